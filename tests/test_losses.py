"""Label-smoothed padded cross-entropy against brute-force NumPy."""

import math

import numpy as np
import pytest

from t2t_keras.training import losses


def _numpy_reference(logits, labels, ls):
  b, n, v = logits.shape
  num = den = 0.0
  for i in range(b):
    for t in range(n):
      if labels[i, t] == 0:
        continue
      z = logits[i, t].astype(np.float64)
      logp = z - z.max() - math.log(np.exp(z - z.max()).sum())
      target = np.full(v, ls / (v - 1))
      target[labels[i, t]] = 1 - ls
      xent = -(target * logp).sum()
      # Entropy of the smoothed target: subtracting it makes the optimum 0.
      entropy = -sum(p * math.log(p) for p in target if p > 0)
      num += xent - entropy
      den += 1
  return num, den


@pytest.mark.parametrize("ls", [0.0, 0.1, 0.3])
def test_padded_cross_entropy_matches_numpy(ls):
  rng = np.random.default_rng(0)
  logits = rng.normal(scale=3.0, size=(3, 5, 11)).astype(np.float32)
  labels = rng.integers(1, 11, size=(3, 5))
  labels[0, 3:] = 0
  labels[2, 1:] = 0
  num, den = losses.padded_cross_entropy(logits, labels, ls)
  want_num, want_den = _numpy_reference(logits, labels, ls)
  assert float(den) == want_den == 15 - 2 - 4
  np.testing.assert_allclose(float(num), want_num, rtol=1e-5)


def test_perfect_prediction_costs_zero():
  v, ls = 7, 0.1
  target = np.full(v, ls / (v - 1))
  target[3] = 1 - ls
  logits = np.log(target)[None, None].astype(np.float32)
  num, _ = losses.padded_cross_entropy(logits, np.array([[3]]), ls)
  assert abs(float(num)) < 1e-5


@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_gradient_is_softmax_minus_smoothed_targets(ls):
  import tensorflow as tf
  rng = np.random.default_rng(1)
  logits = tf.constant(rng.normal(scale=2.0, size=(2, 3, 7)).astype(np.float32))
  labels = np.array([[1, 4, 0], [6, 2, 3]])
  with tf.GradientTape() as tape:
    tape.watch(logits)
    num, _ = losses.padded_cross_entropy(logits, labels, ls)
  got = tape.gradient(num, logits).numpy()
  z = logits.numpy().astype(np.float64)
  softmax = np.exp(z - z.max(-1, keepdims=True))
  softmax /= softmax.sum(-1, keepdims=True)
  target = np.full(z.shape, ls / 6)
  for b in range(2):
    for t in range(3):
      target[b, t, labels[b, t]] = 1 - ls
  want = (softmax - target) * (labels != 0)[..., None]
  np.testing.assert_allclose(got, want, atol=1e-6)
