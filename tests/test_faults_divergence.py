"""A diverging run never leaves a non-finite checkpoint, and no command uses one.

The real t2t_keras_trainer with a learning rate that becomes inf at update 3
(float32 overflow, so on every CPU; see DIVERGING) must stop with exit status 3 and
one line naming the step, what became non-finite and the last finite checkpoint,
having written only checkpoints whose every tensor is finite (read
back here with numpy). In process, a weight made NaN by an update whose loss was
finite (the loss is computed before the update and cannot see it), or a NaN
gradient norm, must stop training before that step's checkpoint; under float16
loss scaling a NaN gradient norm alone is a skipped step and must not. A NaN
checkpoint as an older version could have saved it is skipped by a resume and by
the decoder's default choice, and refused, naming the variable, when the decoder,
exporter, visualizer or averager is given it. Averaging checkpoints of two shapes
is one line; of two runs of one shape, a warning.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import checkpoints, errors
from t2t_keras.hparams import create_hparams
from t2t_keras.perf import precision
from t2t_keras.rundir import averaging, model_factory, settings
from t2t_keras.training import schedules, trainer as trainer_lib
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support.cli import run_cli
from tests.support.tiny_problem import make_tiny_problem

REPO = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
HP = "num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,batch_size=128"
# Diverges at update 3 on every CPU, in every precision, whatever the kernels: the rate is
# 10 * 1e38 ** floor(s / 2) at update s = 0, 1, 2 (exp_decay, staircase, no warmup), so
# 10 for the first two updates (the weights move by tens at most: every later value is
# far inside float32's range, ~3.4e38) and 10 * 1e38 = inf for the third (float32 rounds
# the product up to inf, and pow's rounding error of a few ulps cannot bring 1e39 below
# 3.4e38). Adam's step lr * m / (sqrt(v) + eps) is then +-inf where m != 0 and NaN where
# m == 0 (inf * 0): IEEE arithmetic, not a kernel's accumulation order, decides it, so
# every weight is non-finite after update 3 while the loss of step 3 (computed before
# that update) is finite. A huge constant rate is not enough: whether it overflows
# depends on the layer norms and matmuls of the CPU (it did not diverge on an AMX Xeon).
DIVERGING = HP + (",learning_rate_schedule=constant*exp_decay,learning_rate_constant=10,"
                  "learning_rate_warmup_steps=0,learning_rate_decay_steps=2,"
                  "learning_rate_decay_staircase=true,learning_rate_decay_rate=1e38")
DIVERGING_STEP = 3
EMBEDDING = "transformer/shared/weights"


def _command(command, *args, timeout=300):
  """The installed console script, as a user's shell runs it (TensorFlow's C++
  start-up lines are filtered by the command itself when TF_CPP_MIN_LOG_LEVEL is unset)."""
  env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP_", "T2T_KERAS_"))}
  env["PYTHONPATH"] = str(REPO)
  return subprocess.run([str(BIN / command), *map(str, args)], capture_output=True, text=True,
                        stdin=subprocess.DEVNULL, env=env, timeout=timeout, cwd=REPO)


def _one_error_line(stderr, command):
  lines = stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith(f"{command}: error: "), stderr[-3000:]
  return lines[0]


def _steps(directory):
  return sorted(checkpoints.checkpoint_step(p) for p in checkpoints.find_checkpoints(directory))


def _assert_all_finite(prefix):
  """Every float tensor of checkpoint `prefix` (model and optimizer) is finite."""
  reader = tf.train.load_checkpoint(prefix)
  for key, dtype in reader.get_variable_to_dtype_map().items():
    if dtype.is_floating:
      assert np.isfinite(reader.get_tensor(key)).all(), f"{prefix}: {key} is not finite"


def _run_json(directory):
  with open(os.path.join(directory, "run.json")) as f:
    return json.load(f)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return make_tiny_problem(str(tmp_path_factory.mktemp("diverge")), train=200, dev=8)


@pytest.fixture(scope="module")
def diverged(data_dir, tmp_path_factory):
  """(completed trainer process, its --output_dir), saving a checkpoint every step."""
  output_dir = tmp_path_factory.mktemp("cli") / "run"
  proc = _command("t2t_keras_trainer", "--problem=translate_from_files",
                  f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                  "--hparams_set=transformer_tiny", f"--hparams={DIVERGING}",
                  "--schedule=train", "--train_steps=30", "--local_eval_frequency=1",
                  "--random_seed=0")
  return proc, str(output_dir)


def test_trainer_cli_stops_with_status_3_and_leaves_only_finite_checkpoints(diverged):
  proc, output_dir = diverged
  assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-3000:]
  line = _one_error_line(proc.stderr, "t2t_keras_trainer")
  match = re.search(r"training diverged at step (\d+): the weight \S+ became (inf|NaN)", line)
  assert match, line
  step = int(match.group(1))
  assert step == DIVERGING_STEP, line
  # Every step was to be saved: all before the divergence were, and nothing after.
  assert _steps(output_dir) == list(range(1, step))
  assert f"the last finite checkpoint is {output_dir}/ckpt-{step - 1}." in line
  assert "learning_rate_constant" in line
  for s in range(1, step):
    _assert_all_finite(os.path.join(output_dir, f"ckpt-{s}"))
  assert (_run_json(output_dir)["stop_reason"], _run_json(output_dir)["stop_step"]) == (
      "diverged", step)


# -- In process: the update's result, checked before each save -----------------------------

@pytest.fixture(scope="module")
def tiny(data_dir):
  """(Trainer, its initial state, the train files): one Trainer for the in-process runs."""
  from data_gen import registry
  problem = registry.problem("translate_from_files", data_dir)
  enc = problem.feature_encoders(data_dir)
  hp = create_hparams("transformer_tiny", HP)
  spec = settings.ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size, 0)
  trainer = Trainer(hp, spec, create_strategy("one_device"))
  state = [v.numpy() for v in trainer.model.variables + trainer.optimizer.variables]
  return trainer, state, problem.filepattern(data_dir, "train")


def _replaced(trainer, out, **metrics):
  """`out` with some metrics replaced, its finiteness judged again as train_step does."""
  new = trainer_lib.StepResult(out, **metrics)
  new.step, new.attempted_step = trainer.step, out.attempted_step
  new.non_finite = trainer_lib.non_finite_metrics(new, trainer.loss_scaled)
  return new


def _experiment(tiny, output_dir, train_step_hook, train_steps=6):
  """An Experiment of the shared trainer, reset to step 0 and its initial weights, whose
  train_step results pass through `train_step_hook(trainer, result)`."""
  trainer, state, pattern = tiny
  for variable, value in zip(trainer.model.variables + trainer.optimizer.variables, state):
    variable.assign(value)
  real_step = Trainer.train_step.__get__(trainer)
  trainer.train_step = lambda iterator: train_step_hook(trainer, real_step(iterator))
  settings.save_or_check_run_files(output_dir, trainer.hparams, "translate_from_files",
                                  trainer.spec)
  config = schedules.RunConfig(output_dir=output_dir, train_steps=train_steps,
                                local_eval_frequency=1)
  return schedules.Experiment(trainer, config, pattern, None, log=lambda line: None)


def test_a_nan_weight_after_a_finite_loss_stops_before_that_checkpoint(tiny, tmp_path):
  output_dir = str(tmp_path / "run")

  def poison_step_3(trainer, out):
    if trainer.step == 3:  # as a NaN gradient would: the loss was computed before the update
      weights = next(v for v in trainer.model.variables if v.path == EMBEDDING)
      weights.assign(tf.tensor_scatter_nd_update(weights, [[2, 1]], [np.nan]))
    return out

  with pytest.raises(errors.DivergenceError) as error:
    _experiment(tiny, output_dir, poison_step_3).train()
  message = str(error.value)
  assert f"at step 3: the weight {EMBEDDING} became NaN" in message
  assert f"last finite checkpoint is {output_dir}/ckpt-2." in message
  assert error.value.exit_status == 3
  assert _steps(output_dir) == [1, 2]
  assert _run_json(output_dir)["stop_reason"] == "diverged"


def test_a_nan_gradient_norm_stops_before_that_checkpoint(tiny, tmp_path):
  output_dir = str(tmp_path / "run")

  def nan_norm_at_2(trainer, out):
    return _replaced(trainer, out, grad_norm=float("nan")) if trainer.step == 2 else out

  with pytest.raises(errors.DivergenceError,
                     match=r"at step 2: the gradient norm became nan \(the loss, [\d.]+, was "
                           rf"finite\).*last finite checkpoint is {output_dir}/ckpt-1\."):
    _experiment(tiny, output_dir, nan_norm_at_2).train()
  assert _steps(output_dir) == [1]


def test_under_float16_loss_scaling_a_nan_gradient_norm_is_a_skipped_step(tiny, tmp_path,
                                                                          monkeypatch):
  output_dir = str(tmp_path / "run")
  precision.set_mixed_precision("float16")
  try:
    assert Trainer(tiny[0].hparams, tiny[0].spec, create_strategy("one_device")).loss_scaled
  finally:
    precision.set_mixed_precision("none")
  assert not tiny[0].loss_scaled

  def nan_norm_at_2(trainer, out):
    return _replaced(trainer, out, grad_norm=float("nan")) if trainer.step == 2 else out

  # The shared float32 trainer, told it scales its loss (building a float16 one to
  # train costs seconds; the LossScaleOptimizer's skipping is Keras's).
  monkeypatch.setattr(Trainer, "loss_scaled", property(lambda self: True))
  assert _experiment(tiny, output_dir, nan_norm_at_2, train_steps=3).train()[
      "stop_reason"] == "train_steps"
  assert _steps(output_dir) == [1, 2, 3]
  # The loss is still checked there.
  assert trainer_lib.non_finite_metrics({"loss": float("inf"), "grad_norm": 1.0}, True)


def test_a_nan_loss_of_a_skipped_update_names_the_step_it_attempted(tiny, tmp_path,
                                                                      monkeypatch):
  """Under float16 loss scaling an update with non-finite gradients is skipped, so the
  optimizer's step does not advance: a NaN loss there is reported at the step the
  update was for (2), not at the saved step before it."""
  output_dir = str(tmp_path / "run")
  monkeypatch.setattr(Trainer, "loss_scaled", property(lambda self: True))

  def skipped_nan_at_2(trainer, out):
    if trainer.step == 2:  # as LossScaleOptimizer does: no update, the step stays 1
      trainer.optimizer.iterations.assign_sub(1)
      return _replaced(trainer, out, loss=float("nan"), grad_norm=float("nan"))
    return out

  with pytest.raises(errors.DivergenceError,
                     match=rf"at step 2: the loss became nan.*last finite checkpoint is "
                           rf"{output_dir}/ckpt-1\."):
    _experiment(tiny, output_dir, skipped_nan_at_2).train()
  assert _steps(output_dir) == [1]
  assert (_run_json(output_dir)["stop_reason"], _run_json(output_dir)["stop_step"]) == (
      "diverged", 2)


# -- A NaN checkpoint, as an older version saved one --------------------------------------

@pytest.fixture(scope="module")
def nan_run(diverged, tmp_path_factory):
  """(a copy of the diverged run with a NaN newest checkpoint added, its finite newest step)."""
  directory = str(tmp_path_factory.mktemp("nan") / "run")
  shutil.copytree(diverged[1], directory)
  good = _steps(directory)[-1]
  hparams, _, spec = settings.load_run_files(directory)
  trainer = Trainer(hparams, spec, create_strategy("one_device"))
  checkpoint = tf.train.Checkpoint(model=trainer.model, optimizer=trainer.optimizer)
  checkpoint.restore(os.path.join(directory, f"ckpt-{good}")).assert_existing_objects_matched()
  weights = next(v for v in trainer.model.variables if v.path == EMBEDDING)
  weights.assign(tf.fill(weights.shape, np.nan))
  checkpoint.write(os.path.join(directory, f"ckpt-{good + 1}"))
  checkpoints.write_state(directory, checkpoints.find_checkpoints(directory)[::-1])
  return directory, good


def test_resume_skips_a_nan_checkpoint_and_names_the_variable(nan_run, tmp_path):
  directory = str(tmp_path / "run")
  shutil.copytree(nan_run[0], directory)
  good = nan_run[1]
  hparams, _, spec = settings.load_run_files(directory)
  lines = []
  exp = schedules.Experiment(Trainer(hparams, spec, create_strategy("one_device")),
                              schedules.RunConfig(output_dir=directory), None, None,
                              log=lines.append)
  assert exp.restore(repair=True) == good
  assert any(f"ckpt-{good + 1} has non-finite weights: {EMBEDDING} holds NaN" in line
             for line in lines), lines
  assert _steps(directory)[-1] == good
  assert os.path.exists(os.path.join(directory, "damaged", f"ckpt-{good + 1}.index"))


def test_decoder_default_falls_back_to_the_newest_finite_checkpoint(nan_run):
  directory, good = nan_run
  warnings = []
  *_, path = model_factory.load_trained_model(directory, log=warnings.append)
  assert path == os.path.join(directory, f"ckpt-{good}")
  assert len(warnings) == 1 and f"{EMBEDDING} holds NaN" in warnings[0]




@pytest.mark.parametrize("module, flags", [
    ("t2t_keras.cli.decoder", ["--decode_from_file={src}", "--decode_to_file={tmp}/out.txt"]),
    ("t2t_keras.cli.exporter", ["--export_dir={tmp}/export"]),
    ("t2t_keras.cli.visualize", ["--sentence=the cat", "--plot_dir={tmp}/plots"]),
])
def test_commands_refuse_an_explicit_nan_checkpoint_naming_the_variable(
    nan_run, data_dir, tmp_path, capsys, module, flags):
  directory, good = nan_run
  source = tmp_path / "source.en"
  source.write_text("the cat\n", encoding="utf-8")
  nan_ckpt = os.path.join(directory, f"ckpt-{good + 1}")
  code, err = run_cli(module, [f"--output_dir={directory}", f"--data_dir={data_dir}",
                            f"--checkpoint_path={nan_ckpt}",
                            *[f.format(src=source, tmp=tmp_path) for f in flags]], capsys)
  assert code == 2, err
  line = _one_error_line(err, "prog")
  assert f"{nan_ckpt} has non-finite weights: {EMBEDDING} holds NaN" in line
  assert sorted(os.listdir(tmp_path)) == ["source.en"]  # nothing was written


def test_averager_refuses_a_nan_checkpoint_naming_it_and_the_variable(nan_run, tmp_path,
                                                                      capsys):
  directory, good = nan_run
  paths = [os.path.join(directory, f"ckpt-{s}") for s in (good, good + 1)]
  code, err = run_cli("t2t_keras.cli.avg_checkpoints",
                   [f"--checkpoints={','.join(paths)}", f"--output_path={tmp_path}/avg"], capsys)
  assert code == 2
  assert f"{paths[1]} has non-finite weights: {EMBEDDING} holds NaN" in _one_error_line(
      err, "prog")
  assert os.listdir(tmp_path) == []


# -- Averaging checkpoints of different runs ----------------------------------------------

def _other_run(root, run, **changes):
  """A run directory with the hparams of `run` but `changes`, and one (untrained)
  checkpoint ckpt-1."""
  hparams, problem, spec = settings.load_run_files(run)
  hparams = hparams.replace(**changes)
  settings.save_or_check_run_files(root, hparams, problem, spec)
  tf.train.Checkpoint(model=model_factory.build_model(hparams, spec)).write(
      os.path.join(root, "ckpt-1"))
  return os.path.join(root, "ckpt-1")


def test_averaging_two_shapes_is_one_line_naming_the_variable_and_both_shapes(diverged,
                                                                              tmp_path):
  output_dir = diverged[1]
  mine = os.path.join(output_dir, "ckpt-1")
  other = _other_run(str(tmp_path / "wide"), output_dir, hidden_size=24)
  proc = _command("t2t_keras_avg_checkpoints", f"--checkpoints={mine},{other}",
                  f"--output_path={tmp_path}/avg/averaged.ckpt")
  assert proc.returncode == 2, proc.stderr[-3000:]
  line = _one_error_line(proc.stderr, "t2t_keras_avg_checkpoints")
  assert re.search(rf"{mine} and {other}: transformer/\S+ has shape \[(\d+, )?16\] in the "
                   r"first and \[(\d+, )?24\] in the second", line), line
  assert not (tmp_path / "avg").exists()


def test_averaging_two_runs_of_one_shape_warns_once(diverged, tmp_path):
  output_dir = diverged[1]
  mine = os.path.join(output_dir, "ckpt-1")
  other = _other_run(str(tmp_path / "other"), output_dir, label_smoothing=0.2)
  hparams, _, spec = settings.load_run_files(output_dir)
  lines = []
  averaging.average_checkpoints(model_factory.build_model(hparams, spec), [mine, other],
                                      str(tmp_path / "avg" / "averaged.ckpt"), log=lines.append)
  assert len(lines) == 1 and lines[0].startswith("WARNING: averaging checkpoints of 2 "
                                                 "different runs")
  assert output_dir in lines[0] and str(tmp_path / "other") in lines[0]
  assert "differ in label_smoothing" in lines[0]
  lines.clear()  # two checkpoints of one run: no warning
  averaging.average_checkpoints(model_factory.build_model(hparams, spec),
                                      [mine, os.path.join(output_dir, "ckpt-2")],
                                      str(tmp_path / "avg" / "one_run.ckpt"), log=lines.append)
  assert lines == []
