"""Runs a command's `run()` in the test's process (shared test helper): faster than a
subprocess where a test only needs the exit status and stderr."""

import importlib
import sys

import pytest


def run_cli(module, argv, capsys):
  """Runs `module`.run() with `argv`; returns (exit status, stderr)."""
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
  return exit_info.value.code, capsys.readouterr().err
