"""Nothing hangs: an input split with no usable example is an error, and SIGTERM and
Ctrl-C stop the trainer at every stage, even while it is blocked inside TensorFlow.

The trainer runs as a subprocess with timeouts, so that a hang fails a test
instead of the suite. A blocked first batch is made real: one training shard is
a FIFO that nobody writes to (tests/scripts/unchecked_trainer.py skips only the
manifest check, which refuses such a shard), so TFRecordDataset waits in C++.
The tests signal once /proc shows a thread waiting in open() for a writer of
the FIFO and the main thread asleep (blocked in the train step's op).
"""

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import tensorflow as tf

from t2t_keras import errors
from t2t_keras.hparams import create_hparams
from t2t_keras.rundir import settings
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.training import inputs, schedules
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support.tiny_problem import make_tiny_problem

REPO = str(pathlib.Path(__file__).resolve().parent.parent)
BIN = pathlib.Path(sys.executable).parent
HP = "num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2"
UNCHECKED_TRAINER = os.path.join(REPO, "tests", "scripts", "unchecked_trainer.py")
PROBLEM = "translate_from_files"


def _env():
  env = dict(os.environ, PYTHONPATH=REPO)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user's shell has it
  return env


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return make_tiny_problem(str(tmp_path_factory.mktemp("hang")), train=200, dev=8)


def _lengths(data_dir, split):
  """max(len(inputs), len(targets)) of every example of `split`, read independently."""
  spec = {k: tf.io.VarLenFeature(tf.int64) for k in ("inputs", "targets")}
  files = sorted(tf.io.gfile.glob(os.path.join(data_dir, f"{PROBLEM}-{split}*")))
  lengths = []
  for record in tf.data.TFRecordDataset(files):
    ex = tf.io.parse_single_example(record, spec)
    lengths.append(max(int(tf.size(ex["inputs"].values)), int(tf.size(ex["targets"].values))))
  return lengths


def _args(data_dir, output_dir, hparams):
  return [f"--problem={PROBLEM}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
          "--hparams_set=transformer_tiny", f"--hparams={HP},{hparams}", "--schedule=train",
          "--train_steps=5", "--local_eval_frequency=100"]


@pytest.mark.parametrize("hparams,limit", [
    ("batch_size=128,max_length=1", "max_length=1"),
    # T2T: max_length=0 means batch_size, and longer examples are dropped too.
    ("batch_size=2,max_length=0", "batch_size=2")])
def test_training_split_with_every_example_dropped_is_one_line_exit_2(data_dir, tmp_path,
                                                                      hparams, limit):
  lengths = _lengths(data_dir, "train")
  assert min(lengths) > int(limit.split("=")[1])  # the data: every example is too long
  output_dir = tmp_path / "run"
  start = time.time()
  proc = subprocess.run([str(BIN / "t2t_keras_trainer"), *_args(data_dir, output_dir, hparams)],
                        capture_output=True, text=True, env=_env(), timeout=120,
                        stdin=subprocess.DEVNULL)
  elapsed = time.time() - start
  lines = proc.stderr.splitlines()
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert len(lines) == 1 and lines[0].startswith("t2t_keras_trainer: error: "), proc.stderr
  assert limit in lines[0] and f"all {len(lengths)} training examples" in lines[0], lines[0]
  assert elapsed < 60
  assert tf.train.latest_checkpoint(str(output_dir)) is None


def test_evaluation_split_with_every_example_dropped_is_an_error(data_dir, tmp_path):
  """eval_drop_long_sequences can drop the whole dev set: no metrics of nothing."""
  from data_gen import registry
  problem = registry.problem(PROBLEM, data_dir)
  enc = problem.feature_encoders(data_dir)
  hp = create_hparams("transformer_tiny", HP + ",max_length=1,eval_drop_long_sequences=true")
  spec = ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size, 0)
  output_dir = str(tmp_path / "run")
  settings.save_or_check_run_files(output_dir, hp, PROBLEM, spec)
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=5)
  config = schedules.RunConfig(output_dir=output_dir, train_steps=5)
  exp = schedules.Experiment(trainer, config, problem.filepattern(data_dir, "train"),
                              problem.filepattern(data_dir, "dev"), log=lambda line: None)
  with pytest.raises(errors.RunError) as e:
    exp.run("evaluate")
  message = str(e.value)
  assert f"all {len(_lengths(data_dir, 'dev'))} evaluation examples" in message, message
  assert "max_length=1" in message and "eval_drop_long_sequences" in message, message


def test_the_check_stops_at_the_first_kept_example(data_dir, tmp_path):
  """A usable split is not read past the first batch: a later damaged shard goes unread."""
  shards = sorted(tf.io.gfile.glob(os.path.join(data_dir, f"{PROBLEM}-train*")))
  for shard in shards:
    shutil.copy(shard, tmp_path)
  damaged = tmp_path / os.path.basename(shards[-1])
  damaged.write_bytes(b"\xff" * 64)  # not a TFRecord: reading it raises DataLossError
  pattern = str(tmp_path / f"{PROBLEM}-train*")
  hp = create_hparams("transformer_tiny", HP + ",max_length=256")
  inputs.check_examples_kept(pattern, hp, "train")  # no error: shard 0 has kept examples
  with pytest.raises(tf.errors.DataLossError):  # what reading the whole split does
    inputs.check_examples_kept(pattern, create_hparams("transformer_tiny", HP + ",max_length=1"),
                               "train")


def _fifo_data_dir(data_dir, root):
  """A copy of data_dir whose last training shard is a FIFO that nobody writes to."""
  copy = os.path.join(root, "data")
  shutil.copytree(data_dir, copy)
  fifo = sorted(tf.io.gfile.glob(os.path.join(copy, f"{PROBLEM}-train*")))[-1]
  os.remove(fifo)
  os.mkfifo(fifo)
  return copy, fifo


def _main_thread_cpu_ticks(pid):
  with open(f"/proc/{pid}/task/{pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return int(fields[11]) + int(fields[12])  # utime + stime


def _wait_until_blocked_on_fifo(proc, timeout=120):
  """Waits until a thread of `proc` waits in open() for the FIFO's writer (kernel wchan
  wait_for_partner) and the main thread sleeps, using no CPU for a second."""
  deadline = time.time() + timeout
  while time.time() < deadline and proc.poll() is None:
    try:
      tasks = os.listdir(f"/proc/{proc.pid}/task")
      waits = [pathlib.Path(f"/proc/{proc.pid}/task/{t}/wchan").read_text() for t in tasks]
      ticks = _main_thread_cpu_ticks(proc.pid)
      time.sleep(1.0)
      if "wait_for_partner" in waits and ticks == _main_thread_cpu_ticks(proc.pid):
        return
    except FileNotFoundError:  # a thread ended while listed
      pass
  proc.kill()
  raise AssertionError("the trainer never blocked on the FIFO shard:\n" +
                       proc.communicate()[1][-3000:])


def _stop_and_wait(proc, signum, timeout):
  """Sends `signum`; returns (seconds until the exit, stderr); kills the process on timeout."""
  sent = time.time()
  proc.send_signal(signum)
  try:
    _, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    _, err = proc.communicate()
    raise AssertionError(f"still running {timeout} s after {signum!r}:\n{err[-3000:]}")
  return time.time() - sent, err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_first_batch_blocks_in_tensorflow_exits_at_once(data_dir, tmp_path,
                                                                           signum):
  fifo_dir, fifo = _fifo_data_dir(data_dir, str(tmp_path))
  output_dir = tmp_path / "run"
  proc = subprocess.Popen([sys.executable, UNCHECKED_TRAINER,
                           *_args(fifo_dir, output_dir, "batch_size=128")],
                          env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL)
  try:
    _wait_until_blocked_on_fifo(proc)
    elapsed, err = _stop_and_wait(proc, signum, timeout=15)
  finally:
    if proc.poll() is None:
      proc.kill()
  name = signal.Signals(signum).name
  assert proc.returncode == 128 + signum, err[-3000:]
  assert elapsed < 5.0, elapsed
  assert [line for line in err.splitlines() if line] == [
      f"Received {name}: stopping at once; no training step has run since the last "
      "checkpoint, so there is nothing to save."], err[-3000:]
  assert tf.train.latest_checkpoint(str(output_dir)) is None


_BLOCKED_WITH_UNSAVED_STEPS = textwrap.dedent("""
    import sys
    import tensorflow as tf
    from t2t_keras import stopping
    with stopping.StopSignals() as signals:
      signals.unsaved = True  # as after a training step
      print("ready", flush=True)
      next(iter(tf.data.TFRecordDataset(sys.argv[1])))  # blocks in C++: nobody writes
""")


def test_a_second_signal_stops_at_once_while_blocked_in_tensorflow(tmp_path):
  """With unsaved steps the first signal waits for the step; a second one does not."""
  fifo = str(tmp_path / "fifo")
  os.mkfifo(fifo)
  proc = subprocess.Popen([sys.executable, "-c", _BLOCKED_WITH_UNSAVED_STEPS, fifo],
                          env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL)
  try:
    assert proc.stdout.readline() == "ready\n"
    _wait_until_blocked_on_fifo(proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(2.0)
    assert proc.poll() is None  # still finishing the "step"
    elapsed, err = _stop_and_wait(proc, signal.SIGTERM, timeout=15)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
  assert elapsed < 5.0, elapsed
  assert [line for line in err.splitlines() if line.startswith("Received")] == [
      "Received SIGTERM: finishing the current step and saving a checkpoint. Press Ctrl-C "
      "again to stop at once without saving.",
      "Received SIGTERM again: stopping at once without saving."], err[-3000:]
