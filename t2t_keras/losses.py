"""T2T's label-smoothed, padding-weighted cross-entropy (`common_layers`).

`padded_cross_entropy` returns the numerator and denominator separately so that
the trainer can sum them over micro-batches and replicas and divide once:
T2T's loss of a step is sum(token losses) / sum(non-pad weights) over all GPUs.
"""

from __future__ import annotations

import math
from typing import Tuple

import tensorflow as tf


def smoothing_normalizer(vocab_size: int, label_smoothing: float) -> float:
  """Entropy of the smoothed target distribution (T2T's `normalizing` constant).

  Subtracting it makes a perfect prediction cost 0; it does not change gradients.
  """
  confidence = 1.0 - label_smoothing
  low = (1.0 - confidence) / (vocab_size - 1)
  return -(confidence * math.log(confidence) + (vocab_size - 1) * low * math.log(low + 1e-20))


def smoothing_cross_entropy(logits: tf.Tensor, labels: tf.Tensor,
                            label_smoothing: float) -> tf.Tensor:
  """Per-token cross-entropy against smoothed one-hot targets.

  The gold class gets 1 - label_smoothing and every other class, PAD included,
  label_smoothing / (vocab - 1), as in T2T. Computed in closed form, never
  building the `[batch, length, vocab]` soft targets: with targets t summing to 1,
  -sum(t * log_softmax(z)) = logsumexp(z) - conf * z_gold - low * (sum(z) - z_gold).
  The gradient, softmax(z) - t, is written by hand for the same reason.

  Args:
    logits: `[batch, length, vocab]` (any float dtype; computed in float32).
    labels: `[batch, length]` int ids.
  Returns:
    float32 `[batch, length]`.
  """
  logits = tf.cast(logits, tf.float32)
  vocab_size = logits.shape[-1]
  confidence = 1.0 - label_smoothing
  low = (1.0 - confidence) / (vocab_size - 1)
  xent = _smoothed_xent(logits, tf.cast(labels, tf.int32), confidence, low)
  return xent - smoothing_normalizer(vocab_size, label_smoothing)


def _smoothed_xent(logits: tf.Tensor, labels: tf.Tensor, confidence: float,
                   low: float) -> tf.Tensor:
  """Closed-form smoothed cross-entropy, `[..., vocab]` float32 -> `[...]`."""
  vocab_size = logits.shape[-1]
  out_shape = tf.shape(labels)
  labels = tf.reshape(labels, [-1])
  # [tokens, 2] (row, gold id): where the gold entries sit in the flat `[tokens, vocab]`.
  gold_index = tf.stack([tf.range(tf.size(labels)), labels], axis=1)

  @tf.custom_gradient
  def xent(z):
    # One fused kernel gives logsumexp(z) - z_gold and softmax(z) - onehot(gold).
    sparse, sparse_grad = tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
        features=z, labels=labels)
    gold = tf.gather_nd(z, gold_index)
    value = sparse + (1.0 - confidence) * gold - low * (tf.reduce_sum(z, axis=-1) - gold)

    def grad(dy):
      # d/dz = softmax(z) - t, t = low everywhere plus (confidence - low) at gold.
      g = (sparse_grad - low) * dy[:, None]
      return tf.tensor_scatter_nd_add(g, gold_index, (1.0 - confidence + low) * dy)

    return value, grad

  return tf.reshape(xent(tf.reshape(logits, [-1, vocab_size])), out_shape)


def padded_cross_entropy(logits: tf.Tensor, labels: tf.Tensor,
                         label_smoothing: float) -> Tuple[tf.Tensor, tf.Tensor]:
  """Sum of smoothed token losses and sum of weights, weights = (labels != 0).

  Args:
    logits: `[batch, length, vocab]`; labels: `[batch, length]`, 0 = PAD.
  Returns:
    (float32 scalar loss numerator, float32 scalar weight sum).
  """
  weights = tf.cast(tf.not_equal(labels, 0), tf.float32)
  xent = smoothing_cross_entropy(logits, labels, label_smoothing)
  return tf.reduce_sum(xent * weights), tf.reduce_sum(weights)
