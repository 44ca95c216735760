"""t2t_keras.layers.dense: bias gradients in mixed bfloat16 against NumPy float64 sums.

The expectation is the column sum, in float64, of the bfloat16 gradient that
reaches the bias; the only error allowed is the final rounding to bfloat16
(relative 2^-8 of the largest sum, with margin).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers import dense as dense_lib
from t2t_keras.layers.ffn import DenseReluDense

ROUNDING = 2.0 ** -8  # bfloat16 keeps 8 significant bits.


def bf16(a) -> np.ndarray:
  """`a` rounded to bfloat16, back in float64."""
  return tf.cast(tf.cast(a, tf.bfloat16), tf.float64).numpy()


def upstream(rng, rows=2048, units=256):
  # A positive mean makes the column sums grow with the rows: the case where a
  # bfloat16 accumulator swamps what it adds.
  return bf16(rng.normal(size=(rows, units)) + 0.5)


def relative_error(got, exact) -> float:
  return float(np.max(np.abs(np.asarray(got, np.float64) - exact)) / np.max(np.abs(exact)))


def test_tensorflow_bias_add_grad_is_inexact_in_bfloat16():
  """Why the layer exists: TensorFlow's CPU `BiasAddGrad` sums bfloat16 in bfloat16."""
  dy = upstream(np.random.default_rng(0))
  got = tf.raw_ops.BiasAddGrad(out_backprop=tf.constant(dy, tf.bfloat16))
  assert relative_error(tf.cast(got, tf.float64), dy.sum(0)) > 8 * ROUNDING


@pytest.mark.parametrize("shape", [(2048, 256), (16, 128, 64)])
def test_bias_add_gradient_is_the_float64_sum(shape):
  rng = np.random.default_rng(1)
  dy = upstream(rng, int(np.prod(shape[:-1])), shape[-1]).reshape(shape)
  x = tf.constant(bf16(rng.normal(size=shape)), tf.bfloat16)
  bias = tf.constant(bf16(rng.normal(size=shape[-1])), tf.bfloat16)
  with tf.GradientTape() as tape:
    tape.watch([x, bias])
    y = dense_lib.bias_add(x, bias)
  dx, dbias = tape.gradient(y, [x, bias], output_gradients=tf.constant(dy, tf.bfloat16))
  np.testing.assert_array_equal(y.numpy(), tf.nn.bias_add(x, bias).numpy())
  np.testing.assert_array_equal(tf.cast(dx, tf.float64).numpy(), dy)
  exact = dy.reshape(-1, shape[-1]).sum(0)
  assert dbias.dtype == tf.bfloat16
  assert relative_error(tf.cast(dbias, tf.float64), exact) <= ROUNDING


def keras_twin(layer: dense_lib.Dense) -> keras.layers.Dense:
  twin = keras.layers.Dense.from_config(layer.get_config())
  twin.build((None, layer.kernel.shape[0]))
  twin.set_weights(layer.get_weights())
  return twin


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_dense_matches_keras_forward_and_weights(policy):
  layer = dense_lib.Dense(64, activation="relu", dtype=policy, name="conv1")
  layer.build((None, 32))
  layer.bias.assign(np.linspace(-1, 1, 64).astype(np.float32))
  twin = keras_twin(layer)
  assert [v.path for v in layer.weights] == ["conv1/kernel", "conv1/bias"]
  assert layer.get_config() == twin.get_config()
  x = tf.random.stateless_normal([4, 7, 32], [1, 2])
  for training in (True, False):
    np.testing.assert_array_equal(layer(x, training=training).numpy(),
                                  twin(x, training=training).numpy())


def test_float32_gradients_are_keras_own():
  layer = dense_lib.Dense(48, activation="relu")
  layer.build((None, 24))
  layer.bias.assign(np.linspace(-1, 1, 48).astype(np.float32))
  twin = keras_twin(layer)
  x = tf.random.stateless_normal([5, 24], [3, 4])
  grads = []
  for model in (layer, twin):
    with tf.GradientTape() as tape:
      y = tf.reduce_sum(tf.sin(model(x, training=True)))
    grads.append(tape.gradient(y, model.trainable_variables))
  for ours, theirs in zip(*grads):
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_dense_relu_dense_bias_gradients_in_mixed_bfloat16():
  """Both biases of T2T's feed-forward block against a float64 port of its gradient."""
  keras.utils.set_random_seed(3)
  rows, depth, filters = 2048, 64, 256
  block = DenseReluDense(filters, depth, relu_dropout=0.0, dtype="mixed_bfloat16", name="ffn")
  block.build((None, None, depth))
  block.conv1.bias.assign(np.full(filters, 0.05, np.float32))
  rng = np.random.default_rng(4)
  x = rng.normal(size=(8, rows // 8, depth))
  dy = upstream(rng, rows, depth).reshape(8, rows // 8, depth)
  with tf.GradientTape() as tape:
    y = block(tf.constant(x, tf.float32), training=True)
  grads = dict(zip([v.path for v in block.trainable_variables],
                   tape.gradient(y, block.trainable_variables,
                                 output_gradients=tf.constant(dy, tf.bfloat16))))
  # float64 port, rounding to bfloat16 where the layer's tensors are bfloat16.
  w1, b1 = bf16(block.conv1.kernel.numpy()), bf16(block.conv1.bias.numpy())
  w2 = bf16(block.conv2.kernel.numpy())
  h = bf16(bf16(bf16(x.reshape(rows, depth)) @ w1) + b1)
  dh = bf16(dy.reshape(rows, depth) @ w2.T) * (h > 0)
  assert relative_error(grads["ffn/conv2/bias"], dy.reshape(rows, depth).sum(0)) \
      <= ROUNDING
  # dh's matmul may round differently from NumPy's in a few entries: allow a little more.
  assert relative_error(grads["ffn/conv1/bias"], dh.sum(0)) <= 2 * ROUNDING
