"""The bias add whose gradient is summed with float32 accumulation in mixed bfloat16.

Keras' `Dense` adds its bias with `tf.nn.bias_add`, whose gradient is TensorFlow's
`BiasAddGrad`. On CPU that kernel sums a bfloat16 gradient in bfloat16: over the
2,048 rows of a `[2048, 2048]` gradient whose columns have a positive mean it was
off by a third of the largest column sum (`bench/bench_bias_grad.py` prints it).
T2T never met this: it trained in float32 on GPUs, and in bfloat16 only on TPUs,
whose reductions accumulate in float32.

In bfloat16 the bias gradient here is `tf.reduce_sum` over the rows. TensorFlow's
`Sum` kernel reads bfloat16 and accumulates in float32 (the same Eigen code on
every x86 CPU; oneDNN is not involved), then rounds once to bfloat16, as every
mixed-precision gradient is: within one bfloat16 rounding of the exact sum on
any CPU (`tests/test_dense.py` states the bound and its derivation).

A matmul `ones[1, rows] · dy` was tried first: it is as accurate where oneDNN
runs bfloat16 natively (AVX-512 with `avx512_bf16`, AMX), but where TensorFlow
falls back to Eigen's bfloat16 matmul (AVX2-only CPUs) it is off by a whole
bfloat16 unit in the last place, twice the rounding. On a 2-core Zen 4 with
`avx512_bf16` the sum took 0.27 ms at `[2048, 512]` against the matmul's 0.24 and
`BiasAddGrad`'s 0.44: a difference of well under 1% of a training step.

The forward pass is Keras' own, and other dtypes keep Keras' gradient (exact in
float32); so does `T2T_KERAS_PLAIN_OPS=1`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from t2t_keras import perf


def bias_gradient(dy: tf.Tensor) -> tf.Tensor:
  """`dy` `[..., units]` summed over all but its last axis: `[units]`, dy's dtype.

  The gradient rule of `bias_add`. TensorFlow's `Sum` accumulates bfloat16 in
  float32 (see the module docstring).
  """
  return tf.reduce_sum(tf.reshape(dy, [-1, tf.shape(dy)[-1]]), axis=0)


def bias_add(x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
  """`x + bias` (`tf.nn.bias_add`) whose bias gradient is `bias_gradient(dy)`.

  Under `perf.plain_ops()`: `tf.nn.bias_add` with its own gradient (`BiasAddGrad`).

  Args:
    x: `[..., units]`, any float dtype.
    bias: `[units]`, x's dtype.
  Returns:
    `[..., units]` in x's dtype.
  """
  if perf.plain_ops():
    return tf.nn.bias_add(x, bias)

  @tf.custom_gradient
  def add(x, bias):

    def grad(dy):
      return dy, bias_gradient(dy)

    return tf.nn.bias_add(x, bias), grad

  # Tensors, not variables: the gradient is taken through the read (and cast).
  return add(tf.convert_to_tensor(x), tf.convert_to_tensor(bias))


def dense(layer: keras.layers.Dense, inputs: tf.Tensor, training=None) -> tf.Tensor:
  """`layer`'s output, its bias added by `bias_add` in a bfloat16 compute dtype.

  Keras' own `Dense.call` otherwise: other dtypes, no bias, LoRA or quantization,
  and under `perf.plain_ops()`.

  Args:
    layer: a built `keras.layers.Dense`.
    inputs: `[batch, length, depth]` (any rank >= 2).
  Returns:
    `[batch, length, units]` in the compute dtype.
  """
  if (perf.plain_ops() or layer.compute_dtype != "bfloat16" or layer.bias is None
      or layer.lora_enabled or layer.quantization_mode):
    return keras.layers.Dense.call(layer, inputs, training=training)
  return layer.activation(bias_add(keras.ops.matmul(inputs, layer.kernel), layer.bias))
