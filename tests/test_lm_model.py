"""The language model (`lm_model.TransformerLM`): T2T's Transformer without inputs.

Checked against tests/support/t2t_numpy_lm.py (T2T's algorithm in float64 NumPy) on the
same weights, every weight (layer norms included) set to random values so that
no two tensors can be swapped unnoticed; and cached incremental decoding
against the teacher-forced call, step by step.
"""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import errors
from t2t_keras.hparams import create_hparams
from t2t_keras.lm_model import TransformerLM
from tests.support.random_lm import SMALL, VOCAB, lm, t2t_tensors, targets_batch
from tests.support.t2t_numpy_lm import T2TNumpyLM


@pytest.mark.parametrize("hparams_set, overrides", [
    ("transformer_base", ""),  # pre-norm, shared embedding and softmax
    ("transformer_base_v1", "shared_embedding_and_softmax_weights=false"),  # post-norm "dan"
    ("transformer_lm_tpu_0", ""),  # T2T's LM set: clean_big for TPUs, unshared softmax
])
def test_logits_equal_t2t_numpy_without_inputs(hparams_set, overrides):
  model = lm(hparams_set, overrides)
  assert isinstance(model, TransformerLM)
  targets = targets_batch()
  ours = model({"targets": tf.constant(targets)}, training=False).numpy()
  theirs = T2TNumpyLM.from_tensors(t2t_tensors(model), model.hparams.to_dict()).logits(targets)
  assert ours.shape == (3, 9, VOCAB)
  # float32 against float64 over two layers of random weights, logits of size ~4:
  # ~1e-6 apart on the CPUs tried; a wrong sublayer or weight moves them by ~1.
  assert np.abs(theirs).max() > 1.0
  np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


def test_the_lm_has_exactly_t2t_s_variables_of_a_model_without_inputs():
  model = lm("transformer_base", "shared_embedding_and_softmax_weights=false")
  tensors = t2t_tensors(model)
  # Every variable of ours has one T2T name, and none is an encoder's, encoder-decoder
  # attention's, target-space embedding's or input embedding's.
  assert len(tensors) == len(model.trainable_variables)
  assert not [n for n in tensors if "encoder" in n or "encdec" in n or "target_space" in n
              or "input_emb" in n]
  layers = model.hparams.decoder_layers
  per_layer = [n for n in tensors if "/decoder/layer_0/" in n]
  # q, k, v, output_transform; conv1/conv2 kernel and bias; pre-norm: one norm per
  # sublayer (scale, bias) -> 4 + 4 + 2 * 2 = 12.
  assert len(per_layer) == 12
  assert len(tensors) == layers * 12 + 2 + 2  # + the final norm + target_emb, softmax


def test_cached_decoding_equals_teacher_forced_logits_step_by_step():
  model = lm("transformer_base", "shared_embedding_and_softmax_weights=false")
  targets = targets_batch(seed=3, rows=2, length=8)
  targets[1] = np.where(targets[1] == 0, 7, targets[1])  # rows without padding
  full = model({"targets": tf.constant(targets)}, training=False).numpy()
  state = model.init_decoding_state(2, 8)
  step = tf.function(model.decode_step)
  previous = tf.zeros([2], tf.int32)  # position 0 reads the zero embedding
  for i in range(8):
    logits, state = step(previous, tf.constant(i), state)
    np.testing.assert_allclose(logits.numpy(), full[:, i], rtol=0, atol=1e-5)
    previous = tf.constant(targets[:, i], tf.int32)


def test_lm_refuses_prepend_mode_and_round_trips_its_config():
  hp = create_hparams("transformer_prepend", SMALL)
  with pytest.raises(ValueError, match="prepend_mode='prepend_inputs_masked_attention' "
                     "prepends a problem's inputs"):
    TransformerLM(hp, VOCAB)
  model = lm()
  clone = TransformerLM.from_config(model.get_config())
  clone.build()
  assert [v.shape for v in clone.trainable_variables] == [
      v.shape for v in model.trainable_variables]
  assert clone.hparams == model.hparams and clone.target_vocab_size == VOCAB
  # What translates inputs (the decoder, the exporter) is told why it cannot.
  with pytest.raises(errors.ConfigError, match="this run is a language model"):
    model.encode(tf.constant([[3, 1]]))


def test_keras_saving_round_trips_the_language_model(tmp_path):
  import keras
  model = lm("transformer_base", "shared_embedding_and_softmax_weights=false", seed=2)
  targets = tf.constant(targets_batch(seed=6))
  path = str(tmp_path / "lm.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  assert isinstance(loaded, TransformerLM) and not loaded.decoder.encdec
  # Exact on every CPU: the same weights through the same code in one process.
  np.testing.assert_array_equal(loaded({"targets": targets}, training=False).numpy(),
                                model({"targets": targets}, training=False).numpy())
