"""The label-smoothed cross-entropy as one XLA kernel forward and one backward.

T2T computes the loss as `softmax_cross_entropy_with_logits` against smoothed
one-hot targets: a `[tokens, vocab]` target tensor, and TensorFlow's kernel,
built for a baseline x86 ISA (it took 9% of a mixed-bfloat16 transformer_base
train step on a 2-core Sapphire Rapids). Here, with targets t summing to 1,

    -sum(t * log_softmax(z)) = logsumexp(z) - conf * z_gold - low * (sum(z) - z_gold),

never building the targets, and the gradient `softmax(z) - t` is written by
hand for the same reason; XLA generates code for the host CPU and fuses each
pass over the logits (cast, max, exp, sums, one-hot, scaling) into one.
Compiled once per shape; inlined when the step itself runs under XLA.

Plain (`T2T_KERAS_PLAIN_OPS=1`): T2T's own formulation with stock ops.
"""

from __future__ import annotations

from typing import Tuple

import tensorflow as tf

from t2t_keras import perf


def _forward(z: tf.Tensor, labels: tf.Tensor, confidence: float,
             low: float) -> Tuple[tf.Tensor, tf.Tensor]:
  """`[tokens, vocab]` logits -> (smoothed cross-entropy `[tokens]`, logsumexp `[tokens]`)."""
  z = tf.cast(z, tf.float32)
  lse = tf.reduce_logsumexp(z, axis=-1)
  gold = tf.gather(z, labels, batch_dims=1)
  return lse - confidence * gold - low * (tf.reduce_sum(z, axis=-1) - gold), lse


def _backward(z: tf.Tensor, lse: tf.Tensor, labels: tf.Tensor, dy: tf.Tensor,
              confidence: float, low: float) -> tf.Tensor:
  """d xent / d z = (softmax(z) - t) * dy, t = low everywhere, confidence at gold; z's dtype."""
  p = tf.exp(tf.cast(z, tf.float32) - lse[:, None])
  gold = tf.equal(tf.range(tf.shape(z)[1])[None, :], labels[:, None])
  g = (p - tf.where(gold, confidence, low)) * dy[:, None]
  return tf.cast(g, z.dtype)


_forward_xla = tf.function(_forward, jit_compile=True)
_backward_xla = tf.function(_backward, jit_compile=True)


def smoothed_xent(logits: tf.Tensor, labels: tf.Tensor, confidence: float,
                  low: float) -> tf.Tensor:
  """Cross-entropy against targets `confidence` at the gold id and `low` elsewhere.

  Args:
    logits: `[..., vocab]`, any float dtype (computed in float32).
    labels: int32 `[...]`.
  Returns:
    float32 `[...]`; the gradient comes back in the logits' dtype.
  """
  vocab_size = logits.shape[-1]
  if perf.plain_ops() or perf.in_portable_graph():  # no XLA in a SavedModel
    targets = tf.one_hot(labels, vocab_size, on_value=confidence, off_value=low)
    return tf.nn.softmax_cross_entropy_with_logits(labels=targets,
                                                   logits=tf.cast(logits, tf.float32))
  out_shape = tf.shape(labels)
  labels = tf.reshape(labels, [-1])

  @tf.custom_gradient
  def xent(z):
    value, lse = _forward_xla(z, labels, confidence, low)

    def grad(dy):
      return _backward_xla(z, lse, labels, dy, confidence, low)

    return value, grad

  return tf.reshape(xent(tf.reshape(logits, [-1, vocab_size])), out_shape)
