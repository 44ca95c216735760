"""A training run written by an earlier main still loads, resumes and decodes the same.

tests/data/main_checkpoint was written by tests/scripts/write_main_checkpoint.py with
the code of the commit named in its written_by.json (before the decoding-state and
run-directory refactor). Its expected.npz holds that code's logits and beam output
for fixed inputs; today's code must reproduce them from the checkpoint, and must
write checkpoints with the same variable names.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.decoding import seq2seq
from t2t_keras.hparams import DecodeHParams
from t2t_keras.rundir import model_factory
from t2t_keras.training import schedules
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support import near_ties
from tests.support.tolerances import SCORE_EPS

DATA = os.path.join(os.path.dirname(__file__), "data", "main_checkpoint")


@pytest.fixture(scope="module")
def written():
  with open(os.path.join(DATA, "written_by.json"), encoding="utf-8") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def expected():
  return dict(np.load(os.path.join(DATA, "expected.npz")))


@pytest.fixture(scope="module")
def loaded():
  return model_factory.load_trained_model(os.path.join(DATA, "run"))


def test_logits_match_the_writing_commit(loaded, expected):
  model = loaded[0]
  logits = model({"inputs": expected["inputs"], "targets": expected["targets"]},
                 training=False).numpy()
  assert logits.shape == expected["logits"].shape
  np.testing.assert_allclose(logits, expected["logits"], rtol=1e-5, atol=1e-5)


def test_beam_search_matches_the_writing_commit(loaded, expected):
  model = loaded[0]
  decode_hp = DecodeHParams(beam_size=2, alpha=0.6, extra_length=4)
  ids, scores = seq2seq.make_decode_fn(model, decode_hp)(
      tf.constant(expected["inputs"]))
  # The stored decode ran on the writer's CPU, whose kernels may round otherwise. Both
  # are the cached float32 decode, within SCORE_EPS (1e-4, tests/test_decoding.py) of
  # today's full pass (which test_logits_match_the_writing_commit ties to the stored
  # logits), so the ids are equal or part at a choice of margin <= 2 * SCORE_EPS of
  # T2T's search (tests/support/near_ties.py). The scores of equal ids keep this test's
  # tolerance of the logits, atol + rtol * |score| with 1e-5 each, at the largest score.
  score_atol = 1e-5 * (1 + np.abs(expected["beam_scores"]).max())
  margin_of = near_ties.model_margin_of(model, expected["inputs"], decode_hp.beam_size,
                                        decode_hp.alpha, decode_hp.extra_length,
                                        model.target_vocab_size)
  near_ties.assert_decodes_equal_or_near_tie(
      (ids.numpy(), scores.numpy()), (expected["beam_ids"], expected["beam_scores"]),
      margin_of, SCORE_EPS, "today's beam search vs the writing commit's", score_atol)


def test_todays_checkpoints_have_the_same_variable_names(loaded, written, tmp_path):
  _, hp, _, spec, _ = loaded
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=written["steps"])
  config = schedules.RunConfig(output_dir=str(tmp_path), train_steps=1)
  exp = schedules.Experiment(trainer, config, None, None, log=lambda line: None)
  exp.save()
  names = sorted(name for name, _ in tf.train.list_variables(str(tmp_path)))
  assert names == written["variables"]


def test_resumes_from_the_old_checkpoint_at_its_step(loaded, written, tmp_path):
  run = tmp_path / "run"
  shutil.copytree(os.path.join(DATA, "run"), run)
  _, hp, _, spec, _ = loaded
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=written["steps"])
  config = schedules.RunConfig(output_dir=str(run), train_steps=written["steps"])
  exp = schedules.Experiment(trainer, config, None, None, log=lambda line: None)
  assert exp.restore() == written["steps"]
  # Written back by today's code, every model weight and Adam slot holds the value the
  # old commit saved under the same key.
  again = exp.checkpoint.write(str(tmp_path / "again" / "ckpt"))
  old = tf.train.load_checkpoint(os.path.join(DATA, "run", written["checkpoint"]))
  new = tf.train.load_checkpoint(again)
  keys = [k for k in new.get_variable_to_shape_map()
          if k.endswith("VARIABLE_VALUE") and not k.startswith("save_counter")]
  assert len(keys) > 40
  for key in keys:
    np.testing.assert_array_equal(new.get_tensor(key), old.get_tensor(key), err_msg=key)
