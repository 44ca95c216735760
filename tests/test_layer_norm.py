"""The fused layer norm (t2t_keras/perf/layer_norm.py) against NumPy float64.

Forward: T2T's two-pass formula. Gradients: central finite differences of a
random projection of the output, in float64, so neither side borrows from the
closed form under test.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers import layer_norm as ln_lib
from t2t_keras.perf import layer_norm as perf_ln

EPS = 1e-6


def numpy_layer_norm(x, scale, bias, eps=EPS):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * scale + bias


def random_case(rng, shape=(3, 5, 16)):
  x = rng.normal(size=shape) * 2.0 + rng.normal(size=shape[:-1] + (1,))  # per-row offsets
  scale = 1.0 + 0.3 * rng.normal(size=shape[-1])
  bias = 0.3 * rng.normal(size=shape[-1])
  return x, scale, bias


def layer(scale, bias, dtype_policy="float32"):
  """A built LayerNorm whose weights are `scale` and `bias` (float32)."""
  norm = ln_lib.LayerNorm(epsilon=EPS, dtype=dtype_policy)
  norm.build([None, None, scale.shape[0]])
  norm.gamma.assign(scale.astype(np.float32))
  norm.beta.assign(bias.astype(np.float32))
  return norm


@pytest.mark.parametrize("training", [True, False])
def test_forward_is_t2t_formula(training):
  rng = np.random.default_rng(0)
  x, scale, bias = random_case(rng)
  norm = layer(scale, bias)
  y = norm(tf.constant(x, tf.float32), training=training).numpy()
  np.testing.assert_allclose(y, numpy_layer_norm(x, scale, bias), atol=2e-5, rtol=1e-5)


def test_gradients_match_finite_differences():
  rng = np.random.default_rng(1)
  x, scale, bias = random_case(rng, (2, 3, 8))
  w = rng.normal(size=x.shape)  # loss = sum(w * y)

  def loss(x_, scale_, bias_):
    return float((w * numpy_layer_norm(x_, scale_, bias_)).sum())

  def numeric(arg_index):
    args = [x.copy(), scale.copy(), bias.copy()]
    target = args[arg_index]
    out = np.zeros_like(target)
    h = 1e-6
    for i in np.ndindex(target.shape):
      saved = target[i]
      target[i] = saved + h
      up = loss(*args)
      target[i] = saved - h
      down = loss(*args)
      target[i] = saved
      out[i] = (up - down) / (2 * h)
    return out

  xt, st, bt = (tf.constant(a, tf.float32) for a in (x, scale, bias))
  with tf.GradientTape() as tape:
    tape.watch([xt, st, bt])
    y = perf_ln.fused_layer_norm(xt, st, bt, EPS)
    total = tf.reduce_sum(tf.constant(w, tf.float32) * y)
  dx, dscale, dbias = tape.gradient(total, [xt, st, bt])
  np.testing.assert_allclose(dx.numpy(), numeric(0), atol=1e-4, rtol=1e-3)
  np.testing.assert_allclose(dscale.numpy(), numeric(1), atol=1e-4, rtol=1e-3)
  np.testing.assert_allclose(dbias.numpy(), numeric(2), atol=1e-4, rtol=1e-3)


def test_layer_gradients_reach_its_weights_in_a_compiled_step():
  rng = np.random.default_rng(2)
  x, scale, bias = random_case(rng)
  w = rng.normal(size=x.shape)
  norm = layer(scale, bias)

  @tf.function
  def grads(x_):
    with tf.GradientTape() as tape:
      y = norm(x_, training=True)
      total = tf.reduce_sum(tf.constant(w, tf.float32) * y)
    return tape.gradient(total, [norm.gamma, norm.beta])

  dscale, dbias = grads(tf.constant(x, tf.float32))
  mean = x.mean(-1, keepdims=True)
  xhat = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + EPS)
  # y is linear in scale and bias: d/dscale = sum(w * x̂), d/dbias = sum(w), over rows.
  np.testing.assert_allclose(dscale.numpy(), (w * xhat).reshape(-1, 16).sum(0), rtol=1e-4,
                             atol=1e-4)
  np.testing.assert_allclose(dbias.numpy(), w.reshape(-1, 16).sum(0), rtol=1e-5, atol=1e-5)


def test_mixed_bfloat16_keeps_float32_weights_and_bfloat16_output():
  rng = np.random.default_rng(3)
  x, scale, bias = random_case(rng)
  norm = layer(scale, bias, "mixed_bfloat16")
  xb = tf.cast(tf.constant(x, tf.float32), tf.bfloat16)
  with tf.GradientTape() as tape:
    tape.watch(xb)
    y = norm(xb, training=True)
    total = tf.reduce_sum(tf.cast(y, tf.float32))
  dx, dscale = tape.gradient(total, [xb, norm.gamma])
  assert y.dtype == tf.bfloat16 and dx.dtype == tf.bfloat16 and dscale.dtype == tf.float32
  assert norm.gamma.dtype == "float32"
  # Normalized from the bfloat16-rounded input, in float32, then rounded once.
  x_rounded = xb.numpy().astype(np.float64)
  np.testing.assert_allclose(y.numpy().astype(np.float64),
                             numpy_layer_norm(x_rounded, scale.astype(np.float32),
                                              bias.astype(np.float32)),
                             atol=0.02, rtol=0.01)
  # Keras' inference path agrees to bfloat16 rounding.
  np.testing.assert_allclose(norm(xb, training=False).numpy().astype(np.float64),
                             y.numpy().astype(np.float64), atol=0.04, rtol=0.02)


def test_weights_names_and_config_are_keras_layer_norms():
  norm = ln_lib.LayerNorm(epsilon=1e-6, name="layer_norm_0")
  norm.build([None, None, 8])
  plain = keras.layers.LayerNormalization(epsilon=1e-6, name="layer_norm_0")
  plain.build([None, None, 8])
  assert [v.path for v in norm.weights] == [v.path for v in plain.weights]
  config = norm.get_config()
  assert config == plain.get_config()
  assert ln_lib.LayerNorm.from_config(config).epsilon == 1e-6


@pytest.mark.parametrize("kwargs", [dict(axis=1), dict(rms_scaling=True), dict(center=False)])
def test_other_normalizations_are_refused(kwargs):
  with pytest.raises(ValueError, match="last axis with scale and bias"):
    ln_lib.LayerNorm(**kwargs)
