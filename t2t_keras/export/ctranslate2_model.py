"""A trained Transformer -> a CTranslate2 model directory (int8 / float32 CPU inference).

CTranslate2 (PyPI `ctranslate2`, the optional extra `.[ct2]`) runs Transformers
without TensorFlow, in float32 or with int8 weights. Its `TransformerSpec`
holds T2T's Transformer once these mappings are made:

  * pre-norm ("n" before, "da" after each sublayer, a final norm) or post-norm
    ("none" before, "dan" after, no final norm); dropout ("d") and "z" are no-ops
    at inference, any other sequence is refused;
  * LayerNorm epsilon `norm_epsilon` (CTranslate2's default is 1e-5, T2T's 1e-6);
  * q, k, v and output projections without bias (q|k|v fused for self-attention,
    k|v for encoder-decoder attention); the FFN's two dense layers with bias;
  * embeddings times sqrt(hidden_size) (`multiply_embedding_mode`);
  * our own position table (CTranslate2's built-in sinusoid is another layout),
    `MAX_POSITIONS` rows; with `use_target_space_embedding` the target-space
    row is added to every row of the encoder's table (T2T adds it to every input
    position);
  * the embedding copies of a matrix have the PAD row (id 0) zeroed, as T2T's
    lookup does; the softmax projection keeps it;
  * tokens are the subword ids written "0".."V-1": decoding starts from "0" (a
    zero embedding, T2T's shift-right) and ends at "1" (EOS). The subword
    vocabularies are copied beside the model; `ctranslate2_decoder` encodes.

Relative self-attention (`dot_product_relative`, Shaw et al.) maps onto
CTranslate2's relative positions when `pos="none"`, as T2T's relative sets use
it; CTranslate2 then has no position table, so the target-space row goes into
the encoder's lookup table instead (divided by the embedding scale).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Dict, List, Optional

import numpy as np

from data_gen import file_io
from t2t_keras.hparams import HParams

# Rows of the exported position tables: inputs and outputs up to this many ids.
MAX_POSITIONS = 2048
# Written beside the model: what the decoder needs to encode and decode text.
INFO_FILE = "t2t_keras_ctranslate2.json"
VOCAB_FILES = {"inputs": "vocab.inputs", "targets": "vocab.targets"}


class NotConvertibleError(ValueError):
  """The run uses something CTranslate2's Transformer cannot express."""


def _norm_layout(hp: HParams) -> str:
  """ "pre" or "post" (CTranslate2's two layouts) from T2T's sequences, else refused."""
  ops = lambda seq: "" if seq == "none" else seq.replace("d", "").replace("z", "")
  pre, post = ops(hp.layer_preprocess_sequence), ops(hp.layer_postprocess_sequence)
  if (pre, post) == ("n", "a"):
    return "pre"
  if (pre, post) == ("", "an"):
    return "post"
  raise NotConvertibleError(
      f"layer_preprocess_sequence={hp.layer_preprocess_sequence!r} with "
      f"layer_postprocess_sequence={hp.layer_postprocess_sequence!r}: CTranslate2 has "
      "pre-norm ('n' / 'da') and post-norm ('none' / 'dan') only.")


def check_convertible(hp: HParams) -> None:
  """Raises NotConvertibleError naming the first hparam CTranslate2 cannot hold."""
  _norm_layout(hp)
  if hp.prepend_mode != "none":
    raise NotConvertibleError(
        f"prepend_mode={hp.prepend_mode!r}: the run decodes after its inputs and a 0 forced "
        "first, scored 0 (T2T's partial_targets), which CTranslate2 does not do.")
  if hp.key_channels != hp.value_channels:
    raise NotConvertibleError(
        f"attention_key_channels={hp.key_channels} != attention_value_channels="
        f"{hp.value_channels}: CTranslate2's attention has one head depth for keys and values.")
  if hp.encoder_layers < 1 or hp.decoder_layers < 1:
    raise NotConvertibleError(
        f"encoder_layers={hp.encoder_layers}, decoder_layers={hp.decoder_layers}: "
        "CTranslate2's Transformer needs at least one layer in each stack.")
  if hp.ffn_layer != "dense_relu_dense":
    raise NotConvertibleError(f"ffn_layer={hp.ffn_layer!r}: only dense_relu_dense converts.")
  if hp.multiply_embedding_mode not in ("sqrt_depth", "none"):
    raise NotConvertibleError(
        f"multiply_embedding_mode={hp.multiply_embedding_mode!r}: CTranslate2 scales "
        "embeddings by sqrt(depth) or not at all.")
  if hp.self_attention_type == "dot_product_relative" and hp.pos != "none":
    raise NotConvertibleError(
        f"self_attention_type='dot_product_relative' with pos={hp.pos!r}: CTranslate2's "
        "relative attention has no position table; it converts with pos=none (as T2T's "
        "transformer_relative sets).")
  if hp.pos == "emb" and hp.max_length > MAX_POSITIONS:
    raise NotConvertibleError(f"pos='emb' with max_length={hp.max_length}: the exported "
                              f"position table has {MAX_POSITIONS} rows.")


def position_table(hp: HParams, learned: Optional[np.ndarray]) -> np.ndarray:
  """`[MAX_POSITIONS, hidden]` float32: what the model adds at each position."""
  # TensorFlow: not loaded by the CTranslate2 decoder, which runs without it
  from t2t_keras.layers.embedding import get_timing_signal_1d
  depth = hp.hidden_size
  if hp.pos in ("timing", "timing_paper"):
    layout = "concat" if hp.pos == "timing" else "interleaved"
    return get_timing_signal_1d(MAX_POSITIONS, depth, hp.min_timescale, hp.max_timescale,
                                layout=layout).numpy()[0].astype(np.float32)
  table = np.zeros([MAX_POSITIONS, depth], np.float32)
  if hp.pos == "emb":  # rows past the learned table add nothing (T2T pads it with zeros)
    table[:learned.shape[0]] = learned
  return table


def _kernel(dense) -> np.ndarray:
  """A Keras `[in, out]` kernel as CTranslate2's `[out, in]`."""
  return np.ascontiguousarray(np.asarray(dense.kernel.numpy(), np.float32).T)


def _set_linear(spec, kernels: List, bias=None) -> None:
  spec.weight = np.concatenate([_kernel(k) for k in kernels], axis=0)
  if bias is not None:
    spec.bias = np.asarray(bias, np.float32)


def _set_norm(spec, norm) -> None:
  spec.gamma = np.asarray(norm.gamma.numpy(), np.float32)
  spec.beta = np.asarray(norm.beta.numpy(), np.float32)


def _the_norm(prepost):
  """The one LayerNorm of a LayerPrepostprocess ("n", "da"/"dan" sequences)."""
  norms = [getattr(prepost, name) for name in sorted(vars(prepost))
           if name.startswith("layer_norm_")]
  assert len(norms) == 1, prepost.sequence
  return norms[0]


def _set_attention(spec, attention, norm_holder, fused: List[List[str]]) -> None:
  for linear, names in zip(spec.linear, fused + [["output_transform"]]):
    _set_linear(linear, [getattr(attention, n) for n in names])
  _set_norm(spec.layer_norm, _the_norm(norm_holder))
  if attention.max_relative_position:
    spec.relative_position_keys = np.asarray(attention.relative_keys.numpy(), np.float32)
    spec.relative_position_values = np.asarray(attention.relative_values.numpy(), np.float32)


def _set_ffn(spec, layer, norm_holder) -> None:
  _set_linear(spec.linear_0, [layer.ffn.conv1], layer.ffn.conv1.bias.numpy())
  _set_linear(spec.linear_1, [layer.ffn.conv2], layer.ffn.conv2.bias.numpy())
  _set_norm(spec.layer_norm, _the_norm(norm_holder))


def _embedding(modality) -> np.ndarray:
  """The lookup table of a SymbolModality: its matrix with the PAD row zeroed."""
  table = np.array(modality.weights_var.numpy(), np.float32)
  table[0] = 0.0
  return table


def build_spec(model):
  """The `ctranslate2.specs.TransformerSpec` of a built Transformer (float32 weights)."""
  from ctranslate2.specs import transformer_spec  # optional dependency
  hp = model.hparams
  check_convertible(hp)
  pre_norm = _norm_layout(hp) == "pre"
  relative = hp.self_attention_type == "dot_product_relative"
  head_dim = hp.key_channels // hp.num_heads
  common = dict(pre_norm=pre_norm, relative_position=relative,
                head_dim=None if head_dim * hp.num_heads == hp.hidden_size else head_dim)
  encoder = transformer_spec.TransformerEncoderSpec(hp.encoder_layers, hp.num_heads, **common)
  decoder = transformer_spec.TransformerDecoderSpec(hp.decoder_layers, hp.num_heads, **common)
  spec = transformer_spec.TransformerSpec(encoder, decoder)
  scale = hp.multiply_embedding_mode == "sqrt_depth"
  encoder.scale_embeddings = decoder.scale_embeddings = scale
  encoder.embeddings[0].weight = _embedding(model.input_modality)
  decoder.embeddings.weight = _embedding(model.target_modality)
  decoder.projection.weight = np.array(model.softmax.weights_var.numpy(), np.float32)
  if not relative:
    source_positions = position_table(hp, _learned(model.inputs_position))
    if hp.use_target_space_embedding:
      space = model.target_space_embedding.embeddings.numpy()[model.target_space_id]
      source_positions = source_positions + np.asarray(space, np.float32)[None]
    encoder.position_encodings.encodings = source_positions
    decoder.position_encodings.encodings = position_table(hp, _learned(model.targets_position))
  elif hp.use_target_space_embedding:  # no position table: the row goes into the lookup
    space = model.target_space_embedding.embeddings.numpy()[model.target_space_id]
    factor = hp.hidden_size ** 0.5 if scale else 1.0
    encoder.embeddings[0].weight = (encoder.embeddings[0].weight
                                    + np.asarray(space, np.float32)[None] / np.float32(factor))
  for layer_spec, layer in zip(encoder.layer, model.encoder.layers_):
    _set_attention(layer_spec.self_attention, layer.self_attention,
                   layer.pre if pre_norm else layer.post, [["q", "k", "v"]])
    _set_ffn(layer_spec.ffn, layer, layer.ffn_pre if pre_norm else layer.ffn_post)
  for layer_spec, layer in zip(decoder.layer, model.decoder.layers_):
    _set_attention(layer_spec.self_attention, layer.self_attention,
                   layer.pre if pre_norm else layer.post, [["q", "k", "v"]])
    _set_attention(layer_spec.attention, layer.encdec_attention,
                   layer.encdec_pre if pre_norm else layer.encdec_post, [["q"], ["k", "v"]])
    _set_ffn(layer_spec.ffn, layer, layer.ffn_pre if pre_norm else layer.ffn_post)
  if pre_norm:
    _set_norm(encoder.layer_norm, _the_norm(model.encoder.final))
    _set_norm(decoder.layer_norm, _the_norm(model.decoder.final))
  vocab = lambda size: [str(i) for i in range(size)]
  spec.register_source_vocabulary(vocab(model.input_vocab_size))
  spec.register_target_vocabulary(vocab(model.target_vocab_size))
  spec.config.layer_norm_epsilon = float(hp.norm_epsilon)
  # T2T: no BOS on either side; the source ends with EOS (added by the encoder of
  # text); decoding starts from id 0 and stops at EOS (id 1).
  spec.config.bos_token = "0"
  spec.config.decoder_start_token = "0"
  spec.config.eos_token = "1"
  spec.config.unk_token = "2" if model.target_vocab_size > 2 else "1"
  spec.config.add_source_bos = spec.config.add_source_eos = False
  return spec


def _learned(position) -> Optional[np.ndarray]:
  return position.embedding.numpy() if position.pos == "emb" else None


def export(model, vocab_files: Dict[str, str], export_dir: str,
           quantization: Optional[str] = None) -> str:
  """Writes the CTranslate2 model of `model` to `export_dir` (replaced whole, atomically).

  Args:
    model: a built Transformer with its trained weights.
    vocab_files: {"inputs": path, "targets": path} subword vocabularies, copied beside it.
    export_dir: the directory to write (its parent is created if missing): new, empty,
      or a previous export, which is replaced once the new one is complete. A
      symbolic link's target is written (`file_io.output_directory`): the link stays.
    quantization: the stored weights' type (CTranslate2's: "int8", "int8_float32",
      "float16", ...); None keeps float32, which the decoder's compute_type may
      quantize on load.
  Returns:
    export_dir.

  Raises:
    file_io.OutputPathError: `export_dir` is a file.
    FileExistsError: it holds files but is not an export.
  """
  target = file_io.output_directory(export_dir)  # the old export is moved, not a link
  if os.path.isdir(target) and os.listdir(target) and not os.path.isfile(
      os.path.join(target, INFO_FILE)):
    raise FileExistsError(
        f"{export_dir} holds files but is not a CTranslate2 export of this project (no "
        f"{INFO_FILE}); give a new or empty directory: an export replaces its directory "
        "whole.")
  spec = build_spec(model)
  spec.validate()
  spec.optimize(quantization=quantization)
  parent = os.path.dirname(os.path.abspath(target))
  os.makedirs(parent, exist_ok=True)
  staging = tempfile.mkdtemp(prefix=".ctranslate2-", dir=parent)
  old = None
  try:
    spec.save(staging)
    for side, path in vocab_files.items():
      shutil.copyfile(path, os.path.join(staging, VOCAB_FILES[side]))
    info = {"input_vocab_size": model.input_vocab_size,
            "target_vocab_size": model.target_vocab_size,
            "max_positions": MAX_POSITIONS,
            "vocab_files": VOCAB_FILES, "hparams": model.hparams.to_dict()}
    with open(os.path.join(staging, INFO_FILE), "w") as f:
      json.dump(info, f, indent=1, sort_keys=True)
    file_io.make_tree_readable(staging)
    if os.path.isdir(target):  # the previous export, moved aside until the new one is in
      old = tempfile.mkdtemp(prefix=".ctranslate2-old-", dir=parent)
      os.rename(target, os.path.join(old, "export"))
    os.rename(staging, target)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    if old is not None and not os.path.exists(target):
      os.rename(os.path.join(old, "export"), target)
    raise
  finally:
    if old is not None:
      shutil.rmtree(old, ignore_errors=True)
  return export_dir
