"""T2T evaluation metrics on a hand-computed batch."""

import math

import numpy as np
import pytest

from t2t_keras.training import metrics


def test_metric_sums_and_finalize_by_hand():
  # Vocab 6. Row 0: labels [2, 3, 1]; argmax [2, 4, 1] -> 2 of 3 right.
  # Row 1: labels [5, 1, 0(pad)]; argmax [5, 1, 0] -> all right (pad ignored).
  logits = np.full((2, 3, 6), -5.0, np.float32)
  argmax = [[2, 4, 1], [5, 1, 0]]
  for b in range(2):
    for t in range(3):
      logits[b, t, argmax[b][t]] = 5.0
  logits[0, 1, 3] = 4.0  # the gold label is second best: inside the top 5
  labels = np.array([[2, 3, 1], [5, 1, 0]])
  sums = {k: float(v) for k, v in metrics.metric_sums(logits, labels).items()}
  assert sums["weights"] == 5
  assert sums["correct"] == 4 and sums["correct_top5"] == 5
  assert sums["sequences_correct"] == 1 and sums["sequences"] == 2
  # Cross-entropy by hand for each non-pad position.
  def xent(row, gold):
    z = np.asarray(row, np.float64)
    return math.log(np.exp(z).sum()) - z[gold]
  want = sum(xent(logits[b, t], labels[b, t]) for b in range(2) for t in range(3)
             if labels[b, t])
  assert sums["xent"] == pytest.approx(want, rel=1e-5)
  out = metrics.finalize(sums)
  assert out["accuracy"] == pytest.approx(0.8)
  assert out["accuracy_top5"] == pytest.approx(1.0)
  assert out["accuracy_per_sequence"] == pytest.approx(0.5)
  assert out["neg_log_perplexity"] == pytest.approx(-want / 5, rel=1e-5)
  assert out["loss"] == pytest.approx(want / 5, rel=1e-5)
