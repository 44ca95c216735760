"""T2T beam search over a `symbols_to_logits_fn`.

Model-agnostic: nothing here imports model code. The search drives one callable

    symbols_to_logits_fn(ids, i, state) -> (logits, state)

* `ids`: `[batch * beam_size, decode_length + 1]` int32, the fixed-size id
  buffer of the hypotheses (rows item-major: `row = item * beam_size + beam`).
  Positions `0..i` are filled (position 0 holds `initial_ids`), later positions
  are 0. The last decoded id is `ids[:, i]`; a cached model reads only that, a
  slow (uncached) model can mask positions `> i`.
* `i`: scalar int32 step, `0 <= i < decode_length`.
* `state`: a `decoding_state.DecodingState`, returned updated and never
  mutated: its `per_beam` part is tiled to the beams and reordered with them,
  `per_item` is handed over unchanged, `in_place` is never reordered (see
  `decoding_state.py`). Shapes must stay fixed across steps, so the loop runs
  in `tf.while_loop` and compiles with `tf.function(jit_compile=True)`.
* `logits`: `[batch * beam_size, vocab_size]` float (normalised here).

Semantics follow T2T's `utils/beam_search.py` (GNMT length penalty, alive and
finished sets, 2 * beam candidates per step). Each batch item may have its own
maximum length (`decode_lengths`); an item stops at it, or when its own
early-stopping bound is met, and then keeps its state while the others go on,
so every item gets exactly T2T's result for it decoded alone with that
decode_length. Nothing is forced at the last step: an item where no
hypothesis emitted EOS returns its alive beams without EOS and with raw
log-probs (as T2T). Differences, all improvements: per-item lengths and
stopping (T2T's decode_length and early stopping are batch-wide, so an item's
result depended on its batch); sequences live in fixed `[.., decode_length + 1]`
buffers (XLA friendly); `top_beams` picks the stopping criterion (see
`BeamSearchOptions`); per-beam state is gathered once per step instead of
twice. When `vocab_size < 2 * beam_size` the children of the `-INF`
placeholder beams get selected; here they never count as finished and
EOS-ended candidates never enter the alive set (T2T let both happen).

Greedy and sampling decoding are in `sampling.py`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional, Union

import numpy as np
import tensorflow as tf

from data_gen.text_encoder import EOS_ID
from t2t_keras.decoding.search_utils import (ForcedPrefix, IntOrTensor, SearchOutput,
                                             SymbolsToLogitsFn, check_decode_length,
                                             check_logits, check_positive_int, check_state,
                                             forced_prefix, init_id_buffer,
                                             item_decode_lengths, prefix_step, write_column)
from t2t_keras.decoding_state import DecodingState
from t2t_keras.perf import search

INF = 1.0 * 1e7


@dataclasses.dataclass(frozen=True)
class BeamSearchOptions:
  """T2T's beam-search settings.

  beam_size: beams kept per batch item.
  vocab_size: last dim of the logits.
  alpha: length-penalty exponent, `((5 + len) / 6) ** alpha`.
  eos_id: id that ends a hypothesis.
  stop_early: an item stops once its `top_beams` best are provably settled;
    if False, every item runs to its decode length.
  top_beams: how many of the returned beams the caller will use. 1 gives T2T's
    stop_early criterion; `beam_size` gives T2T's criterion for n-best output
    (its `stop_early=False`), exact for the whole n-best list.
  """
  beam_size: int
  vocab_size: int
  alpha: float
  eos_id: int = EOS_ID
  stop_early: bool = True
  top_beams: int = 1

  def __post_init__(self):
    check_positive_int("beam_size", self.beam_size)
    check_positive_int("vocab_size", self.vocab_size, minimum=2)
    check_positive_int("top_beams", self.top_beams)
    if self.top_beams > self.beam_size:
      raise ValueError(f"top_beams must be <= beam_size={self.beam_size}, "
                       f"got {self.top_beams}.")


class _BeamState(NamedTuple):
  i: tf.Tensor  # scalar int32
  alive_seq: tf.Tensor  # [batch, beam, decode_length + 1] int32
  alive_log_probs: tf.Tensor  # [batch, beam] float32, sorted descending
  finished_seq: tf.Tensor  # [batch, beam, decode_length + 1] int32
  finished_scores: tf.Tensor  # [batch, beam] float32, sorted descending
  finished_flags: tf.Tensor  # [batch, beam] bool
  per_beam: Any  # DecodingState.per_beam, leading dim batch * beam
  in_place: Any  # DecodingState.in_place, never reordered


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


def gather_beams(tensor: tf.Tensor, beam_indices: tf.Tensor) -> tf.Tensor:
  """Picks beams per batch item.

  Args:
    tensor: `[batch, beams_in, ...]`.
    beam_indices: `[batch, beams_out]` int32 indices into `beams_in`.
  Returns:
    `[batch, beams_out, ...]`.
  """
  return tf.gather(tensor, beam_indices, axis=1, batch_dims=1)


def _gather_flat_beams(per_beam: Any, beam_indices: tf.Tensor, beam_size: int) -> Any:
  """Gathers per-beam tensors `[batch * beam, ...]` by `beam_indices` [b, beam]."""
  batch_size = tf.shape(beam_indices)[0]
  offsets = tf.range(batch_size)[:, None] * beam_size  # [batch, 1]
  flat_indices = tf.reshape(beam_indices + offsets, [-1])  # [batch * beam]
  return tf.nest.map_structure(lambda t: tf.gather(t, flat_indices), per_beam)


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


# ------------------------------------------------------------ beam search ---
def _force_prefix(logits, state: _BeamState, extensions, prefix: ForcedPrefix, k: int):
  """The extensions of step `state.i`, with the forced token where a prefix goes on.

  Where item b is still inside its prefix (`search_utils.prefix_step`), its
  only hypothesis (beam 0: nothing ends and no second beam can arise while
  forcing) is extended by the prefix token, scored by `prefix.scoring`, and the
  other k - 1 candidates are placeholders at -INF, as the initial beams are.
  Elsewhere the extensions are kept as they are.

  Returns:
    (the extensions, forcing `[batch]` bool: the items inside their prefix).
  """
  log_probs, beam, ids = extensions
  first = logits[:, 0, :]  # [batch, vocab]
  forcing, forced_id, forced_lp = prefix_step(
      prefix, state.i,
      lambda forced: tf.gather(first, forced, batch_dims=1) - tf.reduce_logsumexp(first, axis=-1))
  forced_lp = forced_lp + state.alive_log_probs[:, 0]  # [batch]
  batch_size = tf.shape(logits)[0]
  placeholders = tf.fill([batch_size, k - 1], -INF)
  forced = (tf.concat([forced_lp[:, None], placeholders], axis=1),
            tf.zeros_like(beam), tf.tile(forced_id[:, None], [1, k]))
  return tuple(tf.where(forcing[:, None], f, e) for f, e in zip(forced, extensions)), forcing


def _grow_topk(symbols_to_logits_fn, state: _BeamState, per_item: Any,
               options: BeamSearchOptions, prefix=None, alpha=None):
  """Extends the alive beams by one token; keeps the best 2 * beam_size.

  With `prefix` (a `ForcedPrefix`) an item inside its prefix takes the prefix token
  (`_force_prefix`). `alpha`: the items' own alphas `[batch]` (default
  options.alpha for all).

  Returns:
    topk_seq `[batch, 2*beam, L+1]`, topk_log_probs / topk_scores
    `[batch, 2*beam]`, topk_beam `[batch, 2*beam]` (parent alive beam),
    topk_ids `[batch, 2*beam]`, forcing `[batch]` (the items that took a forced
    token), and the fn's new state (parents' order).
  """
  beam_size, vocab_size = options.beam_size, options.vocab_size
  batch_size = tf.shape(state.alive_seq)[0]
  flat_ids = merge_beam_dim(state.alive_seq)  # [batch * beam, L+1]
  flat_logits, new_state = symbols_to_logits_fn(
      flat_ids, state.i, DecodingState(state.per_beam, per_item, state.in_place))
  logits = tf.reshape(check_logits(flat_logits, vocab_size),
                      [batch_size, beam_size, vocab_size])
  # [batch, 2*beam] of the beam * V extensions by log-prob: 2 * beam
  # guarantees >= beam candidates that are not EOS. One penalty for all
  # candidates, so rank by log-prob and divide only the 2 * beam winners
  # (T2T divides all beam * V first: same order).
  extensions = search.compiled_extensions(
      top_log_prob_extensions, logits, state.alive_log_probs, 2 * beam_size)
  forcing = tf.zeros([batch_size], tf.bool)
  if prefix is not None:
    extensions, forcing = _force_prefix(logits, state, extensions, prefix, 2 * beam_size)
  topk_log_probs, topk_beam, topk_ids = extensions
  if alpha is None:
    topk_scores = topk_log_probs / length_penalty(state.i + 1, options.alpha)
  else:
    topk_scores = topk_log_probs / length_penalty(state.i + 1, alpha)[:, None]
  topk_seq = gather_beams(state.alive_seq, topk_beam)  # [batch, 2*beam, L+1]
  topk_seq = write_column(topk_seq, state.i + 1, topk_ids)
  return topk_seq, topk_log_probs, topk_scores, topk_beam, topk_ids, forcing, new_state


def _grow_alive(topk_seq, topk_log_probs, topk_scores, topk_is_eos,
                topk_beam, new_per_beam, beam_size: int):
  """Keeps the best beam_size candidates that did not end in EOS."""
  # [batch, 2*beam]: EOS candidates sink below all others (T2T adds -INF,
  # which lets them beat the -INF placeholder beams' children when
  # vocab_size < 2 * beam_size). Each parent has one EOS child, so at least
  # beam_size candidates are not EOS.
  scores = tf.where(topk_is_eos, -np.inf, topk_scores)
  _, keep = tf.math.top_k(scores, k=beam_size)  # [batch, beam]
  alive_seq = gather_beams(topk_seq, keep)  # [batch, beam, L+1]
  alive_log_probs = tf.gather(topk_log_probs, keep, batch_dims=1)
  # Compose the two selections so each per-beam tensor is gathered only once.
  parents = tf.gather(topk_beam, keep, batch_dims=1)  # [batch, beam]
  per_beam = _gather_flat_beams(new_per_beam, parents, beam_size)
  return alive_seq, alive_log_probs, per_beam


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


def _beam_step(symbols_to_logits_fn, state: _BeamState, per_item: Any,
               options: BeamSearchOptions, active: tf.Tensor, prefix=None,
               alpha=None) -> _BeamState:
  """One T2T beam-search step: grow_topk, grow_alive, grow_finished.

  Only the items where `active` `[batch]` is True take the step; the others
  keep their state (the fn still runs on their rows, shapes being fixed).
  """
  beam_size = options.beam_size
  (topk_seq, topk_log_probs, topk_scores, topk_beam, topk_ids, forcing,
   new_state) = _grow_topk(symbols_to_logits_fn, state, per_item, options, prefix, alpha)
  # [batch, 2*beam]; a forced EOS (T2T's prepend prefix holds the inputs' EOS) ends nothing.
  topk_is_eos = tf.logical_and(tf.equal(topk_ids, options.eos_id),
                               tf.logical_not(forcing)[:, None])
  # Children of the -INF placeholder beams are not real hypotheses.
  topk_finished = tf.logical_and(topk_is_eos, topk_log_probs > -INF / 2)
  alive_seq, alive_log_probs, per_beam = _grow_alive(
      topk_seq, topk_log_probs, topk_scores, topk_is_eos, topk_beam,
      new_state.per_beam, beam_size)
  finished_seq, finished_scores, finished_flags = _grow_finished(
      state, topk_seq, topk_scores, topk_finished, beam_size)
  new = _BeamState(state.i + 1, alive_seq, alive_log_probs, finished_seq,
                   finished_scores, finished_flags, per_beam, new_state.in_place)
  return _keep_inactive(new, state, active, beam_size)


def _select_rows(rows: tf.Tensor, new: tf.Tensor, old: tf.Tensor) -> tf.Tensor:
  """`new` where `rows` `[n]` is True, else `old`; tensors `[n, ...]`."""
  mask = tf.reshape(rows, tf.concat(
      [tf.shape(rows), tf.ones([tf.rank(new) - 1], tf.int32)], 0))
  return tf.where(mask, new, old)


def _keep_inactive(new: _BeamState, old: _BeamState, active: tf.Tensor,
                   beam_size: int) -> _BeamState:
  """`new` for active items, `old` for the others; `new` step and in-place part.

  A stopped item keeps its per-beam rows too, so the final per-beam state is
  the one after its own last step. The in-place part is not restored: a
  stopped item's fn calls write only buffer positions past its last step.
  """
  fields = [_select_rows(active, n, o) for n, o in zip(new[1:6], old[1:6])]
  flat_active = tf.repeat(active, beam_size)  # [batch * beam], item-major
  per_beam = tf.nest.map_structure(
      lambda n, o: _select_rows(flat_active, n, o), new.per_beam, old.per_beam)
  return _BeamState(new.i, *fields, per_beam, new.in_place)


def _active_items(state: _BeamState, decode_lengths: tf.Tensor,
                  options: BeamSearchOptions, alpha=None, top_beams=None) -> tf.Tensor:
  """`[batch]` bool: the items that take another step.

  T2T's `_is_not_finished` for each item alone: an item stops at its own
  decode length or, with stop_early, once its top_beams-th best finished
  hypothesis beats the best score any alive beam could still reach: its
  log-prob (which can only fall) over the item's largest length penalty
  `((5 + decode_length) / 6) ** alpha`. top_beams=1 is T2T's stop_early
  criterion (best finished score); top_beams=beam_size is T2T's criterion
  for n-best output (worst of the beam finished slots; an empty slot never
  beats an alive beam). `alpha` and `top_beams` `[batch]`, when given, are
  the items' own (default: options' for all).
  """
  steps_left = state.i < decode_lengths  # [batch]
  if not options.stop_early:
    return steps_left
  max_penalty = length_penalty(decode_lengths, options.alpha if alpha is None else alpha)
  best_alive_bound = state.alive_log_probs[:, 0] / max_penalty  # [batch]
  if top_beams is None:
    top = options.top_beams - 1
    flags, scores = state.finished_flags[:, top], state.finished_scores[:, top]
  else:
    top = top_beams[:, None] - 1
    flags = tf.gather(state.finished_flags, top, batch_dims=1)[:, 0]
    scores = tf.gather(state.finished_scores, top, batch_dims=1)[:, 0]
  settled = tf.logical_and(flags, scores > best_alive_bound)  # [batch]
  return tf.logical_and(steps_left, tf.logical_not(settled))


def _initial_beam_state(ids: tf.Tensor, state: DecodingState, beam_size: int) -> _BeamState:
  """Only beam 0 is alive; finished slots are empty with score -INF.

  `ids`: `[batch, L+1]` from `init_id_buffer`.
  """
  batch_size = tf.shape(ids)[0]
  alive_seq = expand_to_beam_size(ids, beam_size)  # [batch, beam, L+1]
  initial_log_probs = tf.constant([[0.0] + [-INF] * (beam_size - 1)])
  alive_log_probs = tf.tile(initial_log_probs, [batch_size, 1])
  per_beam = tf.nest.map_structure(
      lambda t: merge_beam_dim(expand_to_beam_size(t, beam_size)), state.per_beam)
  return _BeamState(
      i=tf.constant(0), alive_seq=alive_seq, alive_log_probs=alive_log_probs,
      finished_seq=tf.zeros_like(alive_seq),
      finished_scores=tf.fill([batch_size, beam_size], -INF),
      finished_flags=tf.zeros([batch_size, beam_size], tf.bool),
      per_beam=per_beam, in_place=state.in_place)


def beam_search(symbols_to_logits_fn: SymbolsToLogitsFn, initial_ids: tf.Tensor,
                decode_length: IntOrTensor, options: BeamSearchOptions,
                state: Optional[DecodingState] = None,
                decode_lengths: Optional[tf.Tensor] = None,
                prefix: Union[None, tf.Tensor, ForcedPrefix] = None,
                alphas: Optional[tf.Tensor] = None,
                top_beams: Optional[tf.Tensor] = None,
                prefix_scoring: str = "model") -> SearchOutput:
  """T2T beam search: ids, scores, final state and steps run.

  Each batch item gets exactly the result T2T's `beam_search` gives for it
  decoded alone with `decode_length` = its own `decode_lengths` entry: it
  takes steps until that length or until its early-stopping bound is met,
  then keeps its state while the other items go on. At its length nothing is
  forced: a hypothesis ends only on the model's own EOS, and an item where
  none did returns its alive beams (no EOS) with their raw log-probs.

  Args:
    symbols_to_logits_fn: see the module docstring.
    initial_ids: `[batch]` int, the first id of every hypothesis (T2T: 0).
    decode_length: int (or scalar int32 tensor, not under XLA): the id
      buffer size and the maximum steps of every item.
    options: `BeamSearchOptions` (beam size, vocab size, alpha, ...).
    state: the fn's `DecodingState`; its `per_beam` tensors are `[batch, ...]`.
    decode_lengths: optional `[batch]` int, each item's own maximum steps
      (T2T's decode_length for that item; values above `decode_length` act
      as `decode_length`). Default: `decode_length` for every item.
    prefix: optional `[batch, P]` int32, a forced target prefix per item
      (0-padded), or a `search_utils.ForcedPrefix` (its own lengths and
      scoring, e.g. `seq2seq.prepend_prefix`): step i < the item's prefix
      length takes `prefix[:, i]` with the model's log-prob of it, so every
      hypothesis starts with the prefix and its score counts the prefix's
      log-probs as scoring the whole target would. A forced id ends nothing
      (a forced EOS neither). Items with an empty prefix (and `prefix=None`)
      search exactly as without. A decode length shorter than the prefix cuts
      it.
    alphas: optional `[batch]` float, each item's own length-penalty
      exponent (default options.alpha for every item).
    top_beams: optional `[batch]` int in 1..beam_size, each item's own
      `BeamSearchOptions.top_beams` (its stopping criterion; default
      options.top_beams for every item).
    prefix_scoring: how the forced ids score (`search_utils.PREFIX_SCORINGS`):
      "model" (see `prefix`), or "free": 0 each, as T2T forces a language model's
      prompt (`partial_targets`), so that scores count the continuation only
      (the length penalty still counts the prefix's positions, as T2T's).

  Returns:
    `SearchOutput(ids [batch, beam, decode_length + 1], scores [batch, beam],
    state, num_steps)`, best beam first.
  """
  check_decode_length(decode_length)
  ids = init_id_buffer(initial_ids, decode_length)  # [batch, L+1]
  state = check_state(state, ids.shape[0])
  search = _initial_beam_state(ids, state, options.beam_size)
  lengths = item_decode_lengths(decode_lengths, decode_length, tf.shape(search.alive_seq)[0])
  if alphas is not None:
    alphas = tf.cast(alphas, tf.float32)
  if top_beams is not None:
    top_beams = tf.cast(top_beams, tf.int32)
  active = lambda s: _active_items(s, lengths, options, alphas, top_beams)
  prefix = forced_prefix(prefix, prefix_scoring)
  # `per_item` never changes: captured by the loop, not carried through it.
  search = tf.while_loop(
      lambda *s: tf.reduce_any(active(_BeamState(*s))),
      lambda *s: tuple(_beam_step(symbols_to_logits_fn, _BeamState(*s), state.per_item,
                                  options, active(_BeamState(*s)), prefix, alphas)),
      tuple(search))
  search = _BeamState(*search)
  # Items where nothing finished fall back to alive beams and raw log-probs.
  any_finished = tf.reduce_any(search.finished_flags, axis=1)  # [batch]
  ids = tf.where(any_finished[:, None, None], search.finished_seq, search.alive_seq)
  scores = tf.where(any_finished[:, None], search.finished_scores, search.alive_log_probs)
  final = DecodingState(search.per_beam, state.per_item, search.in_place)
  return SearchOutput(ids, scores, final, search.i)
