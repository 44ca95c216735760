"""T2T's checkpoint names of the model's variables, and reading a T2T checkpoint into a model.

A T2T checkpoint names its variables by scope
(`transformer/body/encoder/layer_0/self_attention/multihead_attention/q/kernel`,
`transformer/symbol_modality_<vocab>_<hidden>/shared/weights_<shard>`, ...); a language
model's has the decoder only. `body_variable_map` maps the body's names onto the
model's variables, `modality_roles` the symbol modality's shards, and `load_t2t_weights`
assigns a checkpoint's weights through them.

Below `training/` and `t2t_import/` alike: the T2T importer writes a run from a T2T
checkpoint with it, and training's warm start (`training/warm_start.py`) reads one.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

import numpy as np
import tensorflow as tf

from t2t_keras.hparams import HParams

# Variables of a T2T checkpoint that are not model weights.
_IGNORED_VARIABLE_RE = re.compile(
    r"(^|/)(Adam|Adam_\d+|Adafactor\w*|Momentum|beta[12]_power|global_step)$|"
    r"^(training|losses_avg|train_stats)/|(^|/)(global_step|beta[12]_power)$")
MODALITY_RE = re.compile(
    r"^transformer/symbol_modality_(\d+)_(\d+)/(shared|input_emb|target_emb|softmax)/"
    r"weights_(\d+)$")


def is_ignored_variable(name: str) -> bool:
  """True for optimizer slots and T2T bookkeeping (`global_step`, loss averages, ...)."""
  return bool(_IGNORED_VARIABLE_RE.search(name))


# ---------------------------------------------------------------------------
# Variable names.


def _norm_names(scope: str, sequence: str, layer, t2t_scope: str) -> Dict[str, Any]:
  """T2T layer-norm variables of one pre/post-process `sequence` -> Keras variables.

  T2T names each norm in the sequence `layer_norm`, `layer_norm_1`, ... under
  the scope `t2t_scope` (`layer_prepostprocess` or `layer_postprocess`).
  """
  out = {}
  if sequence == "none":
    return out
  count = 0
  for i, op in enumerate(sequence):
    if op != "n":
      continue
    norm = getattr(layer, f"layer_norm_{i}")
    prefix = f"{scope}/{t2t_scope}/layer_norm{'_%d' % count if count else ''}"
    out[f"{prefix}/layer_norm_scale"] = norm.gamma
    out[f"{prefix}/layer_norm_bias"] = norm.beta
    count += 1
  return out


def _sublayer_names(scope: str, pre, post, hp: HParams) -> Dict[str, Any]:
  return {**_norm_names(scope, hp.layer_preprocess_sequence, pre, "layer_prepostprocess"),
          **_norm_names(scope, hp.layer_postprocess_sequence, post, "layer_postprocess")}


def _attention_names(scope: str, attention) -> Dict[str, Any]:
  out = {f"{scope}/multihead_attention/{p}/kernel": getattr(attention, p).kernel
         for p in ("q", "k", "v", "output_transform")}
  if attention.max_relative_position:  # T2T's dot_product_attention_relative scope
    relative = f"{scope}/multihead_attention/dot_product_attention_relative"
    out[f"{relative}/relative_positions_keys/embeddings"] = attention.relative_keys
    out[f"{relative}/relative_positions_values/embeddings"] = attention.relative_values
  return out


def _ffn_names(scope: str, ffn) -> Dict[str, Any]:
  return {f"{scope}/{conv}/{kind}": getattr(getattr(ffn, conv), kind)
          for conv in ("conv1", "conv2") for kind in ("kernel", "bias")}


def body_variable_map(model) -> Dict[str, Any]:
  """T2T checkpoint name -> Keras variable, for every weight except the embeddings."""
  hp = model.hparams
  out: Dict[str, Any] = {}
  # A language model (`lm_model.TransformerLM`) has no encoder, encoder-decoder
  # attention nor target-space embedding, as T2T's model without inputs.
  has_inputs = getattr(model, "has_inputs", True)
  if hp.use_target_space_embedding and has_inputs:
    out["transformer/body/target_space_embedding/kernel"] = \
        model.target_space_embedding.embeddings
  if hp.pos == "emb":
    if has_inputs:
      out["transformer/body/inputs_positional_embedding"] = model.inputs_position.embedding
    out["transformer/body/targets_positional_embedding"] = model.targets_position.embedding
  stacks = (("encoder", model.encoder),) if has_inputs else ()
  for stack_name, stack in stacks + (("decoder", model.decoder),):
    base = f"transformer/body/{stack_name}"
    for i, layer in enumerate(stack.layers_):
      scope = f"{base}/layer_{i}"
      out.update(_attention_names(f"{scope}/self_attention", layer.self_attention))
      out.update(_sublayer_names(f"{scope}/self_attention", layer.pre, layer.post, hp))
      if stack_name == "decoder" and has_inputs:
        out.update(_attention_names(f"{scope}/encdec_attention", layer.encdec_attention))
        out.update(_sublayer_names(f"{scope}/encdec_attention", layer.encdec_pre,
                                   layer.encdec_post, hp))
      out.update(_ffn_names(f"{scope}/ffn", layer.ffn))
      out.update(_sublayer_names(f"{scope}/ffn", layer.ffn_pre, layer.ffn_post, hp))
    out.update(_norm_names(base, hp.layer_preprocess_sequence, stack.final,
                           "layer_prepostprocess"))
  return out


def modality_roles(model) -> Dict[str, Any]:
  """T2T modality scope role ("shared", "input_emb", ...) -> our SymbolModality."""
  hp = model.hparams
  if hp.shared_embedding_and_softmax_weights:
    return {"shared": model.softmax}
  if not getattr(model, "has_inputs", True):
    # T2T's symbol_targets_bottom: the "shared" scope under shared_embedding, even
    # without an input embedding to share it with.
    return {"shared" if hp.shared_embedding else "target_emb": model.target_modality,
            "softmax": model.softmax}
  if hp.shared_embedding:
    return {"shared": model.input_modality, "softmax": model.softmax}
  return {"input_emb": model.input_modality, "target_emb": model.target_modality,
          "softmax": model.softmax}


def load_t2t_weights(model, checkpoint_path: str) -> Dict[str, Any]:
  """Assigns a T2T checkpoint's weights to a built `Transformer` or `TransformerLM`.

  Returns:
    {"global_step": int, "assigned": number of T2T variables read}.
  Raises:
    ValueError: in one line, listing the T2T names the model needs that the
      checkpoint lacks, the checkpoint's names the model has no place for, and
      shape mismatches (nothing is assigned then).
  """
  reader = tf.train.load_checkpoint(checkpoint_path)
  shapes = reader.get_variable_to_shape_map()
  expected = body_variable_map(model)
  roles = modality_roles(model)
  shards: Dict[str, Dict[int, str]] = {role: {} for role in roles}
  unexpected, mismatched, missing = [], [], []
  for name in sorted(shapes):
    if is_ignored_variable(name) or name in expected:
      continue
    match = MODALITY_RE.match(name)
    if match and match.group(3) in roles:
      shards[match.group(3)][int(match.group(4))] = name
    else:
      unexpected.append(name)
  missing += sorted(n for n in expected if n not in shapes)
  assignments: List[Tuple[Any, np.ndarray]] = []
  for name, variable in expected.items():
    if name not in shapes:
      continue
    if list(shapes[name]) != list(variable.shape):
      mismatched.append(f"{name} ({list(shapes[name])} in the checkpoint, "
                        f"{list(variable.shape)} in the model)")
      continue
    assignments.append((variable, reader.get_tensor(name)))
  count = len(assignments)
  for role, modality in roles.items():
    found = shards[role]
    if not found:
      vocab, hidden = modality.weights_var.shape
      missing.append(f"transformer/symbol_modality_{vocab}_{hidden}/{role}/weights_<i>")
      continue
    indices = sorted(found)
    scope = found[indices[0]].rsplit("/", 1)[0]
    if indices != list(range(len(indices))):
      missing += [f"{scope}/weights_{i}" for i in range(max(indices)) if i not in found]
      continue
    table = np.concatenate([reader.get_tensor(found[i]) for i in indices], axis=0)
    if list(table.shape) != list(modality.weights_var.shape):
      mismatched.append(f"{scope}/weights_0..{len(indices) - 1} "
                        f"concatenated ({list(table.shape)} in the checkpoint, "
                        f"{list(modality.weights_var.shape)} in the model)")
      continue
    assignments.append((modality.weights_var, table))
    count += len(indices)
  problems = [f"{what}: {', '.join(names)}" for what, names in (
      ("missing from the checkpoint", missing),
      ("in the checkpoint but not in the model", unexpected),
      ("shape mismatches", mismatched)) if names]
  if problems:
    raise ValueError(f"T2T checkpoint {checkpoint_path} does not match the model built from "
                     f"its hparams ({'; '.join(problems)}); check hparams.json and --hparams.")
  for variable, value in assignments:
    variable.assign(value.astype(np.float32))
  step = int(reader.get_tensor("global_step")) if "global_step" in shapes else 0
  return {"global_step": step, "assigned": count}


def checkpoint_has_inputs(checkpoint_path: str) -> bool:
  """Whether T2T built the checkpoint's model for a problem with inputs.

  T2T's `Transformer.body` creates the encoder stack (`transformer/body/encoder/`)
  and each decoder layer's `encdec_attention` only when the problem has
  inputs; a language model's checkpoint holds neither.
  """
  names = tf.train.load_checkpoint(checkpoint_path).get_variable_to_shape_map()
  return any(n.startswith("transformer/body/encoder/") or "/encdec_attention/" in n
             for n in names)
