"""Immutable hyperparameters with T2T's names, T2T's named sets, and override parsing.

`HParams` holds every model and training hyperparameter under the name T2T used
(`layers/common_hparams.py:basic_params1` plus `models/transformer.py`), so that a
T2T override string such as ``--hparams='num_heads=16,pos=emb'`` works unchanged.
Unlike T2T's mutable object, it is a frozen dataclass: derive a new one with
`replace` or `parse_overrides`.

`DecodeHParams` holds T2T's decode hparams (`utils/decoding.py:decode_hparams`),
and the sampling settings T2T kept among the model hparams (`sampling_method`,
`sampling_temp`, `sampling_keep_top_k`): they change decoding, not the model.
T2T's way of setting them still works: an `--hparams` string may name them
(`HParams.parse` checks and sets them aside, `create_decode_hparams` takes them
from it), and an older run's hparams.json that holds them still loads.

Where the paper and T2T differ, T2T's value is the default of the T2T-named sets
and the paper's is available by name (the `transformer_paper_*` sets) or override:
  * norm layout: `layer_preprocess_sequence="n"`, `layer_postprocess_sequence="da"`
    (T2T pre-norm) vs `"none"` / `"dan"` (paper post-norm);
  * positions: `pos="timing"` (T2T, concatenated [sin | cos], exponent i/(d/2-1))
    vs `pos="timing_paper"` (interleaved sin/cos, exponent 2i/d) vs `pos="emb"`
    (learned, the paper's Table 3 row E);
  * Adam beta2 0.997 (T2T >= v1.4.3) vs 0.98 (paper);
  * learning rate: factor-string schedules (T2T v3, constant 2.0, warmup 8000) vs
    the paper's formula (`learning_rate_schedule="legacy"`, `noam`, lr 0.1, 4000).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Any, Callable, Dict, List, Tuple

_PREPOST_CHARS = set("adnz")
POS_CHOICES = ("timing", "timing_paper", "emb", "none")
SELF_ATTENTION_TYPES = ("dot_product", "dot_product_relative")
# T2T `utils/optimize.py:get_variable_initializer` names ("" is TF's default,
# Glorot uniform); built by `layers/initializers.py`.
INITIALIZERS = ("uniform_unit_scaling", "normal_unit_scaling", "uniform", "orthogonal",
                "xavier", "")
# Factors of `learning_rate_schedule` strings (T2T `utils/learning_rate.py`).
LEARNING_RATE_FACTORS = ("constant", "linear_warmup", "rsqrt_decay", "rsqrt_normalized_decay",
                         "rsqrt_hidden_size", "linear_decay", "cosdecay",
                         "single_cycle_cos_decay", "multi_cycle_cos_decay", "exp_decay",
                         "legacy")
# `learning_rate_decay_scheme` values of the legacy schedule. T2T's "piecewise"
# reads `learning_rate_boundaries` / `learning_rate_multiples`, fields not kept here.
LEGACY_DECAY_SCHEMES = ("noam", "none", "exp", "cosine", "cyclelinear10x", "sqrt")
# T2T's optimizer names that are its Adam (all train here as optimization.FusedAdam).
ADAM_OPTIMIZERS = ("adam", "multistep_adam", "multistepadam", "true_adam", "lazy_adam")
# T2T's `activation_dtype` values -> the trainer's --mixed_precision mode (precision.py).
ACTIVATION_DTYPES = ("float32", "bfloat16", "float16")
MIXED_PRECISION_OF_ACTIVATION_DTYPE = {"float32": "none", "bfloat16": "bfloat16",
                                       "float16": "float16"}
# Every optimizer name accepted: T2T's Adam ones and its Adafactor (adafactor.T2TAdafactor).
OPTIMIZERS = ADAM_OPTIMIZERS + ("adafactor",)
ADAFACTOR_DECAY_TYPES = ("pow", "adam")
# Broadcast-dims fields -> the rank of the tensor whose dropout they shape.
DROPOUT_BROADCAST_DIMS_RANKS = {"layer_prepostprocess_dropout_broadcast_dims": 3,
                                "attention_dropout_broadcast_dims": 4,
                                "relu_dropout_broadcast_dims": 3}
# DecodeHParams fields that T2T kept in its model hparams (`--hparams=sampling_method=random`).
DECODE_FIELDS_IN_HPARAMS = ("sampling_method", "sampling_temp", "sampling_keep_top_k")


class _Fields:
  """`replace` / `parse` / `to_dict` of the frozen hparams dataclasses."""

  def replace(self, **changes: Any):
    """Returns a copy with `changes` applied (validated like the constructor)."""
    unknown = sorted(set(changes) - set(field_names(type(self))))
    if unknown:
      raise ValueError(_unknown_message(type(self), unknown[0]))
    return dataclasses.replace(self, **changes)

  def parse(self, overrides: str):
    """Applies a T2T override string such as ``'num_heads=16,pos=emb'``."""
    return self.replace(**parse_overrides(type(self), overrides))

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class HParams(_Fields):
  """Model, optimization and input hyperparameters (T2T names and defaults)."""

  # Model size.
  hidden_size: int = 512
  filter_size: int = 2048
  num_heads: int = 8
  num_hidden_layers: int = 6
  num_encoder_layers: int = 0  # 0: num_hidden_layers.
  num_decoder_layers: int = 0  # 0: num_hidden_layers.
  attention_key_channels: int = 0  # Total over heads; 0: hidden_size.
  attention_value_channels: int = 0  # Total over heads; 0: hidden_size.
  ffn_layer: str = "dense_relu_dense"
  self_attention_type: str = "dot_product"  # or "dot_product_relative" (Shaw et al. 2018)
  # Relative attention: distances clipped to +-this get their own learned key and
  # value embeddings (T2T's transformer_relative: 20; read only by the relative type).
  max_relative_position: int = 0  # dot_product_relative: distances clipped to +-this.
  # Residual blocks, normalization, dropout.
  layer_preprocess_sequence: str = "none"
  layer_postprocess_sequence: str = "dan"
  layer_prepostprocess_dropout: float = 0.1
  attention_dropout: float = 0.0
  relu_dropout: float = 0.0
  # Dims along which a dropout mask is shared (T2T's comma-separated lists, "" none):
  # of the residual-block tensors [batch, length, depth], the attention weights
  # [batch, heads, length_q, length_kv] and the FFN hidden [batch, length, filter].
  layer_prepostprocess_dropout_broadcast_dims: str = ""
  attention_dropout_broadcast_dims: str = ""
  relu_dropout_broadcast_dims: str = ""
  norm_type: str = "layer"
  norm_epsilon: float = 1e-6
  # Embeddings and positions.
  pos: str = "timing"
  min_timescale: float = 1.0
  max_timescale: float = 1.0e4
  shared_embedding_and_softmax_weights: bool = True
  shared_embedding: bool = False
  multiply_embedding_mode: str = "sqrt_depth"
  # T2T split the embedding variable into this many `weights_<i>` row shards: a
  # checkpoint layout only (same values). One matrix here; the T2T checkpoint
  # importer (`t2t_import.py`) concatenates the shards of a T2T checkpoint.
  symbol_modality_num_shards: int = 16
  use_target_space_embedding: bool = True
  initializer: str = "uniform_unit_scaling"
  initializer_gain: float = 1.0
  # Loss.
  label_smoothing: float = 0.1
  # Optimization.
  optimizer: str = "adam"
  optimizer_adam_beta1: float = 0.9
  optimizer_adam_beta2: float = 0.98
  optimizer_adam_epsilon: float = 1e-9
  optimizer_multistep_accumulate_steps: int = 0
  # T2T's Adafactor (`utils/adafactor.py`), read only when optimizer=adafactor.
  optimizer_adafactor_beta1: float = 0.0
  optimizer_adafactor_beta2: float = 0.999
  optimizer_adafactor_decay_type: str = "pow"
  optimizer_adafactor_memory_exponent: float = 0.8
  optimizer_adafactor_factored: bool = True
  optimizer_adafactor_clipping_threshold: float = 1.0
  optimizer_adafactor_multiply_by_parameter_scale: bool = True
  clip_grad_norm: float = 0.0
  weight_decay: float = 0.0
  learning_rate: float = 0.1
  learning_rate_schedule: str = "legacy"
  learning_rate_decay_scheme: str = "noam"
  learning_rate_constant: float = 1.0
  learning_rate_warmup_steps: int = 4000
  learning_rate_decay_steps: int = 5000
  learning_rate_decay_rate: float = 1.0
  learning_rate_decay_staircase: bool = False
  learning_rate_cosine_cycle_steps: int = 250000
  # Mixed precision: "float32", "bfloat16" or "float16" activations (float16 trains
  # with dynamic loss scaling); weights stay float32 (other weight_dtype refused).
  activation_dtype: str = "float32"
  weight_dtype: str = "float32"
  # Input pipeline (batch_size counts tokens per replica, padding included).
  batch_size: int = 4096
  max_length: int = 256
  min_length_bucket: int = 8
  length_bucket_step: float = 1.1
  use_fixed_batch_size: bool = False
  eval_drop_long_sequences: bool = False
  batch_shuffle_size: int = 512
  max_input_seq_length: int = 0
  max_target_seq_length: int = 0

  def __post_init__(self):
    _check_positive(self, ("hidden_size", "filter_size", "num_heads",
                           "num_hidden_layers", "batch_size"))
    for name in ("layer_prepostprocess_dropout", "attention_dropout",
                 "relu_dropout", "label_smoothing"):
      value = getattr(self, name)
      if not 0.0 <= value < 1.0:
        raise ValueError(f"hparams.{name} must be in [0, 1), got {value!r}.")
    for name, rank in DROPOUT_BROADCAST_DIMS_RANKS.items():
      broadcast_dims(getattr(self, name), rank, name)
    if self.pos not in POS_CHOICES:
      raise ValueError(f"hparams.pos must be one of {POS_CHOICES}, got {self.pos!r}.")
    _check_sequence("layer_preprocess_sequence", self.layer_preprocess_sequence,
                    allowed=set("dn"))
    _check_sequence("layer_postprocess_sequence", self.layer_postprocess_sequence,
                    allowed=_PREPOST_CHARS)
    for name, total in (("attention_key_channels", self.key_channels),
                        ("attention_value_channels", self.value_channels)):
      if total % self.num_heads:
        raise ValueError(
            f"hparams.{name} (or hidden_size when 0) = {total} must be divisible "
            f"by num_heads = {self.num_heads}.")
    if self.norm_type != "layer":
      raise ValueError(f"hparams.norm_type: only 'layer' is implemented, got {self.norm_type!r}.")
    if self.ffn_layer != "dense_relu_dense":
      raise ValueError(
          f"hparams.ffn_layer: only 'dense_relu_dense' is implemented, got {self.ffn_layer!r}.")
    if self.self_attention_type not in SELF_ATTENTION_TYPES:
      raise ValueError(f"hparams.self_attention_type must be one of {SELF_ATTENTION_TYPES}, "
                       f"got {self.self_attention_type!r}.")
    if self.max_relative_position < 0:
      raise ValueError("hparams.max_relative_position must be >= 0, got "
                       f"{self.max_relative_position!r}.")
    if self.self_attention_type == "dot_product_relative":
      if self.max_relative_position == 0:
        raise ValueError("hparams.max_relative_position must be > 0 with "
                         f"self_attention_type='dot_product_relative', got "
                         f"{self.max_relative_position!r}.")
      if self.key_channels != self.value_channels:
        # T2T's relative value embeddings have the key depth (its matmul fails otherwise).
        raise ValueError(
            "hparams.self_attention_type='dot_product_relative' needs equal key and value "
            f"depths, got attention_key_channels={self.key_channels} and "
            f"attention_value_channels={self.value_channels} (0 means hidden_size).")
    if self.multiply_embedding_mode not in ("sqrt_depth", "none"):
      raise ValueError("hparams.multiply_embedding_mode must be 'sqrt_depth' or 'none', "
                       f"got {self.multiply_embedding_mode!r}.")
    if self.symbol_modality_num_shards < 1:
      raise ValueError("hparams.symbol_modality_num_shards must be >= 1, got "
                       f"{self.symbol_modality_num_shards!r}.")
    if self.initializer not in INITIALIZERS:
      raise ValueError(f"hparams.initializer: unknown initializer {self.initializer!r}; "
                       f"supported (T2T's names): {', '.join(map(repr, INITIALIZERS))}.")
    _check_learning_rate(self)
    if self.activation_dtype not in ACTIVATION_DTYPES:
      raise ValueError(f"hparams.activation_dtype must be one of {', '.join(ACTIVATION_DTYPES)}, "
                       f"got {self.activation_dtype!r}.")
    if self.weight_dtype != "float32":
      raise ValueError(f"hparams.weight_dtype: only 'float32' weights are implemented, got "
                       f"{self.weight_dtype!r} (activation_dtype sets mixed precision).")
    if self.optimizer.lower() not in OPTIMIZERS:
      raise ValueError("hparams.optimizer must be one of adam, multistep_adam, true_adam, "
                       f"lazy_adam, adafactor; got {self.optimizer!r}.")
    _check_adafactor(self)

  # Derived values (T2T computes these inline as `x or hidden_size`).
  @property
  def encoder_layers(self) -> int:
    return self.num_encoder_layers or self.num_hidden_layers

  @property
  def decoder_layers(self) -> int:
    return self.num_decoder_layers or self.num_hidden_layers

  @property
  def key_channels(self) -> int:
    return self.attention_key_channels or self.hidden_size

  @property
  def value_channels(self) -> int:
    return self.attention_value_channels or self.hidden_size

  def parse(self, overrides: str) -> "HParams":
    """Applies a T2T override string such as ``'num_heads=16,pos=emb'``.

    T2T's decoding settings (`DECODE_FIELDS_IN_HPARAMS`) are checked and set
    aside: `create_decode_hparams(..., hparams_overrides=)` applies them.
    """
    return self.replace(**split_decode_fields(parse_overrides(HParams, overrides))[0])

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> "HParams":
    """HParams of a hparams.json; the decoding settings older runs saved are dropped."""
    values, decode = split_decode_fields(json.loads(text))
    unknown = sorted(set(values) - set(field_names(cls)))
    if unknown:
      raise ValueError(_unknown_message(cls, unknown[0]))
    changed = {k: v for k, v in decode.items() if v != getattr(DecodeHParams, k)}
    if changed:
      logging.warning("hparams.json sets the decoding settings %s, which are decode "
                      "hparams now: pass --decode_hparams=%s to decode with them.", changed,
                      ",".join(f"{k}={v}" for k, v in sorted(changed.items())))
    return cls(**values)


# T2T decode hparams this project refuses to change: (name, supported value, why).
_REFUSED_DECODE_HPARAMS = (
    ("force_decode_length", False, "decoding stops once every hypothesis has emitted EOS"),
    ("num_decodes", 1, "each input is decoded once"),
    ("skip_eos_postprocess", False, "outputs are always cut at the first EOS"),
)


@dataclasses.dataclass(frozen=True)
class DecodeHParams(_Fields):
  """T2T's decode hparams (`--decode_hparams`), same names and defaults."""

  beam_size: int = 4
  alpha: float = 0.6
  extra_length: int = 100
  batch_size: int = 0  # 0: 32 when decoding from a file, as in T2T.
  return_beams: bool = False  # n-best output, tab-separated.
  write_beam_scores: bool = False  # A score after each beam (needs return_beams).
  max_input_size: int = -1  # > 0: inputs keep max_input_size - 1 subword tokens + EOS (T2T).
  num_samples: int = -1  # >= 1: decode only the first N examples of the dataset.
  delimiter: str = "\n"  # Separates the inputs of --decode_from_file.
  force_decode_length: bool = False  # Refused when true (not implemented).
  num_decodes: int = 1  # Refused unless 1 (not implemented).
  skip_eos_postprocess: bool = False  # Refused when true (not implemented).
  log_results: bool = True  # Log each input and output ("Inference results ...").
  # Decoding with beam_size=1 (model hparams in T2T).
  sampling_method: str = "argmax"  # or "random"
  sampling_temp: float = 1.0  # Softmax temperature of "random"; 0: argmax.
  sampling_keep_top_k: int = -1  # "random" draws among the k most likely ids; -1: all.

  def __post_init__(self):
    for name, supported, why in _REFUSED_DECODE_HPARAMS:
      if getattr(self, name) != supported:
        raise ValueError(f"decode_hparams.{name}={getattr(self, name)!r} is not implemented "
                         f"({why}); only {name}={supported!r} is supported.")
    if self.batch_size < 0:
      raise ValueError("decode_hparams.batch_size must be >= 0 (0: 32 sentences per "
                       f"batch from a file), got {self.batch_size}.")
    if not self.delimiter:
      raise ValueError("decode_hparams.delimiter must be a non-empty string (it separates "
                       "the inputs of --decode_from_file), got ''.")
    if self.num_samples == 0 or self.num_samples < -1:
      raise ValueError("decode_hparams.num_samples must be -1 (all) or >= 1 (decode the "
                       f"first N examples of the dataset), got {self.num_samples}.")
    if self.write_beam_scores and not self.return_beams:
      raise ValueError("decode_hparams.write_beam_scores=true needs return_beams=true "
                       "(scores are written after each beam of the n-best list).")
    if self.beam_size < 1:
      raise ValueError(f"decode_hparams.beam_size must be >= 1, got {self.beam_size}.")
    if self.alpha < 0:
      raise ValueError(f"decode_hparams.alpha must be >= 0, got {self.alpha}.")
    if self.extra_length < 0:
      raise ValueError(f"decode_hparams.extra_length must be >= 0, got {self.extra_length}.")
    _check_sampling("decode_hparams", self.sampling_method, self.sampling_temp,
                    self.sampling_keep_top_k)


def _check_sampling(owner: str, method: str, temp: float, keep_top_k: int) -> None:
  """The checks of the sampling settings; `owner` names where they were given."""
  if method not in ("argmax", "random"):
    raise ValueError(f"{owner}.sampling_method must be 'argmax' or 'random', got {method!r}.")
  if temp < 0:
    raise ValueError(f"{owner}.sampling_temp must be >= 0 (0: argmax), got {temp!r}.")
  if keep_top_k == 0 or keep_top_k < -1:
    raise ValueError(f"{owner}.sampling_keep_top_k must be -1 (keep all) or >= 1, got "
                     f"{keep_top_k!r}.")


def split_decode_fields(values: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
  """(model values, decoding settings) of HParams values that may hold T2T's
  decoding settings (`DECODE_FIELDS_IN_HPARAMS`), which are checked here.

  Raises:
    ValueError: a decoding setting's value is invalid, named as `hparams.<name>`.
  """
  decode = {k: v for k, v in values.items() if k in DECODE_FIELDS_IN_HPARAMS}
  setting = lambda name: decode.get(name, getattr(DecodeHParams, name))
  _check_sampling("hparams", *map(setting, DECODE_FIELDS_IN_HPARAMS))
  return {k: v for k, v in values.items() if k not in decode}, decode


# ---------------------------------------------------------------------------
# Override parsing (T2T's `HParams.parse` syntax: comma-separated name=value).

# A quoted value may hold commas: attention_dropout_broadcast_dims='0,1'.
_OVERRIDE_RE = re.compile(
    r"\s*(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>'[^']*'|\"[^\"]*\"|[^,]*)\s*(?:,|$)")
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def field_names(cls) -> List[str]:
  return [f.name for f in dataclasses.fields(cls)]


def _field_types(cls) -> Dict[str, type]:
  """Field name -> type of `cls`; HParams also takes T2T's decoding settings."""
  # `from __future__ import annotations` makes annotations strings.
  mapping = {"int": int, "float": float, "bool": bool, "str": str}
  types = {f.name: mapping[f.type] if isinstance(f.type, str) else f.type
           for f in dataclasses.fields(cls)}
  if cls is HParams:
    decode = _field_types(DecodeHParams)
    types.update((name, decode[name]) for name in DECODE_FIELDS_IN_HPARAMS)
  return types


def _unknown_message(cls, name: str) -> str:
  import difflib
  names = field_names(cls)
  close = difflib.get_close_matches(name, names, n=3)
  hint = f" Did you mean {', '.join(close)}?" if close else ""
  return (f"Unknown {cls.__name__} name {name!r}.{hint} Valid names: "
          f"{', '.join(sorted(names))}.")


def _convert(cls, name: str, raw: str, kind: type) -> Any:
  text = raw.strip()
  try:
    if kind is bool:
      if text.lower() in _TRUE:
        return True
      if text.lower() in _FALSE:
        return False
      raise ValueError
    if kind is int:
      value = float(text)
      if value != int(value):
        raise ValueError
      return int(value)
    if kind is float:
      return float(text)
  except ValueError:
    expected = {bool: "true or false", int: "an integer", float: "a number"}[kind]
    raise ValueError(f"{cls.__name__} {name!r} expects {expected}, got {raw!r}.") from None
  if text[:1] in "'\"" and text[-1:] == text[:1] and len(text) >= 2:
    text = text[1:-1]
  return text


def parse_overrides(cls, overrides: str) -> Dict[str, Any]:
  """Parses ``'a=1,b=x'`` into typed values for the dataclass `cls`.

  Raises:
    ValueError: on malformed text, an unknown name (listing the valid names) or a
      value of the wrong type.
  """
  values: Dict[str, Any] = {}
  text = (overrides or "").strip()
  types = _field_types(cls)
  pos = 0
  while pos < len(text):
    match = _OVERRIDE_RE.match(text, pos)
    if not match or match.end() == pos:
      raise ValueError(f"Malformed {cls.__name__} override at {text[pos:]!r} in "
                       f"{overrides!r}; expected comma-separated name=value pairs.")
    name = match.group("name")
    if name not in types:
      raise ValueError(_unknown_message(cls, name))
    if name in values:
      raise ValueError(f"{cls.__name__} {name!r} is given twice in {overrides!r}.")
    values[name] = _convert(cls, name, match.group("value"), types[name])
    pos = match.end()
  return values


def broadcast_dims(text: str, rank: int, name: str = "broadcast_dims") -> Tuple[int, ...]:
  """The sorted dims in [0, rank) of a T2T broadcast-dims string such as "0,1".

  As T2T's `comma_separated_string_to_integer_list` and
  `dropout_with_broadcast_dims`: empty items are skipped and a negative dim
  counts from the end ("-1" is the last).

  Raises:
    ValueError: an item is not an integer or is outside [-rank, rank).
  """
  dims = set()
  for item in text.split(","):
    if not item.strip():
      continue
    try:
      dim = int(item)
    except ValueError:
      raise ValueError(f"hparams.{name} must be comma-separated integers such as '0,1', "
                       f"got {text!r}.") from None
    if not -rank <= dim < rank:
      raise ValueError(f"hparams.{name}={text!r}: dim {dim} is outside [{-rank}, {rank}) "
                       f"(its dropout acts on rank-{rank} tensors).")
    dims.add(dim % rank)
  return tuple(sorted(dims))


def _check_positive(hp: HParams, names) -> None:
  for name in names:
    value = getattr(hp, name)
    if value <= 0:
      raise ValueError(f"hparams.{name} must be positive, got {value!r}.")


def schedule_factors(schedule: str) -> List[str]:
  """The factor names of a `learning_rate_schedule` string, as T2T splits it."""
  return [name.strip() for name in schedule.split("*") if name.strip()]


def _check_adafactor(hp: HParams) -> None:
  """Refuses Adafactor settings T2T's `adafactor_optimizer_from_hparams` would not run."""
  if hp.optimizer_adafactor_decay_type not in ADAFACTOR_DECAY_TYPES:
    raise ValueError("hparams.optimizer_adafactor_decay_type must be 'pow' or 'adam', got "
                     f"{hp.optimizer_adafactor_decay_type!r}.")
  if not 0.0 <= hp.optimizer_adafactor_beta1 < 1.0:
    raise ValueError("hparams.optimizer_adafactor_beta1 must be in [0, 1), got "
                     f"{hp.optimizer_adafactor_beta1!r}.")
  if not 0.0 < hp.optimizer_adafactor_beta2 < 1.0:
    raise ValueError("hparams.optimizer_adafactor_beta2 must be in (0, 1), got "
                     f"{hp.optimizer_adafactor_beta2!r}.")
  if not 0.0 < hp.optimizer_adafactor_memory_exponent <= 1.0:
    raise ValueError("hparams.optimizer_adafactor_memory_exponent must be in (0, 1], got "
                     f"{hp.optimizer_adafactor_memory_exponent!r}.")
  if not hp.optimizer_adafactor_clipping_threshold > 0.0:
    raise ValueError("hparams.optimizer_adafactor_clipping_threshold must be > 0 (T2T: >= 1), "
                     f"got {hp.optimizer_adafactor_clipping_threshold!r}.")
  if hp.optimizer.lower() == "adafactor" and hp.optimizer_multistep_accumulate_steps > 1:
    raise ValueError(
        "hparams.optimizer=adafactor with optimizer_multistep_accumulate_steps="
        f"{hp.optimizer_multistep_accumulate_steps}: T2T accumulates gradients only in "
        "MultistepAdam (its Adafactor updates every batch); set "
        "optimizer_multistep_accumulate_steps=0 or optimizer=multistep_adam.")


def _check_learning_rate(hp: HParams) -> None:
  factors = schedule_factors(hp.learning_rate_schedule)
  bad = [name for name in factors if name not in LEARNING_RATE_FACTORS]
  if bad or not factors:
    raise ValueError(
        f"hparams.learning_rate_schedule={hp.learning_rate_schedule!r}: unknown factor "
        f"{(bad or [''])[0]!r}; valid factors (joined by '*'): "
        f"{', '.join(LEARNING_RATE_FACTORS)}.")
  if "legacy" in factors and hp.learning_rate_decay_scheme not in LEGACY_DECAY_SCHEMES:
    raise ValueError(
        "hparams.learning_rate_decay_scheme: the legacy schedule implements "
        f"{', '.join(LEGACY_DECAY_SCHEMES)}; got {hp.learning_rate_decay_scheme!r}.")
  if hp.learning_rate_warmup_steps < 0:
    raise ValueError("hparams.learning_rate_warmup_steps must be >= 0, got "
                     f"{hp.learning_rate_warmup_steps!r}.")
  divisors = {"linear_warmup", "rsqrt_decay", "rsqrt_normalized_decay"} & set(factors)
  if "legacy" in factors and hp.learning_rate_decay_scheme in ("noam", "cyclelinear10x"):
    divisors.add(f"legacy {hp.learning_rate_decay_scheme}")
  if hp.learning_rate_warmup_steps == 0 and divisors:
    raise ValueError("hparams.learning_rate_warmup_steps must be > 0 with "
                     f"{', '.join(sorted(divisors))} (it divides by it), got 0.")
  _check_positive(hp, ("learning_rate_decay_steps", "learning_rate_cosine_cycle_steps"))


def _check_sequence(name: str, sequence: str, allowed: set) -> None:
  if sequence == "none":
    return
  bad = sorted(set(sequence) - allowed)
  if bad or not sequence:
    raise ValueError(f"hparams.{name} must be 'none' or a string of {sorted(allowed)}, "
                     f"got {sequence!r}.")


# ---------------------------------------------------------------------------
# Named sets: each names its T2T parent explicitly and lists only its changes.

_REGISTRY: Dict[str, Callable[[], HParams]] = {}


def register(fn: Callable[[], HParams]) -> Callable[[], HParams]:
  _REGISTRY[fn.__name__] = fn
  return fn


@register
def transformer_base_v1() -> HParams:
  """Post-norm, attention/relu dropout 0, the paper's noam LR (v1 = dataclass defaults)."""
  return HParams()


@register
def transformer_base_v2() -> HParams:
  return transformer_base_v1().replace(
      layer_preprocess_sequence="n", layer_postprocess_sequence="da",
      layer_prepostprocess_dropout=0.1, attention_dropout=0.1, relu_dropout=0.1,
      learning_rate_warmup_steps=8000, learning_rate=0.2)


@register
def transformer_base_v3() -> HParams:
  return transformer_base_v2().replace(
      optimizer_adam_beta2=0.997,
      learning_rate_schedule="constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size",
      learning_rate_constant=2.0)


@register
def transformer_base() -> HParams:
  return transformer_base_v3()


@register
def transformer_big() -> HParams:
  return transformer_base().replace(hidden_size=1024, filter_size=4096, batch_size=2048,
                                    num_heads=16, layer_prepostprocess_dropout=0.3)


@register
def transformer_big_single_gpu() -> HParams:
  return transformer_big().replace(layer_prepostprocess_dropout=0.1,
                                   learning_rate_warmup_steps=16000)


@register
def transformer_base_single_gpu() -> HParams:
  return transformer_base().replace(
      batch_size=1024, learning_rate_schedule="constant*linear_warmup*rsqrt_decay",
      learning_rate_constant=0.1, learning_rate_warmup_steps=16000)


@register
def transformer_base_multistep8() -> HParams:
  return transformer_base().replace(optimizer="multistep_adam",
                                    optimizer_multistep_accumulate_steps=8)


@register
def transformer_parsing_base() -> HParams:
  # learning_rate=0.05 is inert under the factor schedule, as in T2T.
  return transformer_base().replace(
      attention_dropout=0.2, layer_prepostprocess_dropout=0.2, max_length=512,
      learning_rate_warmup_steps=16000, hidden_size=1024, learning_rate=0.05,
      shared_embedding_and_softmax_weights=False)


@register
def transformer_parsing_big() -> HParams:
  # T2T also sets `shared_source_target_embedding=False`, a name nothing reads.
  return transformer_big().replace(
      max_length=512, learning_rate_warmup_steps=4000, layer_prepostprocess_dropout=0.1,
      batch_size=2048, learning_rate=0.05)


@register
def transformer_tiny() -> HParams:
  return transformer_base().replace(num_hidden_layers=2, hidden_size=128, filter_size=512,
                                    num_heads=4)


@register
def transformer_small() -> HParams:
  return transformer_base().replace(num_hidden_layers=2, hidden_size=256, filter_size=1024,
                                    num_heads=4)


@register
def transformer_big_dr1() -> HParams:
  return transformer_base().replace(hidden_size=1024, filter_size=4096, num_heads=16,
                                    layer_prepostprocess_dropout=0.1)


@register
def transformer_big_enfr() -> HParams:
  return transformer_big_dr1().replace(shared_embedding_and_softmax_weights=False,
                                       filter_size=8192, layer_prepostprocess_dropout=0.1)


@register
def transformer_paper_base() -> HParams:
  """The paper's base model (§3, §5.3-5.4): post-norm, interleaved sinusoids, β2 0.98,
  lr = d^-0.5·min(step^-0.5, step·4000^-1.5), P_drop 0.1 on residuals and embeddings only,
  ε_ls 0.1, no target-space embedding (a T2T addition)."""
  return HParams(pos="timing_paper", use_target_space_embedding=False)


@register
def transformer_paper_big() -> HParams:
  """The paper's big model (Table 3): d 1024, d_ff 4096, 16 heads, P_drop 0.3."""
  return transformer_paper_base().replace(hidden_size=1024, filter_size=4096, num_heads=16,
                                          layer_prepostprocess_dropout=0.3)


# T2T's sets below: same names, each its T2T parent plus T2T's changes.


@register
def transformer_parsing_ice() -> HParams:
  return transformer_base_single_gpu().replace(batch_size=4096,
                                               shared_embedding_and_softmax_weights=False)


@register
def transformer_test() -> HParams:
  """T2T's test-sized model (its checkpoint in tests/data was trained with this set)."""
  return transformer_base().replace(num_hidden_layers=2, hidden_size=16, filter_size=8,
                                    num_heads=2)


def _base_with(**changes: Any) -> Callable[[], HParams]:
  """A set that is transformer_base with `changes` (T2T's one-change paper Table 3 rows)."""
  return lambda: transformer_base().replace(**changes)


# The paper's Table 3 variations of the base model, as T2T registered them.
for _name, _changes in (
    ("transformer_l2", dict(num_hidden_layers=2)), ("transformer_l4", dict(num_hidden_layers=4)),
    ("transformer_l8", dict(num_hidden_layers=8)),
    ("transformer_l10", dict(num_hidden_layers=10)),
    ("transformer_h1", dict(num_heads=1)), ("transformer_h4", dict(num_heads=4)),
    ("transformer_h16", dict(num_heads=16)), ("transformer_h32", dict(num_heads=32)),
    ("transformer_k128", dict(attention_key_channels=128)),
    ("transformer_k256", dict(attention_key_channels=256)),
    ("transformer_ff1024", dict(filter_size=1024)), ("transformer_ff4096", dict(filter_size=4096)),
    ("transformer_dr0", dict(layer_prepostprocess_dropout=0.0)),
    ("transformer_dr2", dict(layer_prepostprocess_dropout=0.2)),
    ("transformer_ls0", dict(label_smoothing=0.0)), ("transformer_ls2", dict(label_smoothing=0.2)),
    ("transformer_hs256", dict(hidden_size=256)), ("transformer_hs1024", dict(hidden_size=1024))):
  _fn = _base_with(**_changes)
  _fn.__name__ = _name
  register(_fn)


@register
def transformer_big_dr2() -> HParams:
  return transformer_big_dr1().replace(layer_prepostprocess_dropout=0.2)


@register
def transformer_clean() -> HParams:
  """No dropout, no label smoothing; max_length 0 (= batch_size)."""
  return transformer_base_v2().replace(
      label_smoothing=0.0, layer_prepostprocess_dropout=0.0, attention_dropout=0.0,
      relu_dropout=0.0, max_length=0)


@register
def transformer_clean_big() -> HParams:
  return transformer_clean().replace(hidden_size=1024, filter_size=4096)


@register
def transformer_fairseq_fp16_activation_big() -> HParams:
  """Float16 activations (mixed_float16, dynamic loss scaling) as in Ott et al. 2018."""
  return transformer_big().replace(activation_dtype="float16", batch_size=3584)


@register
def transformer_relative() -> HParams:
  """Shaw et al. 2018: self-attention on clipped relative positions, no sinusoid."""
  return transformer_base().replace(pos="none", self_attention_type="dot_product_relative",
                                    max_relative_position=20)


@register
def transformer_relative_tiny() -> HParams:
  return transformer_relative().replace(num_hidden_layers=2, hidden_size=128, filter_size=512,
                                        num_heads=4)


@register
def transformer_relative_big() -> HParams:
  return transformer_big().replace(pos="none", self_attention_type="dot_product_relative",
                                   max_relative_position=20)


@register
def transformer_cubbitt() -> HParams:
  """CUBBITT (Popel et al. 2020): transformer_big_single_gpu with Adafactor."""
  return transformer_big_single_gpu().replace(
      learning_rate_schedule="rsqrt_decay", batch_size=2900, learning_rate_warmup_steps=8000,
      max_length=150, layer_prepostprocess_dropout=0.0, optimizer="Adafactor")


# Dropout masks shared over attention's batch and heads and over the length of
# the [batch, length, depth] tensors: T2T's memory saving on TPUs.
_BROADCAST_DROPOUT = dict(attention_dropout_broadcast_dims="0,1",
                          relu_dropout_broadcast_dims="1",
                          layer_prepostprocess_dropout_broadcast_dims="1")


def _for_tpu(hp: HParams) -> HParams:
  """T2T's `update_hparams_for_tpu`: Adafactor with rsqrt_decay (warmup 10000), one
  embedding shard, max_length 64, batch_size at most 2048, `_BROADCAST_DROPOUT`."""
  return hp.replace(optimizer="Adafactor", learning_rate_schedule="rsqrt_decay",
                    learning_rate_warmup_steps=10000, symbol_modality_num_shards=1,
                    max_length=64, batch_size=min(hp.batch_size, 2048), **_BROADCAST_DROPOUT)


@register
def transformer_tpu() -> HParams:
  return _for_tpu(transformer_base())


@register
def transformer_packed_tpu() -> HParams:
  """T2T's deprecated alias of transformer_tpu."""
  return transformer_tpu()


@register
def transformer_tpu_bf16_activation() -> HParams:
  return transformer_tpu().replace(activation_dtype="bfloat16")


@register
def transformer_big_tpu() -> HParams:
  return _for_tpu(transformer_big())


@register
def transformer_tiny_tpu() -> HParams:
  return _for_tpu(transformer_tiny())


@register
def transformer_small_tpu() -> HParams:
  return _for_tpu(transformer_small())


@register
def transformer_clean_big_tpu() -> HParams:
  return _for_tpu(transformer_clean_big())


@register
def transformer_big_enfr_tpu() -> HParams:
  return _for_tpu(transformer_big_enfr().replace(num_heads=8))


@register
def transformer_mlperf_tpu() -> HParams:
  """T2T's MLPerf set; its mlperf_mode only switched on MLPerf compliance logging."""
  return transformer_base_v3().replace(
      symbol_modality_num_shards=1, max_length=256, batch_size=2048, hidden_size=1024,
      filter_size=4096, num_heads=16, **_BROADCAST_DROPOUT)


# T2T's transformer.py sets not built here, refused by name: set -> why.
_MOE = "mixture-of-experts / VQ-gated feed-forward layers (ffn_layer=local_moe) are not implemented"
_TALL = ("language-model 'tall' pre-training and multi-problem mixing (multiproblem_*) are "
         "not implemented")
_LM = "language models (targets only, no inputs) are not implemented"
_AUDIO = "audio inputs are not implemented"
_MEMORY = f"Transformer-XL memory (memory_type, split_targets_*) is not implemented; {_LM}"
REFUSED_HPARAMS_SETS: Dict[str, str] = {
    **{name: _MOE for name in (
        "transformer_base_vq_ada_32ex_packed", "transformer_topk_16_packed",
        "transformer_base_vq1_16_nb1_packed_nda_b01_scales",
        "transformer_base_vq1_16_nb1_packed_dan_b01_scales",
        "transformer_base_vq1_16_nb1_packed_nda_b01_scales_dialog")},
    **{name: _TALL for name in (
        "transformer_tall", "transformer_tall_finetune_tied", "transformer_tall_train_tied",
        "transformer_tall_finetune_uniencdec", "transformer_tall_train_uniencdec",
        "transformer_tall_finetune_textclass", "transformer_tall_pretrain_lm",
        "transformer_tall_pretrain_lm_tpu_adafactor",
        "transformer_tall_pretrain_lm_tpu_adafactor_large", "transformer_tall_pretrain_lm_tpu",
        "transformer_tall_big")},
    **{name: "parameter attention (ffn_layer=parameter_attention) is not implemented"
       for name in ("transformer_parameter_attention_a", "transformer_parameter_attention_b")},
    **{name: "prepend mode (inputs prepended to targets, prepend_mode) is not implemented"
       for name in ("transformer_prepend_v2", "transformer_prepend_v1", "transformer_prepend")},
    **{name: "time-series inputs are not implemented"
       for name in ("transformer_timeseries", "transformer_timeseries_tpu")},
    "transformer_tpu_with_conv": ("convolutional feed-forward layers (ffn_layer=conv_relu_conv) "
                                  "are not implemented"),
    **{name: f"a language-model set (T2T's languagemodel_lm1b8k): {_LM}"
       for name in ("transformer_lm_tpu_0", "transformer_lm_tpu_1")},
    "transformer_wikitext103_l4k_v0": f"a language-model set (T2T's "
                                      f"languagemodel_wikitext103_l4k): {_LM}",
    **{name: ("a language-model set on packed examples (T2T's languagemodel_lm1b32k_packed): "
              f"{_LM}, nor are packed datasets (several examples per row)")
       for name in ("transformer_ada_lmpackedbase", "transformer_ada_lmpackedbase_dialog",
                    "transformer_ada_lmpackedbase_relative")},
    **{name: _AUDIO for name in (
        "transformer_librispeech_v1", "transformer_librispeech_v2",
        "transformer_librispeech_tpu_v1", "transformer_librispeech_tpu_v2",
        "transformer_librispeech_with_area_attention", "transformer_librispeech",
        "transformer_librispeech_tpu", "transformer_common_voice",
        "transformer_common_voice_tpu")},
    "transformer_supervised_attention": "supervised attention (an attention loss) is not "
                                        "implemented",
    "transformer_tpu_1b": "bfloat16 weights (weight_dtype=bfloat16) are not implemented",
    "transformer_wikitext103_l4k_memory_v0": _MEMORY,
    "transformer_wikitext103_l16k_memory_v0": _MEMORY,
    "transformer_cifar10_memory_v0": f"image inputs are not implemented; {_MEMORY}",
    "transformer_imagenet64_memory_v0": f"image inputs are not implemented; {_MEMORY}",
}
def refusal(hparams_set: str) -> str:
  """Why T2T's set `hparams_set` is not built here; "" for a set that is not refused."""
  if hparams_set in REFUSED_HPARAMS_SETS:
    return f"{hparams_set}: {REFUSED_HPARAMS_SETS[hparams_set]}."
  return ""


def list_hparams_sets() -> List[str]:
  return sorted(_REGISTRY)


def create_hparams(hparams_set: str, overrides: str = "") -> HParams:
  """Returns the named set with T2T-syntax `overrides` applied.

  Raises:
    ValueError: for a T2T set refused here (naming it and why), an unknown set
      (listing the valid ones) or a bad override.
  """
  if hparams_set not in _REGISTRY:
    why = refusal(hparams_set)
    if why:
      raise ValueError(f"{why} Buildable sets: {', '.join(list_hparams_sets())}.")
    raise ValueError(f"Unknown hparams_set {hparams_set!r} (neither a set built here nor one "
                     f"of T2T's refused sets, see docs/hparams_sets.md). Valid sets: "
                     f"{', '.join(list_hparams_sets())}.")
  return _REGISTRY[hparams_set]().parse(overrides)


def create_decode_hparams(overrides: str = "", hparams_overrides: str = "") -> DecodeHParams:
  """DecodeHParams with T2T-syntax `overrides` (`--decode_hparams`) applied.

  `hparams_overrides` (`--hparams`) may hold the decoding settings T2T kept
  among the model hparams (`DECODE_FIELDS_IN_HPARAMS`, e.g.
  `sampling_method=random`); they are applied too. Its other names are only
  checked here.

  Raises:
    ValueError: a bad override, or a setting given in both strings.
  """
  routed = split_decode_fields(parse_overrides(HParams, hparams_overrides))[1]
  values = parse_overrides(DecodeHParams, overrides)
  twice = sorted(set(routed) & set(values))
  if twice:
    raise ValueError(f"{twice[0]} is given in both --hparams and --decode_hparams; give it "
                     "once (in --decode_hparams).")
  return DecodeHParams().replace(**routed, **values)
