"""Layers against closed-form formulas and brute-force NumPy."""

import math

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.hparams import create_hparams
from t2t_keras.layers import attention, embedding, ffn
from t2t_keras.layers import transformer_layers as tl
from t2t_keras.layers.initializers import get_variable_initializer


def _concat_formula(length, channels, min_ts=1.0, max_ts=1e4):
  # T2T: channel i < d/2 is sin(p * min * (max/min)^(-i/(d/2-1))), then the cos half.
  half = channels // 2
  out = np.zeros((length, channels))
  for p in range(length):
    for i in range(half):
      inv = min_ts * (max_ts / min_ts) ** (-i / max(half - 1, 1))
      out[p, i] = math.sin(p * inv)
      out[p, half + i] = math.cos(p * inv)
  return out


def _interleaved_formula(length, channels):
  # The paper: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(same).
  out = np.zeros((length, channels))
  for p in range(length):
    for i in range(0, channels - channels % 2, 2):
      out[p, i] = math.sin(p / 10000 ** (i / channels))
      out[p, i + 1] = math.cos(p / 10000 ** (i / channels))
  return out


@pytest.mark.parametrize("channels", [8, 64, 7])
def test_timing_signal_concat_matches_formula(channels):
  got = embedding.get_timing_signal_1d(50, channels).numpy()[0]
  np.testing.assert_allclose(got, _concat_formula(50, channels), atol=2e-5)


@pytest.mark.parametrize("channels", [8, 64])
def test_timing_signal_interleaved_matches_paper(channels):
  got = embedding.get_timing_signal_1d(50, channels, layout="interleaved").numpy()[0]
  np.testing.assert_allclose(got, _interleaved_formula(50, channels), atol=2e-5)


def test_timing_signal_start_index_is_a_slice():
  full = embedding.get_timing_signal_1d(20, 16).numpy()[0]
  part = embedding.get_timing_signal_1d(3, 16, start_index=7).numpy()[0]
  np.testing.assert_allclose(part, full[7:10], atol=1e-6)


def test_biases():
  pad = tf.constant([[0., 0., 1.], [0., 1., 1.]])
  bias = attention.attention_bias_ignore_padding(pad).numpy()
  assert bias.shape == (2, 1, 1, 3)
  np.testing.assert_array_equal(bias[:, 0, 0], [[0, 0, -1e9], [0, -1e9, -1e9]])
  tri = attention.attention_bias_lower_triangle(3).numpy()[0, 0]
  np.testing.assert_array_equal(tri, [[0, -1e9, -1e9], [0, 0, -1e9], [0, 0, 0]])
  assert attention.large_compatible_negative(tf.float16) == float(np.finfo(np.float16).min)


def _numpy_attention(layer, q_in, m_in, bias):
  wq, wk, wv, wo = (np.asarray(l.kernel) for l in
                    (layer.q, layer.k, layer.v, layer.output_transform))
  h = layer.num_heads

  def split(x):
    b, n, d = x.shape
    return x.reshape(b, n, h, d // h).transpose(0, 2, 1, 3)

  q, k, v = split(q_in @ wq), split(m_in @ wk), split(m_in @ wv)
  q = q * (layer.key_channels // h) ** -0.5
  logits = q @ k.transpose(0, 1, 3, 2) + bias
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  out = (w @ v).transpose(0, 2, 1, 3)
  out = out.reshape(out.shape[0], out.shape[1], -1)
  return out @ wo


def test_multihead_attention_matches_numpy_with_separate_depths():
  rng = np.random.default_rng(0)
  layer = attention.MultiHeadAttention(key_channels=12, value_channels=8, output_depth=10,
                                       num_heads=4)
  q_in = rng.normal(size=(2, 5, 10)).astype(np.float32)
  m_in = rng.normal(size=(2, 3, 10)).astype(np.float32)
  pad = np.array([[0, 0, 1], [0, 0, 0]], np.float32)
  bias = attention.attention_bias_ignore_padding(tf.constant(pad))
  got = layer(q_in, m_in, bias=bias).numpy()
  assert not any("bias" in w.name for w in layer.weights)  # T2T: no projection biases.
  want = _numpy_attention(layer, q_in, m_in, bias.numpy())
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_beams_sharing_one_memory_equal_numpy_on_tiled_memory():
  # Decoding memory (encoder-decoder keys/values) at one row per item and 3 query
  # rows (beams) per item: each beam must see exactly its own item's memory.
  rng = np.random.default_rng(4)
  layer = attention.MultiHeadAttention(key_channels=12, value_channels=8, output_depth=10,
                                       num_heads=4)
  items, beams = 2, 3
  q_in = rng.normal(size=(items * beams, 1, 10)).astype(np.float32)
  m_in = rng.normal(size=(items, 4, 10)).astype(np.float32)
  pad = np.array([[0, 0, 0, 1], [0, 0, 0, 0]], np.float32)
  bias = attention.attention_bias_ignore_padding(tf.constant(pad))
  layer(q_in, np.repeat(m_in, beams, axis=0))  # builds
  got = layer.attend(q_in, layer.compute_memory_kv(m_in), bias)
  want = _numpy_attention(layer, q_in, np.repeat(m_in, beams, axis=0),
                          np.repeat(bias.numpy(), beams, axis=0))
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


def test_write_position_changes_only_that_position():
  rng = np.random.default_rng(5)
  buffer = rng.normal(size=(3, 2, 6, 4)).astype(np.float32)
  step = rng.normal(size=(3, 2, 1, 4)).astype(np.float32)
  for index in (0, 3, 5):
    want = buffer.copy()
    want[:, :, index] = step[:, :, 0]
    got = attention.write_position(tf.constant(buffer), tf.constant(step), index)
    np.testing.assert_array_equal(got.numpy(), want)


def test_write_position_of_beams_sharing_a_buffer():
  # 2 items x 3 beams share 2 buffers of 4 steps * 3 slots: beam g of an item
  # writes step i at position i * 3 + g.
  rng = np.random.default_rng(6)
  items, beams, steps = 2, 3, 4
  buffer = rng.normal(size=(items, 2, steps * beams, 5)).astype(np.float32)
  step = rng.normal(size=(items * beams, 2, 1, 5)).astype(np.float32)
  for index in (0, 2, 3):
    want = buffer.copy()
    for row in range(items * beams):
      want[row // beams, :, index * beams + row % beams] = step[row, :, 0]
    got = attention.write_position(tf.constant(buffer), tf.constant(step), index)
    np.testing.assert_array_equal(got.numpy(), want)


def _bf16(a):
  """`a` rounded to bfloat16 (to nearest even), as float64."""
  return tf.cast(tf.cast(a, tf.bfloat16), tf.float64).numpy()


def _matmul_bound(a, b, rounding):
  """Error allowed for a @ b computed from float32-exact products, accumulated in float32
  in any order (Higham: gamma_K * sum|a_i b_i|), then rounded to the result's precision
  with relative error `rounding` in all (2^-24 float32; 2^-8 a bfloat16 rounding)."""
  k = a.shape[-1]
  gamma = (k - 1) * 2.0 ** -24 / (1 - (k - 1) * 2.0 ** -24)
  exact = a @ b
  return rounding * np.abs(exact) + (1 + rounding) * gamma * (np.abs(a) @ np.abs(b))


@pytest.mark.parametrize("policy,hidden", [("float32", 8), ("float32", 520),
                                           ("mixed_bfloat16", 8)])
def test_tied_logits_gradients_match_closed_form(policy, hidden):
  """logits = x·Wᵀ, so for loss = sum(logits * c): dx = c·W and dW = cᵀ·x: in float32
  up to depth 512 through the swapped table gradient, else TensorFlow's.

  Each within a derived bound that holds for any CPU's kernels: under mixed bfloat16
  the matmuls see c (the cast's gradient), W and x rounded to bfloat16, whose
  products are exact in float32; the reference is computed from those same rounded
  operands, the float32 accumulation in any order is within gamma_K * sum|a_i b_i|,
  and the result is rounded to bfloat16 once by oneDNN, twice by Eigen's fallback
  on AVX2-only CPUs (2 u allowed). In float32 nothing is rounded before the matmul.
  """
  tf.keras.utils.set_random_seed(4)
  mod = embedding.SymbolModality(37, hidden, dtype=policy)
  mod.build()
  rng = np.random.default_rng(4)
  x = rng.normal(size=(3, 5, hidden)).astype(np.float32)
  c = rng.normal(size=(3, 5, 37)).astype(np.float32)
  x_var = tf.Variable(x)

  @tf.function
  def grads():
    with tf.GradientTape() as tape:
      logits = mod.logits(tf.cast(x_var, mod.compute_dtype))
      loss = tf.reduce_sum(tf.cast(logits, tf.float32) * c)
    return tape.gradient(loss, [x_var, mod.weights_var])

  dx, dw = (g.numpy() for g in grads())
  table = np.asarray(mod.weights_var, np.float64)
  if policy == "float32":
    ops, u = (lambda a: np.asarray(a, np.float64)), 2.0 ** -24
  else:
    ops, u = _bf16, 2.0 ** -8 * 2  # up to two bfloat16 roundings
  c_, w_, x_ = ops(c).reshape(15, 37), ops(table), ops(x).reshape(15, hidden)
  want_dx, dx_bound = c_ @ w_, _matmul_bound(c_, w_, u)
  want_dw, dw_bound = c_.T @ x_, _matmul_bound(c_.T, x_, u)
  assert (np.abs(dx.reshape(15, hidden) - want_dx) <= dx_bound).all()
  assert (np.abs(dw - want_dw) <= dw_bound).all()
  # The bound is far below a wrong gradient's error (e.g. the transposed table's).
  assert np.abs(want_dx).mean() > 20 * dx_bound.mean()


def test_symbol_modality_scaling_padding_and_tied_logits():
  mod = embedding.SymbolModality(11, 6)
  mod.build()
  table = np.asarray(mod.weights_var)
  ids = np.array([[3, 0, 5]])
  emb = mod.embed(ids).numpy()
  np.testing.assert_allclose(emb[0, 0], table[3] * math.sqrt(6), rtol=1e-6)
  np.testing.assert_array_equal(emb[0, 1], 0.0)  # PAD row zeroed
  x = np.random.default_rng(1).normal(size=(1, 2, 6)).astype(np.float32)
  np.testing.assert_allclose(mod.logits(x).numpy(), x @ table.T, rtol=1e-5, atol=1e-5)
  # N(0, d^-0.5) init: the std of a big table is close to 6^-0.5.
  big = embedding.SymbolModality(4000, 64)
  big.build()
  assert abs(np.std(np.asarray(big.weights_var)) - 64 ** -0.5) < 0.005


def test_prepostprocess_sequences():
  x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
  prev = np.ones_like(x)
  post = ffn.LayerPrepostprocess("dan", dropout=0.0, epsilon=1e-6)
  got = post(prev, x).numpy()
  s = x + prev
  want = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-6)
  np.testing.assert_allclose(got, want, atol=1e-5)
  np.testing.assert_array_equal(ffn.LayerPrepostprocess("none")(prev, x), x)
  np.testing.assert_allclose(ffn.LayerPrepostprocess("da")(prev, x).numpy(), x + prev)
  with pytest.raises(ValueError, match="adnz"):
    ffn.LayerPrepostprocess("nq")


def test_dense_relu_dense_matches_numpy():
  x = np.random.default_rng(3).normal(size=(2, 3, 4)).astype(np.float32)
  layer = ffn.DenseReluDense(8, 4, relu_dropout=0.5)
  got = layer(x, training=False).numpy()
  w1, b1 = (np.asarray(v) for v in layer.conv1.weights)
  w2, b2 = (np.asarray(v) for v in layer.conv2.weights)
  np.testing.assert_allclose(got, np.maximum(x @ w1 + b1, 0) @ w2 + b2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda: attention.MultiHeadAttention(8, 16, 8, 2, 0.1, name="att"),
    lambda: ffn.DenseReluDense(16, 8, 0.2, name="ffn"),
    lambda: ffn.LayerPrepostprocess("nda", 0.3, 1e-6),
    lambda: embedding.SymbolModality(20, 8, "none", with_softmax=False),
    lambda: embedding.PositionEmbedding("emb", 64, 1.0, 1e4),
])
def test_get_config_round_trips(make):
  layer = make()
  clone = type(layer).from_config(layer.get_config())
  assert clone.get_config() == layer.get_config()


def test_stack_layers_round_trip_config():
  hp = create_hparams("transformer_tiny", "pos=emb,num_heads=2")
  for cls in (tl.EncoderLayer, tl.DecoderLayer, tl.TransformerEncoder, tl.TransformerDecoder):
    layer = cls(hp, name="x")
    clone = cls.from_config(layer.get_config())
    assert clone.hparams == hp and clone.get_config() == layer.get_config()


def test_stacks_rebuilt_from_their_config_compute_the_same_outputs():
  hp = create_hparams("transformer_tiny", "num_heads=2")
  x = tf.random.stateless_normal([2, 5, hp.hidden_size], seed=[1, 2])
  bias = tf.zeros([2, 1, 1, 5])
  # Without encoder-decoder attention: a clone that lost `encdec` has other variables.
  for layer, args in ((tl.TransformerEncoder(hp, name="enc"), (bias,)),
                      (tl.TransformerDecoder(hp, encdec=False, name="dec"), (None, bias, None))):
    layer.build(x.shape)
    clone = type(layer).from_config(layer.get_config())
    clone.build(x.shape)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(clone(x, *args, training=False).numpy(),
                                  layer(x, *args, training=False).numpy())


# T2T's initializers (`utils/optimize.py:get_variable_initializer`) on a kernel
# large enough for sample moments: fan_in 300, fan_out 500, fan_avg 400.
KERNEL = (300, 500)
FAN_AVG = (KERNEL[0] + KERNEL[1]) / 2


def _kernel(name, gain):
  return np.asarray(get_variable_initializer(name, gain, seed=7)(KERNEL, "float32"), np.float64)


@pytest.mark.parametrize("gain", [1.0, 2.0])
def test_uniform_unit_scaling_is_variance_scaling_fan_avg_uniform(gain):
  w = _kernel("uniform_unit_scaling", gain)
  limit = math.sqrt(3.0 * gain / FAN_AVG)  # U(-l, l) has variance l^2 / 3 = gain / fan_avg.
  assert np.abs(w).max() <= limit and np.abs(w).max() > 0.99 * limit
  assert w.var() == pytest.approx(gain / FAN_AVG, rel=0.02)
  assert abs(w.mean()) < 0.01 * limit


@pytest.mark.parametrize("gain", [1.0, 3.0])
def test_normal_unit_scaling_is_truncated_normal_fan_avg(gain):
  w = _kernel("normal_unit_scaling", gain)
  # TF1's variance_scaling(distribution="normal") truncates at 2 sigma, sigma chosen
  # so that the truncated variance is gain / fan_avg (0.8796... = its std for sigma 1).
  sigma = math.sqrt(gain / FAN_AVG) / 0.87962566103423978
  assert w.var() == pytest.approx(gain / FAN_AVG, rel=0.02)
  assert np.abs(w).max() <= 2 * sigma * 1.0001 and np.abs(w).max() > 1.95 * sigma


@pytest.mark.parametrize("gain", [1.0, 2.0])
def test_uniform_is_plus_minus_a_tenth_of_gain(gain):
  w = _kernel("uniform", gain)
  assert np.abs(w).max() <= 0.1 * gain and np.abs(w).max() > 0.099 * gain
  assert w.var() == pytest.approx((0.1 * gain) ** 2 / 3, rel=0.02)


@pytest.mark.parametrize("gain", [1.0, 2.0])
def test_orthogonal_rows_are_orthogonal_with_norm_gain(gain):
  w = _kernel("orthogonal", gain)  # 300 x 500: the 300 rows are orthogonal.
  np.testing.assert_allclose(w @ w.T, gain ** 2 * np.eye(KERNEL[0]), atol=1e-4 * gain ** 2)


def test_xavier_ignores_gain():
  w = _kernel("xavier", 5.0)
  limit = math.sqrt(6.0 / (KERNEL[0] + KERNEL[1]))
  assert np.abs(w).max() <= limit and w.var() == pytest.approx(1.0 / FAN_AVG, rel=0.02)


def test_unknown_initializer_is_refused():
  with pytest.raises(ValueError, match="'glorot'.*uniform_unit_scaling"):
    get_variable_initializer("glorot")
  with pytest.raises(ValueError, match="initializer.*'he_normal'"):
    attention.MultiHeadAttention(8, 8, 8, 2, initializer="he_normal")
  with pytest.raises(ValueError, match="hparams.initializer.*'he_normal'.*normal_unit_scaling"):
    create_hparams("transformer_tiny", "initializer=he_normal")


def test_layers_apply_initializer_to_kernels_only():
  att = attention.MultiHeadAttention(64, 64, 64, 4, initializer="uniform", initializer_gain=3.0)
  att.build((None, None, 64))
  dense = ffn.DenseReluDense(128, 64, initializer="uniform", initializer_gain=3.0)
  dense.build((None, None, 64))
  for kernel in [att.q.kernel, att.k.kernel, att.v.kernel, att.output_transform.kernel,
                 dense.conv1.kernel, dense.conv2.kernel]:
    values = np.abs(kernel.numpy())
    assert values.max() <= 0.3 and values.max() > 0.29, kernel.path
  assert not np.any(dense.conv1.bias.numpy()) and not np.any(dense.conv2.bias.numpy())
  clone = ffn.DenseReluDense.from_config(dense.get_config())
  assert (clone.initializer, clone.initializer_gain) == ("uniform", 3.0)
  clone = attention.MultiHeadAttention.from_config(att.get_config())
  assert (clone.initializer, clone.initializer_gain) == ("uniform", 3.0)
