"""The trainer, decoder and exporter never lose a user's work to a damaged run directory.

Each test damages a copy of one small run (4 checkpoints) itself: a deleted
`.index`, a truncated data shard, a deleted or emptied `checkpoint` state file,
or every checkpoint unloadable. After each fault the good checkpoints' bytes must
be unchanged (checksums), the newest loadable checkpoint must be the one used,
and a damaged one must be named. Also: every bad setting is refused by the CLIs
before anything is written, with a one-line error.
"""

import hashlib
import json
import os
import shutil
import sys

import pytest
import tensorflow as tf

from t2t_keras import checkpoints
from t2t_keras.hparams import create_hparams
from t2t_keras.rundir import model_factory, settings
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.training import schedules as experiment
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support.cli import run_cli
from tests.support.tiny_problem import ONE_LAYER, make_tiny_problem

STEPS = 4


def _sums(directory):
  """{file name: sha256} of every checkpoint file in `directory`."""
  out = {}
  for name in sorted(os.listdir(directory)):
    if name.startswith("ckpt-"):
      with open(os.path.join(directory, name), "rb") as f:
        out[name] = hashlib.sha256(f.read()).hexdigest()
  return out


class _Run:
  """One tiny training run with checkpoints 1..STEPS, and one Trainer reused by the tests."""

  def __init__(self, root):
    from data_gen import registry
    self.data_dir = make_tiny_problem(root, train=200, dev=8)
    problem = registry.problem("translate_from_files", self.data_dir)
    enc = problem.feature_encoders(self.data_dir)
    self.hp = create_hparams("transformer_tiny", ONE_LAYER)
    self.spec = ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size, 0)
    self.pattern = problem.filepattern(self.data_dir, "train")
    self.dir = os.path.join(root, "good")
    settings.save_or_check_run_files(self.dir, self.hp, "translate_from_files", self.spec,
                                    settings.vocab_record(problem, self.data_dir, enc))
    self.trainer = Trainer(self.hp, self.spec, create_strategy("one_device"))
    self.experiment(self.dir, STEPS).train()
    self.sums = _sums(self.dir)

  def experiment(self, output_dir, train_steps, trainer=None, **config):
    self.lines = []
    cfg = experiment.RunConfig(output_dir=output_dir, train_steps=train_steps,
                               local_eval_frequency=1, **config)
    return experiment.Experiment(trainer or self.trainer, cfg, self.pattern, None,
                                 log=self.lines.append)

  def copy(self, tmp_path):
    target = str(tmp_path / "run")
    shutil.copytree(self.dir, target)
    return target


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  return _Run(str(tmp_path_factory.mktemp("faults")))


def _unchanged(before, directory, names):
  after = _sums(directory)
  for name in names:
    assert after.get(name) == before[name], f"{name} changed or vanished"


def _files_of(sums, *steps):
  return [n for n in sums if any(n.startswith(f"ckpt-{s}.") for s in steps)]


def test_deleted_newest_index_falls_back_and_keeps_older_checkpoints(run, tmp_path):
  directory = run.copy(tmp_path)
  os.remove(os.path.join(directory, f"ckpt-{STEPS}.index"))
  summary = run.experiment(directory, STEPS + 1).train()
  assert summary["steps"] == 2  # resumed from ckpt-3, not from step 0
  assert run.trainer.step == STEPS + 1
  _unchanged(run.sums, directory, _files_of(run.sums, 1, 2, 3))
  # The damaged checkpoint's data file is kept, moved aside, its bytes intact.
  data = f"ckpt-{STEPS}.data-00000-of-00001"
  assert _sums(os.path.join(directory, "damaged")) == {data: run.sums[data]}
  assert any(f"ckpt-{STEPS}.index is missing" in line for line in run.lines)
  state = tf.train.get_checkpoint_state(directory)
  assert [checkpoints.checkpoint_step(p) for p in state.all_model_checkpoint_paths] == [
      1, 2, 3, 4, 5]


@pytest.mark.parametrize("fault", ["deleted", "emptied"])
def test_lost_state_file_is_rebuilt_from_the_checkpoints_present(run, tmp_path, fault):
  directory = run.copy(tmp_path)
  state_file = os.path.join(directory, "checkpoint")
  os.remove(state_file) if fault == "deleted" else open(state_file, "w").close()
  assert run.experiment(directory, STEPS).restore(repair=True) == STEPS
  state = tf.train.get_checkpoint_state(directory)
  assert [checkpoints.checkpoint_step(p) for p in state.all_model_checkpoint_paths] == [
      1, 2, 3, 4]
  summary = run.experiment(directory, STEPS + 1).train()
  assert summary["steps"] == 1
  _unchanged(run.sums, directory, run.sums)
  checkpoints.verify_checkpoint(os.path.join(directory, f"ckpt-{STEPS + 1}"), full_read=True)


def test_saving_over_a_checkpoint_this_run_did_not_write_moves_it_aside(run, tmp_path):
  directory = run.copy(tmp_path)
  exp = run.experiment(directory, STEPS)
  assert exp.restore(repair=True) == STEPS
  exp.save()  # step STEPS again: ckpt-4 exists, written by another run
  _unchanged(run.sums, os.path.join(directory, "superseded"), _files_of(run.sums, STEPS))
  checkpoints.verify_checkpoint(os.path.join(directory, f"ckpt-{STEPS}"), full_read=True)
  exp.save()  # its own checkpoint: simply rewritten
  assert sorted(os.listdir(os.path.join(directory, "superseded"))) == _files_of(run.sums, STEPS)


def test_truncated_data_is_named_trainer_falls_back_decoder_warns_or_refuses(run, tmp_path):
  directory = run.copy(tmp_path)
  data = os.path.join(directory, f"ckpt-{STEPS}.data-00000-of-00001")
  os.truncate(data, os.path.getsize(data) // 2)
  # Decoder / exporter path: no explicit checkpoint -> newest loadable, with a warning.
  warnings = []
  *_, path = model_factory.load_trained_model(directory, log=warnings.append)
  assert path == os.path.join(directory, f"ckpt-{STEPS - 1}")
  assert len(warnings) == 1 and data in warnings[0]
  # An explicit damaged checkpoint: a clear error naming the file.
  with pytest.raises(checkpoints.CheckpointError, match="data-00000-of-00001 has"):
    model_factory.load_trained_model(directory, os.path.join(directory, f"ckpt-{STEPS}"))
  truncated = _sums(directory)[os.path.basename(data)]
  assert run.experiment(directory, STEPS).restore(repair=True) == STEPS - 1
  _unchanged(run.sums, directory, _files_of(run.sums, 1, 2, 3))
  assert _sums(os.path.join(directory, "damaged"))[os.path.basename(data)] == truncated


def test_no_loadable_checkpoint_stops_unless_start_over(run, tmp_path):
  directory = run.copy(tmp_path)
  for step in range(1, STEPS + 1):
    os.remove(os.path.join(directory, f"ckpt-{step}.index"))
  before = _sums(directory)
  with pytest.raises(checkpoints.CheckpointError, match="none is loadable.*--start_over"):
    run.experiment(directory, STEPS).train()
  assert _sums(directory) == before
  fresh = Trainer(run.hp, run.spec, create_strategy("one_device"))
  exp = run.experiment(directory, STEPS, trainer=fresh, start_over=True)
  assert exp.restore(repair=True) == 0
  assert _sums(directory) == {}
  aside = [d for d in os.listdir(directory) if d.startswith("replaced-")]
  assert len(aside) == 1 and _sums(os.path.join(directory, aside[0])) == before


def test_verify_catches_a_flipped_byte_and_a_missing_shard(run, tmp_path):
  directory = run.copy(tmp_path)
  prefix = os.path.join(directory, "ckpt-2")
  data = prefix + ".data-00000-of-00001"
  blob = bytearray(open(data, "rb").read())
  blob[len(blob) // 2] ^= 0xFF
  open(data, "wb").write(bytes(blob))
  checkpoints.verify_checkpoint(prefix, full_read=False)  # sizes alone cannot see it
  with pytest.raises(checkpoints.CheckpointError, match="does not read back"):
    checkpoints.verify_checkpoint(prefix, full_read=True)
  os.remove(data)
  with pytest.raises(checkpoints.CheckpointError, match="data-00000-of-00001 is missing"):
    checkpoints.verify_checkpoint(prefix, full_read=False)


def test_stop_is_recorded_and_run_json_still_matches(run):
  with open(os.path.join(run.dir, "run.json")) as f:
    saved = json.load(f)
  assert saved["stop_reason"] == "train_steps" and saved["stop_step"] == STEPS
  settings.save_or_check_run_files(run.dir, run.hp, "translate_from_files", run.spec)
  assert settings.load_run_files(run.dir)[2] == run.spec


# -- CLI settings: refused before anything is written, in one line -------------------------



@pytest.mark.parametrize("flag, message", [
    ("--hparams=learning_rate_schedule=constantt*linear_warmup", "constantt"),
    ("--local_eval_frequency=0", "local_eval_frequency must be >= 1"),
    ("--train_steps=-5", "train_steps must be >= 0"),
    ("--train_seconds=-1", "train_seconds must be >= 0"),
    ("--decode_hparams=batch_size=-1", "batch_size"),
])
def test_trainer_refuses_bad_settings_before_writing(tmp_path, capsys, flag, message):
  output_dir = tmp_path / "out"
  code, err = run_cli("t2t_keras.cli.trainer", [
      "--problem=translate_from_files", f"--data_dir={tmp_path}", f"--output_dir={output_dir}",
      "--hparams_set=transformer_tiny", "--schedule=train", flag], capsys)
  assert code == 2 and message in err
  assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
  assert not output_dir.exists()


@pytest.mark.parametrize("flag, message", [
    ("--decode_hparams=batch_size=-1", "batch_size must be >= 0"),
    ("--decode_hparams=delimiter=", "delimiter"),
    ("--decode_to_file={tmp}", "is a directory"),
])
def test_decoder_refuses_bad_settings_before_decoding(tmp_path, capsys, flag, message):
  # An empty --output_dir: the decoder would fail later; these must fail first.
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--data_dir={tmp_path}", f"--output_dir={tmp_path}", flag.format(tmp=tmp_path)], capsys)
  assert code == 2 and message in err
  assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
  assert os.listdir(tmp_path) == []


def test_decoder_names_a_damaged_explicit_checkpoint_in_one_line(run, tmp_path, capsys):
  directory = run.copy(tmp_path)
  os.truncate(os.path.join(directory, "ckpt-2.data-00000-of-00001"), 10)
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--data_dir={run.data_dir}", f"--output_dir={directory}",
      f"--checkpoint_path={directory}/ckpt-2", f"--decode_to_file={tmp_path}/out.txt"], capsys)
  assert code == 2 and "ckpt-2.data-00000-of-00001 has 10 bytes" in err
  assert len(err.strip().splitlines()) == 1
  assert not os.path.exists(tmp_path / "out.txt")
