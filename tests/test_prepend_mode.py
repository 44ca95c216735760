"""T2T's prepend_mode: inputs, a 0 and targets as one target sequence.

Against tests/support/t2t_numpy_lm.py (T2T's preprocess_example_common,
attention_bias_prepend_inputs_full_attention, weights_prepend_inputs_to_targets
and smoothed cross-entropy in NumPy) and tests/support/t2t_numpy_model.py (T2T's
encoder-decoder forward pass; T2T's Transformer keeps encoding a problem's
inputs in prepend mode), on the same random weights.
"""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.hparams import create_hparams
from t2t_keras.layers.attention import attention_bias_prepend_inputs_full_attention
from t2t_keras.rundir import model_factory
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.t2t_import import variable_names
from t2t_keras.training import inputs as inputs_lib, losses
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support import t2t_numpy_lm as np_lm
from tests.support.step_utils import one_step
from tests.support.t2t_numpy_model import T2TNumpyTransformer

VOCAB = 31
SMALL = ("num_hidden_layers=2,hidden_size=16,filter_size=24,num_heads=2,"
         "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0")
MODES = ("prepend_inputs_masked_attention", "prepend_inputs_full_attention")
EXAMPLES = [([5, 6, 7, 1], [8, 9, 1]), ([12, 1], [3, 4, 5, 6, 1]), ([20, 21, 22, 23, 24, 1], [1])]


def _write_records(path):
  with tf.io.TFRecordWriter(path) as writer:
    for source, target in EXAMPLES:
      feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                 for k, v in (("inputs", source), ("targets", target))}
      writer.write(tf.train.Example(
          features=tf.train.Features(feature=feature)).SerializeToString())


def _padded(rows):
  out = np.zeros([len(rows), max(map(len, rows))], np.int64)
  for r, row in enumerate(rows):
    out[r, :len(row)] = row
  return out


def prepended_batch():
  sources, targets = zip(*EXAMPLES)
  return {"inputs": _padded(sources), "targets": _padded(np_lm.prepend_inputs(sources, targets))}


def _rows(path, hp, mode, key="targets"):
  """The examples' `key` rows of make_dataset, trailing padding cut (rows end in EOS)."""
  return sorted(tuple(np.trim_zeros(row, "b").tolist())
                for batch in inputs_lib.make_dataset(path, hp, mode)
                for row in batch[key].numpy())


def test_the_input_pipeline_prepends_inputs_and_a_zero_to_the_targets(tmp_path):
  path = str(tmp_path / "p-dev-00000-of-00001")
  _write_records(path)
  hp = create_hparams("transformer_prepend", "batch_size=4096")
  sources, targets = zip(*EXAMPLES)
  want = sorted(map(tuple, np_lm.prepend_inputs(sources, targets)))
  assert _rows(path, hp, "eval") == want
  assert _rows(path, hp, "eval", "inputs") == sorted(
      map(tuple, sources))
  # T2T's PREDICT mode leaves the targets alone (the prefix is decoding's partial_targets).
  assert _rows(path, hp, "predict") == sorted(map(tuple, targets))
  # max_target_seq_length cuts the prepended sequence: T2T cuts after prepending.
  cut = create_hparams("transformer_prepend", "batch_size=4096,max_target_seq_length=5")
  assert _rows(path, cut, "eval") == sorted(
      tuple(np.trim_zeros(np.array(w[:5]), "b").tolist()) for w in want)
  assert _rows(path, create_hparams("transformer_base", "batch_size=4096"), "eval") == \
      sorted(map(tuple, targets))


def test_full_attention_bias_and_loss_weights_are_t2t_s():
  rng = np.random.default_rng(0)
  labels = rng.integers(1, 6, size=(4, 12))
  labels[rng.random(labels.shape) < 0.2] = 0
  labels[:, -2:] = 0
  got = attention_bias_prepend_inputs_full_attention(
      tf.constant((labels == 0).astype(np.float32))).numpy()
  np.testing.assert_array_equal(got, np_lm.full_attention_bias(labels))
  np.testing.assert_array_equal(losses.weights_prepend_inputs_to_targets(labels).numpy(),
                                np_lm.weights_prepend_inputs_to_targets(labels))
  for mode, training, want in (
      ("none", True, labels != 0), ("none", False, labels != 0),
      (MODES[0], True, labels != 0),  # T2T: the loss of the whole sequence in training
      (MODES[0], False, np_lm.weights_prepend_inputs_to_targets(labels)),
      (MODES[1], True, np_lm.weights_prepend_inputs_to_targets(labels)),
      (MODES[1], False, np_lm.weights_prepend_inputs_to_targets(labels))):
    np.testing.assert_array_equal(losses.target_weights(labels, mode, training).numpy(),
                                  want.astype(np.float32), err_msg=f"{mode} {training}")


def _model(mode, seed=0):
  hp = create_hparams("transformer_prepend", SMALL + f",prepend_mode={mode}")
  model = model_factory.build_model(hp, ModelSpec(VOCAB, VOCAB, 0))
  rng = np.random.default_rng(seed)
  for v in model.trainable_variables:
    v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))
  return model


def _numpy(model):
  tensors = {n: v.numpy() for n, v in variable_names.body_variable_map(model).items()}
  tensors[f"transformer/symbol_modality_{VOCAB}_16/shared/weights_0"] = \
      model.softmax.weights_var.numpy()
  return T2TNumpyTransformer.from_tensors(tensors, model.hparams.to_dict(), 0)


def _numpy_logits(model, batch):
  reference = _numpy(model)
  targets = batch["targets"]
  bias = (np_lm.full_attention_bias(targets)
          if model.hparams.prepend_mode == MODES[1] else None)
  shifted = np.pad(targets, [[0, 0], [1, 0]])[:, :-1]
  return reference.decode(shifted, *reference.encode(batch["inputs"]), self_bias=bias)


@pytest.mark.parametrize("mode", MODES)
def test_prepend_logits_and_masked_loss_equal_t2t_numpy(mode):
  model = _model(mode)
  batch = prepended_batch()
  logits = model({k: tf.constant(v) for k, v in batch.items()}, training=False)
  theirs = _numpy_logits(model, batch)
  np.testing.assert_allclose(logits.numpy(), theirs, rtol=0,
                             atol=1e-5 * max(1.0, np.abs(theirs).max()))
  labels = batch["targets"]
  for training in (True, False):
    weights = (labels != 0).astype(np.float64) if (mode == MODES[0] and training) else \
        np_lm.weights_prepend_inputs_to_targets(labels)
    want = np_lm.smoothed_loss(theirs, labels, 0.1, weights)
    num, den = losses.padded_cross_entropy(
        logits, labels, 0.1, losses.target_weights(labels, mode, training))
    assert float(den) == want["den"]
    np.testing.assert_allclose(float(num), want["num"], rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_trainer_loss_and_evaluation_use_t2t_s_prepend_weights(mode):
  """The train step's loss (before its update) and the evaluation's metrics are
  T2T's masked cross-entropies of the model's logits."""
  tf.keras.utils.set_random_seed(0)
  hp = create_hparams("transformer_prepend", SMALL + f",prepend_mode={mode}")
  trainer = Trainer(hp, ModelSpec(VOCAB, VOCAB, 0), create_strategy("one_device"),
                    train_steps=10)
  batch = prepended_batch()
  labels = batch["targets"]
  theirs = _numpy_logits(trainer.model, batch)  # the weights before the update
  weights = np_lm.weights_prepend_inputs_to_targets(labels)
  train_weights = (labels != 0).astype(np.float64) if mode == MODES[0] else weights
  smoothed = np_lm.smoothed_loss(theirs, labels, hp.label_smoothing, train_weights)
  got = one_step(trainer, [batch])
  np.testing.assert_allclose(got["loss"], smoothed["num"] / smoothed["den"], rtol=1e-5)
  after = _numpy_logits(trainer.model, batch)
  unsmoothed = np_lm.smoothed_loss(after, labels, 0.0, weights)
  dataset = tf.data.Dataset.from_tensors({k: tf.constant(v) for k, v in batch.items()})
  results = trainer.evaluate(trainer.strategy.experimental_distribute_dataset(dataset))
  np.testing.assert_allclose(results["loss"], unsmoothed["num"] / unsmoothed["den"], rtol=1e-5)
  np.testing.assert_allclose(results["perplexity"], np.exp(results["loss"]), rtol=1e-12)
