"""Checks of `HParams` fields that have their own rules (T2T's Adafactor, prepend_mode,
the learning-rate schedule, positive sizes, the pre/post-processing sequences),
and of the decode hparams that depend on the model decoded (`check_decode_for_models`,
`check_decode_for_language_model`).

Called by `HParams.__post_init__` and before decoding; each raises ValueError naming
the field and the value received. Kept apart so that `hparams.py` stays one sitting's
read.
"""

from __future__ import annotations

from typing import List

ADAFACTOR_DECAY_TYPES = ("pow", "adam")
# T2T's `prepend_mode` (common_hparams.py): "none"; the inputs, a 0 and the targets
# as one target sequence under causal attention (loss on it all in training,
# metrics on the targets part), or with full attention within the inputs part
# (loss and metrics on the targets part only).
PREPEND_MODES = ("none", "prepend_inputs_masked_attention", "prepend_inputs_full_attention")

# Factors of `learning_rate_schedule` strings (T2T `utils/learning_rate.py`).
LEARNING_RATE_FACTORS = ("constant", "linear_warmup", "rsqrt_decay", "rsqrt_normalized_decay",
                         "rsqrt_hidden_size", "linear_decay", "cosdecay",
                         "single_cycle_cos_decay", "multi_cycle_cos_decay", "exp_decay",
                         "legacy")
# `learning_rate_decay_scheme` values of the legacy schedule. T2T's "piecewise"
# reads `learning_rate_boundaries` / `learning_rate_multiples`, fields not kept here.
LEGACY_DECAY_SCHEMES = ("noam", "none", "exp", "cosine", "cyclelinear10x", "sqrt")


def check_adafactor(hp) -> None:
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


def check_prepend_mode(hp) -> None:
  """Refuses a `prepend_mode` T2T does not have."""
  if hp.prepend_mode not in PREPEND_MODES:
    raise ValueError(f"hparams.prepend_mode must be one of {', '.join(PREPEND_MODES)}, got "
                     f"{hp.prepend_mode!r}.")


def check_decode_for_models(decode_hp, models, target_vocab_size: int) -> None:
  """Refuses decode hparams the models decoded together cannot honour, from their
  `HParams` and target vocabulary size alone (before any is built): alignments of a
  prepend_mode run, an alignment_layer or alignment_heads one of them lacks, a
  sampling_keep_top_k above the vocabulary (`DecodeHParams.__post_init__` checks the
  rest).

  Raises:
    ValueError: one line naming the decode hparam, its value and the valid range.
  """
  if decode_hp.return_alignments:
    prepend = sorted({hp.prepend_mode for hp in models} - {"none"})
    if prepend:
      raise ValueError(f"decode_hparams.return_alignments: a run with prepend_mode={prepend[0]!r} "
                       "has no alignments here (its outputs follow its inputs in the decoder); "
                       "decode it without return_alignments.")
    layers = min(hp.decoder_layers for hp in models)
    heads = min(hp.num_heads for hp in models)
    if not -layers <= decode_hp.alignment_layer < layers:
      raise ValueError(f"decode_hparams.alignment_layer must be in [-{layers}, {layers}) (the "
                       f"model's {layers} decoder layers, negative from the end), got "
                       f"{decode_hp.alignment_layer}.")
    if decode_hp.alignment_heads > heads:
      raise ValueError(f"decode_hparams.alignment_heads must be in [0, {heads}] (0: all "
                       f"{heads} heads of the model averaged, k: the first k), got "
                       f"{decode_hp.alignment_heads}.")
  if (decode_hp.beam_size == 1 and decode_hp.sampling_method == "random" and
      decode_hp.sampling_keep_top_k > target_vocab_size):
    raise ValueError("decode_hparams.sampling_keep_top_k must be -1 (keep all) or at most the "
                     f"{target_vocab_size} ids of the target vocabulary, got "
                     f"{decode_hp.sampling_keep_top_k}.")


def check_decode_for_language_model(decode_hp) -> None:
  """Refuses decode hparams a language model's decoding does not take: one
  continuation per prompt (no return_beams, write_beam_scores), no source to align
  (return_alignments), at least one new token (extra_length, T2T's decode length
  past the prompt).

  Raises:
    ValueError: one line naming the decode hparam and its value.
  """
  for name, why in (("return_beams", "a language model gives one continuation per prompt"),
                    ("write_beam_scores", "a language model gives one continuation per "
                     "prompt; --score_file writes log-probabilities"),
                    ("return_alignments", "a language model has no source to align")):
    if getattr(decode_hp, name):
      raise ValueError(f"decode_hparams.{name}={getattr(decode_hp, name)!r}: {why}; drop it.")
  if decode_hp.extra_length < 1:
    raise ValueError("decode_hparams.extra_length must be >= 1 for a language model (the new "
                     f"tokens after each prompt), got {decode_hp.extra_length}.")


def check_positive(hp, names) -> None:
  for name in names:
    value = getattr(hp, name)
    if value <= 0:
      raise ValueError(f"hparams.{name} must be positive, got {value!r}.")


def schedule_factors(schedule: str) -> List[str]:
  """The factor names of a `learning_rate_schedule` string, as T2T splits it."""
  return [name.strip() for name in schedule.split("*") if name.strip()]


def check_learning_rate(hp) -> None:
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
  check_positive(hp, ("learning_rate_decay_steps", "learning_rate_cosine_cycle_steps"))


def check_sequence(name: str, sequence: str, allowed: set) -> None:
  if sequence == "none":
    return
  bad = sorted(set(sequence) - allowed)
  if bad or not sequence:
    raise ValueError(f"hparams.{name} must be 'none' or a string of {sorted(allowed)}, "
                     f"got {sequence!r}.")
