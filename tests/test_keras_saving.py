"""Keras-native saving: `model.save("m.keras")` and `keras.models.load_model` round trip.

What a user writes (the fresh-process test runs exactly these lines):

  import keras
  import t2t_keras.model  # registers the model's classes ("t2t_keras>Transformer", ...)
  model = keras.models.load_model("m.keras")

`import t2t_keras` alone does not load TensorFlow, so it registers nothing, and
Keras resolves a custom class only through its registry (it imports no module
but its own).

Within one process the loaded model runs the same ops on the same weights as
the saved one, so its logits and decodes are compared exactly.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.decoding import seq2seq
from t2t_keras.hparams import DecodeHParams, create_hparams
from t2t_keras.model import Transformer
from tests.support import near_ties
from tests.support.tolerances import SCORE_EPS

SMALL = ("num_hidden_layers=2,hidden_size=32,filter_size=64,num_heads=4,"
         "layer_prepostprocess_dropout=0.1,attention_dropout=0.1,relu_dropout=0.1")
GREEDY = DecodeHParams(beam_size=1, extra_length=6)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (hparams overrides, input vocab, target vocab, dtype policy): the layouts the
# hparams offer that change the architecture or its weights.
LAYOUTS = {
    # transformer_tiny's own: pre-norm ("n" / "da"), one matrix for both embeddings
    # and the softmax.
    "prenorm_shared": ("", 30, 30, None),
    # The paper's post-norm, three separate matrices, two vocabularies, learned positions,
    # more encoder than decoder layers.
    "postnorm_unshared": ("layer_preprocess_sequence=none,layer_postprocess_sequence=dan,"
                          "shared_embedding_and_softmax_weights=false,pos=emb,"
                          "num_encoder_layers=3,num_decoder_layers=1", 30, 35, None),
    # One embedding for inputs and targets, a separate softmax, no target space.
    "shared_embedding_only": ("shared_embedding_and_softmax_weights=false,"
                              "shared_embedding=true,use_target_space_embedding=false,"
                              "pos=timing_paper", 30, 30, None),
    # Relative self-attention adds two tables per self-attention layer.
    "relative": ("self_attention_type=dot_product_relative,max_relative_position=3", 30, 30,
                 None),
    # Float32 weights computing in bfloat16; decoding runs the bfloat16 twin.
    "mixed_bfloat16": ("", 30, 30, "mixed_bfloat16"),
}


def _model(layout):
  overrides, input_vocab, target_vocab, dtype = LAYOUTS[layout]
  tf.keras.utils.set_random_seed(0)
  hp = create_hparams("transformer_tiny", ",".join(x for x in (SMALL, overrides) if x))
  model = Transformer(hp, input_vocab, target_vocab, target_space_id=3, dtype=dtype)
  model.build()
  return model


def _features(model, seed=0):
  rng = np.random.default_rng(seed)
  inputs = rng.integers(2, model.input_vocab_size, size=(3, 7)).astype(np.int32)
  inputs[:, -1] = 1  # EOS, as the decoder feeds them
  inputs[1, 4:] = [1, 0, 0]  # a shorter sentence, padded
  targets = rng.integers(2, model.target_vocab_size, size=(3, 5)).astype(np.int32)
  return {"inputs": inputs, "targets": targets}


def _greedy(model, inputs):
  ids, scores = seq2seq.make_decode_fn(model, GREEDY)(tf.constant(inputs))
  return ids.numpy(), scores.numpy()


def _embedding_roles(model):
  """Which of (input embedding, target embedding, softmax) share one layer: [0, 0, 0]
  for one matrix in all three roles, [0, 0, 1] for a shared embedding only, ..."""
  layers = [model.input_modality, model.target_modality, model.softmax]
  return [next(i for i, other in enumerate(layers) if other is layer) for layer in layers]


def _assert_same_model(loaded, model, features):
  assert type(loaded) is Transformer
  assert loaded.get_config() == model.get_config()
  assert loaded.dtype_policy.name == model.dtype_policy.name
  assert loaded.hparams == model.hparams
  assert [v.path for v in loaded.weights] == [v.path for v in model.weights]
  assert len(loaded.weights) == len(model.weights)
  assert loaded.count_params() == model.count_params()
  for got, want in zip(loaded.weights, model.weights):
    assert got.dtype == want.dtype, got.path
    np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=got.path)
  # Same ops on the same weights in one process: bit-identical logits.
  np.testing.assert_array_equal(loaded(features).numpy(), model(features).numpy())
  ids, scores = _greedy(model, features["inputs"])
  got_ids, got_scores = _greedy(loaded, features["inputs"])
  np.testing.assert_array_equal(got_ids, ids)
  np.testing.assert_array_equal(got_scores, scores)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_save_and_load_model_gives_the_same_model(layout, tmp_path):
  model = _model(layout)
  features = _features(model)
  model(features)  # as a user's model: called before it is saved
  path = str(tmp_path / "m.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  _assert_same_model(loaded, model, features)
  # Tied matrices are still one variable: the same layer in the same roles, and a
  # change of the shared embedding reaches the softmax.
  assert _embedding_roles(loaded) == _embedding_roles(model)
  if loaded.softmax is loaded.input_modality:
    table = loaded.input_modality.weights_var
    assert [id(v) for v in loaded.weights].count(id(table)) == 1
    table.assign(table * 2.0)
    np.testing.assert_array_equal(loaded.softmax.weights_var.numpy(),
                                  2.0 * model.softmax.weights_var.numpy())


def test_the_layouts_differ_and_fresh_weights_differ():
  """The round trip above can fail: the layouts give different weights, and a model
  rebuilt from the config alone (fresh initial values) gives other logits."""
  # Paths without the model's name (each model here gets its own).
  paths = {layout: tuple(v.path.split("/", 1)[1] for v in _model(layout).weights)
           for layout in LAYOUTS}
  assert len(set(paths.values())) == len(LAYOUTS) - 1  # mixed_bfloat16: prenorm_shared's
  assert _embedding_roles(_model("prenorm_shared")) == [0, 0, 0]
  assert _embedding_roles(_model("shared_embedding_only")) == [0, 0, 2]
  assert _embedding_roles(_model("postnorm_unshared")) == [0, 1, 2]
  model = _model("prenorm_shared")
  features = _features(model)
  fresh = Transformer.from_config(model.get_config())
  fresh.build()
  assert np.abs(fresh(features).numpy() - model(features).numpy()).max() > 1e-3


@pytest.mark.parametrize("layout", ["postnorm_unshared", "mixed_bfloat16"])
def test_config_round_trip_of_the_model_and_every_layer(layout):
  model = _model(layout)
  config = model.get_config()
  assert config["dtype"]["config"]["name"] == model.dtype_policy.name
  # Through JSON, as config.json of a .keras file holds it.
  serialized = json.loads(json.dumps(keras.saving.serialize_keras_object(model)))
  assert serialized["registered_name"] == "t2t_keras>Transformer"
  clone = keras.saving.deserialize_keras_object(serialized)
  assert type(clone) is Transformer
  assert clone.get_config() == config
  assert Transformer.from_config(config).get_config() == config
  # Every sublayer of the project is registered and rebuilds from its own config.
  checked = set()
  for layer in model._flatten_layers(include_self=False):
    cls = type(layer)
    if not cls.__module__.startswith("t2t_keras."):
      continue
    assert keras.saving.get_registered_name(cls) == f"t2t_keras>{cls.__name__}"
    assert keras.saving.get_registered_object(f"t2t_keras>{cls.__name__}") is cls
    layer_config = json.loads(json.dumps(layer.get_config()))
    twin = cls.from_config(layer_config)
    # Built as the layer was (Keras' LayerNormalization turns axis -1 into [-1] in build).
    twin.build_from_config(layer.get_build_config())
    assert twin.get_config() == layer.get_config(), cls.__name__
    assert ([(v.path.rsplit("/", 1)[1], v.shape) for v in twin.weights] ==
            [(v.path.rsplit("/", 1)[1], v.shape) for v in layer.weights]), cls.__name__
    assert twin.dtype_policy.name == layer.dtype_policy.name, cls.__name__
    checked.add(cls.__name__)
  assert checked >= {"SymbolModality", "PositionEmbedding", "TransformerEncoder",
                     "TransformerDecoder", "EncoderLayer", "DecoderLayer", "MultiHeadAttention",
                     "DenseReluDense", "LayerPrepostprocess", "LayerNorm", "Dense", "Dropout"}


# The documented user lines, in a process that imported nothing else.
_LOAD_SCRIPT = """
import sys
import numpy as np
import keras
import t2t_keras.model
model = keras.models.load_model(sys.argv[1])
features = dict(np.load(sys.argv[2]))
from t2t_keras import decoding
from t2t_keras.hparams import DecodeHParams
ids, _ = decoding.make_decode_fn(model, DecodeHParams(beam_size=1, extra_length=6))(
    features["inputs"])
np.savez(sys.argv[3], logits=model(features).numpy(), ids=ids.numpy(),
         paths=np.array([v.path for v in model.weights]))
"""


def test_load_in_a_fresh_process(tmp_path):
  model = _model("postnorm_unshared")
  features = _features(model)
  model.save(str(tmp_path / "m.keras"))
  np.savez(tmp_path / "features.npz", **features)
  result = subprocess.run(
      [sys.executable, "-c", _LOAD_SCRIPT, str(tmp_path / "m.keras"),
       str(tmp_path / "features.npz"), str(tmp_path / "out.npz")],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  out = np.load(tmp_path / "out.npz")
  assert list(out["paths"]) == [v.path for v in model.weights]
  # Another process may split a matmul across threads differently: a float tolerance.
  np.testing.assert_allclose(out["logits"], model(features).numpy(), rtol=1e-5, atol=1e-5)
  # Greedy ids: equal, or parted at a near-tie (tests/support/near_ties.py), as those logits are.
  margin_of = near_ties.model_margin_of(model, features["inputs"], 1, 0.0, GREEDY.extra_length,
                                        model.target_vocab_size)
  near_ties.assert_equal_or_near_tie(list(out["ids"]), list(_greedy(model, features["inputs"])[0]),
                                     margin_of, SCORE_EPS, "greedy, a fresh process vs this one")


def test_trained_run_model_round_trip(tiny_trained_run, tmp_path):
  import t2t_keras
  run = t2t_keras.open_run(tiny_trained_run[0])
  path = str(tmp_path / "m.keras")
  run.model.save(path)
  loaded = keras.models.load_model(path)
  features = _features(run.model, seed=1)
  _assert_same_model(loaded, run.model, features)
  # The checkpoint's layer name survives (the first part of every variable path).
  assert loaded.name == run.model.name == "transformer"
  assert _embedding_roles(loaded) == _embedding_roles(run.model)
