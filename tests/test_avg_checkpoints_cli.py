"""t2t_keras_avg_checkpoints' --output_path: by default, with --prefix, the run's
averaged/ directory (`RunDir.averaged_checkpoint`); required with --checkpoints alone."""

import os

import pytest
import tensorflow as tf

from tests.support.cli import run_cli, run_cli_output

AVG = "t2t_keras.cli.avg_checkpoints"


@pytest.fixture
def run(tmp_path):
  """A run directory with hparams.json, run.json and two (untrained) checkpoints."""
  from t2t_keras.hparams import create_hparams
  from t2t_keras.rundir import model_factory, settings
  hp = create_hparams("transformer_tiny", "num_hidden_layers=1,hidden_size=16,filter_size=32")
  spec = settings.ModelSpec(40, 40)
  output_dir = str(tmp_path / "run")
  settings.save_or_check_run_files(output_dir, hp, "translate_from_files", spec)
  for step in (1, 2):
    tf.keras.utils.set_random_seed(step)
    tf.train.Checkpoint(model=model_factory.build_model(hp, spec)).write(
        os.path.join(output_dir, f"ckpt-{step}"))
  return output_dir


def test_prefix_writes_to_the_runs_averaged_directory_by_default(run, capsys):
  from t2t_keras.rundir.files import RunDir
  code, out, err = run_cli_output(AVG, [f"--prefix={run}", "--num_last_checkpoints=2"], capsys)
  assert code == 0, err
  expected = RunDir(run).averaged_checkpoint(2)
  assert expected.startswith(RunDir(run).averaged_dir + os.sep)
  assert tf.io.gfile.exists(expected + ".index")
  assert f"Averaged checkpoint written to {expected}" in out


def test_checkpoints_alone_require_output_path_in_one_line(run, capsys):
  paths = ",".join(os.path.join(run, f"ckpt-{s}") for s in (1, 2))
  before = sorted(os.listdir(run))
  code, err = run_cli(AVG, [f"--checkpoints={paths}"], capsys)
  lines = [line for line in err.splitlines() if "error:" in line]
  assert code == 2 and len(lines) == 1, err
  assert "--output_path is required with --checkpoints" in lines[0], lines[0]
  assert sorted(os.listdir(run)) == before
