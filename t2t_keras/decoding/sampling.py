"""T2T's greedy and sampling decoding over a `symbols_to_logits_fn`.

Model-agnostic, with beam search's callable and state (see `beam_search.py` and
`decoding_state.py`), here over `n = batch` rows, one hypothesis per item:

    symbols_to_logits_fn(ids, i, state) -> (logits, state)

Nothing is reordered: `per_beam` and `in_place` are carried from step to step,
`per_item` is handed over unchanged. A row takes steps until it emits EOS or
reaches its own decode length, where it stops without EOS (T2T's greedy loop
at its decode_length).
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import tensorflow as tf

from data_gen.text_encoder import EOS_ID, PAD_ID
from t2t_keras.decoding.search_utils import (ForcedPrefix, IntOrTensor, SearchOutput,
                                             SymbolsToLogitsFn, check_decode_length,
                                             check_logits, check_state, forced_prefix,
                                             init_id_buffer, is_int, item_decode_lengths,
                                             prefix_step, write_column)
from t2t_keras.decoding_state import DecodingState

# T2T's sampling_keep_top_k sets the logits outside the top k to this value.
_TOP_K_MASK_LOGIT = -1e6


def sample_with_temperature(logits: tf.Tensor, temperature: float, top_k: int = -1,
                            seed: tf.Tensor = None) -> tf.Tensor:
  """Draws one id per row, T2T `sampling_temp` / `sampling_keep_top_k`.

  Args:
    logits: `[batch, vocab]` float.
    temperature: 0 means argmax; otherwise sample from
      `softmax(logits / temperature)`.
    top_k: -1 keeps all ids; k > 0 sets the logits below the k-th largest to
      -1e6 first (ties with the k-th largest are kept).
    seed: `[2]` int32 stateless seed (required when temperature > 0).
  Returns:
    `[batch]` int32 ids.
  """
  if temperature == 0.0:
    return tf.argmax(logits, axis=-1, output_type=tf.int32)
  if seed is None:
    raise ValueError("seed is required when temperature > 0 "
                     f"(temperature={temperature}); pass a [2] int32 tensor.")
  vocab_size = logits.shape[-1]
  if vocab_size is not None and top_k > vocab_size:
    raise ValueError(f"top_k must be <= vocab size {vocab_size} (or -1), got {top_k}.")
  if top_k != -1:
    kth_largest = tf.math.top_k(logits, k=top_k).values[:, -1:]  # [batch, 1]
    logits = tf.where(logits < kth_largest, tf.constant(_TOP_K_MASK_LOGIT, logits.dtype),
                      logits)
  # Gumbel-max draws exactly from the categorical and, unlike
  # StatelessMultinomial, compiles with XLA on CPU.
  uniform = tf.random.stateless_uniform(tf.shape(logits), seed, minval=1e-20, maxval=1.0)
  gumbel = -tf.math.log(-tf.math.log(uniform))
  return tf.argmax(logits / temperature + gumbel, axis=-1, output_type=tf.int32)


def _decode_loop(symbols_to_logits_fn, initial_ids, decode_length, eos_id, state,
                 choose_fn, decode_lengths=None, prefix: Optional[ForcedPrefix] = None):
  """Shared greedy/sampling loop; `choose_fn(logits [b, V], i) -> [b]`; a row
  inside its `prefix` takes the prefix token instead (`search_utils.prefix_step`),
  and a forced id does not end the row, EOS included."""
  check_decode_length(decode_length)
  ids = init_id_buffer(initial_ids, decode_length)  # [batch, L+1]
  batch_size = tf.shape(ids)[0]
  lengths = item_decode_lengths(decode_lengths, decode_length, batch_size)
  state = check_state(state, ids.shape[0])

  def body(i, ids, log_prob, hit_eos, per_beam, in_place):
    active = tf.logical_and(tf.logical_not(hit_eos), i < lengths)  # [batch]
    logits, new_state = symbols_to_logits_fn(
        ids, i, DecodingState(per_beam, state.per_item, in_place))
    logits = check_logits(logits, None)  # [batch, V]
    next_id = choose_fn(logits, i)  # [batch]
    log_probs = tf.nn.log_softmax(logits)  # [batch, V]
    token_log_prob = tf.gather(log_probs, next_id, batch_dims=1)  # [batch]
    if prefix is not None:
      inside, forced_id, forced_log_prob = prefix_step(
          prefix, i, lambda forced: tf.gather(log_probs, forced, batch_dims=1))
      next_id = tf.where(inside, forced_id, next_id)
      token_log_prob = tf.where(inside, forced_log_prob, token_log_prob)
    # Count log-probs up to and including the first EOS, pad after it.
    log_prob += tf.where(active, token_log_prob, 0.0)
    next_id = tf.where(active, next_id, PAD_ID)
    ends = tf.equal(next_id, eos_id)
    if prefix is not None:  # a forced EOS (the inputs' in a prepend prefix) ends nothing
      ends = tf.logical_and(ends, tf.logical_not(inside))
    hit_eos = tf.logical_or(hit_eos, ends)
    return (i + 1, write_column(ids, i + 1, next_id), log_prob, hit_eos,
            new_state.per_beam, new_state.in_place)

  def cond(i, unused_ids, unused_log_prob, hit_eos, unused_per_beam, unused_in_place):
    return tf.reduce_any(tf.logical_and(tf.logical_not(hit_eos), i < lengths))

  # `per_item` never changes: captured by the loop, not carried through it.
  steps, ids, log_prob, _, per_beam, in_place = tf.while_loop(
      cond, body, (tf.constant(0), ids, tf.zeros([batch_size]),
                   tf.zeros([batch_size], tf.bool), state.per_beam, state.in_place))
  return SearchOutput(ids, log_prob, DecodingState(per_beam, state.per_item, in_place), steps)


def greedy_search(symbols_to_logits_fn: SymbolsToLogitsFn, initial_ids: tf.Tensor,
                  decode_length: IntOrTensor, eos_id: int = EOS_ID,
                  state: Optional[DecodingState] = None,
                  decode_lengths: Optional[tf.Tensor] = None,
                  prefix: Union[None, tf.Tensor, ForcedPrefix] = None,
                  prefix_scoring: str = "model") -> SearchOutput:
  """Argmax decoding (T2T `_fast_decode` with `sampling_method="argmax"`).

  Args:
    symbols_to_logits_fn: see the module docstring.
    initial_ids: `[batch]` int first ids.
    decode_length: int (or scalar int32 tensor): the id buffer size and the
      maximum steps of every row.
    eos_id: id that ends a sequence; decoding stops when all rows are done.
    state: the fn's `DecodingState`; `per_beam` tensors are `[batch, ...]`.
    decode_lengths: optional `[batch]` int, each row's own maximum steps
      (capped at `decode_length`); a row reaching it stops without EOS, as
      T2T's greedy loop does at its decode_length.
    prefix: optional `[batch, P]` int32 forced first ids per row (0-padded), or
      a `search_utils.ForcedPrefix` (its own lengths and scoring): a row takes
      them before choosing its own; a forced id (EOS too) does not end it.
    prefix_scoring: how the forced ids score (`search_utils.PREFIX_SCORINGS`):
      "model" counts their log-probs, "free" counts 0 for them.

  Returns:
    `search_utils.SearchOutput`: ids `[batch, decode_length + 1]` int32 incl.
    the leading initial id, 0 after the first EOS or the row's last step;
    scores `[batch]` float32 = sum of log-probs up to and including the first
    EOS; the final state; the steps run.
  """
  return _decode_loop(symbols_to_logits_fn, initial_ids, decode_length, eos_id, state,
                      lambda logits, i: sample_with_temperature(logits, 0.0), decode_lengths,
                      forced_prefix(prefix, prefix_scoring))


def sample(symbols_to_logits_fn: SymbolsToLogitsFn, initial_ids: tf.Tensor,
           decode_length: IntOrTensor, temperature: float = 1.0, top_k: int = -1,
           seed: Union[int, Sequence[int], tf.Tensor] = 0, eos_id: int = EOS_ID,
           state: Optional[DecodingState] = None,
           decode_lengths: Optional[tf.Tensor] = None,
           prefix: Union[None, tf.Tensor, ForcedPrefix] = None,
           prefix_scoring: str = "model") -> SearchOutput:
  """Sampling decode (T2T `sampling_method="random"`).

  Args:
    temperature: T2T `sampling_temp`; 0 is argmax.
    top_k: T2T `sampling_keep_top_k`; -1 keeps every id.
    seed: int or pair of ints, or an int `[2]` tensor (a traced function's
      input); the same seed gives the same samples (step i uses the seed
      folded with i). TF's stateless RNG gives a different (equally
      reproducible) stream under `jit_compile=True`.
    Other arguments (incl. `decode_lengths`, `prefix`, `prefix_scoring`) and the
    return value as in `greedy_search`; scores sum the untempered log-probs of
    the drawn ids.
  """
  if isinstance(temperature, bool) or not isinstance(
      temperature, (int, float)) or temperature < 0:
    raise ValueError(f"temperature must be a float >= 0, got {temperature!r}.")
  if not is_int(top_k) or (top_k != -1 and top_k < 1):
    raise ValueError(f"top_k must be -1 (off) or an int >= 1, got {top_k!r}.")
  if isinstance(seed, tf.Tensor):
    seed_tensor = tf.ensure_shape(tf.cast(seed, tf.int32), [2])
  else:
    seed_pair = [seed, 0] if is_int(seed) else seed
    if not (isinstance(seed_pair, (list, tuple)) and len(seed_pair) == 2 and
            all(is_int(x) for x in seed_pair)):
      raise ValueError(f"seed must be an int or a pair of ints, got {seed!r}.")
    seed_tensor = tf.constant(seed_pair, tf.int32)
  prefix = forced_prefix(prefix, prefix_scoring)

  def choose(logits, i):
    step_seed = tf.random.experimental.stateless_fold_in(seed_tensor, i)
    return sample_with_temperature(logits, float(temperature), top_k, step_seed)

  return _decode_loop(symbols_to_logits_fn, initial_ids, decode_length, eos_id, state,
                      choose, decode_lengths, prefix)
