"""What the benchmarks of bench/ share: process set-up, the header, timing, flag checks.

A benchmark imports this module before anything of the project: importing it puts
the repository on `sys.path`, so that `t2t_keras` and `data_gen` come from this
checkout. `configure_process()` then sets the process up as the commands do
(`t2t_keras.perf.process`), so that a benchmark times what the commands run; it must
run before TensorFlow loads, which is why this module imports no TensorFlow.
`print_header()` prints the CPU model and that set-up first: figures from another
CPU, or without the set-up, are not comparable.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
  sys.path.insert(0, REPO)

from t2t_keras.perf import cpu_info  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.perf import process  # noqa: E402  pylint: disable=g-import-not-at-top

_process_setup: Optional[Dict[str, str]] = None


def configure_process() -> Dict[str, str]:
  """Sets the process up as the commands do (before TensorFlow loads); returns what it did.

  Calling it again returns the first call's result.
  """
  global _process_setup
  if _process_setup is None:
    _process_setup = process.configure_process()
  return dict(_process_setup)


def after_first_step() -> None:
  """What the trainer command does after its first step (`process.keep_freed_memory`):
  a benchmark that drives `Trainer.train_step` calls it after its own first step."""
  process.keep_freed_memory()


def print_header(details: str = "") -> None:
  """Prints the CPU model, the process set-up and TensorFlow's version, then `details`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  setup = (f"process set-up (t2t_keras.perf.process): {_process_setup}" if _process_setup is not None
           else "process set-up: TensorFlow's defaults")
  print(cpu_info.describe())
  print(f"{setup}; TensorFlow {tf.__version__}" + (f"; {details}" if details else ""),
        flush=True)


def print_table_header(header: str) -> None:
  """Prints a table's column names, underlined."""
  print(header)
  print("-" * len(header), flush=True)


def require_positive(args: argparse.Namespace, names: Iterable[str]) -> argparse.Namespace:
  """`args`, after checking that each flag in `names` is at least 1."""
  for name in names:
    if getattr(args, name) < 1:
      raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}.")
  return args


def choices(name: str, value: str, allowed: Sequence[str]) -> List[str]:
  """The entries of the comma list `value` of flag `--name`, each one of `allowed`."""
  items = [v.strip() for v in value.split(",") if v.strip()]
  bad = [v for v in items if v not in allowed]
  if bad or not items:
    raise ValueError(f"--{name} entries must be among {tuple(allowed)}, got {value!r}.")
  return items


def parse_or_exit(parse_args: Callable[[Sequence[str]], argparse.Namespace],
                  argv: Sequence[str]) -> argparse.Namespace:
  """`parse_args(argv)`; a `ValueError` (a flag out of range, a missing set-up) ends the
  process with one line `<program>: error: <message>` and status 2, as argparse does."""
  try:
    return parse_args(argv)
  except ValueError as e:
    print(f"{os.path.basename(sys.argv[0])}: error: {e}", file=sys.stderr)
    raise SystemExit(2) from None


def time_calls(fn: Callable[[], Any], calls: int) -> float:
  """Seconds per call of `calls` calls of `fn`, the last one's tensor read (`.numpy()`),
  so that the work has finished when the clock stops."""
  start = time.perf_counter()
  for _ in range(calls - 1):
    fn()
  fn().numpy()
  return (time.perf_counter() - start) / calls


def time_ms(fn: Callable[[], Any], calls: int, repeats: int) -> float:
  """Median milliseconds per call of `fn` over `repeats` rounds of `calls` calls, after one
  untimed call (trace, compile)."""
  fn().numpy()
  return statistics.median(time_calls(fn, calls) * 1e3 for _ in range(repeats))


def time_pair(steps: Dict[str, Callable[[], Any]], calls: int,
              repeats: int) -> Dict[str, float]:
  """Median ms per call of each step, the steps alternating round by round (first in one
  order, then reversed), so that the machine's drift falls on all of them."""
  for step in steps.values():
    step().numpy()  # trace + compile
  rounds = {name: [] for name in steps}
  for r in range(repeats):
    order = list(steps) if r % 2 == 0 else list(steps)[::-1]
    for name in order:
      rounds[name].append(time_calls(steps[name], calls) * 1e3)
  return {name: statistics.median(v) for name, v in rounds.items()}


def print_pair_header(shape: str, calls: int, repeats: int, header: str,
                      what: str = "forward + backward") -> None:
  """`print_header` for `time_pair`'s figures (`what` is timed at `shape`), then the table's
  column names."""
  print_header(f"{shape}, {what}, median of {repeats} alternating rounds of {calls} calls")
  print_table_header(header)


def make_peak_probe(dtype: Any, n: int, count: int = 4) -> Callable[[], float]:
  """Returns a function timing `count` chained n*n*n matmuls of `dtype` (a `tf.DType`);
  it gives FLOP/s, of the faster kernel.

  Chained so that no matmul can be skipped or overlapped with another; both
  TensorFlow's own kernel and XLA's are tried, the faster one is the peak.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  a = tf.constant(rng.normal(size=(n, n)) / np.sqrt(n), dtype)
  b = tf.constant(rng.normal(size=(n, n)) / np.sqrt(n), dtype)

  def chain(x, y):
    for _ in range(count):
      x = tf.matmul(x, y)
    return tf.reduce_sum(tf.cast(x[:1, :1], tf.float32))

  fns = [tf.function(chain), tf.function(chain, jit_compile=True)]
  for fn in fns:  # trace and warm up
    fn(a, b).numpy()
  flop = 2.0 * n ** 3 * count

  def probe() -> float:
    best = 0.0
    for fn in fns:
      start = time.perf_counter()
      fn(a, b).numpy()
      best = max(best, flop / (time.perf_counter() - start))
    return best

  return probe
