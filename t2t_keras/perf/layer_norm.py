"""T2T's layer norm, trained through one fused kernel forward and one backward.

Keras' `LayerNormalization` under TensorFlow runs as a dozen graph ops, and its
gradient as a dozen more, each a pass over the `[rows, depth]` activations
(`x * inv`, the broadcast `inv * gamma`, casts in mixed precision, ...). Here
training computes T2T's `layer_norm_compute`,

    y = (x - mean) * rsqrt(variance + epsilon) * scale + bias,
    variance = mean((x - mean)^2)  (two passes, as T2T),

in float32 as one XLA function, and its gradient, written in closed form, as a
second one. On a 2-core Zen 5 this made a `[64, 32, 512]` forward and backward
2.78 ms instead of 3.95 (float32) and 3.49 instead of 4.20 (mixed bfloat16)
(`bench/bench_layer_norm.py`); the train-step figures are in docs/performance.md. Inference keeps Keras' ops: a graph-mode
decoding step would pay an XLA launch per norm for a handful of rows.

With `T2T_KERAS_PLAIN_OPS=1` training takes Keras' ops too (`layer_norm`), and
`fused_layer_norm` computes the same formula with stock ops and TensorFlow's
own gradient.
"""

from __future__ import annotations

from typing import Tuple

import keras
import tensorflow as tf

from t2t_keras import perf


def _forward(x: tf.Tensor, scale: tf.Tensor, bias: tf.Tensor,
             epsilon: float) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """`[rows, depth]` -> (y in x's dtype, mean `[rows, 1]`, rsqrt(var + eps) `[rows, 1]`)."""
  xf = tf.cast(x, tf.float32)
  mean = tf.reduce_mean(xf, axis=-1, keepdims=True)
  centered = xf - mean
  inv = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
  return tf.cast(centered * inv * scale + bias, x.dtype), mean, inv


def _backward(x: tf.Tensor, mean: tf.Tensor, inv: tf.Tensor, scale: tf.Tensor,
              dy: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """(dx in x's dtype, d scale, d bias) for y = x̂·scale + bias, x̂ = (x - mean)·inv.

  dx = inv · (g - mean(g) - x̂ · mean(g · x̂)), g = dy · scale (means over depth).
  """
  xhat = (tf.cast(x, tf.float32) - mean) * inv
  dy = tf.cast(dy, tf.float32)
  g = dy * scale
  dx = inv * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
              - xhat * tf.reduce_mean(g * xhat, axis=-1, keepdims=True))
  return tf.cast(dx, x.dtype), tf.reduce_sum(dy * xhat, axis=0), tf.reduce_sum(dy, axis=0)


# Compiled once per shape; inlined when the train step itself runs under XLA.
_forward_xla = tf.function(_forward, jit_compile=True)
_backward_xla = tf.function(_backward, jit_compile=True)


def fused_layer_norm(x: tf.Tensor, scale: tf.Tensor, bias: tf.Tensor,
                     epsilon: float) -> tf.Tensor:
  """T2T's layer norm over the last axis with a hand-written gradient.

  Under `perf.plain_ops()`: the same formula in stock ops, TensorFlow's gradient.

  Args:
    x: `[..., depth]`, any float dtype (computed in float32).
    scale, bias: float32 `[depth]`.
  Returns:
    `[..., depth]` in x's dtype.
  """
  if perf.plain_ops() or perf.in_portable_graph():  # no XLA in a SavedModel
    return _forward(x, scale, bias, epsilon)[0]
  depth = x.shape[-1]
  rows = tf.reshape(x, [-1, depth])

  @tf.custom_gradient
  def norm(rows, scale, bias):
    y, mean, inv = _forward_xla(rows, scale, bias, epsilon)

    def grad(dy):
      return _backward_xla(rows, mean, inv, scale, dy)

    return y, grad

  return tf.reshape(norm(rows, scale, bias), tf.shape(x))


def layer_norm(layer: keras.layers.LayerNormalization, inputs: tf.Tensor,
               training=None) -> tf.Tensor:
  """`layer`'s output: `fused_layer_norm` when training, else Keras' own ops.

  Keras' ops (`LayerNormalization.call`) also under `perf.plain_ops()`.

  Args:
    layer: a built last-axis `LayerNormalization` with scale and bias.
    inputs: `[batch, length, depth]`.
    training: Python bool or None.
  Returns:
    `[batch, length, depth]` in the layer's compute dtype.
  """
  if not training or perf.plain_ops():
    return keras.layers.LayerNormalization.call(layer, inputs)
  scale = tf.cast(tf.convert_to_tensor(layer.gamma), tf.float32)
  bias = tf.cast(tf.convert_to_tensor(layer.beta), tf.float32)
  return tf.cast(fused_layer_norm(inputs, scale, bias, layer.epsilon), layer.compute_dtype)
