"""Dropout with 16-bit draws (t2t_keras/perf/dropout.py) against closed-form expectations."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers.dropout import Dropout
from t2t_keras.perf import dropout as dropout_lib


def test_threshold_is_rate_times_65536_rounded():
  assert dropout_lib.drop_threshold(0.1) == 6554  # 6553.6 rounded
  assert dropout_lib.drop_threshold(0.0) == 0
  assert dropout_lib.drop_threshold(0.5) == 32768
  with pytest.raises(ValueError, match=r"\[0, 1\)"):
    dropout_lib.drop_threshold(1.0)


@pytest.mark.parametrize("rate", [0.1, 0.3])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_drop_fraction_scale_and_zeros(rate, dtype):
  # Exact on every CPU: a kept value is one IEEE multiply in the dtype, as the expectation
  # computes it.
  n = 1 << 20
  x = tf.cast(tf.fill([n // 1024, 1024], 3.0), dtype)
  y = dropout_lib.dropout(x, rate, tf.constant([7, 11])).numpy().astype(np.float64)
  dropped = y == 0.0
  # Binomial(n, p): 6 standard deviations, with p the exact 16-bit drop probability.
  p = dropout_lib.drop_threshold(rate) / 65536
  assert abs(dropped.sum() - n * p) < 6 * np.sqrt(n * p * (1 - p))
  # Even and odd positions come from the two halves of each 32-bit word: both fair.
  flat = dropped.reshape(-1)
  for half in (flat[0::2], flat[1::2]):
    assert abs(half.sum() - half.size * p) < 6 * np.sqrt(half.size * p * (1 - p))
  kept = y[~dropped]
  expected = float(tf.cast(tf.cast(3.0, dtype) * tf.cast(1.0 / (1.0 - rate), dtype), tf.float64))
  np.testing.assert_array_equal(kept, np.full_like(kept, expected))


def test_bfloat16_drop_rate_is_the_rate_asked_for():
  # A bfloat16 uniform draw (7 mantissa bits) below 0.1 happens 13/128 = 0.1016 of the
  # time; 16-bit draws give 6554/65536 = 0.10001. Binomial noise at n = 4M: 1.5e-4.
  n = 1 << 22
  x = tf.ones([n], tf.bfloat16)
  fraction = float(np.mean(dropout_lib.dropout(x, 0.1, tf.constant([1, 2])).numpy() == 0))
  assert abs(fraction - 0.1) < 6 * np.sqrt(0.09 / n)
  assert abs(fraction - 13 / 128) > 0.001


def test_same_seed_same_mask_other_seed_other_mask():
  x = tf.ones([64, 64])
  a = dropout_lib.dropout(x, 0.5, tf.constant([1, 2])).numpy()
  b = dropout_lib.dropout(x, 0.5, tf.constant([1, 2])).numpy()
  c = dropout_lib.dropout(x, 0.5, tf.constant([1, 3])).numpy()
  np.testing.assert_array_equal(a, b)
  assert (a != c).mean() > 0.3  # independent masks differ at half the entries


def test_odd_size_and_noise_shape_broadcast():
  x = tf.ones([3, 5, 7])  # 105 elements: an odd count of 16-bit draws
  y = dropout_lib.dropout(x, 0.5, tf.constant([3, 4])).numpy()
  assert set(np.unique(y)) <= {0.0, 2.0}
  shared = dropout_lib.dropout(x, 0.5, tf.constant([3, 4]), noise_shape=[3, 1, 7]).numpy()
  np.testing.assert_array_equal(shared, np.broadcast_to(shared[:, :1, :], shared.shape))


def test_layer_identity_at_inference_gradient_is_the_mask_and_state_advances():
  layer = Dropout(0.25, seed=5)
  x = tf.random.normal([32, 16])
  np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = layer(x, training=True)
    total = tf.reduce_sum(y)
  grad = tape.gradient(total, x).numpy()
  mask = np.where(y.numpy() == 0, 0.0, 1 / 0.75)
  np.testing.assert_allclose(grad, mask, rtol=1e-6)
  y2 = layer(x, training=True).numpy()
  assert not np.array_equal(y2 == 0, y.numpy() == 0)  # the seed generator moved on


def test_layer_keeps_keras_dropout_config_and_variables():
  ours, theirs = Dropout(0.1, seed=3, name="d"), keras.layers.Dropout(0.1, seed=3, name="d")
  assert ours.get_config() == theirs.get_config()
  assert [v.shape for v in ours.variables] == [v.shape for v in theirs.variables]


def test_replicas_draw_their_own_masks_reproducibly(tmp_path):
  """Two MirroredStrategy replicas fed the same batch (2 logical CPUs): as T2T's towers,
  each draws its own dropout masks, so their training logits differ; built again from
  the same random seed, each replica draws the same masks again. In a graph and with
  XLA, with the speed cases and plain ops."""
  import os
  import subprocess
  import sys
  from tests.support.env import ENV, REPO
  out_path = str(tmp_path / "replica_dropout.npz")
  result = subprocess.run([sys.executable, os.path.join(REPO, "tests", "scripts",
                                                        "replica_dropout.py"), REPO, out_path],
                          env=ENV, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  got = np.load(out_path)
  for case in ("plain0_%s_jit0", "plain0_%s_jit1", "plain1_%s_jit0", "plain1_%s_jit1"):
    first, again = (case % "build0") + "_replica%d", (case % "build1") + "_replica%d"
    # With 30% dropout nearly every logit of the two replicas differs.
    assert np.mean(got[first % 0] != got[first % 1]) > 0.9, case
    for r in range(2):
      np.testing.assert_array_equal(got[first % r], got[again % r])


def test_one_replica_draws_as_before():
  """With one replica the seed is the layer's own (`replica_seed` returns it), so the
  layer's output is `dropout` with the seed generator's next seed, as before replicas
  had their own."""
  seed = tf.constant([3, 5])
  assert dropout_lib.replica_seed(seed) is seed
  one = tf.distribute.OneDeviceStrategy("/cpu:0")
  assert one.run(lambda: dropout_lib.replica_seed(seed) is seed)
  layer = Dropout(0.3, seed=17)
  x = tf.ones([4, 64])
  generator = keras.random.SeedGenerator(17)  # the layer's generator, in the same state
  expected_seed = tf.cast(tf.math.floormod(generator.next(), tf.int32.max - 1), tf.int32)
  np.testing.assert_array_equal(layer(x, training=True).numpy(),
                                dropout_lib.dropout(x, 0.3, expected_seed).numpy())
