"""Runs the project's commands for tests: a command's `run()` in the test's process
(faster than a subprocess where a test only needs the exit status and output), or
t2t_keras_datagen as a subprocess where its process is what is tested."""

import importlib
import os
import subprocess
import sys

import pytest

from tests.support.env import REPO


def run_cli_output(module, argv, capsys):
  """Runs `module`.run() with `argv`; returns (exit status, stdout, stderr), status 0
  when the command returned normally."""
  from absl import flags
  cli = importlib.import_module(module)
  flags.FLAGS.unparse_flags()
  old = sys.argv
  sys.argv = ["prog", *map(str, argv)]
  try:
    with pytest.raises(SystemExit) as exit_info:
      cli.run()
  finally:
    sys.argv = old
    flags.FLAGS.unparse_flags()
  out = capsys.readouterr()
  return exit_info.value.code or 0, out.out, out.err


def run_cli(module, argv, capsys):
  """Runs `module`.run() with `argv`; returns (exit status, stderr)."""
  code, _, err = run_cli_output(module, argv, capsys)
  return code, err


def run_datagen(*flags):
  """t2t_keras_datagen with `flags` in a subprocess of this checkout: CompletedProcess."""
  env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, "-m", "t2t_keras.cli.datagen", *flags], cwd=REPO,
                        env=env, capture_output=True, text=True, timeout=300)


def run_datagen_in_process(capsys, *args):
  """Parses flags and calls datagen.run in this process; returns (code, stdout, stderr)."""
  from absl import flags
  from t2t_keras.cli import datagen
  argv = flags.FLAGS(["t2t_keras_datagen", *args])
  try:
    code = datagen.run(argv)
  finally:
    flags.FLAGS.unparse_flags()
  out = capsys.readouterr()
  return code, out.out, out.err
