"""Dropout masks shared along T2T's broadcast dims (`*_dropout_broadcast_dims`).

T2T's `common_layers.dropout_with_broadcast_dims` draws the keep/drop mask with
size 1 on the broadcast dims, so the mask is constant along them and each kept
element is still scaled by 1 / (1 - rate). Checked on both dropout paths (16-bit
draws and, with T2T_KERAS_PLAIN_OPS=1, TensorFlow's stateless_dropout), then
through the layers the hparams configure.
"""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import hparams as hp_lib
from t2t_keras.layers.dropout import Dropout, noise_shape
from t2t_keras.layers.transformer_layers import DecoderLayer, EncoderLayer

TINY = "hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1"


@pytest.fixture(params=["fast", "plain"])
def dropout_path(request, monkeypatch):
  monkeypatch.setenv("T2T_KERAS_PLAIN_OPS", "1" if request.param == "plain" else "0")
  return request.param


def _constant_along(y: np.ndarray, dims) -> bool:
  """Whether `y` equals its first slice along every dim of `dims`."""
  return all(np.array_equal(y, np.broadcast_to(np.take(y, [0], axis=d), y.shape))
             for d in dims)


def test_noise_shape_has_one_on_the_broadcast_dims():
  assert noise_shape((), 3) is None
  assert noise_shape((1,), 3) == (None, 1, None)
  assert noise_shape((0, 1), 4) == (1, 1, None, None)
  assert noise_shape((-1,), 3) == (None, None, 1)  # T2T: negative dims count from the end


@pytest.mark.parametrize("shape, dims", [((64, 16, 128), (1,)), ((8, 4, 32, 64), (0, 1)),
                                         ((64, 16, 128), (-1,))])
def test_mask_is_constant_along_broadcast_dims_and_keeps_the_mean(dropout_path, shape, dims):
  rate = 0.3
  layer = Dropout(rate, noise_shape=noise_shape(dims, len(shape)), seed=4)
  y = layer(tf.ones(shape), training=True).numpy().astype(np.float64)
  shared = [d % len(shape) for d in dims]
  assert _constant_along(y, shared)
  others = [d for d in range(len(shape)) if d not in shared]
  # ...and independent elsewhere: a mask constant along another dim would be a bug.
  assert not any(_constant_along(y, [d]) for d in others)
  # Kept entries are scaled by 1 / (1 - rate); dropped ones are 0.
  kept = y[y != 0]
  np.testing.assert_allclose(kept, np.float32(1 / (1 - rate)), rtol=1e-6)
  # E[y] = 1: the mean over the n independent mask entries, within 6 standard
  # deviations (each entry has variance rate / (1 - rate)).
  n = y.size // np.prod([shape[d] for d in shared])
  assert abs(y.mean() - 1.0) < 6 * np.sqrt(rate / (1 - rate) / n)


def _hparams(**dims):
  return hp_lib.create_hparams("transformer_tiny", TINY).replace(
      attention_dropout=0.5, relu_dropout=0.5, layer_prepostprocess_dropout=0.5, **dims)


def _mask(dropout_layer, shape):
  return dropout_layer(tf.ones(shape), training=True).numpy()


def test_hparams_shape_the_masks_of_each_sublayer(dropout_path):
  hp = _hparams(attention_dropout_broadcast_dims="0,1", relu_dropout_broadcast_dims="1",
                layer_prepostprocess_dropout_broadcast_dims="1")
  layer = DecoderLayer(hp)
  layer.build((3, 5, 16))
  # T2T: attention weights [batch, heads, q, kv] share over batch and heads...
  assert _constant_along(_mask(layer.encdec_attention.dropout, (4, 2, 6, 7)), (0, 1))
  assert _constant_along(_mask(layer.self_attention.dropout, (4, 2, 6, 7)), (0, 1))
  # ...the FFN hidden [batch, length, filter] and the residual blocks over length.
  assert _constant_along(_mask(layer.ffn.dropout, (4, 9, 32)), (1,))
  for prepost in (layer.post, layer.encdec_post, layer.ffn_post):
    assert _constant_along(_mask(prepost.dropout, (4, 9, 16)), (1,))
  # Without broadcast dims no mask is shared (the default, T2T's "").
  plain = DecoderLayer(_hparams())
  plain.build((3, 5, 16))
  assert not _constant_along(_mask(plain.encdec_attention.dropout, (4, 2, 6, 7)), (0,))
  assert not _constant_along(_mask(plain.ffn.dropout, (4, 9, 32)), (1,))
  assert not _constant_along(_mask(plain.post.dropout, (4, 9, 16)), (1,))


def test_relative_self_attention_ignores_attention_broadcast_dims():
  # T2T's dot_product_attention_relative drops its weights with an unshared mask.
  hp = _hparams(attention_dropout_broadcast_dims="0,1",
                self_attention_type="dot_product_relative", max_relative_position=4)
  layer = EncoderLayer(hp)
  layer.build((3, 5, 16))
  assert not _constant_along(_mask(layer.self_attention.dropout, (4, 2, 6, 6)), (0,))
  decoder = DecoderLayer(hp)
  decoder.build((3, 5, 16))
  assert _constant_along(_mask(decoder.encdec_attention.dropout, (4, 2, 6, 7)), (0, 1))


def test_layers_round_trip_their_broadcast_dims_in_config():
  hp = _hparams(attention_dropout_broadcast_dims="1,0", relu_dropout_broadcast_dims="-2",
                layer_prepostprocess_dropout_broadcast_dims="1")
  layer = DecoderLayer(hp)
  layer.build((3, 5, 16))
  assert layer.self_attention.get_config()["attention_dropout_broadcast_dims"] == (0, 1)
  assert layer.ffn.get_config()["relu_dropout_broadcast_dims"] == (1,)
  assert layer.post.get_config()["broadcast_dims"] == (1,)
  rebuilt = type(layer.ffn).from_config(layer.ffn.get_config())
  rebuilt.build((3, 5, 16))
  assert rebuilt.dropout.noise_shape == (None, 1, None)


def test_tpu_set_trains_with_shared_masks():
  from t2t_keras.rundir.settings import ModelSpec
  from t2t_keras.training.trainer import Trainer, create_strategy
  from tests.support.step_utils import batches, one_step
  hp = hp_lib.create_hparams("transformer_tpu", TINY + ",batch_size=64")
  assert (hp.attention_dropout_broadcast_dims, hp.relu_dropout_broadcast_dims,
          hp.layer_prepostprocess_dropout_broadcast_dims) == ("0,1", "1", "1")
  tf.keras.utils.set_random_seed(0)
  trainer = Trainer(hp, ModelSpec(40, 40, 3), create_strategy("one_device"), train_steps=10)
  before = [v.numpy() for v in trainer.model.trainable_weights]
  one_step(trainer, batches(1, seed=0))
  after = [v.numpy() for v in trainer.model.trainable_weights]
  assert all(np.isfinite(w).all() for w in after)
  assert any(not np.array_equal(a, b) for a, b in zip(before, after))
