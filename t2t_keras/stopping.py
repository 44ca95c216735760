"""Graceful stops of a training run on SIGTERM or Ctrl-C.

The first SIGTERM or SIGINT (Ctrl-C) only sets a flag: the trainer finishes the
step in flight, saves a checkpoint and exits with a message. Both signals then
get their default action back, so a second Ctrl-C (or SIGTERM) stops the
process at once, even inside a TensorFlow op, without saving.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Optional

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
  """A context manager that turns the first SIGTERM/SIGINT into a stop request.

  Outside the main thread (where Python cannot install handlers) it installs
  nothing and never requests a stop.
  """

  def __init__(self):
    self.signum: Optional[int] = None
    self._previous = {}

  @property
  def requested(self) -> bool:
    return self.signum is not None

  @property
  def name(self) -> str:
    return signal.Signals(self.signum).name if self.signum else ""

  def __enter__(self) -> "StopSignals":
    if threading.current_thread() is threading.main_thread():
      for signum in STOP_SIGNALS:
        self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def __exit__(self, *exc) -> None:
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}

  def _handle(self, signum, frame) -> None:
    del frame
    if self.signum is None:
      self.signum = signum
    for s in STOP_SIGNALS:  # the next one stops the process at once
      signal.signal(s, signal.SIG_DFL)
    # os.write, not print: the handler may run while the main thread is printing.
    os.write(2, (f"\nReceived {signal.Signals(signum).name}: finishing the current step and "
                 "saving a checkpoint. Press Ctrl-C again to stop at once without "
                 "saving.\n").encode())
