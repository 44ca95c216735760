"""T2T beam search, greedy and sampling decoding over a `symbols_to_logits_fn`.

Model-agnostic: nothing here imports model code. Every decoder takes a callable

    symbols_to_logits_fn(ids, i, cache) -> (logits, new_cache)

* `ids`: `[n, decode_length + 1]` int32, the fixed-size id buffer of the `n`
  hypotheses (`n = batch * beam_size` for beam search, `batch` otherwise).
  Positions `0..i` are filled (position 0 holds `initial_ids`), later positions
  are 0. The last decoded id is `ids[:, i]`; a cached model reads only that, a
  slow (uncached) model can mask positions `> i`.
* `i`: scalar int32 step, `0 <= i < decode_length`.
* `cache`: nested dict of tensors with leading dim `n`, returned updated and
  never mutated. Every tensor in it is tiled to the beams and gathered when
  beams are reordered, so put only per-beam tensors there: rows are item-major
  (`row = item * beam_size + beam`), so tensors that stay equal across the
  beams of an item (e.g. encoder outputs) are better repeated once with
  `tf.repeat(t, beam_size, axis=0)` and captured by the fn, which saves
  gathering them every step. Shapes must stay
  fixed across steps (write step `i` into fixed-size buffers) so the loop runs
  in `tf.while_loop` and compiles with `tf.function(jit_compile=True)`.
* `logits`: `[n, vocab_size]` float (normalised by `log_softmax` here).

Beam search may also carry `slot_states`: tensors (any shapes, fixed across
steps) that it hands to the fn and takes back without reordering them when
beams are reordered; the fn is then called `fn(ids, i, cache, slot_states)`
and returns `(logits, cache, slot_states)`. A cached model keeps its
key/value buffers there, append-only: at step `i` beam slot `s` writes its own
entry of the item's buffers, and a small per-beam table in `cache` (reordered
like every cache tensor) records which slot wrote each earlier position of
the hypothesis. Reordering that table replaces copying every buffer each step.

Semantics follow T2T's `utils/beam_search.py` (GNMT length penalty, alive and
finished sets, 2 * beam candidates per step). Each batch item may have its own
maximum length (`decode_lengths`); an item stops at it, or when its own
early-stopping bound is met, and then keeps its state while the others go on,
so every item gets exactly T2T's result for it decoded alone with that
decode_length. Nothing is forced at the last step: an item where no
hypothesis emitted EOS returns its alive beams without EOS and with raw
log-probs (as T2T); greedy and sampling rows stop there without EOS.
Differences, all improvements: per-item lengths and stopping (T2T's
decode_length and early stopping are batch-wide, so an item's result depended
on its batch); sequences live in fixed `[.., decode_length + 1]` buffers (XLA
friendly); `top_beams` picks the stopping criterion (see
`beam_search_with_info`); cache tensors are gathered once per step instead of
twice. When
`vocab_size < 2 * beam_size` the children of the `-INF` placeholder beams get
selected; here they never count as finished and EOS-ended candidates never
enter the alive set (T2T let both happen).
"""

from typing import Any, Callable, NamedTuple, Sequence, Union

import numpy as np
import tensorflow as tf

EOS_ID = 1
INF = 1.0 * 1e7
# T2T's sampling_keep_top_k sets the logits outside the top k to this value.
_TOP_K_MASK_LOGIT = -1e6

Cache = Any  # nested dict (or other tf.nest structure) of tensors
SymbolsToLogitsFn = Callable[[tf.Tensor, tf.Tensor, Cache], tuple]
IntOrTensor = Union[int, tf.Tensor]


class BeamSearchOutput(NamedTuple):
  """Everything `beam_search_with_info` returns.

  ids: `[batch, beam_size, decode_length + 1]` int32, leading initial id,
    0-padded after EOS / after the last step; sorted best first.
  scores: `[batch, beam_size]` float32; length-normalised scores of finished
    sequences, or raw log-probs of alive ones for items where none finished.
    If fewer than beam_size finished, the empty slots hold ids 0 and a score
    <= -INF (as in T2T); drop them before showing n-best lists.
  states: final cache of the alive beams, leading dim `batch * beam_size`.
  num_steps: scalar int32, decoding steps run (<= decode_length).
  slot_states: final `slot_states` (never reordered).
  """
  ids: tf.Tensor
  scores: tf.Tensor
  states: Cache
  num_steps: tf.Tensor
  slot_states: Cache


class _BeamState(NamedTuple):
  i: tf.Tensor  # scalar int32
  alive_seq: tf.Tensor  # [batch, beam, decode_length + 1] int32
  alive_log_probs: tf.Tensor  # [batch, beam] float32, sorted descending
  finished_seq: tf.Tensor  # [batch, beam, decode_length + 1] int32
  finished_scores: tf.Tensor  # [batch, beam] float32, sorted descending
  finished_flags: tf.Tensor  # [batch, beam] bool
  states: Cache  # leading dim batch * beam
  slot_states: Cache  # never reordered


# ---------------------------------------------------------------- helpers ---
def length_penalty(length: Any, alpha: float) -> tf.Tensor:
  """GNMT length penalty `((5 + length) / 6) ** alpha` (float32, any shape)."""
  length = tf.cast(length, tf.float32)
  return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))


def expand_to_beam_size(tensor: tf.Tensor, beam_size: int) -> tf.Tensor:
  """Tiles `[batch, ...]` to `[batch, beam_size, ...]`."""
  tensor = tf.expand_dims(tensor, axis=1)
  multiples = tf.tensor_scatter_nd_update(
      tf.ones([tf.rank(tensor)], tf.int32), [[1]], [beam_size])
  return tf.tile(tensor, multiples)


def merge_beam_dim(tensor: tf.Tensor) -> tf.Tensor:
  """Reshapes `[batch, beam, ...]` to `[batch * beam, ...]`."""
  shape = tf.shape(tensor)
  return tf.reshape(tensor, tf.concat([[shape[0] * shape[1]], shape[2:]], 0))


def unmerge_beam_dim(tensor: tf.Tensor, batch_size: IntOrTensor,
                     beam_size: int) -> tf.Tensor:
  """Reshapes `[batch * beam, ...]` to `[batch, beam, ...]`."""
  shape = tf.shape(tensor)
  return tf.reshape(tensor,
                    tf.concat([[batch_size, beam_size], shape[1:]], 0))


def gather_beams(tensor: tf.Tensor, beam_indices: tf.Tensor) -> tf.Tensor:
  """Picks beams per batch item.

  Args:
    tensor: `[batch, beams_in, ...]`.
    beam_indices: `[batch, beams_out]` int32 indices into `beams_in`.
  Returns:
    `[batch, beams_out, ...]`.
  """
  return tf.gather(tensor, beam_indices, axis=1, batch_dims=1)


def _gather_flat_beams(states: Cache, beam_indices: tf.Tensor,
                       beam_size: int) -> Cache:
  """Gathers cache tensors `[batch * beam, ...]` by `beam_indices` [b, beam]."""
  batch_size = tf.shape(beam_indices)[0]
  offsets = tf.range(batch_size)[:, None] * beam_size  # [batch, 1]
  flat_indices = tf.reshape(beam_indices + offsets, [-1])  # [batch * beam]
  return tf.nest.map_structure(lambda t: tf.gather(t, flat_indices), states)


def top_log_prob_extensions(logits: tf.Tensor, parent_log_probs: tf.Tensor,
                            k: int, block: int = 128) -> tuple:
  """The k most likely one-token extensions of each item's beams.

  Args:
    logits: `[batch, beam, vocab]` float32.
    parent_log_probs: `[batch, beam]`.
    k: extensions kept per item, at most 2 * beam.
    block: vocabulary entries per block (see below; at most vocab / 2).

  Returns:
    (log_probs `[batch, k]` sorted descending, beam `[batch, k]`, id
    `[batch, k]`): exactly `tf.math.top_k` over the `[batch, beam * vocab]`
    log-probs `logits - logsumexp(logits) + parent_log_prob`, ties going to
    the lower (beam, id), without materialising them. The k best lie in the k
    blocks of `block` consecutive ids with the largest maxima (a block outside
    them has k blocks whose maxima beat or tie-precede its entries), and adding
    a beam's constant offset keeps the order inside a beam. So the logits are
    read twice (block maxima, which also give each beam's max for logsumexp;
    then the exp sum) and top-k runs over `k * block` entries, not over
    `beam * vocab` (slow in XLA on CPU for 100,000s).
  """
  beam, vocab = logits.shape[1], logits.shape[2]
  # >= 2 blocks a beam, so there are >= k = 2 * beam blocks to choose from.
  block = max(1, min(block, vocab // 2))
  pad = -vocab % block
  if pad:  # -inf after the end: never wins a tie, adds 0 to the exp sum
    logits = tf.pad(logits, [[0, 0], [0, 0], [0, pad]], constant_values=-np.inf)
  width = vocab + pad
  blocks = tf.reshape(logits, [-1, beam * width // block, block])
  block_max = tf.reshape(tf.reduce_max(blocks, axis=-1), [-1, beam, width // block])
  beam_max = tf.reduce_max(block_max, axis=-1)  # [batch, beam]
  # As tf.reduce_logsumexp, with the max taken from the block maxima.
  shift = tf.where(tf.math.is_finite(beam_max), beam_max, 0.0)
  logsumexp = shift + tf.math.log(
      tf.reduce_sum(tf.exp(logits - shift[:, :, None]), axis=-1))
  offsets = parent_log_probs - logsumexp  # [batch, beam]
  block_scores = tf.reshape(block_max + offsets[:, :, None], [-1, beam * width // block])
  _, best = tf.math.top_k(block_scores, k=k)  # [batch, k] block indices
  best = tf.sort(best, axis=-1)  # flat order, so ties resolve as in a flat top-k
  best_beam = best // (width // block)
  candidates = (tf.gather(blocks, best, batch_dims=1) +
                tf.gather(offsets, best_beam, batch_dims=1)[:, :, None])  # [batch, k, block]
  values, j = tf.math.top_k(tf.reshape(candidates, [-1, k * block]), k=k)
  flat = tf.gather(best, j // block, batch_dims=1) * block + j % block
  return values, flat // width, flat % width


def _write_column(buffer: tf.Tensor, position: tf.Tensor,
                  values: tf.Tensor) -> tf.Tensor:
  """Writes `values` [...] into column `position` of `buffer` [..., length]."""
  length = tf.shape(buffer)[-1]
  is_position = tf.equal(tf.range(length), position)  # [length]
  return tf.where(is_position, values[..., None], buffer)


def _check_logits(logits: tf.Tensor, vocab_size: int) -> tf.Tensor:
  """Casts logits to float32 and checks the static vocab dim."""
  last_dim = logits.shape[-1]
  if vocab_size is not None and last_dim is not None and (
      last_dim != vocab_size):
    raise ValueError(
        f"symbols_to_logits_fn returned logits with last dim {last_dim}, "
        f"but vocab_size={vocab_size}; pass the model's vocab size.")
  return tf.cast(logits, tf.float32)


def _is_int(value: Any) -> bool:
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_positive_int(name: str, value: Any, minimum: int = 1) -> None:
  if not _is_int(value) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}.")


def _check_decode_length(decode_length: IntOrTensor) -> None:
  if isinstance(decode_length, tf.Tensor):
    return  # checked by shapes at run time
  _check_positive_int("decode_length", decode_length, minimum=0)


def _check_states(states: Cache, batch_size: Any) -> Cache:
  """Returns `states` (or {}) after checking static leading dims == batch."""
  for tensor in tf.nest.flatten(states if states is not None else {}):
    rows = tf.convert_to_tensor(tensor).shape[:1]
    if batch_size is not None and rows and rows[0] not in (None, batch_size):
      raise ValueError(f"every states tensor needs leading dim batch="
                       f"{batch_size}; got a tensor of shape {tensor.shape}.")
  return states if states is not None else {}


def _init_id_buffer(initial_ids: tf.Tensor,
                    decode_length: IntOrTensor) -> tf.Tensor:
  """`[batch]` initial ids -> `[batch, decode_length + 1]` zeros + column 0."""
  initial_ids = tf.convert_to_tensor(initial_ids)
  if initial_ids.shape.rank != 1:
    raise ValueError("initial_ids must have shape [batch], got shape "
                     f"{initial_ids.shape}.")
  initial_ids = tf.cast(initial_ids, tf.int32)
  buffer = tf.zeros(tf.stack([tf.shape(initial_ids)[0], decode_length + 1]),
                    tf.int32)
  return _write_column(buffer, 0, initial_ids)


# ------------------------------------------------------------ beam search ---
def _grow_topk(symbols_to_logits_fn, state: _BeamState, beam_size: int,
               vocab_size: int, alpha: float):
  """Extends the alive beams by one token; keeps the best 2 * beam_size.

  Returns:
    topk_seq `[batch, 2*beam, L+1]`, topk_log_probs / topk_scores
    `[batch, 2*beam]`, topk_beam `[batch, 2*beam]` (parent alive beam),
    topk_ids `[batch, 2*beam]`, the model's new cache (parents' order) and
    its new slot states.
  """
  batch_size = tf.shape(state.alive_seq)[0]
  flat_ids = merge_beam_dim(state.alive_seq)  # [batch * beam, L+1]
  flat_logits, new_states, slot_states = symbols_to_logits_fn(
      flat_ids, state.i, state.states, state.slot_states)
  logits = tf.reshape(_check_logits(flat_logits, vocab_size),
                      [batch_size, beam_size, vocab_size])
  # [batch, 2*beam] of the beam * V extensions by log-prob: 2 * beam
  # guarantees >= beam candidates that are not EOS. One penalty for all
  # candidates, so rank by log-prob and divide only the 2 * beam winners
  # (T2T divides all beam * V first: same order).
  topk_log_probs, topk_beam, topk_ids = top_log_prob_extensions(
      logits, state.alive_log_probs, 2 * beam_size)
  topk_scores = topk_log_probs / length_penalty(state.i + 1, alpha)
  topk_seq = gather_beams(state.alive_seq, topk_beam)  # [batch, 2*beam, L+1]
  topk_seq = _write_column(topk_seq, state.i + 1, topk_ids)
  return (topk_seq, topk_log_probs, topk_scores, topk_beam, topk_ids,
          new_states, slot_states)


def _grow_alive(topk_seq, topk_log_probs, topk_scores, topk_is_eos,
                topk_beam, new_states, beam_size: int):
  """Keeps the best beam_size candidates that did not end in EOS."""
  # [batch, 2*beam]: EOS candidates sink below all others (T2T adds -INF,
  # which lets them beat the -INF placeholder beams' children when
  # vocab_size < 2 * beam_size). Each parent has one EOS child, so at least
  # beam_size candidates are not EOS.
  scores = tf.where(topk_is_eos, -np.inf, topk_scores)
  _, keep = tf.math.top_k(scores, k=beam_size)  # [batch, beam]
  alive_seq = gather_beams(topk_seq, keep)  # [batch, beam, L+1]
  alive_log_probs = tf.gather(topk_log_probs, keep, batch_dims=1)
  # Compose the two selections so each cache tensor is gathered only once.
  parents = tf.gather(topk_beam, keep, batch_dims=1)  # [batch, beam]
  states = _gather_flat_beams(new_states, parents, beam_size)
  return alive_seq, alive_log_probs, states


def _grow_finished(state: _BeamState, topk_seq, topk_scores, topk_finished,
                   beam_size: int):
  """Merges new finished candidates into the finished set (top beam_size)."""
  # Unfinished candidates sink below every finished (and empty) slot.
  scores = topk_scores + (1.0 - tf.cast(topk_finished, tf.float32)) * -INF
  seqs = tf.concat([state.finished_seq, topk_seq], axis=1)  # [b, 3*beam, L+1]
  scores = tf.concat([state.finished_scores, scores], axis=1)  # [b, 3*beam]
  flags = tf.concat([state.finished_flags, topk_finished], axis=1)
  finished_scores, keep = tf.math.top_k(scores, k=beam_size)  # [b, beam]
  return (gather_beams(seqs, keep), finished_scores,
          tf.gather(flags, keep, batch_dims=1))


def _beam_step(symbols_to_logits_fn, state: _BeamState, beam_size: int,
               vocab_size: int, alpha: float, eos_id: int,
               active: tf.Tensor) -> _BeamState:
  """One T2T beam-search step: grow_topk, grow_alive, grow_finished.

  Only the items where `active` `[batch]` is True take the step; the others
  keep their state (the fn still runs on their rows, shapes being fixed).
  """
  (topk_seq, topk_log_probs, topk_scores, topk_beam, topk_ids,
   new_states, slot_states) = _grow_topk(symbols_to_logits_fn, state,
                                         beam_size, vocab_size, alpha)
  topk_is_eos = tf.equal(topk_ids, eos_id)  # [batch, 2*beam]
  # Children of the -INF placeholder beams are not real hypotheses.
  topk_finished = tf.logical_and(topk_is_eos, topk_log_probs > -INF / 2)
  alive_seq, alive_log_probs, states = _grow_alive(
      topk_seq, topk_log_probs, topk_scores, topk_is_eos, topk_beam,
      new_states, beam_size)
  finished_seq, finished_scores, finished_flags = _grow_finished(
      state, topk_seq, topk_scores, topk_finished, beam_size)
  new = _BeamState(state.i + 1, alive_seq, alive_log_probs, finished_seq,
                   finished_scores, finished_flags, states, slot_states)
  return _keep_inactive(new, state, active, beam_size)


def _select_rows(rows: tf.Tensor, new: tf.Tensor, old: tf.Tensor) -> tf.Tensor:
  """`new` where `rows` `[n]` is True, else `old`; tensors `[n, ...]`."""
  mask = tf.reshape(rows, tf.concat(
      [tf.shape(rows), tf.ones([tf.rank(new) - 1], tf.int32)], 0))
  return tf.where(mask, new, old)


def _keep_inactive(new: _BeamState, old: _BeamState, active: tf.Tensor,
                   beam_size: int) -> _BeamState:
  """`new` for active items, `old` for the others; `new` step and slots.

  A stopped item keeps its cache rows too, so the final cache is the one
  after its own last step. Slot states are not restored: a stopped item's
  fn calls write only buffer positions past its last step.
  """
  fields = [_select_rows(active, n, o) for n, o in zip(new[1:6], old[1:6])]
  flat_active = tf.repeat(active, beam_size)  # [batch * beam], item-major
  states = tf.nest.map_structure(
      lambda n, o: _select_rows(flat_active, n, o), new.states, old.states)
  return _BeamState(new.i, *fields, states, new.slot_states)


def _active_items(state: _BeamState, decode_lengths: tf.Tensor, alpha: float,
                  stop_early: bool, top_beams: int) -> tf.Tensor:
  """`[batch]` bool: the items that take another step.

  T2T's `_is_not_finished` for each item alone: an item stops at its own
  decode length or, with stop_early, once its top_beams-th best finished
  hypothesis beats the best score any alive beam could still reach: its
  log-prob (which can only fall) over the item's largest length penalty
  `((5 + decode_length) / 6) ** alpha`. top_beams=1 is T2T's stop_early
  criterion (best finished score); top_beams=beam_size is T2T's criterion
  for n-best output (worst of the beam finished slots; an empty slot never
  beats an alive beam).
  """
  steps_left = state.i < decode_lengths  # [batch]
  if not stop_early:
    return steps_left
  max_penalty = length_penalty(decode_lengths, alpha)  # [batch]
  best_alive_bound = state.alive_log_probs[:, 0] / max_penalty  # [batch]
  settled = tf.logical_and(
      state.finished_flags[:, top_beams - 1],
      state.finished_scores[:, top_beams - 1] > best_alive_bound)  # [batch]
  return tf.logical_and(steps_left, tf.logical_not(settled))


def _item_decode_lengths(decode_lengths, decode_length: IntOrTensor,
                         batch_size: tf.Tensor) -> tf.Tensor:
  """`[batch]` int32 per-item lengths, capped at decode_length."""
  if decode_lengths is None:
    return tf.fill([batch_size], tf.cast(decode_length, tf.int32))
  decode_lengths = tf.convert_to_tensor(decode_lengths)
  if decode_lengths.shape.rank != 1:
    raise ValueError("decode_lengths must have shape [batch], got shape "
                     f"{decode_lengths.shape}.")
  return tf.minimum(tf.cast(decode_lengths, tf.int32),
                    tf.cast(decode_length, tf.int32))


def _initial_beam_state(initial_ids, beam_size: int,
                        decode_length: IntOrTensor, states,
                        slot_states) -> _BeamState:
  """Only beam 0 is alive; finished slots are empty with score -INF."""
  ids = _init_id_buffer(initial_ids, decode_length)  # [batch, L+1]
  batch_size = tf.shape(ids)[0]
  alive_seq = expand_to_beam_size(ids, beam_size)  # [batch, beam, L+1]
  initial_log_probs = tf.constant([[0.0] + [-INF] * (beam_size - 1)])
  alive_log_probs = tf.tile(initial_log_probs, [batch_size, 1])
  states = _check_states(states, ids.shape[0])
  slot_states = slot_states if slot_states is not None else {}
  flat_states = tf.nest.map_structure(
      lambda t: merge_beam_dim(expand_to_beam_size(t, beam_size)), states)
  return _BeamState(
      i=tf.constant(0), alive_seq=alive_seq, alive_log_probs=alive_log_probs,
      finished_seq=tf.zeros_like(alive_seq),
      finished_scores=tf.fill([batch_size, beam_size], -INF),
      finished_flags=tf.zeros([batch_size, beam_size], tf.bool),
      states=flat_states, slot_states=slot_states)


def _check_beam_args(beam_size, vocab_size, decode_length, top_beams):
  _check_positive_int("beam_size", beam_size)
  _check_positive_int("vocab_size", vocab_size, minimum=2)
  _check_decode_length(decode_length)
  _check_positive_int("top_beams", top_beams)
  if top_beams > beam_size:
    raise ValueError(f"top_beams must be <= beam_size={beam_size}, "
                     f"got {top_beams}.")


def beam_search_with_info(symbols_to_logits_fn: SymbolsToLogitsFn,
                          initial_ids: tf.Tensor,
                          beam_size: int,
                          decode_length: IntOrTensor,
                          vocab_size: int,
                          alpha: float,
                          states: Cache = None,
                          eos_id: int = EOS_ID,
                          stop_early: bool = True,
                          top_beams: int = 1,
                          slot_states: Cache = None,
                          decode_lengths: tf.Tensor = None) -> BeamSearchOutput:
  """T2T beam search returning ids, scores, final cache and steps run.

  Each batch item gets exactly the result T2T's `beam_search` gives for it
  decoded alone with `decode_length` = its own `decode_lengths` entry: it
  takes steps until that length or until its early-stopping bound is met,
  then keeps its state while the other items go on. At its length nothing is
  forced: a hypothesis ends only on the model's own EOS, and an item where
  none did returns its alive beams (no EOS) with their raw log-probs.

  Args:
    symbols_to_logits_fn: see the module docstring.
    initial_ids: `[batch]` int, the first id of every hypothesis (T2T: 0).
    beam_size: beams kept per batch item.
    decode_length: int (or scalar int32 tensor, not under XLA): the id
      buffer size and the maximum steps of every item.
    vocab_size: last dim of the logits.
    alpha: length-penalty exponent, `((5 + len) / 6) ** alpha`.
    states: nested dict of tensors `[batch, ...]`; tiled to
      `[batch * beam_size, ...]` and handed to `symbols_to_logits_fn`.
    eos_id: id that ends a hypothesis.
    stop_early: an item stops once its `top_beams` best are provably settled;
      if False, every item runs to its decode length.
    top_beams: how many of the returned beams the caller will use. 1 gives
      T2T's stop_early criterion; `beam_size` gives T2T's criterion for
      n-best output (its `stop_early=False`), exact for the whole n-best list.
    slot_states: optional nested dict of tensors that are not reordered with
      the beams; given one, the fn takes and returns it (see the module
      docstring).
    decode_lengths: optional `[batch]` int, each item's own maximum steps
      (T2T's decode_length for that item; values above `decode_length` act
      as `decode_length`). Default: `decode_length` for every item.

  Returns:
    `BeamSearchOutput(ids [batch, beam, decode_length + 1],
    scores [batch, beam], states, num_steps, slot_states)`.
  """
  _check_beam_args(beam_size, vocab_size, decode_length, top_beams)
  if slot_states is None:
    three_argument_fn = symbols_to_logits_fn
    symbols_to_logits_fn = lambda ids, i, cache, slots: (
        *three_argument_fn(ids, i, cache), slots)
  state = _initial_beam_state(initial_ids, beam_size, decode_length, states,
                              slot_states)
  lengths = _item_decode_lengths(decode_lengths, decode_length,
                                 tf.shape(state.alive_seq)[0])
  active = lambda s: _active_items(s, lengths, alpha, stop_early, top_beams)
  state = tf.while_loop(
      lambda *s: tf.reduce_any(active(_BeamState(*s))),
      lambda *s: tuple(_beam_step(symbols_to_logits_fn, _BeamState(*s),
                                  beam_size, vocab_size, alpha, eos_id,
                                  active(_BeamState(*s)))),
      tuple(state))
  state = _BeamState(*state)
  # Items where nothing finished fall back to alive beams and raw log-probs.
  any_finished = tf.reduce_any(state.finished_flags, axis=1)  # [batch]
  ids = tf.where(any_finished[:, None, None], state.finished_seq,
                 state.alive_seq)
  scores = tf.where(any_finished[:, None], state.finished_scores,
                    state.alive_log_probs)
  return BeamSearchOutput(ids, scores, state.states, state.i,
                          state.slot_states)


def beam_search(symbols_to_logits_fn: SymbolsToLogitsFn,
                initial_ids: tf.Tensor,
                beam_size: int,
                decode_length: IntOrTensor,
                vocab_size: int,
                alpha: float,
                states: Cache = None,
                eos_id: int = EOS_ID,
                stop_early: bool = True,
                top_beams: int = 1,
                slot_states: Cache = None,
                decode_lengths: tf.Tensor = None) -> tuple:
  """T2T beam search; arguments as in `beam_search_with_info`.

  Returns:
    `(ids [batch, beam_size, decode_length + 1] int32 incl. the leading
    initial id, scores [batch, beam_size] float32)`, best beam first.
  """
  out = beam_search_with_info(symbols_to_logits_fn, initial_ids, beam_size,
                              decode_length, vocab_size, alpha, states,
                              eos_id, stop_early, top_beams, slot_states,
                              decode_lengths)
  return out.ids, out.scores


# ------------------------------------------------------- greedy / sample ---
def sample_with_temperature(logits: tf.Tensor, temperature: float,
                            top_k: int = -1,
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
    raise ValueError(f"top_k must be <= vocab size {vocab_size} (or -1), "
                     f"got {top_k}.")
  if top_k != -1:
    kth_largest = tf.math.top_k(logits, k=top_k).values[:, -1:]  # [batch, 1]
    logits = tf.where(logits < kth_largest,
                      tf.constant(_TOP_K_MASK_LOGIT, logits.dtype), logits)
  # Gumbel-max draws exactly from the categorical and, unlike
  # StatelessMultinomial, compiles with XLA on CPU.
  uniform = tf.random.stateless_uniform(tf.shape(logits), seed,
                                        minval=1e-20, maxval=1.0)
  gumbel = -tf.math.log(-tf.math.log(uniform))
  return tf.argmax(logits / temperature + gumbel, axis=-1,
                   output_type=tf.int32)


def _sampling_loop(symbols_to_logits_fn, initial_ids, decode_length,
                   eos_id, states, choose_fn, decode_lengths=None):
  """Shared greedy/sampling loop; `choose_fn(logits [b, V], i) -> [b]`.

  A row takes a step while it has not emitted EOS and `i` is below its own
  decode length; at that length it stops without EOS (T2T's greedy loop).
  """
  _check_decode_length(decode_length)
  ids = _init_id_buffer(initial_ids, decode_length)  # [batch, L+1]
  batch_size = tf.shape(ids)[0]
  lengths = _item_decode_lengths(decode_lengths, decode_length, batch_size)

  def body(i, ids, log_prob, hit_eos, cache):
    active = tf.logical_and(tf.logical_not(hit_eos), i < lengths)  # [batch]
    logits, cache = symbols_to_logits_fn(ids, i, cache)
    logits = _check_logits(logits, None)  # [batch, V]
    next_id = choose_fn(logits, i)  # [batch]
    token_log_prob = tf.gather(tf.nn.log_softmax(logits), next_id,
                               batch_dims=1)  # [batch]
    # Count log-probs up to and including the first EOS, pad after it.
    log_prob += tf.where(active, token_log_prob, 0.0)
    next_id = tf.where(active, next_id, 0)
    hit_eos = tf.logical_or(hit_eos, tf.equal(next_id, eos_id))
    return i + 1, _write_column(ids, i + 1, next_id), log_prob, hit_eos, cache

  def cond(i, unused_ids, unused_log_prob, hit_eos, unused_cache):
    return tf.reduce_any(tf.logical_and(tf.logical_not(hit_eos), i < lengths))

  _, ids, log_prob, _, _ = tf.while_loop(
      cond, body,
      (tf.constant(0), ids, tf.zeros([batch_size]),
       tf.zeros([batch_size], tf.bool), _check_states(states, ids.shape[0])))
  return ids, log_prob


def greedy_search(symbols_to_logits_fn: SymbolsToLogitsFn,
                  initial_ids: tf.Tensor,
                  decode_length: IntOrTensor,
                  eos_id: int = EOS_ID,
                  states: Cache = None,
                  decode_lengths: tf.Tensor = None) -> tuple:
  """Argmax decoding (T2T `_fast_decode` with `sampling_method="argmax"`).

  Args:
    symbols_to_logits_fn: see the module docstring (here `n = batch`).
    initial_ids: `[batch]` int first ids.
    decode_length: int (or scalar int32 tensor): the id buffer size and the
      maximum steps of every row.
    eos_id: id that ends a sequence; decoding stops when all rows are done.
    states: nested dict of `[batch, ...]` tensors passed to the fn.
    decode_lengths: optional `[batch]` int, each row's own maximum steps
      (capped at `decode_length`); a row reaching it stops without EOS, as
      T2T's greedy loop does at its decode_length.

  Returns:
    `(ids [batch, decode_length + 1] int32` incl. the leading initial id, 0
    after the first EOS or the row's last step; `scores [batch]` float32 =
    sum of log-probs up to and including the first EOS).
  """
  return _sampling_loop(
      symbols_to_logits_fn, initial_ids, decode_length, eos_id, states,
      lambda logits, i: sample_with_temperature(logits, 0.0), decode_lengths)


def sample(symbols_to_logits_fn: SymbolsToLogitsFn,
           initial_ids: tf.Tensor,
           decode_length: IntOrTensor,
           temperature: float = 1.0,
           top_k: int = -1,
           seed: Union[int, Sequence[int]] = 0,
           eos_id: int = EOS_ID,
           states: Cache = None,
           decode_lengths: tf.Tensor = None) -> tuple:
  """Sampling decode (T2T `sampling_method="random"`).

  Args:
    temperature: T2T `sampling_temp`; 0 is argmax.
    top_k: T2T `sampling_keep_top_k`; -1 keeps every id.
    seed: int or pair of ints; the same seed gives the same samples (step i
      uses the seed folded with i). TF's stateless RNG gives a different
      (equally reproducible) stream under `jit_compile=True`.
    Other arguments (incl. `decode_lengths`) and the return value as in
    `greedy_search`; scores sum the untempered log-probs of the drawn ids.
  """
  if isinstance(temperature, bool) or not isinstance(
      temperature, (int, float)) or temperature < 0:
    raise ValueError(f"temperature must be a float >= 0, got {temperature!r}.")
  if not _is_int(top_k) or (top_k != -1 and top_k < 1):
    raise ValueError(f"top_k must be -1 (off) or an int >= 1, got {top_k!r}.")
  seed_pair = [seed, 0] if _is_int(seed) else seed
  if not (isinstance(seed_pair, (list, tuple)) and len(seed_pair) == 2 and
          all(_is_int(x) for x in seed_pair)):
    raise ValueError(f"seed must be an int or a pair of ints, got {seed!r}.")
  seed_tensor = tf.constant(seed_pair, tf.int32)

  def choose(logits, i):
    step_seed = tf.random.experimental.stateless_fold_in(seed_tensor, i)
    return sample_with_temperature(logits, float(temperature), top_k,
                                   step_seed)

  return _sampling_loop(symbols_to_logits_fn, initial_ids, decode_length,
                        eos_id, states, choose, decode_lengths)
