"""Checks of `HParams` fields that have their own rules (T2T's Adafactor, prepend_mode),
and of the decode hparams that depend on the model decoded (`check_decode_for_models`).

Called by `HParams.__post_init__` and before decoding; each raises ValueError naming
the field and the value received. Kept apart so that `hparams.py` stays one sitting's
read.
"""

from __future__ import annotations

ADAFACTOR_DECAY_TYPES = ("pow", "adam")
# T2T's `prepend_mode` (common_hparams.py): "none"; the inputs, a 0 and the targets
# as one target sequence under causal attention (loss on it all in training,
# metrics on the targets part), or with full attention within the inputs part
# (loss and metrics on the targets part only).
PREPEND_MODES = ("none", "prepend_inputs_masked_attention", "prepend_inputs_full_attention")


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
  `HParams` and target vocabulary size alone (before any is built): an
  alignment_layer or alignment_heads one of them lacks, a sampling_keep_top_k above
  the vocabulary (`DecodeHParams.__post_init__` checks the rest).

  Raises:
    ValueError: one line naming the decode hparam, its value and the valid range.
  """
  if decode_hp.return_alignments:
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
