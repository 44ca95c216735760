"""Runs a command's `run()` in the test's process (shared test helper): faster than a
subprocess where a test only needs the exit status and stderr."""

import importlib
import sys

import pytest


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
