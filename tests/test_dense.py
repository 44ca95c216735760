"""t2t_keras.perf.bias_grad: bias gradients in mixed bfloat16 against NumPy float64 sums.

The expectation is the column sum, in float64, of the bfloat16 gradient that
reaches the bias. `within_bfloat16_rounding` states the error allowed and why;
it holds on every CPU, whichever kernels TensorFlow picks there.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers import dense as dense_lib
from t2t_keras.perf import bias_grad
from t2t_keras.layers.ffn import DenseReluDense

# Unit roundoff of bfloat16 (8 significant bits) and of float32 (24).
U_BF16 = 2.0 ** -8
U_F32 = 2.0 ** -24


def bf16(a) -> np.ndarray:
  """`a` rounded to bfloat16, back in float64."""
  return tf.cast(tf.cast(a, tf.bfloat16), tf.float64).numpy()


def upstream(rng, rows=2048, units=256):
  # A positive mean makes the column sums grow with the rows: the case where a
  # bfloat16 accumulator swamps what it adds.
  return bf16(rng.normal(size=(rows, units)) + 0.5)


def bias_gradient_bound(dy: np.ndarray) -> np.ndarray:
  """Largest error allowed per column for a float32-accumulated, bfloat16-rounded sum.

  Derivation, for a column x_1..x_n of bfloat16 values with exact sum S:
  - Reading bfloat16 into float32 is exact (float32 has every bfloat16 value).
  - Summing n float32 values in any order (sequential, pairwise, or split into
    SIMD lanes of any width, which is how CPUs differ) gives S' with
    |S' - S| <= gamma * sum|x_i|, gamma = (n-1)u32 / (1 - (n-1)u32), u32 = 2^-24
    (Higham, Accuracy and Stability of Numerical Algorithms, section 4.2: the
    bound of recursive summation, which every summation tree satisfies).
  - Rounding S' to bfloat16 to nearest adds at most u * |S'|, u = 2^-8, and
    |S'| <= |S| + |S' - S|.
  So |result - S| <= u |S| + (1 + u) gamma sum|x_i|: one bfloat16 rounding of the
  exact sum plus float32's accumulation error. It holds for any n < 2^24 rows;
  the float32 term stays below a tenth of a bfloat16 rounding while
  n < 2^16 / 10 * |S| / sum|x_i|, about 3,600 rows for the test's gradients
  (|S| / sum|x_i| ~ 0.55) and far more for the 2,048 rows checked here.
  A bfloat16 accumulator breaks it by orders of magnitude, and so does a kernel
  that rounds twice (a whole unit in the last place exceeds u |S|).
  """
  dy = np.asarray(dy, np.float64).reshape(-1, dy.shape[-1])
  n = dy.shape[0]
  gamma = (n - 1) * U_F32 / (1 - (n - 1) * U_F32)
  return U_BF16 * np.abs(dy.sum(0)) + (1 + U_BF16) * gamma * np.abs(dy).sum(0)


def assert_within_bfloat16_rounding(got, dy):
  """`got` [units] is the column sum of dy [..., units] within `bias_gradient_bound`."""
  got = np.asarray(tf.cast(got, tf.float64), np.float64)
  dy = np.asarray(dy, np.float64).reshape(-1, dy.shape[-1])
  err = np.abs(got - dy.sum(0))
  bound = bias_gradient_bound(dy)
  worst = int(np.argmax(err / bound))
  assert np.all(err <= bound), (
      f"column {worst}: error {err[worst]:.4g} > bound {bound[worst]:.4g} "
      f"({err[worst] / (U_BF16 * abs(dy.sum(0)[worst])):.2f} bfloat16 roundings)")


def bfloat16_sequential_sum(dy: np.ndarray) -> np.ndarray:
  """Column sums with a bfloat16 accumulator (each partial sum rounded): NumPy."""
  acc = np.zeros(dy.shape[-1])
  for row in dy.reshape(-1, dy.shape[-1]):
    acc = bf16(acc + row)
  return acc


def test_the_bound_rejects_bfloat16_accumulation_and_double_rounding():
  """The bound is tight enough to fail the kernels it exists to catch."""
  dy = upstream(np.random.default_rng(0), rows=512, units=64)
  exact = dy.sum(0)
  with pytest.raises(AssertionError, match="bfloat16 roundings"):
    assert_within_bfloat16_rounding(bfloat16_sequential_sum(dy), dy)
  # Off by a whole unit in the last place (2 u relative to the binade): too much.
  ulp = 2.0 ** (np.floor(np.log2(np.abs(exact))) - 7)
  with pytest.raises(AssertionError):
    assert_within_bfloat16_rounding(bf16(exact) + ulp, dy)
  assert_within_bfloat16_rounding(bf16(exact), dy)  # correctly rounded: passes


@pytest.mark.parametrize("shape", [(2048, 256), (16, 128, 64), (3, 1)])
def test_bias_add_gradient_is_the_float64_sum(shape):
  # Exact on every CPU: the forward is the same bias add op, and dx is dy itself (identity
  # gradient).
  rng = np.random.default_rng(1)
  dy = upstream(rng, int(np.prod(shape[:-1])), shape[-1]).reshape(shape)
  x = tf.constant(bf16(rng.normal(size=shape)), tf.bfloat16)
  bias = tf.constant(bf16(rng.normal(size=shape[-1])), tf.bfloat16)
  with tf.GradientTape() as tape:
    tape.watch([x, bias])
    y = bias_grad.bias_add(x, bias)
  dx, dbias = tape.gradient(y, [x, bias], output_gradients=tf.constant(dy, tf.bfloat16))
  np.testing.assert_array_equal(y.numpy(), tf.nn.bias_add(x, bias).numpy())
  np.testing.assert_array_equal(tf.cast(dx, tf.float64).numpy(), dy)
  assert dbias.dtype == tf.bfloat16 and dbias.shape == (shape[-1],)
  assert_within_bfloat16_rounding(dbias, dy)


def test_bias_gradient_of_many_rows_stays_within_the_bound():
  # 16,384 rows: a bfloat16 accumulator would stop growing near 2^8 times its addends.
  dy = upstream(np.random.default_rng(5), rows=16384, units=32)
  assert_within_bfloat16_rounding(bias_grad.bias_gradient(tf.constant(dy, tf.bfloat16)), dy)


def keras_twin(layer: dense_lib.Dense) -> keras.layers.Dense:
  twin = keras.layers.Dense.from_config(layer.get_config())
  twin.build((None, layer.kernel.shape[0]))
  twin.set_weights(layer.get_weights())
  return twin


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_dense_matches_keras_forward_and_weights(policy):
  # Exact on every CPU: the same matmul op on the same inputs; the bias add is a correctly
  # rounded elementwise op.
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
  # Exact on every CPU: the float32 path is keras.layers.Dense's own call.
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
  assert_within_bfloat16_rounding(grads["ffn/conv2/bias"], dy)
  # dh comes out of a bfloat16 matmul, whose entries may differ from NumPy's correctly
  # rounded ones by up to one bfloat16 unit in the last place (kernels differ by CPU:
  # Eigen's rounds twice), i.e. by 2 u |dh_i|: allow 2 u sum|dh_i| more per column.
  dh = dh.reshape(rows, filters)
  slack = np.abs(np.asarray(tf.cast(grads["ffn/conv1/bias"], tf.float64)) - dh.sum(0)) - \
      bias_gradient_bound(dh)
  assert np.all(slack <= 2 * U_BF16 * np.abs(dh).sum(0)), slack.max()
