"""T2T's hparams.json and flags.txt -> our `HParams` (used by `t2t_import`).

Fields with our names are taken as they are; the T2T fields in
`T2T_INERT_HPARAMS` are dropped because they do not change the transformer's
computation as T2T ran it; the fields in `T2T_REQUIRED_VALUES` must hold the
value we implement (anything else is an error naming the field and value); any
other field is an error. `overrides_for` writes the `--hparams` string that
reproduces imported hparams from a registered set (for the trainer).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Dict, Iterable, List, Tuple

import tensorflow as tf

from t2t_keras.hparams import (DECODE_FIELDS_IN_HPARAMS, OPTIMIZERS, DecodeHParams, HParams,
                               create_hparams)

# T2T hparams that do not change the transformer's computation, at inference or
# in training, for a run our model can represent; dropped on import.
T2T_INERT_HPARAMS: Dict[str, str] = {
    **{name: "device placement / parallelism only" for name in (
        "daisy_chain_variables", "no_data_parallelism", "tpu_enable_host_call",
        "use_custom_ops")},
    **{name: "logging and summaries only" for name in (
        "summarize_grads", "summarize_vars", "mlperf_mode", "overload_eval_metric_name",
        "eval_dir_name")},
    "use_pad_remover": "removes pad positions before the FFN: a speed-up, same result",
    "force_full_predict": "computes all positions in PREDICT mode: same last-position result",
    "factored_logits": "computes the same logits piece by piece to save memory",
    "eval_run_autoregressive": "evaluation mode of T2T's eval job, not the model",
    **{name: "read only by ffn_layer='local_moe*' / MoE models (ffn_layer is checked)"
       for name in ("moe_hidden_sizes", "moe_num_experts", "moe_k", "moe_loss_coef",
                    "moe_overhead_train", "moe_overhead_eval")},
    **{name: "read only by other models or ffn layers (ffn_layer is checked)" for name in (
        "kernel_height", "kernel_width", "compress_steps", "dropout", "conv_first_kernel",
        "parameter_attention_key_channels", "parameter_attention_value_channels")},
    **{name: "read only by the unmasked relative attention types (self_attention_type is "
             "checked)" for name in ("heads_share_relative_embedding", "add_relative_to_values")},
    **{name: "read only by other optimizers (optimizer is checked)" for name in (
        "optimizer_momentum_momentum", "optimizer_momentum_nesterov")},
    **{name: "read only when scheduled_sampling_prob > 0 (which is checked)" for name in (
        "scheduled_sampling_warmup_steps", "scheduled_sampling_gold_mixin_prob",
        "scheduled_sampling_method", "scheduled_sampling_num_passes",
        "scheduled_sampling_warmup_schedule")},
    **{name: "multi-problem and video training only; a translation run has one problem"
       for name in (
           "nbr_decoder_problems", "multiproblem_schedule_threshold",
           "multiproblem_per_task_threshold", "multiproblem_schedule_max_examples",
           "multiproblem_mixing_schedule", "multiproblem_reweight_label_loss",
           "multiproblem_label_weight", "multiproblem_target_eval_only",
           "multiproblem_vocab_size", "multiproblem_max_input_length",
           "multiproblem_max_target_length", "multiproblem_fixed_train_length",
           "video_num_input_frames", "video_num_target_frames")},
    **{name: "initialization source: the checkpoint already holds the weights" for name in (
        "pretrained_model_dir", "warm_start_from_second", "warm_start_from")},
    **{name: "trainer-job bookkeeping that T2T stores in hparams" for name in (
        "data_dir", "model_dir", "train_steps", "eval_steps", "schedule",
        "std_server_protocol", "eval_freq_in_steps", "eval_timeout_mins", "problem",
        "problem_hparams")},
    "mixed_precision_optimizer_loss_scaler": "float16 loss scaling; activation_dtype is checked",
    "mixed_precision_optimizer_init_loss_scale": "float16 loss scaling; activation_dtype is checked",
}

# T2T hparams our transformer does not implement other than at these values.
T2T_REQUIRED_VALUES: Dict[str, Tuple[Tuple[Any, ...], str]] = {
    "proximity_bias": ((False,), "a log-distance bias in self-attention"),
    "causal_decoder_self_attention": ((True,), "a non-causal decoder"),
    "unidirectional_encoder": ((False,), "a causally masked encoder"),
    "hard_attention_k": ((0,), "hard (top-k) attention"),
    "gumbel_noise_weight": ((0, 0.0), "Gumbel noise in attention"),
    "attention_variables_3d": ((False,), "3-D attention weight layout"),
    "position_features": (("",), "extra position features"),
    "area_key_mode": (("none",), "area attention"),
    "area_value_mode": (("none",), "area attention"),
    "num_area_layers": ((0,), "area attention"),
    "max_area_width": ((1,), "area attention"),
    "max_area_height": ((1,), "area attention"),
    "memory_height": ((1,), "area attention"),
    "symbol_dropout": ((0, 0.0), "dropping input symbols in training"),
    "weight_noise": ((0, 0.0), "weight noise in training"),
    "grad_noise_scale": ((0, 0.0), "gradient noise in training"),
    "scheduled_sampling_prob": ((0, 0.0), "scheduled sampling"),
    "symbol_modality_skip_top": ((False,), "a model without the softmax layer"),
    "min_length": ((0,), "dropping short training examples"),
    "split_to_length": ((0,), "splitting targets into chunks"),
    "split_targets_chunk_length": ((0,), "splitting targets into chunks"),
    "split_targets_max_chunks": ((100,), "splitting targets into chunks"),
    "split_targets_strided_training": ((False,), "splitting targets into chunks"),
    "pad_batch": ((False,), "padded TPU batches"),
    "gpu_automatic_mixed_precision": ((False,), "float16 automatic mixed precision"),
    "optimizer_zero_grads": ((False,), "zeroing gradients"),
    "learning_rate_minimum": ((None,), "a learning-rate floor"),
    "num_sampled_classes": ((0,), "sampled softmax in training"),
    "input_modalities": (("default",), "non-symbol input modalities"),
    "target_modality": (("default",), "non-symbol target modalities"),
    "vocab_divisor": ((1,), "vocabularies padded to a multiple"),
    "bottom": (({},), "custom bottom transformations"),
    "top": (({},), "custom top transformations"),
    "loss": (({},), "custom losses"),
    "name": (({},), "custom modality names"),
    "weights_fn": (({},), "custom loss weights"),
}

# ---------------------------------------------------------------------------
# Flags and hparams.


def read_t2t_flags(t2t_output_dir: str) -> Dict[str, str]:
  """`--name=value` lines of T2T's flags.txt (and flags_t2t.txt) as a dict."""
  flags: Dict[str, str] = {}
  for filename in ("flags.txt", "flags_t2t.txt"):
    path = os.path.join(t2t_output_dir, filename)
    if not tf.io.gfile.exists(path):
      continue
    with tf.io.gfile.GFile(path) as f:
      for line in f:
        match = re.match(r"^--([^=\s]+)=(.*)$", line.rstrip("\n"))
        if match:
          flags[match.group(1)] = match.group(2)
  return flags


def _convert(name: str, value: Any, kind: str) -> Any:
  """A JSON value of T2T's hparams.json as our field's type (int, float, bool, str)."""
  ok = True
  if kind == "bool":
    ok = isinstance(value, bool)
  elif kind == "int":
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == int(value)
    value = int(value) if ok else value
  elif kind == "float":
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    value = float(value) if ok else value
  elif kind == "str":
    ok = isinstance(value, str)
  if not ok:
    raise ValueError(f"T2T hparam {name}={value!r}: expected a {kind}.")
  return value


def _decode_setting_error(name: str, value: Any):
  """None for T2T's default of a sampling setting, else why it is not imported.

  They change decoding only, and are decode hparams here: a non-default value
  is refused rather than dropped, so that it is not lost without a word.
  """
  default = getattr(DecodeHParams, name)
  if value == default:
    return None
  return (f"T2T hparam {name}={value!r} is a decoding setting in t2t-keras: pass "
          f"--ignore_t2t_hparams={name} here and decode with "
          f"--decode_hparams={name}={value}.")


def hparams_from_t2t(values: Dict[str, Any], ignore: Iterable[str] = ()) -> HParams:
  """Our HParams from the dict of T2T's hparams.json.

  Args:
    values: T2T's hparams (name -> JSON value).
    ignore: T2T names to drop although they are not inert (the user accepts
      the difference, e.g. "activation_dtype").

  Raises:
    ValueError: listing every T2T field whose value we do not implement or
      whose name we do not know, with its value.
  """
  kinds = {f.name: f.type for f in dataclasses.fields(HParams)}
  ignore = set(ignore)
  mapped: Dict[str, Any] = {}
  errors: List[str] = []
  for name, value in sorted(values.items()):
    if name in ignore or name in T2T_INERT_HPARAMS:
      continue
    if name == "pos" and value is None:  # T2T's transformer_relative: no position signal
      mapped[name] = "none"
    elif name in kinds:
      try:
        mapped[name] = _convert(name, value, kinds[name])
      except ValueError as e:
        errors.append(str(e))
    elif name in DECODE_FIELDS_IN_HPARAMS:
      error = _decode_setting_error(name, value)
      if error:
        errors.append(error)
    elif name in T2T_REQUIRED_VALUES:
      allowed, what = T2T_REQUIRED_VALUES[name]
      if not any(value == a and type(value) is type(a) or
                 (isinstance(a, float) and isinstance(value, (int, float)) and
                  not isinstance(value, bool) and value == a) for a in allowed):
        errors.append(f"T2T hparam {name}={value!r} is not implemented ({what}); "
                      f"t2t-keras implements {name}={allowed[0]!r}.")
    else:
      errors.append(f"T2T hparam {name}={value!r} is unknown to the importer.")
  for name in ("layer_preprocess_sequence", "layer_postprocess_sequence"):
    if "z" in str(mapped.get(name, "")):
      errors.append(f"T2T hparam {name}={mapped[name]!r} is not implemented (the 'z' "
                    "zero_add residual has a trained gamma).")
  optimizer = str(mapped.get("optimizer", "adam")).lower()
  if optimizer not in OPTIMIZERS:
    mapped.pop("optimizer")
    errors.append(
        f"T2T hparam optimizer={values['optimizer']!r}: t2t-keras trains with T2T's Adam "
        "and Adafactor only, so this run's optimizer state cannot be continued. To "
        "fine-tune its weights with Adam from fresh moments, pass --ignore_t2t_hparams=optimizer --reset_optimizer.")
  if errors:
    raise ValueError("Cannot import these T2T hparams:\n  " + "\n  ".join(errors) +
                     "\nPass --ignore_t2t_hparams=NAME,... to drop a field knowingly.")
  if "optimizer" in mapped:
    mapped["optimizer"] = mapped["optimizer"].lower()  # T2T <= 1.6 wrote "Adam"
  if mapped.get("max_length", 1) == 0:  # T2T: 0 means batch_size
    mapped["max_length"] = mapped.get("batch_size", HParams.batch_size)
  try:
    return HParams(**mapped)
  except ValueError as e:
    raise ValueError(f"T2T hparams.json: {e}") from None


def overrides_for(hparams: HParams, base_set: str) -> str:
  """The `--hparams` string that turns `create_hparams(base_set)` into `hparams`."""
  base = create_hparams(base_set).to_dict()
  parts = []
  for name, value in sorted(hparams.to_dict().items()):
    if base[name] == value:
      continue
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value) \
        if isinstance(value, float) else str(value)
    if isinstance(value, str) and ("," in value or "=" in value):
      raise ValueError(f"hparams.{name}={value!r} cannot be written as an override.")
    parts.append(f"{name}={text}")
  return ",".join(parts)
