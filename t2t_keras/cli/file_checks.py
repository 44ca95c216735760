"""The commands' checks of the paths they are given, made before any slow work.

Each check raises `app.UsageError` naming the flag, its value and what to give
instead, which `common_flags.run_cli` prints as one line (exit status 2). Paths
with a scheme (`gs://...`) are left to the reader (tf.io.gfile), which names them.
"""

from __future__ import annotations

import os

from absl import app


def _remote(path: str) -> bool:
  return "://" in path


def check_input_file(flag: str, path: str, what: str) -> None:
  """Refuses a missing, non-regular, unreadable or empty input file.

  Args:
    flag: the flag's name without dashes, e.g. "decode_from_file".
    path: its value.
    what: what to give instead, e.g. "a text file of source sentences, one per line".
  """
  if _remote(path):
    return
  where = f"--{flag}={path}"
  if not os.path.exists(path):
    raise app.UsageError(f"{where}: no such file; give {what}.")
  if os.path.isdir(path):
    raise app.UsageError(f"{where} is a directory; give {what}.")
  if not os.path.isfile(path):
    raise app.UsageError(f"{where} is not a regular file; give {what}.")
  if not os.access(path, os.R_OK):
    raise app.UsageError(f"{where} is not readable: check its permissions.")
  if os.path.getsize(path) == 0:
    raise app.UsageError(f"{where} is empty; give {what}.")


def read_input_lines(flag: str, path: str, what: str, delimiter: str = "\n") -> list[str]:
  """`check_input_file`, then the file's lines (invalid UTF-8 is a usage error too)."""
  from data_gen import file_io
  check_input_file(flag, path, what)
  try:
    return file_io.read_lines(path, delimiter, name=f"--{flag}")
  except ValueError as e:
    raise app.UsageError(str(e)) from None


def check_output_dir(flag: str, path: str) -> None:
  """Refuses a directory path that is a file or cannot be created or written to."""
  if _remote(path):
    return
  where = f"--{flag}={path}"
  if os.path.exists(path) and not os.path.isdir(path):
    raise app.UsageError(f"{where} is a file; give a directory (it is created if missing).")
  existing = os.path.abspath(path)
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise app.UsageError(f"{where}: {existing} is a file, so the directory cannot be "
                         "created; give a path under a directory.")
  if not os.access(existing, os.W_OK | os.X_OK):
    raise app.UsageError(f"{where}: {existing} is not writable; give a directory you "
                         "can write to.")
