"""Datagen faults: a SIGKILLed run, a full disk, leftovers; the trainer-side manifest check."""

import errno
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from data_gen import datagen_worker, generator_utils as gu, manifest as manifest_lib, registry
from t2t_keras.training import inputs
from tests.support.cli import run_datagen_in_process
from tests.support.tiny_problem import write_parallel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
NAME = "translate_from_files"


def _files(tmp_path, train=400, dev=20):
  text = tmp_path / "text"
  text.mkdir()
  write_parallel(str(text / "train"), train, seed=1)
  write_parallel(str(text / "dev"), dev, seed=2)
  return ["--problem=" + NAME, "--vocab_size=64", "--num_shards=4",
          "--tmp_dir=" + str(tmp_path / "tmp"),
          "--train_source=%s/train.en" % text, "--train_target=%s/train.de" % text,
          "--dev_source=%s/dev.en" % text, "--dev_target=%s/dev.de" % text]


def _datagen_in_process(capsys, *args):
  code, out, err = run_datagen_in_process(capsys, *args)
  return code, out + err


def _kill_at_shard_write(args, data_dir, shard_name):
  """Starts datagen, SIGKILLs it while `shard_name` is half written; returns its pid.

  In one process, so the partial file bears its pid (with workers, see
  tests/test_datagen_parallel.py)."""
  env = dict(ENV, **{gu.PAUSE_ENV: shard_name})
  proc = subprocess.Popen([sys.executable, "-m", "t2t_keras.cli.datagen",
                           "--data_dir=" + data_dir, "--num_workers=1", *args], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  seen = []
  try:
    for line in proc.stdout:
      seen.append(line)
      if line.startswith("T2T_KERAS_TEST_PAUSED"):
        break
    else:
      pytest.fail("datagen ended without reaching %s:\n%s" % (shard_name, "".join(seen)))
    os.kill(proc.pid, signal.SIGKILL)
  finally:
    proc.kill()
    proc.wait(timeout=60)
  assert proc.returncode == -signal.SIGKILL
  return proc.pid


def test_sigkill_mid_shard_then_rerun(tmp_path, capsys):
  args = _files(tmp_path)
  data_dir = str(tmp_path / "data")
  pid = _kill_at_shard_write(args, data_dir, "%s-train-00002-of-00004" % NAME)
  names = set(os.listdir(data_dir))
  partial = "%s-train-00002-of-00004.%s-%d.incomplete" % (
      NAME, socket.gethostname().replace(".", "_"), pid)
  assert partial in names and os.path.getsize(os.path.join(data_dir, partial)) > 0
  assert {"%s-train-0000%d-of-00004" % (NAME, i) for i in (0, 1)} <= names
  assert not any("-dev-" in n for n in names)
  # The manifest remembers the run's settings, lists no split yet and is incomplete.
  killed = manifest_lib.read_manifest(data_dir, NAME)
  assert killed["complete"] is False and killed["splits"] == {}
  assert killed["settings"]["num_shards"] == 4
  # The truncated shard matches T2T's `-train*` glob but no reader takes it.
  problem = registry.problem(NAME, data_dir)
  pattern = problem.filepattern(data_dir, "train")
  assert os.path.join(data_dir, partial) in tf.io.gfile.glob(pattern)
  assert [os.path.basename(f) for f in inputs.match_shard_files(pattern)] == [
      "%s-train-0000%d-of-00004" % (NAME, i) for i in (0, 1)]
  # Trainer side: refused, with the command that repairs it.
  with pytest.raises(ValueError, match="datagen was interrupted.*t2t_keras_datagen "
                     "--problem=%s --data_dir=%s" % (NAME, data_dir)):
    problem.check_data_dir(data_dir)
  trainer = subprocess.run(
      [sys.executable, "-m", "t2t_keras.cli.trainer", "--problem=" + NAME,
       "--data_dir=" + data_dir, "--output_dir=" + str(tmp_path / "run"),
       "--hparams_set=transformer_tiny", "--train_steps=1"],
      cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
  assert trainer.returncode != 0 and "t2t_keras_datagen --problem=%s" % NAME in trainer.stderr
  assert not os.path.exists(tmp_path / "run" / "checkpoint")

  # The same command again: leftovers go, every split is finished, manifest last.
  code, out = _datagen_in_process(capsys, "--data_dir=" + data_dir, *args)
  assert code == 0, out
  names = sorted(os.listdir(data_dir))
  assert not [n for n in names if n.endswith(".incomplete") or "unshuffled" in n], names
  manifest = problem.check_data_dir(data_dir, verify_checksums=True)
  for split, want in (("train", 400), ("dev", 20)):
    shards = manifest["splits"][split]["shards"]
    counts = [sum(1 for _ in tf.data.TFRecordDataset(os.path.join(data_dir, s["file"])))
              for s in shards]
    assert [s["records"] for s in shards] == counts and sum(counts) == want
  assert len(manifest["splits"]["train"]["shards"]) == 4

  # The check catches a damaged dir: truncated shard, lost dev shard, stray shard, legacy dir.
  shard = os.path.join(data_dir, "%s-train-00001-of-00004" % NAME)
  with open(shard, "r+b") as f:
    f.truncate(os.path.getsize(shard) - 3)
  with pytest.raises(ValueError, match="train-00001-of-00004 has \\d+ bytes, manifest says"):
    problem.check_data_dir(data_dir)
  with pytest.raises(ValueError, match="truncated inside record"):
    manifest_lib.tfrecord_count(shard)
  os.remove(os.path.join(data_dir, "%s-dev-00000-of-00001" % NAME))
  with open(os.path.join(data_dir, "%s-train-00009-of-00010" % NAME), "wb"):
    pass
  with pytest.raises(ValueError) as err:
    problem.check_data_dir(data_dir)
  assert "missing %s-dev-00000-of-00001" % NAME in str(err.value)
  assert "unlisted shard %s-train-00009-of-00010" % NAME in str(err.value)
  os.remove(manifest_lib.manifest_path(data_dir, NAME))
  with pytest.raises(ValueError, match="before manifests.*t2t_keras_datagen"):
    problem.check_data_dir(data_dir)


class _FullDisk:
  """A TFRecord writer whose disk fills up: write and close raise ENOSPC."""

  def __init__(self, path, fail_after):
    self.real = tf.io.TFRecordWriter(path)
    self.left = fail_after

  def write(self, record):
    if self.left <= 0:
      raise OSError(errno.ENOSPC, "No space left on device")
    self.left -= 1
    self.real.write(record)

  def flush(self):
    self.real.flush()

  def close(self):
    self.real.close()
    if self.left <= 0:
      raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("stage", ["unshuffled", "shuffle"])
def test_full_disk_cleans_up_after_itself(tmp_path, capsys, monkeypatch, stage):
  args = _files(tmp_path, train=200, dev=10)
  data_dir = str(tmp_path / "data")
  real_open = gu.open_record_writer

  def open_writer(path):
    # Fail in the first round-robin write (the main process writes it).
    hit = "-unshuffled-train-00003" in path
    return _FullDisk(path, fail_after=10) if hit else real_open(path)

  if stage == "unshuffled":
    monkeypatch.setattr(gu, "open_record_writer", open_writer)
  else:  # the shuffle of train shard 1, in a worker process
    monkeypatch.setenv(datagen_worker.FULL_DISK_ENV, "%s-train-00001-of-00004" % NAME)
  code, out = _datagen_in_process(capsys, "--data_dir=" + data_dir, *args)
  assert code == 1 and "disk full" in out and "No space left" in out, out
  names = sorted(os.listdir(data_dir))
  assert not [n for n in names if n.endswith(".incomplete") or "-train-" in n], names
  assert manifest_lib.read_manifest(data_dir, NAME)["complete"] is False
  monkeypatch.setattr(gu, "open_record_writer", real_open)
  monkeypatch.delenv(datagen_worker.FULL_DISK_ENV, raising=False)
  code, out = _datagen_in_process(capsys, "--data_dir=" + data_dir, *args)
  assert code == 0, out
  registry.problem(NAME, data_dir).check_data_dir(data_dir)


def test_remove_stale_temporaries_keeps_live_writers(tmp_path):
  dead = subprocess.Popen(["true"])
  dead.wait()
  live = subprocess.Popen(["sleep", "60"])
  try:
    files = {"p-train-00000-of-00002.%d.incomplete" % dead.pid: False,
             "p-train-00001-of-00002.%d.incomplete" % live.pid: True,
             "p-dev-00000-of-00001.%d.incomplete" % live.pid: False,  # untouched for 2 h
             "vocab.p.64.subwords.abc.incomplete": False,  # older style, no pid
             ".tmp_vocab_x1y2": False,
             "p-unshuffled-train-00000-of-00002": False,
             "p-train-00000-of-00002": True, "other-unshuffled-train-00000-of-00001": True}
    for name in files:
      (tmp_path / name).write_bytes(b"x")
    old = time.time() - 7200
    os.utime(tmp_path / ("p-dev-00000-of-00001.%d.incomplete" % live.pid), (old, old))
    removed = gu.remove_stale_temporaries(str(tmp_path), "p")
  finally:
    live.kill()
    live.wait()
  assert sorted(os.listdir(tmp_path)) == sorted(n for n, keep in files.items() if keep)
  assert sorted(os.path.basename(p) for p in removed) == sorted(
      n for n, keep in files.items() if not keep)
