"""A run directory stays consistent: however it is named, however many trainers are
started on it, and however full its disk gets.

* A relative and an absolute output_dir give the same `checkpoint` state file,
  the same retention (keep_checkpoint_max) and a working
  `tf.train.latest_checkpoint`, resume after resume.
* A second trainer on a run directory in use fails at once (exit 2), naming the
  first, which goes on unharmed; the lock of a SIGKILLed trainer is taken over.
* A save that runs out of space (a file size limit: EFBIG; a full tmpfs: ENOSPC
  at every moment of the save) leaves no file of its checkpoint under its final
  name, the state file naming the previous checkpoint, and exits with status 4.
* The `ckpt-<step>_temp/` of a killed save is removed on resume.
"""

import os
import resource
import signal
import socket
import subprocess
import sys

import pytest
import tensorflow as tf

from t2t_keras import checkpoints, errors
from t2t_keras.hparams import create_hparams
from t2t_keras.rundir import lock, settings
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.training import schedules as experiment
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support.env import ENV
from tests.support.tiny_problem import ONE_LAYER, make_tiny_problem
from tests.support.trainer_process import SLOW_TRAINER, wait_for

TRAINER = [sys.executable, "-m", "t2t_keras.cli.trainer"]


class _Problem:
  """The tiny problem's data, hparams and model spec, as the trainer CLI derives them."""

  def __init__(self, root):
    from data_gen import registry
    self.data_dir = make_tiny_problem(root, train=200, dev=8)
    problem = registry.problem("translate_from_files", self.data_dir)
    enc = problem.feature_encoders(self.data_dir)
    self.hp = create_hparams("transformer_tiny", ONE_LAYER)
    self.spec = ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size,
                          problem.target_space_id)
    self.pattern = problem.filepattern(self.data_dir, "train")

  def experiment(self, output_dir, train_steps, trainer, lines, **config):
    cfg = experiment.RunConfig(output_dir=output_dir, train_steps=train_steps,
                               local_eval_frequency=1, **config)
    return experiment.Experiment(trainer, cfg, self.pattern, None, log=lines.append)

  def trainer(self):
    return Trainer(self.hp, self.spec, create_strategy("one_device"))

  def args(self, output_dir, train_steps, *extra):
    return ["--problem=translate_from_files", f"--data_dir={self.data_dir}",
            f"--output_dir={output_dir}", "--hparams_set=transformer_tiny",
            f"--hparams={ONE_LAYER}", "--schedule=train", "--log_every_steps=1",
            f"--train_steps={train_steps}", *extra]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  return _Problem(str(tmp_path_factory.mktemp("run_dir_faults")))


def _state_lines(directory):
  """The `checkpoint` state file's lines but the times CheckpointManager writes in it."""
  with open(os.path.join(directory, "checkpoint")) as f:
    return [line for line in f.read().splitlines() if "timestamp" not in line]


def _steps_present(directory):
  return sorted({checkpoints.checkpoint_step(p) for p in checkpoints.find_checkpoints(directory)})


# -- Paths ------------------------------------------------------------------------------------

def test_relative_and_absolute_output_dir_keep_the_same_state(tiny, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  states = {}
  for name, directory in (("relative", "run"), ("absolute", str(tmp_path / "abs" / "run"))):
    trainer, states[name] = tiny.trainer(), []
    for stop in (2, 4, 6, 8):  # a first run, then 3 resumes
      lines = []
      tiny.experiment(directory, stop, trainer, lines, keep_checkpoint_max=2).train()
      assert not [line for line in lines if "rewrote it" in line], (name, stop, lines)
      assert _steps_present(directory) == [stop - 1, stop], (name, stop)
      assert sorted(n for n in os.listdir(directory) if n.startswith("ckpt-")) == [
          f"ckpt-{stop - 1}.data-00000-of-00001", f"ckpt-{stop - 1}.index",
          f"ckpt-{stop}.data-00000-of-00001", f"ckpt-{stop}.index"], (name, stop)
      assert tf.train.latest_checkpoint(directory) == os.path.join(directory, f"ckpt-{stop}")
      states[name].append(_state_lines(directory))
  assert states["relative"] == states["absolute"]
  assert states["relative"][-1] == ['model_checkpoint_path: "ckpt-8"',
                                    'all_model_checkpoint_paths: "ckpt-7"',
                                    'all_model_checkpoint_paths: "ckpt-8"']


def test_a_rewritten_state_file_names_checkpoints_as_the_manager_does(tiny, tmp_path,
                                                                      monkeypatch):
  monkeypatch.chdir(tmp_path)
  lines = []
  tiny.experiment("run", 2, tiny.trainer(), lines).train()
  written = _state_lines("run")
  os.remove(os.path.join("run", "checkpoint"))
  lines = []
  assert tiny.experiment("run", 2, tiny.trainer(), lines).restore(repair=True) == 2
  assert _state_lines("run") == written  # not "../ckpt-2"
  assert any("rewrote it" in line for line in lines)
  assert tf.train.latest_checkpoint("run") == os.path.join("run", "ckpt-2")


def test_path_flags_are_made_absolute_once_and_remote_ones_kept(tmp_path, monkeypatch):
  from absl import flags

  from t2t_keras.cli import common_flags
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  values = flags.FlagValues()
  for name in ("output_dir", "data_dir", "checkpoint_path"):
    flags.DEFINE_string(name, None, "", flag_values=values)
  values(["prog", "--output_dir=run/", "--data_dir=~/data", "--checkpoint_path=gs://b/run/ckpt-4"])
  monkeypatch.setattr(flags, "FLAGS", values)
  common_flags.resolve_path_flags("output_dir", "data_dir", "checkpoint_path")
  assert values.output_dir == str(tmp_path / "run")
  assert values.data_dir == str(tmp_path / "home" / "data")
  assert values.checkpoint_path == "gs://b/run/ckpt-4"


# -- One trainer per run directory ------------------------------------------------------------

def test_a_second_trainer_fails_fast_and_a_killed_trainers_lock_is_taken_over(tiny, tmp_path):
  output_dir = str(tmp_path / "run")
  # The first trainer is given a relative --output_dir: it must name its files absolutely.
  first = subprocess.Popen([sys.executable, SLOW_TRAINER, "1.0",
                            *tiny.args("run", 10**6, "--local_eval_frequency=2")],
                           cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
  seen = []
  try:
    wait_for(first, f"Saved {output_dir}/ckpt-2.", seen)
    run_files = {n: _bytes_and_time(os.path.join(output_dir, n)) for n in ("run.json",
                                                                          "hparams.json")}
    started = _started(output_dir)
    second = subprocess.run(TRAINER + tiny.args(output_dir, 10**6), env=ENV,
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 2, second.stdout + second.stderr
    error = _error_lines(second.stderr)
    assert error == [
        f"t2t_keras_trainer: error: {output_dir} is in use by another trainer (host "
        f"{socket.gethostname()}, PID {first.pid}, started {started}); only one "
        "trainer may write a run directory. Wait for it or stop it, or give another "
        "--output_dir."], second.stderr
    assert "Traceback" not in second.stderr and "parameters" not in second.stdout
    assert {n: _bytes_and_time(os.path.join(output_dir, n)) for n in run_files} == run_files
    # The first goes on: it saves again after the second has gone (every 2 steps).
    latest = checkpoints.checkpoint_step(tf.train.latest_checkpoint(output_dir)) + 2
    wait_for(first, f"Saved {output_dir}/ckpt-{latest}.", seen)
    assert first.poll() is None
  finally:
    first.kill()  # during the sleep of the step after that save
    first.wait(timeout=60)
  assert tf.train.latest_checkpoint(output_dir) == os.path.join(output_dir, f"ckpt-{latest}")
  # The kernel released the SIGKILLed trainer's flock; its record in the file remains.
  assert f'"pid": {first.pid},' in (tmp_path / "run" / lock.LOCK_NAME).read_text()
  lines = []
  with lock.RunLock(output_dir, log=lines.append):
    assert lines == [f"WARNING: took over the lock {output_dir}/{lock.LOCK_NAME} left by "
                     f"a trainer that is gone (host {socket.gethostname()}, PID {first.pid}, "
                     f"started {started})."]
    assert f'"pid": {os.getpid()},' in (tmp_path / "run" / lock.LOCK_NAME).read_text()
  assert os.path.getsize(os.path.join(output_dir, lock.LOCK_NAME)) == 0  # released


def _error_lines(stderr):
  return [line for line in stderr.splitlines() if line.startswith("t2t_keras_trainer:")]


def _bytes_and_time(path):
  with open(path, "rb") as f:
    return f.read(), os.stat(path).st_mtime_ns


def _started(output_dir):
  import json
  with open(os.path.join(output_dir, lock.LOCK_NAME)) as f:
    return json.load(f)["started"]


def test_a_held_lock_is_refused_and_a_clean_release_leaves_no_holder(tmp_path):
  lines = []
  with lock.RunLock(str(tmp_path), log=lines.append):
    with pytest.raises(errors.RunError, match=f"PID {os.getpid()}, started"):
      lock.RunLock(str(tmp_path)).acquire()  # another open file description: refused
  assert lines == [] and os.path.getsize(tmp_path / lock.LOCK_NAME) == 0
  with lock.RunLock(str(tmp_path), log=lines.append):  # a clean release: no warning
    pass
  assert lines == []


# -- Disk full --------------------------------------------------------------------------------

def _limit_file_size(limit):
  def apply():  # in the child: writes past `limit` fail with EFBIG instead of killing it
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
  return apply


def test_file_size_limit_in_a_save_exits_4_and_keeps_the_last_good_checkpoint(tiny, tmp_path):
  output_dir = str(tmp_path / "run")
  settings.save_or_check_run_files(output_dir, tiny.hp, "translate_from_files", tiny.spec)
  trainer = tiny.trainer()
  tiny.experiment(output_dir, 2, trainer, []).train()
  data = os.path.getsize(os.path.join(output_dir, "ckpt-2.data-00000-of-00001"))
  limit = data // 2  # the next data shard cannot be written; every other file is smaller
  assert max(os.path.getsize(os.path.join(output_dir, n)) for n in os.listdir(output_dir)
             if not n.endswith(".data-00000-of-00001") and n != "eval") < limit // 2
  before = _bytes_and_time(os.path.join(output_dir, "checkpoint"))
  out = subprocess.run(TRAINER + tiny.args(output_dir, 4, "--local_eval_frequency=1"), env=ENV,
                       capture_output=True, text=True, timeout=300,
                       preexec_fn=_limit_file_size(limit))
  assert out.returncode == errors.STORAGE_STATUS, out.stdout[-3000:] + out.stderr[-3000:]
  error = _error_lines(out.stderr)
  assert error == [
      f"t2t_keras_trainer: error: saving {output_dir}/ckpt-3 failed: File too large; its "
      f"partial files were removed. Free some space in {output_dir} and run the same command "
      f"again: training resumes from {output_dir}/ckpt-2, the last good checkpoint."], out.stderr
  assert "Traceback" not in out.stderr
  assert not [n for n in os.listdir(output_dir) if n.startswith("ckpt-3")]
  assert _bytes_and_time(os.path.join(output_dir, "checkpoint")) == before
  checkpoints.verify_checkpoint(os.path.join(output_dir, "ckpt-2"), full_read=True)
  summary = tiny.experiment(output_dir, 3, tiny.trainer(), []).train()  # resumes from ckpt-2
  assert summary["steps"] == 1
  checkpoints.verify_checkpoint(os.path.join(output_dir, "ckpt-3"), full_read=True)


@pytest.fixture
def small_tmpfs(tmp_path):
  """A 1 MiB tmpfs (needs root and a kernel that lets this process mount)."""
  mount = tmp_path / "tmpfs"
  mount.mkdir()
  if os.geteuid() != 0:
    pytest.skip("mounting a tmpfs needs root; the file size limit test covers EFBIG")
  done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                        capture_output=True, text=True)
  if done.returncode:
    pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")
  yield str(mount)
  subprocess.run(["umount", "--lazy", str(mount)], check=True)  # event files may be open


def test_a_full_disk_at_any_moment_of_a_save_leaves_no_partial_checkpoint(tiny, small_tmpfs):
  output_dir = os.path.join(small_tmpfs, "run")
  trainer, lines = tiny.trainer(), []
  exp = tiny.experiment(output_dir, 1, trainer, lines)
  exp.train()
  good = os.path.join(output_dir, "ckpt-1")
  sizes = [os.path.getsize(f) for f in checkpoints.checkpoint_files(good)]
  page = os.statvfs(small_tmpfs).f_frsize
  pages = sum(-(-s // page) for s in sizes)  # what the next checkpoint will take
  state = _bytes_and_time(os.path.join(output_dir, "checkpoint"))
  exp = tiny.experiment(output_dir, 2, trainer, lines)
  filler = os.path.join(small_tmpfs, "filler")

  def save_on_a_fuller_disk():  # leaves `free` pages, then saves
    stat = os.statvfs(small_tmpfs)
    with open(filler, "wb") as f:
      f.write(b"\0" * ((stat.f_bavail - free) * page))
    try:
      experiment.Experiment.save(exp)
    finally:
      os.remove(filler)

  exp.save = save_on_a_fuller_disk
  failures = 0
  # From the shards not fitting, through the index not fitting once the shards are in
  # place, to the whole save fitting.
  for free in range(pages - 1, 2 * pages + 4):
    try:
      exp.train()  # resumes from ckpt-1 after each failure
    except errors.StorageError as e:
      failures += 1
      assert "No space left on device" in str(e) and f"{good}, the last good" in str(e)
      assert not [n for n in os.listdir(output_dir) if n.startswith("ckpt-2")], free
      assert _bytes_and_time(os.path.join(output_dir, "checkpoint")) == state, free
      checkpoints.verify_checkpoint(good, full_read=True)
      continue
    break
  else:
    pytest.fail(f"the save never fitted in up to {2 * pages + 3} free pages")
  assert failures >= 2, free
  assert tf.train.latest_checkpoint(output_dir) == os.path.join(output_dir, "ckpt-2")
  checkpoints.verify_checkpoint(os.path.join(output_dir, "ckpt-2"), full_read=True)


def test_a_summary_write_on_a_full_disk_is_a_storage_failure(small_tmpfs):
  # TensorFlow raises an OpError, not an OSError: run_cli must still print one line, exit 4.
  writer = tf.summary.create_file_writer(os.path.join(small_tmpfs, "logs"))
  stat = os.statvfs(small_tmpfs)
  with open(os.path.join(small_tmpfs, "filler"), "wb") as f:
    f.write(b"\0" * (stat.f_bavail * stat.f_frsize))
  with pytest.raises(tf.errors.OpError) as raised:
    with writer.as_default(step=0):
      for step in range(1000):
        tf.summary.scalar("loss", 1.0, step=step)
    writer.flush()
  [events] = tf.io.gfile.glob(os.path.join(small_tmpfs, "logs", "events.out.tfevents.*"))
  assert errors.storage_failure(raised.value) == ("No space left on device", events)
  assert errors.storage_failure(tf.errors.NotFoundError(None, None, "x; No such file")) is None
  os.remove(os.path.join(small_tmpfs, "filler"))
  writer.close()


# -- A killed save ----------------------------------------------------------------------------

def test_the_temp_dir_of_a_killed_save_is_removed_on_resume(tiny, tmp_path):
  output_dir = str(tmp_path / "run")
  trainer = tiny.trainer()
  tiny.experiment(output_dir, 1, trainer, []).train()
  # What SIGKILL during tf.train.CheckpointManager.save leaves (seen with TF 2.21).
  killed = tmp_path / "run" / "ckpt-2_temp"
  killed.mkdir()
  (killed / "part-00000-of-00001.data-00000-of-00001.tempstate1234").write_bytes(b"\0" * 100)
  (tmp_path / "run" / "notes_temp").mkdir()  # not a checkpoint's: kept
  lines = []
  assert tiny.experiment(output_dir, 2, trainer, lines).restore(repair=True) == 1
  assert not killed.exists() and (tmp_path / "run" / "notes_temp").is_dir()
  removed = [line for line in lines if "ckpt-2_temp" in line]
  assert removed == [f"Removed ckpt-2_temp from {output_dir}: the temporary directory of a "
                     "save that was killed (its checkpoint was never complete)."]
