"""Stops of a training run on SIGTERM or Ctrl-C, at any stage, even inside TensorFlow.

The first SIGTERM or SIGINT (Ctrl-C) while training steps have run since the
last checkpoint (`unsaved`, set by the training loop) only sets a flag: the
trainer finishes the step in flight, saves a checkpoint and exits with
128 + the signal number. With nothing to save (before the first step, while
reading the first batch, right after a checkpoint, in evaluation) the process
exits at once with that status, after one line on stderr. A second signal
always stops the process at once, without saving.

Python runs signal handlers only when the main thread is in the interpreter,
and the main thread may be blocked in a TensorFlow op for ever (e.g. a
pipeline that waits for data). So the handler also wakes a watcher thread
(`signal.set_wakeup_fd`), which acts even then; its immediate exits are
`os._exit`, whose file locks the kernel releases. When the main thread does
run the handler, the handler gives both signals their default action back, so
that a second one kills the process even if no Python thread can run.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Optional

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long the watcher gives the main thread to run the handler (which restores
# the default actions) before it announces the stop itself.
_HANDLER_GRACE_S = 0.25


class StopSignals:
  """A context manager that turns SIGTERM/SIGINT into stops (see the module docstring).

  Attributes:
    signum: the first stop signal received, or None.
    unsaved: True while training steps have run since the last checkpoint or
      restore; the training loop sets it. While False, a signal exits at once.

  Outside the main thread (where Python cannot install handlers) it installs
  nothing and never requests a stop.
  """

  def __init__(self):
    self.signum: Optional[int] = None
    self.unsaved = False
    self._previous = {}
    self._previous_wakeup_fd = None
    self._pipe = None
    self._watcher = None
    self._handled = threading.Event()  # the main thread ran the handler

  @property
  def requested(self) -> bool:
    return self.signum is not None

  @property
  def name(self) -> str:
    return signal.Signals(self.signum).name if self.signum else ""

  def __enter__(self) -> "StopSignals":
    if threading.current_thread() is not threading.main_thread():
      return self
    self._previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    self.install()
    read_fd, write_fd = self._pipe = os.pipe()
    os.set_blocking(write_fd, False)  # required by set_wakeup_fd
    self._previous_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    self._watcher = threading.Thread(target=self._watch, args=(read_fd,),
                                     name="stop-signal-watcher", daemon=True)
    self._watcher.start()
    return self

  def install(self) -> None:
    """(Re)installs the handlers; call it again after something may have replaced them.

    TensorFlow's coordination service (started by MultiWorkerMirroredStrategy)
    installs its own SIGTERM handler, unknown to Python, which would ignore it.
    Does nothing outside the context or the main thread, or after a first signal.
    """
    if self._previous and self.signum is None:
      for signum in STOP_SIGNALS:
        signal.signal(signum, self._handle)

  def __exit__(self, *exc) -> None:
    if self._pipe is None:
      return
    signal.set_wakeup_fd(self._previous_wakeup_fd)
    for signum, handler in self._previous.items():
      if handler is not None:  # None: installed outside Python, which cannot restore it
        signal.signal(signum, handler)
    self._previous = {}
    read_fd, write_fd = self._pipe
    os.close(write_fd)  # the watcher reads end-of-file and returns
    self._watcher.join(timeout=5)
    os.close(read_fd)
    self._pipe = self._watcher = None

  def _handle(self, signum, frame) -> None:
    """Runs in the main thread when it is in Python; the watcher announces the stop."""
    del frame
    if self.signum is None:
      self.signum = signum
    for s in STOP_SIGNALS:  # the next one stops the process at once
      signal.signal(s, signal.SIG_DFL)
    self._handled.set()

  def _watch(self, read_fd: int) -> None:
    """Reads the signal numbers that the C-level handler writes, one byte each."""
    received = 0
    while True:
      try:
        data = os.read(read_fd, 64)
      except OSError:
        return
      if not data:
        return
      for signum in data:
        if signum not in STOP_SIGNALS:
          continue
        received += 1
        name = signal.Signals(signum).name
        if received > 1:
          _exit_now(signum, f"Received {name} again: stopping at once without saving.")
        if not self.unsaved:
          _exit_now(signum, f"Received {name}: stopping at once; no training step has run "
                            "since the last checkpoint, so there is nothing to save.")
        if self.signum is None:
          self.signum = signum
        self._handled.wait(_HANDLER_GRACE_S)
        _write_line(f"Received {name}: finishing the current step and saving a checkpoint. "
                    "Press Ctrl-C again to stop at once without saving.")


def _write_line(text: str) -> None:
  # os.write, not print: the main thread may be printing, or blocked holding stdout.
  os.write(2, f"\n{text}\n".encode())


def _exit_now(signum: int, text: str) -> None:
  """Exits the whole process at once with 128 + signum, as if killed by the signal."""
  _write_line(text)
  os._exit(128 + signum)  # pylint: disable=protected-access
