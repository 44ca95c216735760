"""TensorFlow's C++ start-up lines stay out of the commands' output unless asked for.

Importing TensorFlow 2.21 on a CPU machine prints, through absl's C++ logging,
"All log messages before absl::InitializeLog() ...", "Could not find cuda
drivers", the cpu_feature_guard note and a "failed call to cuInit" error; some
of these ignore `TF_CPP_MIN_LOG_LEVEL` (they are logged before TensorFlow reads
it). `install()` therefore does two things when the user has not chosen:

* sets `TF_CPP_MIN_LOG_LEVEL=2` (INFO and WARNING hidden; errors kept) for this
  process and the processes it starts;
* imports TensorFlow, and initializes its physical devices (where cuInit is
  called), with file descriptor 2 sent to a temporary file, then writes back
  every captured line except the known start-up lines above;
* sets TensorFlow's Python logger to WARNING (its INFO lines, such as one per
  checkpoint saved, are not for a report either).

The user's `TF_CPP_MIN_LOG_LEVEL` wins, and then nothing is captured; so does
absl's `--verbosity`/`-v` 0 or more on the command line (TensorFlow logs
everything). A negative `--verbosity` (-1 warnings and up, -2 errors, -3 fatal
only) sets TensorFlow's level to match and keeps the start-up lines filtered.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import os
import re
import sys
import tempfile
from typing import Mapping, Optional, Sequence

LEVEL_VAR = "TF_CPP_MIN_LOG_LEVEL"
# Marks a TF_CPP_MIN_LOG_LEVEL that `install` set (not the user), so that the
# commands a command starts (the demo's stages) stay quiet too.
MARKER_VAR = "T2T_KERAS_QUIET_TF"
QUIET_LEVEL = "2"

_NOISE = re.compile(
    r"All log messages before absl::InitializeLog\(\)|Could not find cuda drivers|"
    r"cudart_stub\.cc|cuInit|cuda_(driver|platform|executor)\.cc|cpu_feature_guard\.cc|"
    r"^To enable the following instructions:|oneDNN custom operations are on|"
    r"Unable to register cu(DNN|FFT|BLAS) factory|TF-TRT Warning|"
    r"computation placer already registered|absl::InitializeLog")


def filter_noise(text: str) -> str:
  """`text` without TensorFlow's known start-up lines (other lines kept, in order)."""
  return "".join(line for line in text.splitlines(keepends=True) if not _NOISE.search(line))


def requested_level(argv: Sequence[str]) -> Optional[str]:
  """TF_CPP_MIN_LOG_LEVEL for an absl `--verbosity`/`-v` in `argv`; None if absent.

  absl's verbosity 0 (INFO, its default when given explicitly) or more shows all
  of TensorFlow's lines; -1 (WARNING), -2 (ERROR), -3 (FATAL) map to 1, 2, 3.
  """
  value = None
  for i, arg in enumerate(argv):
    if arg == "--":
      break
    for name in ("--verbosity", "-verbosity", "--v", "-v"):
      if arg == name and i + 1 < len(argv):
        value = argv[i + 1]
      elif arg.startswith(name + "="):
        value = arg[len(name) + 1:]
  if value is None:
    return None
  try:
    verbosity = int(value)
  except ValueError:
    return "0"  # absl will reject the value itself; show everything meanwhile.
  return str(min(3, max(0, -verbosity)))


def user_chose(environ: Mapping[str, str]) -> bool:
  """Whether the user set TF_CPP_MIN_LOG_LEVEL (not `install` in a parent process)."""
  return LEVEL_VAR in environ and environ.get(MARKER_VAR) != environ[LEVEL_VAR]


@contextlib.contextmanager
def _stderr_filtered():
  """Captures file descriptor 2 (C++ and Python writes) and writes back non-noise."""
  sys.stderr.flush()
  saved = os.dup(2)
  try:
    with tempfile.TemporaryFile() as tmp:
      os.dup2(tmp.fileno(), 2)
      try:
        yield
      finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        tmp.seek(0)
        kept = filter_noise(tmp.read().decode("utf-8", errors="replace"))
        if kept:
          os.write(2, kept.encode("utf-8"))
  finally:
    os.close(saved)


class _QuietLoader(importlib.abc.Loader):
  """Runs TensorFlow's own loader, and device discovery, under `_stderr_filtered`."""

  def __init__(self, loader):
    self._loader = loader

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    with _stderr_filtered():
      self._loader.exec_module(module)
      # cuInit is called when the physical devices are first listed; listing
      # them does not initialize the runtime (multi-worker set-up still works).
      module.config.list_physical_devices()
    # TensorFlow's Python INFO lines (e.g. one per checkpoint saved) go the same way
    # (absl's app.run later lowers the root logger to INFO; this logger keeps WARNING).
    module.get_logger().setLevel(logging.WARNING)
    # Some of its modules log through absl directly (e.g. "Sharding callback
    # duration" per checkpoint saved): drop their INFO records, keep ours.
    logging.getLogger("absl").addFilter(_drop_tensorflow_info)


def _drop_tensorflow_info(record: logging.LogRecord) -> bool:
  """False for INFO/DEBUG records logged from inside the tensorflow package."""
  return (record.levelno >= logging.WARNING or
          f"{os.sep}tensorflow{os.sep}" not in (record.pathname or ""))


class _QuietFinder(importlib.abc.MetaPathFinder):

  def find_spec(self, name, path, target=None):
    if name != "tensorflow":
      return None
    sys.meta_path.remove(self)
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.loader is not None:
      spec.loader = _QuietLoader(spec.loader)
    return spec


def install(environ=None, argv: Optional[Sequence[str]] = None) -> None:
  """Quiets TensorFlow's start-up lines unless the user asked for TensorFlow's logs.

  The user's TF_CPP_MIN_LOG_LEVEL wins; else `--verbosity` 0 or more shows every
  line (nothing captured); else TensorFlow gets level 2, or the level of a negative
  `--verbosity` (-1: 1, -3: 3), with the start-up lines filtered. Must run before
  TensorFlow is first imported (`common_flags.run_cli` calls it first). Idempotent.
  """
  environ = os.environ if environ is None else environ
  argv = sys.argv if argv is None else argv
  if user_chose(environ):
    return
  level = requested_level(argv)
  if level == "0":
    environ.pop(MARKER_VAR, None)
    environ[LEVEL_VAR] = level  # also reaches the commands this one starts
    return
  environ[LEVEL_VAR] = environ[MARKER_VAR] = level or QUIET_LEVEL
  if "tensorflow" not in sys.modules and not any(
      isinstance(f, _QuietFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _QuietFinder())


def active(environ=None) -> bool:
  """Whether `install` quieted TensorFlow here (so helpers should filter too)."""
  environ = os.environ if environ is None else environ
  return LEVEL_VAR in environ and environ.get(MARKER_VAR) == environ[LEVEL_VAR]
