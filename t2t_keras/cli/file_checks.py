"""The commands' checks of the paths they are given, made before any slow work.

Each check raises `app.UsageError` naming the flag, its value and what to give
instead, which `common_flags.run_cli` prints as one line (exit status 2). Paths
with a scheme (`gs://...`) are left to the reader (tf.io.gfile), which names them.

Input lines may come from stdin where a command allows it: `-`, `/dev/stdin`, a
named pipe or a terminal is read to its end before any slow work starts.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile

from absl import app

from data_gen import file_io
from t2t_keras import errors

STDIN = "-"


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


def _is_stream(path: str) -> bool:
  """`-`, or a local path to a pipe, socket or terminal (e.g. /dev/stdin under `|`)."""
  if path == STDIN:
    return True
  try:
    mode = os.stat(path).st_mode
  except OSError:
    return False
  return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def read_input_lines(flag: str, path: str, what: str, delimiter: str = "\n",
                     allow_stdin: bool = False) -> list[str]:
  """The lines of an input file, checked by `check_input_file`.

  Args:
    flag, path, what: as `check_input_file`.
    delimiter: what ends a line (`file_io.iter_lines`).
    allow_stdin: `path` may be `-` (stdin) or a pipe, read to its end.

  Raises:
    app.UsageError: `check_input_file`'s cases; invalid UTF-8; a NUL byte (a
      binary file); an empty stream.
  """
  where = f"--{flag}={path}"
  stream = allow_stdin and _is_stream(path)
  if not stream:
    check_input_file(flag, path, what)
  try:
    if path == STDIN and stream:
      lines = list(file_io.iter_stream_lines(sys.stdin.buffer, delimiter, f"--{flag}"))
    elif stream:
      with open(path, "rb") as f:
        lines = list(file_io.iter_stream_lines(f, delimiter, f"--{flag}", path))
    else:
      lines = file_io.read_lines(path, delimiter, name=f"--{flag}")
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  except OSError as e:  # e.g. a pipe that cannot be opened
    raise app.UsageError(f"{where}: cannot read it ({e.strerror}); give {what}.") from None
  if stream and not lines:
    raise app.UsageError(f"{where}: stdin/the pipe gave no lines; give {what}.")
  for number, line in enumerate(lines, start=1):
    if "\0" in line:  # text never holds NUL; e.g. a model or an archive given by mistake
      raise app.UsageError(f"{where} is a binary file (a NUL byte on line {number}); "
                           f"give {what}.")
  return lines


def check_output_dir(flag: str, path: str) -> None:
  """Refuses a directory path that is a file or cannot be created or written to."""
  if _remote(path):
    return
  where = f"--{flag}={path}"
  if os.path.lexists(path) and not os.path.isdir(path):  # a file, or a dangling link
    raise app.UsageError(f"{where} is a file; give a directory (it is created if missing).")
  existing = os.path.abspath(path)
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise app.UsageError(f"{where}: {existing} is a file, so the directory cannot be "
                         "created; give a path under a directory.")
  if not os.access(existing, os.W_OK | os.X_OK) or not _can_create_in(existing):
    raise app.UsageError(f"{where}: {existing} is not writable; give a directory you "
                         "can write to.")


def _can_create_in(directory: str) -> bool:
  """Whether a directory can really be made in `directory` (permissions, ACLs, a
  read-only file system: `os.access` misses some, and all of them for root)."""
  try:
    os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=directory))
  except OSError as e:
    if errors.is_storage_error(e):  # writable, but full: say so now (exit status 4)
      raise errors.StorageError(f"no space left in {directory} ({e.strerror}); free some "
                                "space and run the same command again.") from None
    return False
  return True
