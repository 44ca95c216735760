"""One trainer per run directory: an exclusive lock on `<output_dir>/.trainer.lock`.

Two trainers on one run directory would both train from the same checkpoint,
overwrite each other's checkpoints and `run.json`. The trainer takes
`fcntl.flock(LOCK_EX)` on the lock file before it writes anything, and records
in it who holds it (host, PID, start time). The kernel releases a flock when
its process dies, however it dies, so a lock file whose flock can be taken is
stale: it is taken over, with a warning naming the trainer that left it. The
file itself is never deleted (deleting it would let a third trainer lock a new
file while a second one still holds the old one); a clean release empties it.

A remote run directory (`gs://...`) has no flock: it is not locked.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from typing import Callable, Optional

from t2t_keras import errors
from t2t_keras.rundir.files import RunDir

LOCK_NAME = os.path.basename(RunDir("").lock_file)


class RunLock:
  """The lock of run directory `directory`, held from `acquire()` to `release()`.

  Use as a context manager. Args: `directory`, the run directory (created if
  missing); `log`, a function taking one line (the take-over warning).
  """

  def __init__(self, directory: str, log: Callable[[str], None] = print):
    self.path = RunDir(directory).lock_file
    self.directory = directory
    self.log = log
    self._fd: Optional[int] = None

  def acquire(self) -> None:
    """Takes the lock.

    Raises:
      errors.RunError: another live process holds it (naming its host and PID).
    """
    if "://" in self.directory:
      return
    os.makedirs(self.directory, exist_ok=True)
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = _describe(_read(fd))
      os.close(fd)
      raise errors.RunError(
          f"{self.directory} is in use by another trainer ({holder}); only one trainer may "
          "write a run directory. Wait for it or stop it, or give another --output_dir.") from None
    previous = _read(fd)
    if previous:
      self.log(f"WARNING: took over the lock {self.path} left by a trainer that is gone "
               f"({_describe(previous)}).")
    mine = {"host": socket.gethostname(), "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(mine) + "\n").encode("utf-8"), 0)
    self._fd = fd

  def release(self) -> None:
    """Empties the lock file (a clean exit leaves no holder) and unlocks it."""
    if self._fd is None:
      return
    try:
      os.ftruncate(self._fd, 0)
    finally:
      os.close(self._fd)  # closing the last descriptor releases the flock
      self._fd = None

  def __enter__(self) -> "RunLock":
    self.acquire()
    return self

  def __exit__(self, *exc) -> None:
    self.release()


def _read(fd: int) -> dict:
  """The holder recorded in the lock file ({} when empty or unreadable)."""
  raw = os.pread(fd, 4096, 0)
  try:
    value = json.loads(raw.decode("utf-8")) if raw.strip() else {}
  except (UnicodeDecodeError, ValueError):
    return {"unreadable": raw[:80]}
  return value if isinstance(value, dict) else {}


def _describe(holder: dict) -> str:
  if "pid" not in holder:
    return "its host and PID are not recorded yet" if not holder else "unreadable lock file"
  return (f"host {holder.get('host', '?')}, PID {holder['pid']}, started "
          f"{holder.get('started', '?')}")
