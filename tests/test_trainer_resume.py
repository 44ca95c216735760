"""Resuming a run from its --output_dir alone: the problem, hparams set, hparams and
data_dir are the run's (run.json, hparams.json); a given flag must be the run's.

A resumed run restarts its data from the beginning, so its weights are not those of
an uninterrupted run; they are those of the same resume given every flag.
"""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.support.cli import run_cli_output
from tests.support.tiny_problem import make_tiny_problem

HP = "num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,batch_size=128"
TRAINER = "t2t_keras.cli.trainer"
# Not part of a run: the seed (data order), the schedule.
EACH_TIME = ["--random_seed=3", "--schedule=train"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return make_tiny_problem(str(tmp_path_factory.mktemp("resume")), train=200, dev=8)


def _every_flag(data_dir):
  return ["--problem=translate_from_files", f"--data_dir={data_dir}",
          "--hparams_set=transformer_tiny", f"--hparams={HP}", *EACH_TIME]


def _train(capsys, *args):
  code, out, err = run_cli_output(TRAINER, args, capsys)
  assert code == 0, out + err
  return out + err


@pytest.fixture(scope="module")
def two_steps(data_dir, tmp_path_factory):
  """A run trained 2 steps with the trainer command (every flag given)."""
  output_dir = str(tmp_path_factory.mktemp("two_steps") / "run")
  code, out, err = run_cli_output(
      TRAINER, _every_flag(data_dir) + [f"--output_dir={output_dir}", "--train_steps=2"],
      _NoCapture())
  assert code == 0, out + err
  return output_dir


class _NoCapture:
  """capsys for a module fixture (pytest's is function-scoped): nothing to read."""

  def readouterr(self):
    class Out:
      out = err = ""
    return Out()


def _weights(run: str) -> dict:
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(run))
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def _assert_same_weights(a: str, b: str):
  ours, theirs = _weights(a), _weights(b)
  assert ours.keys() == theirs.keys() and len(ours) > 10
  for name in ours:
    np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


def _snapshot(run: str) -> dict:
  files = {}
  for root, _, names in os.walk(run):
    for name in names:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        files[os.path.relpath(path, run)] = f.read()
  return files


def test_resume_from_output_dir_alone_trains_as_resuming_with_every_flag(
    two_steps, data_dir, tmp_path, capsys):
  # Exact on every CPU: the same code, seed, data order and process on both sides.
  """--output_dir and --train_steps alone (no --problem, --hparams_set, --hparams,
  --data_dir) reach step 4 with the weights of the same resume given every flag; so
  do t2t_keras.train(output_dir=...) and the command given flags equal to the run's."""
  import t2t_keras
  alone, every = str(tmp_path / "alone"), str(tmp_path / "every")
  shutil.copytree(two_steps, alone)
  shutil.copytree(two_steps, every)
  out = _train(capsys, f"--output_dir={alone}", "--train_steps=4", *EACH_TIME)
  assert "translate_from_files / transformer_tiny:" in out
  assert tf.train.latest_checkpoint(alone).endswith("ckpt-4")
  _train(capsys, *_every_flag(data_dir), f"--output_dir={every}", "--train_steps=4")
  _assert_same_weights(alone, every)
  # The Python API without problem / hparams_set / data_dir; the command with the run's
  # values given (its --hparams only in part: what it sets is the run's).
  run = t2t_keras.train(output_dir=alone, train_steps=5, random_seed=3, schedule="train",
                        log=lambda line: None)
  assert run.checkpoint_path.endswith("ckpt-5") and run.problem.name == "translate_from_files"
  _train(capsys, "--problem=translate_from_files", "--hparams_set=transformer_tiny",
         "--hparams=num_heads=2", f"--data_dir={data_dir}", f"--output_dir={every}",
         "--train_steps=5", *EACH_TIME)
  _assert_same_weights(alone, every)


@pytest.mark.parametrize("flag,given,recorded", [
    ("problem", "translate_ende_ding_bible8k", "--problem=translate_from_files"),
    ("hparams_set", "transformer_small", "--hparams_set=transformer_tiny"),
    ("hparams", "num_heads=4,hidden_size=16", "num_heads: 2 in the run, 4 given"),
])
def test_a_flag_differing_from_the_run_is_refused_in_one_line(
    two_steps, flag, given, recorded, capsys):
  before = _snapshot(two_steps)
  code, out, err = run_cli_output(
      TRAINER, [f"--output_dir={two_steps}", "--train_steps=4", f"--{flag}={given}"], capsys)
  lines = [line for line in (out + err).splitlines() if "error:" in line]
  assert code == 2 and len(lines) == 1, out + err
  assert f"--{flag}={given}" in lines[0] and recorded in lines[0], lines[0]
  assert "another --output_dir" in lines[0], lines[0]
  assert _snapshot(two_steps) == before


def test_an_older_run_without_a_recorded_set_resumes_with_its_hparams(tmp_path):
  """A run.json of an older version records no hparams_set: the run's hparams.json is
  used, and a given --hparams_set is checked by the hparams it builds."""
  from t2t_keras.hparams import create_hparams
  from t2t_keras.rundir import settings as settings_lib
  hp = create_hparams("transformer_tiny", HP)
  output_dir = str(tmp_path / "old")
  settings_lib.save_or_check_run_files(output_dir, hp, "translate_from_files",
                                  settings_lib.ModelSpec(76, 76))
  settings = settings_lib.resolve_run_settings(output_dir)
  assert (settings.problem, settings.hparams, settings.hparams_set) == (
      "translate_from_files", hp, None)
  assert settings_lib.resolve_run_settings(output_dir, hparams_set="transformer_tiny",
                                      overrides=HP).hparams == hp
  with pytest.raises(ValueError, match="holds a run with different hparams"):
    settings_lib.resolve_run_settings(output_dir, hparams_set="transformer_tiny")
  # Given, the set is recorded; from then on it is the run's.
  settings_lib.save_or_check_run_files(output_dir, hp, "translate_from_files",
                                  settings_lib.ModelSpec(76, 76), hparams_set="transformer_tiny",
                                  overrides=HP)
  assert settings_lib.resolve_run_settings(output_dir).hparams_set == "transformer_tiny"
  with pytest.raises(ValueError, match="--problem is required"):
    settings_lib.resolve_run_settings(str(tmp_path / "new"), hparams_set="transformer_tiny")
