"""Errors a user can act on, and the exit status each command gives them.

Every command runs through `cli.common_flags.run_cli`, which prints such an
error as one line `<program>: error: <message>` (no traceback) and exits with
the status below. Anything else keeps its traceback: it is a bug.

  2  a bad flag, input file, run directory or checkpoint (`UsageError`,
     `checkpoints.CheckpointError`, `RunError`)
  3  training diverged: a non-finite loss, gradient or weight (`DivergenceError`)
  4  the disk is full or a file too big for the file system (`StorageError`, and
     `OSError` with ENOSPC, EDQUOT or EFBIG)

A stop by SIGTERM or Ctrl-C exits with 128 + the signal number, as if killed by it.
This module imports nothing heavy: the commands load it before TensorFlow.
"""

import errno
import os
import re
from typing import Optional, Tuple

USAGE_STATUS = 2
DIVERGENCE_STATUS = 3
STORAGE_STATUS = 4

# OSError numbers that mean "no room to write", whatever the file.
STORAGE_ERRNOS = frozenset(filter(None, (errno.ENOSPC, getattr(errno, "EDQUOT", None),
                                         errno.EFBIG)))


class RunError(Exception):
  """A problem with the user's run directory, data or input; exit status 2."""
  exit_status = USAGE_STATUS


class ConfigError(RunError, ValueError):
  """A bad setting or input given to a library entry (`train`): a ValueError for
  Python callers, one line and exit status 2 for the commands."""


class DivergenceError(RunError):
  """Training produced a non-finite loss, gradient or weight; exit status 3."""
  exit_status = DIVERGENCE_STATUS


class StorageError(RunError):
  """Writing failed for lack of space; exit status 4."""
  exit_status = STORAGE_STATUS


def is_storage_error(error: BaseException) -> bool:
  """True for an OSError that means the disk (or a quota or size limit) is full."""
  return isinstance(error, OSError) and error.errno in STORAGE_ERRNOS


def storage_failure(error: BaseException) -> Optional[Tuple[str, Optional[str]]]:
  """(why, file) when `error` is a write that failed for lack of space, else None.

  `why` is the system's text ("No space left on device", "File too large", ...).
  Also for TensorFlow's errors (a checkpoint save or a summary write on a full disk
  raises an OpError such as ResourceExhaustedError whose message ends in
  "<file>; <why>"), recognized by that text; TensorFlow is not imported here.
  """
  if is_storage_error(error):
    return error.strerror or os.strerror(error.errno), error.filename
  if not type(error).__module__.startswith("tensorflow."):
    return None
  message = str(getattr(error, "message", "") or "")
  for number in sorted(STORAGE_ERRNOS):
    why = os.strerror(number)
    if why in message:
      found = re.search(r"(\S+); " + re.escape(why), message)
      return why, found.group(1) if found else None
  return None
