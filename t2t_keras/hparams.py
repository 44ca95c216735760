"""Immutable hyperparameters with T2T's names, the registry of named sets, and override parsing.

`HParams` holds every model and training hyperparameter under the name T2T used
(`layers/common_hparams.py:basic_params1` plus `models/transformer.py`), so that a
T2T override string such as ``--hparams='num_heads=16,pos=emb'`` works unchanged.
Unlike T2T's mutable object, it is a frozen dataclass: derive a new one with
`replace` or `parse_overrides`. T2T's named sets, and those refused with the
reason, are in `hparams_sets.py`; `create_hparams` builds one by name.

`DecodeHParams` holds T2T's decode hparams (`utils/decoding.py:decode_hparams`),
and the sampling settings T2T kept among the model hparams (`sampling_method`,
`sampling_temp`, `sampling_keep_top_k`): they change decoding, not the model.
T2T's way of setting them still works: an `--hparams` string may name them
(`HParams.parse` checks and sets them aside, `create_decode_hparams` takes them
from it), and an older run's hparams.json that holds them still loads.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import re
from typing import Any, Callable, Dict, List, Tuple

from t2t_keras.hparams_checks import (check_adafactor, check_learning_rate, check_positive,
                                      check_prepend_mode, check_sequence)

_PREPOST_CHARS = set("adnz")
POS_CHOICES = ("timing", "timing_paper", "emb", "none")
SELF_ATTENTION_TYPES = ("dot_product", "dot_product_relative")
# T2T `utils/optimize.py:get_variable_initializer` names ("" is TF's default,
# Glorot uniform); built by `layers/initializers.py`.
INITIALIZERS = ("uniform_unit_scaling", "normal_unit_scaling", "uniform", "orthogonal",
                "xavier", "")
# T2T's optimizer names that are its Adam (all train here as optimization.FusedAdam).
ADAM_OPTIMIZERS = ("adam", "multistep_adam", "multistepadam", "true_adam", "lazy_adam")
# T2T's `activation_dtype` values -> the trainer's --mixed_precision mode (precision.py).
ACTIVATION_DTYPES = ("float32", "bfloat16", "float16")
MIXED_PRECISION_OF_ACTIVATION_DTYPE = {"float32": "none", "bfloat16": "bfloat16",
                                       "float16": "float16"}
# Every optimizer name accepted: T2T's Adam ones and its Adafactor (adafactor.T2TAdafactor).
OPTIMIZERS = ADAM_OPTIMIZERS + ("adafactor",)
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
  prepend_mode: str = "none"  # see hparams_checks.PREPEND_MODES (T2T's values)
  # Pack several examples into each row of max_length tokens (T2T's pack_dataset;
  # training/inputs.py), each example still computed as alone.
  pack_dataset: bool = False

  def __post_init__(self):
    check_positive(self, ("hidden_size", "filter_size", "num_heads",
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
    check_sequence("layer_preprocess_sequence", self.layer_preprocess_sequence,
                    allowed=set("dn"))
    check_sequence("layer_postprocess_sequence", self.layer_postprocess_sequence,
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
    check_learning_rate(self)
    if self.activation_dtype not in ACTIVATION_DTYPES:
      raise ValueError(f"hparams.activation_dtype must be one of {', '.join(ACTIVATION_DTYPES)}, "
                       f"got {self.activation_dtype!r}.")
    if self.weight_dtype != "float32":
      raise ValueError(f"hparams.weight_dtype: only 'float32' weights are implemented, got "
                       f"{self.weight_dtype!r} (activation_dtype sets mixed precision).")
    if self.optimizer.lower() not in OPTIMIZERS:
      raise ValueError("hparams.optimizer must be one of adam, multistep_adam, true_adam, "
                       f"lazy_adam, adafactor; got {self.optimizer!r}.")
    check_adafactor(self)
    check_prepend_mode(self)
    if self.pack_dataset and self.prepend_mode != "none":
      raise ValueError("hparams.pack_dataset=true with prepend_mode="
                       f"{self.prepend_mode!r} is not implemented; use prepend_mode=none.")

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
    return cls.from_dict(json.loads(text))

  @classmethod
  def from_dict(cls, values: Dict[str, Any]) -> "HParams":
    """HParams of a `to_dict` (hparams.json, a Keras config); as `from_json`."""
    values, decode = split_decode_fields(dict(values))
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
  # Not T2T's: source-target alignments after each hypothesis (`alignments.py`).
  return_alignments: bool = False  # "text ||| 0-0 1-2 ..." (Pharaoh) per hypothesis.
  alignment_level: str = "word"  # or "subword": indices of words or of subword ids.
  alignment_layer: int = -1  # decoder layer whose encoder-decoder attention is read.
  alignment_heads: int = 0  # average of its first k heads; 0: all.

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
    for name, lowest in (("beam_size", 1), ("alpha", 0), ("extra_length", 0)):
      if not (value := getattr(self, name)) >= lowest:  # NaN too
        raise ValueError(f"decode_hparams.{name} must be >= {lowest}, got {value}.")
    _check_sampling("decode_hparams", self.sampling_method, self.sampling_temp,
                    self.sampling_keep_top_k)
    if self.alignment_level not in ("word", "subword") or self.alignment_heads < 0:
      raise ValueError("decode_hparams.alignment_level must be 'word' or 'subword' and "
                       "alignment_heads >= 0 (0: all heads), got "
                       f"{self.alignment_level!r} and {self.alignment_heads}.")


def _check_sampling(owner: str, method: str, temp: float, keep_top_k: int) -> None:
  """The checks of the sampling settings; `owner` names where they were given."""
  if method not in ("argmax", "random"):
    raise ValueError(f"{owner}.sampling_method must be 'argmax' or 'random', got {method!r}.")
  if not temp >= 0:  # NaN too
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


# ---------------------------------------------------------------------------
# The registry of named sets; the sets themselves are in hparams_sets.py.

_REGISTRY: Dict[str, Callable[[], HParams]] = {}


def register(fn: Callable[[], HParams]) -> Callable[[], HParams]:
  """Registers `fn` as the hparams set named `fn.__name__`; returns `fn`."""
  _REGISTRY[fn.__name__] = fn
  return fn


def _sets():
  # Registers the built-in sets on first lookup (hparams_sets imports this module).
  from t2t_keras import hparams_sets  # it imports this module  pylint: disable=import-outside-toplevel
  return hparams_sets


def refusal(hparams_set: str) -> str:
  """Why T2T's set `hparams_set` is not built here; "" for a set that is not refused."""
  refused = _sets().REFUSED_HPARAMS_SETS
  return f"{hparams_set}: {refused[hparams_set]}." if hparams_set in refused else ""


def list_hparams_sets() -> List[str]:
  _sets()
  return sorted(_REGISTRY)


def create_hparams(hparams_set: str, overrides: str = "") -> HParams:
  """Returns the named set with T2T-syntax `overrides` applied.

  Raises:
    ValueError: for a T2T set refused here (naming it and why), an unknown set
      (listing the valid ones) or a bad override.
  """
  _sets()
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


def api_decode_hparams(decode_hparams: Any = "", **values) -> DecodeHParams:
  """The decode hparams of a Python API call: T2T's override string and/or keyword
  values, with log_results off unless asked for; a DecodeHParams given is used with
  `values` replaced.

  Raises:
    ValueError: an unknown name or a bad value.
  """
  if isinstance(decode_hparams, DecodeHParams):
    return dataclasses.replace(decode_hparams, **values)
  values.setdefault("log_results", False)
  overrides = ",".join(filter(None, [decode_hparams] + [f"{k}={v}" for k, v in values.items()]))
  return create_decode_hparams(overrides)
