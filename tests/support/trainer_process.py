"""The real trainer CLI in a subprocess, each step slowed by a sleep, and its output read.

A signal sent right after the progress line of step k then reliably arrives during
step k + 1 (tests/scripts/slow_trainer.py).
"""

import os
import subprocess
import sys
import time

from tests.support.env import ENV, REPO

SLOW_TRAINER = os.path.join(REPO, "tests", "scripts", "slow_trainer.py")


def start_slow(pause, args, env=ENV):
  """The real trainer CLI in a subprocess, each step followed by `pause` seconds of sleep."""
  return subprocess.Popen([sys.executable, SLOW_TRAINER, str(pause), *args], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(proc, text, seen, timeout=300):
  """Reads the merged output until a line contains `text`."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    line = proc.stdout.readline()
    if not line:
      break
    seen.append(line)
    if text in line:
      return
  proc.kill()
  raise AssertionError(f"never saw {text!r}:\n" + "".join(seen[-40:]))
