"""What every decoding loop shares: the id buffer, per-row lengths, the forced
prefix, argument checks.

Used by `beam_search.py` and `sampling.py` (and, through `sampling.py`, `lm.py`).
The loops write decoded ids into a fixed-size buffer `[n, decode_length + 1]`
(column 0 holds the initial ids) and stop each row at its own decode length, so
shapes never change across steps.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

from data_gen.text_encoder import PAD_ID
from t2t_keras.decoding_state import DecodingState

# fn(ids [n, decode_length + 1], i, state) -> (logits [n, vocab], state).
SymbolsToLogitsFn = Callable[[tf.Tensor, tf.Tensor, DecodingState],
                             Tuple[tf.Tensor, DecodingState]]
IntOrTensor = Union[int, tf.Tensor]


class SearchOutput(NamedTuple):
  """What every search returns (`beam_search.beam_search`, `sampling.greedy_search`,
  `sampling.sample`).

  ids: int32 incl. the leading initial id, 0-padded after EOS / after the last
    step. Beam search: `[batch, beam_size, decode_length + 1]`, sorted best
    first; greedy and sampling: `[batch, decode_length + 1]`.
  scores: float32. Beam search: `[batch, beam_size]`, length-normalised scores
    of finished sequences, or raw log-probs of alive ones for items where none
    finished; if fewer than beam_size finished, the empty slots hold ids 0 and a
    score <= -INF (as in T2T): drop them before showing n-best lists. Greedy and
    sampling: `[batch]`, the sum of log-probs up to and including the first EOS.
  state: the final `DecodingState`: `per_beam` of the final hypotheses (beam
    search: the alive beams, leading dim `batch * beam_size`), `per_item` as
    given, the final `in_place`.
  num_steps: scalar int32, decoding steps run (<= decode_length).
  """
  ids: tf.Tensor
  scores: tf.Tensor
  state: DecodingState
  num_steps: tf.Tensor


def write_column(buffer: tf.Tensor, position: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
  """Writes `values` [...] into column `position` of `buffer` [..., length]."""
  length = tf.shape(buffer)[-1]
  is_position = tf.equal(tf.range(length), position)  # [length]
  return tf.where(is_position, values[..., None], buffer)


def init_id_buffer(initial_ids: tf.Tensor, decode_length: IntOrTensor) -> tf.Tensor:
  """`[batch]` initial ids -> `[batch, decode_length + 1]` PAD ids + column 0."""
  initial_ids = tf.convert_to_tensor(initial_ids)
  if initial_ids.shape.rank != 1:
    raise ValueError("initial_ids must have shape [batch], got shape "
                     f"{initial_ids.shape}.")
  initial_ids = tf.cast(initial_ids, tf.int32)
  buffer = tf.fill(tf.stack([tf.shape(initial_ids)[0], decode_length + 1]), PAD_ID)
  return write_column(buffer, 0, initial_ids)


def item_decode_lengths(decode_lengths, decode_length: IntOrTensor,
                        batch_size: tf.Tensor) -> tf.Tensor:
  """`[batch]` int32 per-item lengths (default `decode_length`), capped at decode_length."""
  if decode_lengths is None:
    return tf.fill([batch_size], tf.cast(decode_length, tf.int32))
  decode_lengths = tf.convert_to_tensor(decode_lengths)
  if decode_lengths.shape.rank != 1:
    raise ValueError("decode_lengths must have shape [batch], got shape "
                     f"{decode_lengths.shape}.")
  return tf.minimum(tf.cast(decode_lengths, tf.int32), tf.cast(decode_length, tf.int32))


# How a forced prefix id is scored: "model": the model's log-prob of it counts,
# as scoring the whole output would (seq2seq prefixes); "free": it counts 0, so
# the score is the continuation's alone (T2T's LM `partial_targets`, lm.py).
PREFIX_SCORINGS = ("model", "free")


class ForcedPrefix(NamedTuple):
  """Forced first ids per row, prepared once per search by `forced_prefix`.

  ids: `[batch, P + 1]` int32, 0-padded; the extra PAD column lets step i
    always gather a column, also when P is 0.
  lengths: `[batch]` int32, each row's prefix length: its non-PAD ids, or the
    lengths given to `forced_prefix` (then PAD ids inside them are forced too,
    as the 0 that ends T2T's prepend-mode prefix, `seq2seq.prepend_prefix`).
  scoring: one of `PREFIX_SCORINGS`.

  A forced id never ends a hypothesis, EOS included (the inputs' EOS inside a
  prepend-mode prefix): only an id the search chooses itself does.
  """
  ids: tf.Tensor
  lengths: tf.Tensor
  scoring: str


def forced_prefix(prefix: Union[None, tf.Tensor, ForcedPrefix], scoring: str = "model",
                  lengths: Optional[tf.Tensor] = None) -> Optional[ForcedPrefix]:
  """`prefix` `[batch, P]` int forced first ids (0-padded) -> `ForcedPrefix`
  (None for None; a `ForcedPrefix` is returned as it is, with its own scoring).

  lengths: optional `[batch]` int, each row's prefix length (default: its
    non-PAD ids); ids past it are not forced.
  """
  if scoring not in PREFIX_SCORINGS:
    raise ValueError(f"prefix scoring must be one of {PREFIX_SCORINGS}, got {scoring!r}.")
  if prefix is None or isinstance(prefix, ForcedPrefix):
    return prefix
  ids = tf.pad(tf.cast(prefix, tf.int32), [[0, 0], [0, 1]])
  if lengths is None:
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), 1)
  return ForcedPrefix(ids, tf.cast(lengths, tf.int32), scoring)


def prefix_step(prefix: ForcedPrefix, i: tf.Tensor,
                model_log_prob: Callable[[tf.Tensor], tf.Tensor]
                ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """The forced token of step `i` (scalar int32) of every row.

  Args:
    prefix: from `forced_prefix`.
    model_log_prob: ids `[batch]` -> `[batch]` float32, the model's log-prob
      of the ids at this step, computed as the caller scores the ids it
      chooses itself (so a forced id scores as the same id chosen would);
      called only under scoring "model".
  Returns:
    (inside `[batch]` bool: the rows still inside their prefix, which take
    the forced ids; ids `[batch]` int32, the forced ids (meaningless where not
    inside); log_probs `[batch]` float32, their scores under `prefix.scoring`).
  """
  column = tf.minimum(i, tf.shape(prefix.ids)[1] - 1)
  ids = tf.gather(prefix.ids, column, axis=1)
  if prefix.scoring == "free":
    log_probs = tf.zeros(tf.shape(ids), tf.float32)
  else:
    log_probs = model_log_prob(ids)
  return i < prefix.lengths, ids, log_probs


def check_logits(logits: tf.Tensor, vocab_size: Optional[int]) -> tf.Tensor:
  """Casts logits to float32 and checks the static vocab dim."""
  last_dim = logits.shape[-1]
  if vocab_size is not None and last_dim is not None and last_dim != vocab_size:
    raise ValueError(
        f"symbols_to_logits_fn returned logits with last dim {last_dim}, "
        f"but vocab_size={vocab_size}; pass the model's vocab size.")
  return tf.cast(logits, tf.float32)


def is_int(value: Any) -> bool:
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_positive_int(name: str, value: Any, minimum: int = 1) -> None:
  if not is_int(value) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}.")


def check_decode_length(decode_length: IntOrTensor) -> None:
  if isinstance(decode_length, tf.Tensor):
    return  # checked by shapes at run time
  check_positive_int("decode_length", decode_length, minimum=0)


def check_state(state: Optional[DecodingState], batch_size: Any) -> DecodingState:
  """`state` (or an empty one) after checking the static leading dims of `per_beam`."""
  if state is None:
    return DecodingState()
  if not isinstance(state, DecodingState):
    raise ValueError("state must be a decoding_state.DecodingState, got "
                     f"{type(state).__name__}.")
  for tensor in tf.nest.flatten(state.per_beam):
    rows = tf.convert_to_tensor(tensor).shape[:1]
    if batch_size is not None and rows and rows[0] not in (None, batch_size):
      raise ValueError(f"every per_beam tensor needs leading dim batch={batch_size}; "
                       f"got a tensor of shape {tensor.shape}.")
  return state
