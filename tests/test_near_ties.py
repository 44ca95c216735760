"""The near-tie rule of tests/support/near_ties.py: its margins and the derivation it rests on.

The rule accepts two decodes that differ only when the reference search made a
choice whose margin is <= 2 * eps. Checked here on the NumPy port itself, with
no TensorFlow: greedy's margin by hand; and for beam search, thousands of
random near-uniform tables perturbed by at most delta per logit (so each
candidate score moves by at most eps = 2 * delta * steps): every perturbed
decode that differs from the unperturbed one has a margin <= 2 * eps, and
differences do happen (the check is not vacuous).
"""

import numpy as np
import pytest

from tests.support import near_ties, t2t_numpy_decoding as t2t
from tests.support.tolerances import SCORE_EPS

EOS = t2t.EOS_ID


def _table_fn(table):
  """logits_fn of a `[steps, vocab, vocab]` table: row = last id (sos 0 at step 0)."""
  def fn(prefix):
    return table[prefix.shape[1] - 1, prefix[:, -1]]
  return fn


def test_greedy_margin_is_the_smallest_best_minus_second_log_prob():
  logits = np.full((3, 5, 5), -5.0)
  logits[0, 0, [2, 3]] = [1.0, 0.97]   # step 0: 2 beats 3 by 0.03
  logits[1, 2, [EOS, 4]] = [2.0, 1.5]  # step 1: EOS beats 4 by 0.5
  margins = []
  ids, _ = t2t.t2t_greedy(_table_fn(logits), 3, margins=margins)
  assert list(ids) == [2, EOS]
  np.testing.assert_allclose(margins, [0.03, 0.5], atol=1e-12)
  assert near_ties.reference_margin(_table_fn(logits), 1, 0.0, 3, 5) == pytest.approx(0.03)


def test_beam_margins_include_the_final_order():
  """Two hypotheses, 2 and 3, then EOS, 0.01 apart in log-prob: the returned order's
  margin, 0.01, is recorded last, and it is the smallest choice of the search."""
  logits = np.broadcast_to(-20.0 - np.arange(6.0), (3, 6, 6)).copy()  # distinct others
  logits[0, 0, [2, 3]] = [0.0, -0.01]
  logits[1, [2, 3], EOS] = 0.0
  margins = []
  seqs, scores = t2t.t2t_beam_search(_table_fn(logits), 2, 0.0, 3, 6, stop_early=False,
                                     margins=margins)
  assert [list(s[:2]) for s in seqs] == [[2, EOS], [3, EOS]]
  assert scores[0] - scores[1] == pytest.approx(0.01, abs=1e-6)
  assert margins[-1] == pytest.approx(0.01, abs=1e-6)
  assert min(margins) == pytest.approx(0.01, abs=1e-6)


@pytest.mark.parametrize("beam, alpha", [(1, 0.0), (2, 0.6), (3, 0.0), (4, 1.0)])
def test_a_decode_moved_by_eps_differs_only_at_a_margin_within_2_eps(beam, alpha):
  steps, vocab, delta = 5, 7, 5e-3
  eps = 2 * delta * steps  # log_softmax moves by <= 2 delta per step
  rng = np.random.default_rng(beam)
  differed = 0
  for _ in range(300):
    table = rng.normal(size=(steps, vocab, vocab)) * 0.15  # near-uniform: many near-ties
    table[..., EOS] += rng.normal() * 0.5
    moved = table + rng.uniform(-delta, delta, size=table.shape)

    def run(t, margins=None):
      if beam == 1:
        return t2t.t2t_greedy(_table_fn(t), steps, margins=margins)[0]
      return t2t.t2t_beam_search(_table_fn(t), beam, alpha, steps, vocab, stop_early=False,
                                 margins=margins)[0]

    margins = []
    want = run(table, margins)
    if not near_ties.same(run(moved), want):
      differed += 1
      assert min(margins) <= 2 * eps, (min(margins), 2 * eps)
  assert differed >= 5  # the perturbation does flip near-ties


def test_assert_equal_or_near_tie_accepts_near_ties_only_and_counts_them():
  want = ["a b", "c d", "e f", "g h", "i j", "k l", "m n", "o p"]
  got = list(want)
  got[2] = "e g"
  margins = {2: 1e-5}
  assert near_ties.assert_equal_or_near_tie(got, want, margins.__getitem__, eps=1e-5) == 1
  margins[2] = 3e-5  # beyond 2 * eps: a real difference
  with pytest.raises(AssertionError, match="sentence 2 differs .* not a near-tie"):
    near_ties.assert_equal_or_near_tie(got, want, margins.__getitem__, eps=1e-5)
  got = ["x"] * 8  # ties everywhere: more than a quarter
  with pytest.raises(AssertionError, match="8 near-ties"):
    near_ties.assert_equal_or_near_tie(got, want, lambda i: 0.0, eps=1e-5)
  assert near_ties.assert_equal_or_near_tie(
      [np.array([3, 1])], [np.array([3, 1])], lambda i: 1 / 0, eps=1e-5) == 0


def test_model_margins_follow_the_decoders_search():
  """On a random Transformer, the reference the decoding tests use (full decoder pass,
  each sentence's own cap) runs T2T's search to the decoder's own top beam, and its
  margin is what a forced difference is judged by."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from t2t_keras.decoding import seq2seq  # pylint: disable=g-import-not-at-top
  from t2t_keras.hparams import (create_decode_hparams,  # pylint: disable=g-import-not-at-top
                                 create_hparams)
  from t2t_keras.model import Transformer  # pylint: disable=g-import-not-at-top
  tf.keras.utils.set_random_seed(1)
  model = Transformer(create_hparams("transformer_tiny", "num_hidden_layers=1"), 30,
                      target_space_id=2)
  model.build()
  rows = np.array([[5, 7, 9, 1], [4, 1, 0, 0]], np.int32)
  for beam in (1, 3):
    dhp = create_decode_hparams(f"beam_size={beam},extra_length=3")
    ids = seq2seq.make_decode_fn(model, dhp)(tf.constant(rows))[0].numpy()
    margin_of = near_ties.model_margin_of(model, rows, beam, dhp.alpha, 3, 30)
    for i, n in enumerate((4, 2)):
      fn = near_ties.full_pass_logits_fn(model, rows[i, :n])
      if beam == 1:
        want = t2t.t2t_greedy(fn, n + 3)[0]
      else:
        want = t2t.t2t_beam_search(fn, beam, dhp.alpha, n + 3, 30)[0][0]
      want = want[:len(want) if EOS not in want else list(want).index(EOS) + 1]
      # No near-tie on these weights (seeded, the same on every CPU): the decoder's ids
      # equal the reference's exactly, whatever the kernels (the rule's own premise).
      assert 2 * SCORE_EPS < margin_of(i) < np.inf
      assert list(ids[i][:len(want)]) == list(want) and not ids[i][len(want):].any()
    forged = [list(r) for r in ids]
    forged[0][0] = (forged[0][0] + 1) % 30  # a difference no rounding makes
    with pytest.raises(AssertionError, match="sentence 0 differs .* not a near-tie"):
      near_ties.assert_equal_or_near_tie(forged, list(ids), margin_of, eps=1e-9)
