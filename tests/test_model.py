"""Transformer invariants: causality, padding, parameter counts, config round trip."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.hparams import create_hparams
from t2t_keras.model import Transformer

NO_DROPOUT = "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0"


def _model(overrides="", vocab=40, set_name="transformer_tiny", seed=0, **kwargs):
  tf.keras.utils.set_random_seed(seed)
  hp = create_hparams(set_name, ",".join(x for x in (NO_DROPOUT, overrides) if x))
  model = Transformer(hp, vocab, target_space_id=3, **kwargs)
  model.build()
  return model


def _batch(rng, vocab, batch=3, in_len=7, tgt_len=6):
  inputs = rng.integers(2, vocab, size=(batch, in_len))
  targets = rng.integers(2, vocab, size=(batch, tgt_len))
  return inputs, targets


@pytest.mark.parametrize("overrides", ["", "pos=timing_paper,layer_preprocess_sequence=none,"
                                       "layer_postprocess_sequence=dan", "pos=emb"])
def test_causality(overrides):
  model = _model(overrides)
  rng = np.random.default_rng(0)
  inputs, targets = _batch(rng, 40)
  base = model({"inputs": inputs, "targets": targets}).numpy()
  for j in range(targets.shape[1] - 1):
    changed = targets.copy()
    changed[:, j] = (changed[:, j] + 1 - 2) % 38 + 2  # another non-pad id
    out = model({"inputs": inputs, "targets": changed}).numpy()
    # Target j feeds position j+1 (shift right): positions <= j cannot see it.
    np.testing.assert_allclose(out[:, :j + 1], base[:, :j + 1], atol=1e-5)
    assert np.abs(out[:, j + 1] - base[:, j + 1]).max() > 1e-4


def test_padding_inputs_does_not_change_logits():
  model = _model()
  rng = np.random.default_rng(1)
  inputs, targets = _batch(rng, 40)
  inputs[1, 5:] = 0  # a shorter sentence in the batch
  base = model({"inputs": inputs, "targets": targets}).numpy()
  padded = np.pad(inputs, [[0, 0], [0, 9]])
  out = model({"inputs": padded, "targets": targets}).numpy()
  np.testing.assert_allclose(out, base, atol=1e-5)
  # A real token in place of the padding does change the logits of that row.
  other = inputs.copy()
  other[1, 5] = 7
  assert np.abs(model({"inputs": other, "targets": targets}).numpy()[1] - base[1]).max() > 1e-4


def _closed_form_params(vocab, d, f, layers, shared=True, target_space=True):
  ln = 2 * d
  enc_layer = 4 * d * d + 2 * d * f + f + d + 2 * ln
  dec_layer = 8 * d * d + 2 * d * f + f + d + 3 * ln
  embeddings = vocab * d if shared else 3 * vocab * d
  return (embeddings + layers * (enc_layer + dec_layer) + 2 * ln
          + (32 * d if target_space else 0))


@pytest.mark.parametrize("set_name, paper_millions", [("transformer_base", 65),
                                                      ("transformer_big", 213)])
def test_parameter_count_matches_closed_form_and_paper(set_name, paper_millions):
  hp = create_hparams(set_name)
  model = Transformer(hp, 37000)
  model.build()
  want = _closed_form_params(37000, hp.hidden_size, hp.filter_size, 6)
  assert model.count_params() == want
  assert abs(want / 1e6 - paper_millions) / paper_millions < 0.05
  print(set_name, want)


@pytest.mark.parametrize("overrides, d, f, layers", [
    ("num_heads=1", 512, 2048, 6),                                   # Table 3 (A)
    ("num_heads=32", 512, 2048, 6),
    ("num_heads=8,attention_key_channels=128", 512, 2048, 6),       # (B) d_k = 16
    ("num_hidden_layers=2", 512, 2048, 2),                          # (C)
    ("hidden_size=256,num_heads=8", 256, 2048, 6),
    ("filter_size=4096", 512, 4096, 6),
    ("layer_prepostprocess_dropout=0.2,label_smoothing=0.0", 512, 2048, 6),  # (D)
])
def test_table3_ablations_as_overrides(overrides, d, f, layers):
  hp = create_hparams("transformer_base", overrides)
  model = Transformer(hp, 100)
  model.build()
  want = _closed_form_params(100, d, f, layers)
  if hp.attention_key_channels:  # q and k projections shrink to key_channels.
    want -= layers * 3 * 2 * d * (d - hp.attention_key_channels)
  assert model.count_params() == want


def test_learned_positions_add_a_table():  # Table 3 (E)
  hp = create_hparams("transformer_tiny", "pos=emb")
  model = Transformer(hp, 50)
  model.build()
  base = _closed_form_params(50, 128, 512, 2)
  assert model.count_params() == base + 2 * hp.max_length * 128


def test_unshared_embeddings():
  hp = create_hparams("transformer_tiny", "shared_embedding_and_softmax_weights=false")
  model = Transformer(hp, 50, 60)
  model.build()
  want = _closed_form_params(50, 128, 512, 2) - 50 * 128 + 50 * 128 + 2 * 60 * 128
  assert model.count_params() == want
  with pytest.raises(ValueError, match="shared_embedding_and_softmax_weights"):
    Transformer(create_hparams("transformer_tiny"), 50, 60)


def test_model_config_round_trip_and_weights():
  model = _model("pos=emb")
  clone = Transformer.from_config(model.get_config())
  clone.build()
  clone.set_weights(model.get_weights())
  rng = np.random.default_rng(3)
  inputs, targets = _batch(rng, 40)
  feats = {"inputs": inputs, "targets": targets}
  np.testing.assert_allclose(clone(feats).numpy(), model(feats).numpy(), atol=1e-6)
  assert clone.get_config() == model.get_config()


def test_dropout_only_in_training():
  hp = create_hparams("transformer_tiny")  # dropout 0.1
  model = Transformer(hp, 40)
  model.build()
  rng = np.random.default_rng(4)
  inputs, targets = _batch(rng, 40)
  feats = {"inputs": inputs, "targets": targets}
  np.testing.assert_array_equal(model(feats, training=False).numpy(),
                                model(feats, training=False).numpy())
  assert np.abs(model(feats, training=True).numpy() -
                model(feats, training=False).numpy()).max() > 1e-3


def test_incremental_decoding_equals_full_forward():
  model = _model()
  rng = np.random.default_rng(5)
  inputs, targets = _batch(rng, 40, tgt_len=5)
  full = model({"inputs": inputs, "targets": targets}).numpy()
  enc, bias = model.encode(inputs)
  state = model.init_decoding_state(enc, bias, decode_length=5)
  ids = np.zeros(3, np.int32)
  for i in range(5):
    logits, state = model.decode_step(ids, i, state)
    np.testing.assert_allclose(logits.numpy(), full[:, i], atol=1e-5)
    ids = targets[:, i]


def test_mixed_bfloat16_gives_float32_logits_close_to_float32():
  from keras import mixed_precision
  model32 = _model()
  rng = np.random.default_rng(6)
  inputs, targets = _batch(rng, 40)
  feats = {"inputs": inputs, "targets": targets}
  want = model32(feats).numpy()
  mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model16 = Transformer(model32.hparams, 40, target_space_id=3)
    model16.build()
    model16.set_weights(model32.get_weights())
    got = model16(feats)
  finally:
    mixed_precision.set_global_policy("float32")
  assert got.dtype == tf.float32
  assert np.abs(got.numpy() - want).max() < 0.15 * np.abs(want).max()


def test_initializer_hparams_reach_dense_kernels_not_embeddings_or_norms():
  """T2T's scope initializer: dense kernels and the target-space embedding; the shared
  embedding keeps N(0, d^-0.5), LayerNorm ones/zeros, biases zeros; names unchanged."""
  model = _model("initializer=uniform,initializer_gain=3.0,layer_preprocess_sequence=n,"
                 "layer_postprocess_sequence=da", name="t")
  names = [v.path for v in model.weights]
  assert names == [v.path for v in _model("layer_preprocess_sequence=n,"
                                          "layer_postprocess_sequence=da", name="t").weights]
  kinds = set()
  for v in model.weights:
    w = v.numpy()
    if v.path.endswith("kernel") or "target_space_embedding" in v.path:
      assert np.abs(w).max() <= 0.3 and np.abs(w).max() > 0.29, v.path  # U(-0.1g, 0.1g)
      kinds.add("initialized")
    elif v.path.endswith(("gamma", "beta", "bias")):
      np.testing.assert_array_equal(w, 1.0 if v.path.endswith("gamma") else 0.0)
      kinds.add(v.path.rsplit("/", 1)[1])
    else:
      assert v.path.endswith("shared/weights"), v.path
      assert w.std() == pytest.approx(128 ** -0.5, rel=0.05)
  assert kinds == {"initialized", "gamma", "beta", "bias"}
