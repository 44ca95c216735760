"""Independent NumPy port of T2T's decoding for ONE sentence (batch 1).

Written from a description of T2T's `beam_search.py` and greedy decoding loop,
not from t2t_keras, so tests can check that t2t_keras decodes a sentence as
T2T would. It does not import t2t_keras and keeps T2T's own bookkeeping
(growing id arrays, `-INF` score offsets, `top_k` with lower-index-first ties)
rather than t2t_keras's fixed buffers and masks.

The model is a callable `logits_fn(prefix_ids) -> logits`:
`prefix_ids` is `[n, t]` int (column 0 holds the sos id 0, as in T2T's
`fast_decode`), and it returns the next-token logits `[n, vocab]`
(unnormalised; `log_softmax` is applied here, as T2T does).

Arithmetic is float64, so near-ties may break differently from a float32
implementation; compare scores with a tolerance.

T2T's `partial_targets` (`partial_targets=`): the prefix T2T forced before
decoding a prepend-mode model (`problem.preprocess_example_common` in PREDICT
mode and `decoding._decode_input_tensor_to_features_dict`: the inputs, EOS
included, then a 0). `transformer.py` `Transformer._fast_decode` forces it
through the logits: while `i < len(partial_targets)` the step's logits are
`one_hot(partial_targets[i], on=0, off=-1e9)` (so the forced id's log-prob is
0); `decode_length = len(partial_targets) + extra_length`; the outputs drop
the first `len(partial_targets)` ids. T2T's searches then treat a forced EOS
(the inputs') as any EOS: `forced_eos_ends=True` is T2T as written (beam
search finishes `inputs` with score 0, greedy stops, and every output is
empty); `forced_eos_ends=False` is T2T with that one change (a forced id never
ends a hypothesis), what t2t_keras decodes.

Both searches can record their decision margins (`margins=[]`): for every
choice the search makes between two candidates (which 2 * beam extensions
survive, which beam alive and finished ones are kept, whether to stop, the
order of the returned hypotheses; greedy's argmax), the gap between the two
scores it compared. `tests/support/near_ties.py` uses them: a computation whose
scores are within eps of these makes every choice whose margin exceeds
2 * eps the same way, so it can decode differently only where a margin is
at most 2 * eps.
"""

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

EOS_ID = 1  # T2T beam_search.EOS_ID
SOS_ID = 0  # T2T fast_decode's sos_id
INF = 1.0 * 1e7  # T2T beam_search.INF

LogitsFn = Callable[[np.ndarray], np.ndarray]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
  """T2T `common_layers.log_prob_from_logits` over the last axis."""
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _top_k(values: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
  """`tf.nn.top_k` on a 1-D array: (values, indices), ties to the lower index."""
  order = np.argsort(-values, kind="stable")[:k]
  return values[order], order


def _real(values: np.ndarray) -> np.ndarray:
  """The values that are scores, not T2T's -INF placeholders, largest first."""
  values = np.asarray(values, np.float64)
  return np.sort(values[values > -INF / 2])[::-1]


def _record_cut(margins: Optional[List[float]], values: np.ndarray, k: int) -> None:
  """The margin of keeping the k best of `values`: the k-th best minus the next."""
  if margins is not None:
    real = _real(values)
    if len(real) > k:
      margins.append(float(real[k - 1] - real[k]))


def _record_order(margins: Optional[List[float]], values: np.ndarray) -> None:
  """The margins of sorting `values`: each one minus the next."""
  if margins is not None:
    margins.extend(float(g) for g in -np.diff(_real(values)))


def _length_penalty(length, alpha: float) -> float:
  """GNMT penalty as in T2T's grow_topk / _is_not_finished."""
  return ((5.0 + float(length)) / 6.0) ** alpha


def _force(log_probs: np.ndarray, i: int, prefix: Sequence[int]) -> np.ndarray:
  """Forced prefix: at step i < len(prefix) every id but prefix[i] is impossible
  (-inf, after normalisation, so the forced id keeps the model's log-prob)."""
  if i >= len(prefix):
    return log_probs
  masked = np.full_like(log_probs, -np.inf)
  masked[..., prefix[i]] = log_probs[..., prefix[i]]
  return masked


def _partial_targets_logits(logits: np.ndarray, i: int,
                            partial_targets: Sequence[int]) -> np.ndarray:
  """T2T `_fast_decode`'s `forced_logits`: at step i < len(partial_targets) every
  row's logits are 0 at partial_targets[i] and -1e9 elsewhere."""
  if i >= len(partial_targets):
    return logits
  forced = np.full(logits.shape, -1e9)
  forced[..., partial_targets[i]] = 0.0
  return forced


def _grow_topk(logits_fn: LogitsFn, i: int, alive_seq: np.ndarray,
               alive_log_probs: np.ndarray, beam_size: int, alpha: float,
               eos_id: int, margins: Optional[List[float]] = None,
               prefix: Sequence[int] = (), partial_targets: Sequence[int] = (),
               forced_eos_ends: bool = True):
  """T2T `beam_search.grow_topk`: the 2 * beam best one-token extensions.

  Returns (topk_seq [2*beam, i+2], topk_log_probs, topk_scores,
  topk_finished), all [2*beam] except the sequences.
  """
  logits = _partial_targets_logits(np.asarray(logits_fn(alive_seq), np.float64), i,
                                   partial_targets)  # [beam, vocab]
  vocab_size = logits.shape[-1]
  log_probs = _force(_log_softmax(logits), i, prefix) + alive_log_probs[:, None]
  penalty = _length_penalty(i + 1, alpha)
  curr_scores = (log_probs / penalty).reshape(-1)  # [beam * vocab]
  _record_cut(margins, curr_scores, 2 * beam_size)
  topk_scores, topk_flat = _top_k(curr_scores, 2 * beam_size)
  topk_log_probs = topk_scores * penalty
  topk_beam, topk_ids = topk_flat // vocab_size, topk_flat % vocab_size
  topk_seq = np.concatenate([alive_seq[topk_beam], topk_ids[:, None]], axis=1)
  finished = topk_ids == eos_id
  if i < len(partial_targets) and not forced_eos_ends:
    finished = np.zeros_like(finished)
  return topk_seq, topk_log_probs, topk_scores, finished


def _grow_alive(topk_seq, topk_scores, topk_log_probs, topk_finished,
                beam_size: int, margins: Optional[List[float]] = None):
  """T2T `grow_alive`: EOS candidates get -INF, keep the best beam_size.

  Returns (alive_seq [beam, t], alive_log_probs [beam]).
  """
  scores = topk_scores + topk_finished.astype(np.float64) * -INF
  _record_cut(margins, scores, beam_size)
  _, keep = _top_k(scores, beam_size)
  return topk_seq[keep], topk_log_probs[keep]


def _grow_finished(finished_seq, finished_scores, finished_flags, topk_seq,
                   topk_scores, topk_finished, beam_size: int,
                   margins: Optional[List[float]] = None):
  """T2T `grow_finished`: pad finished by a 0 column, merge, keep top beam.

  Returns (finished_seq [beam, t], finished_scores [beam],
  finished_flags [beam]).
  """
  finished_seq = np.concatenate(
      [finished_seq, np.zeros([beam_size, 1], finished_seq.dtype)], axis=1)
  scores = topk_scores + (1.0 - topk_finished.astype(np.float64)) * -INF
  seqs = np.concatenate([finished_seq, topk_seq], axis=0)
  scores = np.concatenate([finished_scores, scores])
  flags = np.concatenate([finished_flags, topk_finished])
  _record_cut(margins, scores, beam_size)
  top_scores, keep = _top_k(scores, beam_size)
  return seqs[keep], top_scores, flags[keep]


def _is_not_finished(i: int, alive_log_probs, finished_scores,
                     decode_length: int, alpha: float,
                     stop_early: bool, margins: Optional[List[float]] = None) -> bool:
  """T2T `_is_not_finished` (final version) for one batch item.

  stop_early: the best finished score must beat the best alive log-prob over
  the largest length penalty `((5 + decode_length) / 6) ** alpha`; otherwise
  the worst of the beam finished slots must (empty slots hold -INF).
  """
  max_length_penalty = _length_penalty(decode_length, alpha)
  lower_bound_alive = alive_log_probs[0] / max_length_penalty
  if stop_early:
    finished_bound = finished_scores.max()
  else:
    finished_bound = finished_scores.min()
  bound_is_met = finished_bound > lower_bound_alive
  if margins is not None and i < decode_length and min(finished_bound,
                                                       lower_bound_alive) > -INF / 2:
    margins.append(float(abs(finished_bound - lower_bound_alive)))
  return i < decode_length and not bound_is_met


def t2t_beam_search(logits_fn: LogitsFn, beam_size: int, alpha: float,
                    decode_length: int, vocab_size: int, eos_id: int = EOS_ID,
                    stop_early: bool = True, margins: Optional[List[float]] = None,
                    prefix: Sequence[int] = (), partial_targets: Sequence[int] = (),
                    forced_eos_ends: bool = True) -> Tuple[np.ndarray, np.ndarray]:
  """T2T `beam_search.beam_search` + `fast_decode`'s slicing, one sentence.

  Mirrors: initial state (only beam 0 alive, finished slots empty at -INF),
  `inner_loop` = grow_topk, grow_alive, grow_finished; `_is_not_finished`
  as the loop condition; the final per-item choice (finished sequences with
  length-normalised scores if any beam finished, else the alive ones with
  raw log-probs and no EOS). T2T's `fast_decode` passes
  `stop_early=(top_beams == 1)`; pass it the same way.

  Args:
    logits_fn: see the module docstring.
    beam_size: beams kept.
    alpha: length-penalty exponent.
    decode_length: maximum decoding steps (T2T: input length + extra_length).
    vocab_size: number of logits the fn returns (checked).
    eos_id: the id that ends a hypothesis.
    stop_early: T2T's stop_early.
    margins: a list to which the margin of every choice is appended (see the
      module docstring), or None.
    prefix: forced first ids (not T2T's: a forced target prefix, as CTranslate2's
      target_prefix): at step i < len(prefix) only prefix[i] may extend a beam.
    partial_targets: T2T's forced prefix (module docstring); decode_length
      counts it (T2T: len(partial_targets) + extra_length).
    forced_eos_ends: with partial_targets, whether a forced EOS ends a
      hypothesis (T2T: it does).

  Returns:
    (seqs `[beam_size, steps]` int64 without the leading sos id (and without
    the partial_targets), 0-padded after EOS, best first; scores
    `[beam_size]` float64, T2T's scores; empty finished slots keep ids 0 and a
    score <= -INF).
  """
  alive_seq = np.full([beam_size, 1], SOS_ID, np.int64)
  alive_log_probs = np.array([0.0] + [-INF] * (beam_size - 1))
  finished_seq = np.zeros([beam_size, 1], np.int64)
  finished_scores = np.full([beam_size], -INF)
  finished_flags = np.zeros([beam_size], bool)

  def checked_fn(prefix):
    logits = np.asarray(logits_fn(prefix))
    if logits.shape != (prefix.shape[0], vocab_size):
      raise ValueError(f"logits_fn returned shape {logits.shape}, expected "
                       f"{(prefix.shape[0], vocab_size)}.")
    return logits

  i = 0
  while _is_not_finished(i, alive_log_probs, finished_scores, decode_length,
                         alpha, stop_early, margins):
    topk_seq, topk_log_probs, topk_scores, topk_finished = _grow_topk(
        checked_fn, i, alive_seq, alive_log_probs, beam_size, alpha, eos_id, margins, prefix,
        partial_targets, forced_eos_ends)
    alive_seq, alive_log_probs = _grow_alive(
        topk_seq, topk_scores, topk_log_probs, topk_finished, beam_size, margins)
    finished_seq, finished_scores, finished_flags = _grow_finished(
        finished_seq, finished_scores, finished_flags, topk_seq, topk_scores,
        topk_finished, beam_size, margins)
    i += 1
  if finished_flags.any():
    seqs, scores = finished_seq, finished_scores
  else:
    seqs, scores = alive_seq, alive_log_probs
  _record_order(margins, scores)
  return seqs[:, 1 + len(partial_targets):], scores


def t2t_greedy(logits_fn: LogitsFn, decode_length: int, eos_id: int = EOS_ID,
               margins: Optional[List[float]] = None,
               prefix: Sequence[int] = (), partial_targets: Sequence[int] = (),
               forced_eos_ends: bool = True) -> Tuple[np.ndarray, float]:
  """T2T `fast_decode`'s greedy loop (`sampling_method="argmax"`), batch 1.

  Loops while `i < decode_length` and EOS was not hit; each step appends the
  argmax id and adds its log-prob to the score (up to and including the
  first EOS). At decode_length it simply stops: no EOS is appended.
  `margins`: as t2t_beam_search's (each step's best minus second-best log-prob).
  `prefix`: forced first ids, `partial_targets` and `forced_eos_ends` T2T's
  forced prefix, as t2t_beam_search's.

  Returns:
    (ids `[steps]` int64 without the sos id (and without the
    partial_targets), ending in EOS only if the model emitted it; score =
    summed log-probs).
  """
  decoded = np.array([[SOS_ID]], np.int64)
  log_prob, hit_eos, i = 0.0, False, 0
  while i < decode_length and not hit_eos:
    logits = _partial_targets_logits(np.asarray(logits_fn(decoded), np.float64)[0], i,
                                     partial_targets)
    log_probs = _force(_log_softmax(logits), i, prefix)
    next_id = int(np.argmax(log_probs))  # first maximum, as tf.argmax
    forced = i < len(prefix) or i < len(partial_targets)
    if not forced:
      _record_cut(margins, log_probs, 1)
    log_prob += float(log_probs[next_id])
    hit_eos = next_id == eos_id and (forced_eos_ends or i >= len(partial_targets))
    decoded = np.concatenate([decoded, [[next_id]]], axis=1)
    i += 1
  return decoded[0, 1 + len(partial_targets):], log_prob
