"""Relative self-attention (T2T's `dot_product_relative`): T2T's numbers, cached decoding.

Expectations: `tests/support/t2t_numpy_model.py` (NumPy from T2T's
`_generate_relative_positions_matrix` and `_relative_attention_inner`, reading
T2T's variable names) for the forward pass; the uncached decoder (which re-runs
the full relative attention over the prefix) for cached decoding. Sequences are
longer than `max_relative_position`, so the clipped distances are exercised.
"""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.decoding import seq2seq
from t2t_keras.hparams import HParams, create_decode_hparams, create_hparams
from t2t_keras.model import Transformer
from t2t_keras.t2t_import import importer
from tests.support import near_ties
from tests.support.decode_checks import (assert_batch_equals_alone,
                                         assert_cached_logits_equal_recomputation)
from tests.support.t2t_checkpoint import (BASE, assert_close, random_t2t_tensors,
                                          write_t2t_checkpoint)
from tests.support.t2t_numpy_model import T2TNumpyTransformer
from tests.support.tolerances import SCORE_EPS

MAX = 2  # max_relative_position: far shorter than the sequences below
RELATIVE = {"self_attention_type": "dot_product_relative", "max_relative_position": MAX,
            "pos": None}


def _relative_tensors(hp_t2t, rng):
  """T2T-named tensors of a relative model: `random_t2t_tensors` plus both tables per
  self-attention."""
  tensors = random_t2t_tensors(hp_t2t, 20, 20, rng)
  depth = hp_t2t["hidden_size"] // hp_t2t["num_heads"]
  for name in list(tensors):
    if name.endswith("/self_attention/multihead_attention/q/kernel"):
      scope = name[:-len("q/kernel")] + "dot_product_attention_relative"
      for kind in ("keys", "values"):
        tensors[f"{scope}/relative_positions_{kind}/embeddings"] = rng.normal(
            size=(2 * MAX + 1, depth))
  return tensors


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_t2t_relative_checkpoint_imports_and_equals_numpy(tmp_path, norm):
  hp_t2t = dict(BASE, **RELATIVE)
  if norm == "post":
    hp_t2t.update(layer_preprocess_sequence="none", layer_postprocess_sequence="dan")
  tensors = _relative_tensors(hp_t2t, np.random.default_rng(0))
  assert sum("relative_positions" in n for n in tensors) == 2 * 3  # 2 encoder + 1 decoder layers
  path = write_t2t_checkpoint(str(tmp_path / "model.ckpt"), tensors)
  hp = importer.hparams_from_t2t(hp_t2t)
  assert (hp.self_attention_type, hp.max_relative_position, hp.pos) == (
      "dot_product_relative", MAX, "none")
  model = Transformer(hp, 20, 20, target_space_id=3)
  model.build()
  assert importer.load_t2t_weights(model, path)["assigned"] == len(tensors)
  rng = np.random.default_rng(1)
  inputs = rng.integers(2, 20, size=(2, 7))
  inputs[1, 5:] = 0
  targets = rng.integers(2, 20, size=(2, 6))
  targets[0, 4:] = 0
  got = model({"inputs": inputs, "targets": targets}, training=False).numpy()
  want = T2TNumpyTransformer(path, hp_t2t, 3).logits(inputs, targets)
  assert_close(got, want, rtol=1e-5)
  # The tables matter: without them the same weights give other logits.
  plain = T2TNumpyTransformer(path, dict(hp_t2t, self_attention_type="dot_product"), 3)
  assert np.abs(plain.logits(inputs, targets) - want).max() > 1e-2 * np.abs(want).max()


def test_checkpoint_without_relative_tables_is_refused(tmp_path):
  hp_t2t = dict(BASE, **RELATIVE)
  tensors = random_t2t_tensors(hp_t2t, 20, 20, np.random.default_rng(0))
  path = write_t2t_checkpoint(str(tmp_path / "model.ckpt"), tensors)
  model = Transformer(importer.hparams_from_t2t(hp_t2t), 20, 20)
  model.build()
  with pytest.raises(ValueError, match="relative_positions_keys/embeddings"):
    importer.load_t2t_weights(model, path)


def test_hparams_refuse_relative_without_distance_or_with_unequal_depths():
  with pytest.raises(ValueError, match="max_relative_position must be > 0"):
    HParams(self_attention_type="dot_product_relative", max_relative_position=0)
  with pytest.raises(ValueError, match="equal key and value depths"):
    HParams(self_attention_type="dot_product_relative", max_relative_position=20,
            attention_value_channels=256)
  with pytest.raises(ValueError, match="self_attention_type must be one of"):
    HParams(self_attention_type="dot_product_unmasked_relative_v2")


def _relative_model():
  tf.keras.utils.set_random_seed(1)
  hp = create_hparams("transformer_tiny", "num_hidden_layers=2,self_attention_type="
                      f"dot_product_relative,max_relative_position={MAX},pos=none")
  model = Transformer(hp, 30, target_space_id=2)
  model.build()
  return model


def _inputs(seed, lengths):
  rng = np.random.default_rng(seed)
  rows = [list(rng.integers(2, 30, size=n - 1)) + [1] for n in lengths]
  return np.array([r + [0] * (max(lengths) - len(r)) for r in rows], np.int32)


@pytest.fixture(scope="module")
def model():
  return _relative_model()


@pytest.mark.parametrize("beam", [1, 3])
def test_cached_equals_uncached(model, beam):
  x = tf.constant(_inputs(0, [5, 3, 7]))
  dhp = create_decode_hparams(f"beam_size={beam},extra_length=6")
  fast = seq2seq.make_decode_fn(model, dhp, use_cache=True)(x)
  slow = seq2seq.make_decode_fn(model, dhp, use_cache=False)(x)
  near_ties.assert_decodes_equal_or_near_tie(fast, slow, _margin_of(model, x, dhp),
                                             SCORE_EPS, "cached vs uncached")
  assert fast[0].shape[-1] > MAX + 1  # decoded past the clipping distance


def test_cached_logits_equal_recomputation_each_step(model):
  assert_cached_logits_equal_recomputation(model, _inputs(1, [6, 4]))


@pytest.mark.parametrize("beam", [1, 3])
def test_batch_equals_alone_and_xla_equals_default(model, beam):
  x = _inputs(3, [7, 3, 5])
  dhp = create_decode_hparams(f"beam_size={beam},extra_length=4")
  fn = seq2seq.make_decode_fn(model, dhp)
  margin_of = _margin_of(model, x, dhp)
  assert_batch_equals_alone(fn, x, margin_of)
  xla = seq2seq.make_decode_fn(model, dhp, jit_compile=True)(tf.constant(x))
  near_ties.assert_decodes_equal_or_near_tie(xla, fn(tf.constant(x)), margin_of, SCORE_EPS,
                                             "XLA vs graph")


def _margin_of(model, x, dhp):
  """The near-tie margins (tests/support/near_ties.py) of decoding the rows of `x` with `dhp`."""
  return near_ties.model_margin_of(model, np.asarray(x), dhp.beam_size, dhp.alpha,
                                   dhp.extra_length, model.target_vocab_size)
