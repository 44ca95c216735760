"""Comparing two decodes whose kernels differ: identical, or parted at a near-tie.

Two computations of one model (two engines, two precisions, XLA and graph, cached
and uncached, a batch and a sentence alone) give scores that differ by rounding.
Each search makes choices between candidates by their scores; where two scores
are closer than the rounding, which one wins depends on the CPU's kernels, and
the two decodes may part there. Exact equality of decoded text is then a verdict
of the CPU, not of the code.

The rule, with its derivation. Let eps bound how far each of the two computations'
candidate scores (log-probs of prefixes, length-normalised where the search
normalises) lie from a reference's (the tests check that bound on the scores
they compare). Run T2T's search on the reference (`tests/support/t2t_numpy_decoding.py`)
and record the margin of every choice it makes (the gap between the two scores
it compared). If every margin exceeds 2 * eps, each computation's gap for that
choice has the reference's sign (it moves by at most eps per score), so, step by
step, both make the reference's choices and decode identically. Hence:

  a sentence whose two decodes differ must have a reference margin <= 2 * eps.

Such a sentence is a near-tie: accepted and counted. Any other difference fails.
The count is capped (a quarter of the sentences, at least one): margins that
small are rare, so many of them means the premise (eps) is wrong.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional, Sequence

import numpy as np

from tests.support import t2t_numpy_decoding as t2t


def reference_margin(logits_fn: t2t.LogitsFn, beam_size: int, alpha: float,
                     decode_length: int, vocab_size: int, stop_early: bool = True,
                     prefix: Sequence[int] = (), partial_targets: Sequence[int] = ()) -> float:
  """The smallest choice margin of T2T's search for one sentence on `logits_fn`.

  beam_size 1 is greedy decoding (the decoders' beam_size=1), else T2T's beam
  search with `stop_early` (T2T: top_beams == 1); `prefix` forced first ids;
  `partial_targets` T2T's prepend-mode prefix, its forced EOS ending nothing (as
  t2t_keras decodes it; decode_length counts it). inf when there was no choice.
  """
  margins = []
  forced = dict(prefix=prefix, partial_targets=partial_targets, forced_eos_ends=False)
  if beam_size == 1:
    t2t.t2t_greedy(logits_fn, decode_length, margins=margins, **forced)
  else:
    t2t.t2t_beam_search(logits_fn, beam_size, alpha, decode_length, vocab_size,
                        stop_early=stop_early, margins=margins, **forced)
  return min(margins, default=float("inf"))


def _trimmed(ids) -> tuple:
  """Ids without the padding after them: `[length]` -> tuple, `[beams, length]` ->
  tuple of tuples (a decode buffer may be wider than another's)."""
  ids = np.asarray(ids)
  if ids.ndim == 1:
    return tuple(int(i) for i in np.trim_zeros(ids, "b"))
  return tuple(_trimmed(row) for row in ids)


def same(a, b) -> bool:
  """Equality of two decodes: strings, or ids up to trailing padding."""
  if isinstance(a, str) or isinstance(b, str):
    return a == b
  return _trimmed(a) == _trimmed(b)


def assert_equal_or_near_tie(got: Sequence, want: Sequence, margin_of: Callable[[int], float],
                             eps: float, what: str = "decodes",
                             max_ties: Optional[int] = None) -> int:
  """Each got[i] equals want[i], or sentence i is a near-tie (module docstring).

  Args:
    got, want: per-sentence decodes of the two computations (strings, ids).
    margin_of: i -> the reference's smallest choice margin for sentence i
      (`reference_margin`); called only for sentences that differ.
    eps: the bound on each computation's score error against the reference.
    what: named in the failure message.
    max_ties: most near-ties accepted (default a quarter of the sentences, >= 1).

  Returns:
    the number of near-ties accepted.
  """
  assert len(got) == len(want), (what, len(got), len(want))
  ties = []
  for i, (g, w) in enumerate(zip(got, want)):
    if same(g, w):
      continue
    margin = margin_of(i)
    assert margin <= 2 * eps, (
        f"{what}: sentence {i} differs ({g!r} vs {w!r}) but the reference's smallest choice "
        f"margin is {margin:.3g} > 2 * eps = {2 * eps:.3g}: not a near-tie")
    ties.append(i)
  cap = max(1, len(got) // 4) if max_ties is None else max_ties
  assert len(ties) <= cap, f"{what}: {len(ties)} near-ties (sentences {ties}) > {cap}"
  return len(ties)


def assert_decodes_equal_or_near_tie(got, want, margin_of: Callable[[int], float], eps: float,
                                     what: str = "decodes", score_atol: float = None) -> int:
  """`got` and `want` are (ids `[batch, (beams,) length]`, scores `[batch, (beams)]`)
  of two decodes of the same sentences: each sentence's ids equal up to padding,
  with scores within `score_atol` (default eps), or it is a near-tie. Returns the
  number of near-ties."""
  (got_ids, got_scores), (want_ids, want_scores) = (
      ([np.asarray(row) for row in ids], np.asarray(scores)) for ids, scores in (got, want))
  ties = assert_equal_or_near_tie(got_ids, want_ids, margin_of, eps, what)
  rows = [i for i in range(len(want_ids)) if same(got_ids[i], want_ids[i])]
  got_scores, want_scores = got_scores[rows], want_scores[rows]
  real = want_scores > -t2t.INF / 2  # not an empty n-best slot
  np.testing.assert_array_equal(got_scores > -t2t.INF / 2, real)
  np.testing.assert_allclose(got_scores[real], want_scores[real], rtol=0,
                             atol=eps if score_atol is None else score_atol)
  return ties


@functools.lru_cache(maxsize=None)
def _traced_full_decode(model):
  """model.decode traced once for any batch and length (eager calls are slow)."""
  import tensorflow as tf
  spec = lambda *shape, dtype=tf.float32: tf.TensorSpec(shape, dtype)
  return tf.function(lambda t, e, b: model.decode(t, e, b, training=False), input_signature=[
      spec(None, None, dtype=tf.int32), spec(None, None, None), spec(None, 1, 1, None)])


def full_pass_logits_fn(model, row) -> t2t.LogitsFn:
  """The NumPy port's logits_fn for one sentence `row` (its ids, EOS included, no
  padding): the model's full decoder pass over each prefix, no cache."""
  import tensorflow as tf
  encoder_output, bias = model.encode(tf.constant(np.asarray(row)[None]), training=False)
  decode = _traced_full_decode(model)

  def fn(prefix):
    n, t = prefix.shape
    targets = np.concatenate([prefix[:, 1:], np.zeros([n, 1], prefix.dtype)], 1)
    logits = decode(tf.constant(targets, tf.int32), tf.repeat(encoder_output, n, 0),
                    tf.repeat(bias, n, 0))
    return tf.cast(logits[:, t - 1], tf.float32).numpy()

  return fn


def model_margin_of(model, rows, beam_size: int, alpha: float, extra_length: int,
                    vocab_size: int, stop_early: bool = True) -> Callable[[int], float]:
  """margin_of for sentences `rows` (id lists or 0-padded arrays) decoded by `model`
  with each sentence's own cap, its length + extra_length, as the decoders do;
  stop_early False where all beams are returned (T2T: top_beams > 1)."""

  def margin_of(i):
    row = np.asarray(rows[i])
    row = row[:np.count_nonzero(row)]
    return reference_margin(full_pass_logits_fn(model, row), beam_size, alpha,
                            len(row) + extra_length, vocab_size, stop_early)

  return margin_of


def text_margin_of(model, encoders, lines: Sequence[str], decode_hp: str,
                   stop_early: bool = True) -> Callable[[int], float]:
  """margin_of for text `lines` decoded with decode hparams `decode_hp` (a string), the
  lines encoded as `TextDecoder` encodes them (ids + EOS). stop_early False where every
  beam is returned (T2T's top_beams > 1). An empty line has no choice to part at: inf,
  so any difference there fails."""
  from t2t_keras.decoding import text_decoder  # pylint: disable=g-import-not-at-top
  from t2t_keras.hparams import create_decode_hparams  # pylint: disable=g-import-not-at-top
  dhp = create_decode_hparams(decode_hp)
  encode = text_decoder.LineDecoder(encoders, dhp)._encode  # pylint: disable=protected-access
  rows = [encode(line)[0] for line in lines]
  margin_of = model_margin_of(model, rows, dhp.beam_size, dhp.alpha, dhp.extra_length,
                              model.target_vocab_size, stop_early)
  return lambda i: margin_of(i) if lines[i].strip() else float("inf")
