"""Training stops: --train_seconds, SIGTERM and Ctrl-C save a checkpoint at the stop.

The signal tests run the real t2t_keras_trainer in a subprocess whose train step
is slowed by a sleep (tests/scripts/slow_trainer.py), so that a signal sent right after the progress
line of step k reliably arrives during step k + 1: the run must stop after that
step with ckpt-(k+1) saved, and a restart must continue from it. The time budget
is tested in process with a clock that advances one second per step, so the
expected stop step is exact.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from t2t_keras import checkpoints
from t2t_keras.hparams import create_hparams
from t2t_keras.rundir import settings
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.training import schedules
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support.env import ENV
from tests.support.tiny_problem import ONE_LAYER, make_tiny_problem
from tests.support.trainer_process import start_slow, wait_for


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return make_tiny_problem(str(tmp_path_factory.mktemp("stops")), train=200, dev=8)


def _args(data_dir, output_dir, train_steps):
  return ["--problem=translate_from_files", f"--data_dir={data_dir}",
          f"--output_dir={output_dir}", "--hparams_set=transformer_tiny", f"--hparams={ONE_LAYER}",
          "--schedule=train", "--log_every_steps=1", "--local_eval_frequency=100",
          f"--train_steps={train_steps}"]


def _run_json(output_dir):
  with open(os.path.join(output_dir, "run.json")) as f:
    return json.load(f)


def test_sigterm_saves_at_the_step_in_flight_and_a_restart_finishes(data_dir, tmp_path):
  output_dir = str(tmp_path / "run")
  args = _args(data_dir, output_dir, train_steps=8)
  proc, seen = start_slow(1.5, args), []  # a wide window even on a loaded machine
  try:
    wait_for(proc, "step 3/8", seen)
    proc.send_signal(signal.SIGTERM)  # arrives during step 4
    rest = proc.communicate(timeout=120)[0]
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 128 + signal.SIGTERM, "".join(seen) + rest
  latest = tf.train.latest_checkpoint(output_dir)
  assert latest == os.path.join(output_dir, "ckpt-4")
  checkpoints.verify_checkpoint(latest, full_read=True)
  assert _run_json(output_dir)["stop_reason"] == "signal"
  assert _run_json(output_dir)["stop_step"] == 4
  with open(latest + ".index", "rb") as f:
    saved = f.read()
  out = subprocess.run([sys.executable, "-m", "t2t_keras.cli.trainer", *args], env=ENV,
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  run = _run_json(output_dir)
  assert (run["start_step"], run["stop_step"], run["stop_reason"]) == (4, 8, "train_steps")
  assert tf.train.latest_checkpoint(output_dir) == os.path.join(output_dir, "ckpt-8")
  with open(latest + ".index", "rb") as f:
    assert f.read() == saved


def test_a_second_ctrl_c_stops_at_once_without_saving(data_dir, tmp_path):
  output_dir = str(tmp_path / "run")
  proc, seen = start_slow(5.0, _args(data_dir, output_dir, train_steps=50)), []
  try:
    wait_for(proc, "step 1/50", seen)
    proc.send_signal(signal.SIGINT)
    wait_for(proc, "Received SIGINT", seen)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    elapsed = time.time() - sent
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == -signal.SIGINT, "".join(seen)
  assert elapsed < 3.0  # the step in flight sleeps 5 s: it was not finished
  assert tf.train.latest_checkpoint(output_dir) is None


def test_train_seconds_stops_within_one_step_and_resumes_with_a_fresh_budget(data_dir,
                                                                             tmp_path):
  from data_gen import registry
  problem = registry.problem("translate_from_files", data_dir)
  enc = problem.feature_encoders(data_dir)
  hp = create_hparams("transformer_tiny", ONE_LAYER)
  spec = ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size, 0)
  output_dir = str(tmp_path / "run")
  settings.save_or_check_run_files(output_dir, hp, "translate_from_files", spec)
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=100)
  lrs, lines = [], []

  def run(seconds):
    # A far step cap (as the demo's), so its ETA is longer than any budget left here.
    config = schedules.RunConfig(output_dir=output_dir, train_steps=10**6,
                                  train_seconds=seconds, local_eval_frequency=100,
                                  log_every_steps=1)
    exp = schedules.Experiment(trainer, config, problem.filepattern(data_dir, "train"), None,
                                log=lines.append,
                                clock=lambda: float(trainer.step))  # one "second" per step
    summary = exp.run("train")
    lrs.append(trainer.learning_rate())
    return summary

  summary = run(4.5)  # 5 steps end at 5 s >= 4.5 s; after 4 steps only 4 s had passed
  assert summary["stop_reason"] == "train_seconds" and trainer.step == 5
  assert tf.train.latest_checkpoint(output_dir) == os.path.join(output_dir, "ckpt-5")
  checkpoints.verify_checkpoint(os.path.join(output_dir, "ckpt-5"), full_read=True)
  assert _run_json(output_dir)["stop_reason"] == "train_seconds"
  # The ETA of the progress lines is the time budget left, not the step cap's.
  etas = [line.split("ETA ")[1] for line in lines if line.startswith("step ")]
  assert etas == ["0h00m03s", "0h00m02s", "0h00m01s", "0h00m00s", "0h00m00s"]
  summary = run(3.0)  # a fresh budget: 3 more steps
  assert summary["steps"] == 3 and trainer.step == 8
  assert _run_json(output_dir)["start_step"] == 5
  # The learning rate is a function of the step, not of the time or the restarts.
  schedule = Trainer(hp, spec, create_strategy("one_device"), train_steps=100).schedule
  assert lrs == [pytest.approx(float(schedule(5))), pytest.approx(float(schedule(8)))]


def test_the_trainer_warns_in_one_line_when_train_steps_end_inside_the_warmup(
    data_dir, tmp_path, capsys):
  """transformer_tiny's 8000 warmup steps and --train_steps=2: one warning line naming
  the hparam to set; with the warmup shortened to 1 step, none."""
  from tests.support.cli import run_cli_output
  outs = []
  for extra in ("", ",learning_rate_warmup_steps=1"):
    args = _args(data_dir, tmp_path / f"run{len(outs)}", 2)
    args = [a + extra if a.startswith("--hparams=") else a for a in args]
    code, out, err = run_cli_output("t2t_keras.cli.trainer", args, capsys)
    assert code == 0, err
    outs.append([line for line in (out + err).splitlines() if "warmup" in line])
  assert len(outs[0]) == 1 and outs[0][0].startswith("warning: --train_steps=2 ends before")
  assert "--hparams=learning_rate_warmup_steps=1 " in outs[0][0]
  assert outs[1] == []
