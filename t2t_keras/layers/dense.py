"""Keras' `Dense` whose bias gradient is summed in float32 in mixed bfloat16.

Keras' `Dense` adds its bias with `tf.nn.bias_add`, whose gradient is TensorFlow's
`BiasAddGrad`. On CPU that kernel sums a bfloat16 gradient in bfloat16: over the
2,048 rows of a `[2048, 2048]` gradient whose columns have a positive mean it was
off by a third of the largest column sum (`bench/bench_bias_grad.py`;
`tests/test_dense.py` checks both sides). T2T never met this: it trained in
float32 on GPUs, and in bfloat16 only on TPUs, whose reductions accumulate in
float32.

In bfloat16 the bias gradient here is `ones[1, rows] · dy`: a matmul, whose
kernels accumulate bfloat16 products in float32 (oneDNN's on CPU; GPU matmuls
were not measured here), then round once to bfloat16, as every mixed-precision
gradient is. On a 2-core
Zen 5 it took 1.2 ms at `[2048, 2048]` against `BiasAddGrad`'s 1.5. The forward
pass is Keras' own, and other dtypes keep Keras' gradient (exact in float32).

The layer subclasses Keras' `Dense` (same weights, names and config), so
checkpoints and the T2T import are unchanged.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def bias_gradient(dy: tf.Tensor) -> tf.Tensor:
  """`dy` `[..., units]` summed over all but its last axis as `ones · dy`: `[units]`."""
  rows = tf.reshape(dy, [-1, tf.shape(dy)[-1]])
  ones = tf.ones([1, tf.shape(rows)[0]], rows.dtype)
  return tf.reshape(tf.matmul(ones, rows), [-1])


def bias_add(x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
  """`x + bias` (`tf.nn.bias_add`) whose bias gradient is `ones · dy`.

  Args:
    x: `[..., units]`, any float dtype.
    bias: `[units]`, x's dtype.
  Returns:
    `[..., units]` in x's dtype.
  """

  @tf.custom_gradient
  def add(x, bias):

    def grad(dy):
      return dy, bias_gradient(dy)

    return tf.nn.bias_add(x, bias), grad

  # Tensors, not variables: the gradient is taken through the read (and cast).
  return add(tf.convert_to_tensor(x), tf.convert_to_tensor(bias))


class Dense(keras.layers.Dense):
  """Keras' `Dense` with `bias_add`'s gradient (see the module docstring).

  Call arguments:
    inputs: `[batch, length, depth]` (any rank >= 2).
  Returns:
    `[batch, length, units]` in the compute dtype.
  """

  def call(self, inputs, training=None):
    if (self.compute_dtype != "bfloat16" or self.bias is None or self.lora_enabled
        or self.quantization_mode):
      return super().call(inputs, training=training)
    return self.activation(bias_add(keras.ops.matmul(inputs, self.kernel), self.bias))
