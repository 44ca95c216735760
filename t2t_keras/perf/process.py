"""Process set-up for CPU speed, applied by every command before TensorFlow loads.

`configure_process` is called explicitly, first thing, by the commands' runner
(`t2t_keras.cli.common_flags.run_cli`), by `tests/conftest.py` and by the
benchmarks; importing this module changes nothing. `keep_freed_memory` is
passed by the trainer command to the training loop
(`training.schedules.Experiment(after_first_step=...)`), which calls it once after the
first step; the library itself never imports this module.

With `T2T_KERAS_PLAIN_OPS=1` (`t2t_keras.perf.plain_ops`) both are stock:
`TF_ENABLE_ONEDNN_OPTS` is left as it is (unset: TensorFlow's own choice) and
glibc's malloc settings are not touched. `configure_process` also checks that
variable, so that a bad value stops a command before TensorFlow loads.

TensorFlow turns its oneDNN kernels on by itself only on x86 CPUs with AVX-512
VNNI/bfloat16 or AMX; on AVX2-only CPUs it falls back to Eigen's matmuls, whose
operand packing alone took ~10% of the transformer_base training step there
(perf, AMD EPYC Zen 3), and whose worker threads returned and re-faulted their
activation buffers every step (1.7 million page faults per step). With oneDNN
the same step ran 1.4x faster. So every command (and `bench/`, which times what
the commands run) sets `TF_ENABLE_ONEDNN_OPTS=1` on x86-64 unless the user has
set the variable: `TF_ENABLE_ONEDNN_OPTS=0` keeps TensorFlow's Eigen kernels.

Nothing here imports TensorFlow: it must run before TensorFlow reads its
environment.

`keep_freed_memory` (called once after the first training step) undoes a
side effect of tf.data on glibc. In TensorFlow 2.21 under Python 3.11, the
first `GeneratorDataset` kernel a process builds (tf.distribute's input
iterators build one) calls `mallopt(M_MMAP_THRESHOLD, 128 KiB)`
(`ApplyPython311MemoryPatch`, against a memory growth under Python 3.11:
tensorflow/tensorflow#62551). A fixed threshold
also stops glibc's own adjustment, so from then on every block of 128 KiB or
more (oneDNN's float32 matmul packing buffers of 2.2-16 MB, Eigen's scratch
blocks) is a fresh `mmap` that the kernel zero-fills page by page and `munmap`s
on free: about 50-67 thousand page faults and 0.25 s of system time per float32
transformer_base train step on a 2-core Zen 5 (`resource.getrusage`). Setting
the thresholds where glibc's dynamic adjustment would have taken them (mmap
above 32 MiB, its maximum; trim above 64 MiB) keeps those buffers in the heap:
1,000-1,800 faults and 0.09-0.11 s a step, for some 30 MiB more resident memory.
A user's own `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` or
`glibc.malloc` tunables are left in force.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Dict, Mapping, MutableMapping, Optional

from t2t_keras import perf

ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
# glibc's mallopt parameters (malloc.h) and the values keep_freed_memory sets.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEEP_MMAP_THRESHOLD = 32 << 20  # glibc's maximum on 64-bit (HEAP_MAX_SIZE / 2)
KEEP_TRIM_THRESHOLD = 64 << 20  # 2x the mmap threshold, as glibc's adjustment keeps it
# Environment settings through which a user chooses glibc's malloc behaviour.
MALLOC_USER_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

_applied: Dict[str, str] = {}


def _is_x86_64(machine: Optional[str] = None) -> bool:
  return (machine if machine is not None else platform.machine()).lower() in (
      "x86_64", "amd64")


def enable_onednn(environ: Optional[MutableMapping[str, str]] = None,
                  machine: Optional[str] = None) -> bool:
  """Sets TF_ENABLE_ONEDNN_OPTS=1 on x86-64 unless already set; True if it set it."""
  environ = os.environ if environ is None else environ
  if ONEDNN_ENV in environ or not _is_x86_64(machine):
    return False
  environ[ONEDNN_ENV] = "1"
  return True


def configure_process() -> Dict[str, str]:
  """Applies the set-up once per process; returns what it did (for the benchmarks' logs).

  Must run before TensorFlow is first imported: TensorFlow reads
  `TF_ENABLE_ONEDNN_OPTS` when it loads, and ignores later changes.

  Raises:
    ValueError: `T2T_KERAS_PLAIN_OPS` has a value other than 1/0 (and their
      spellings), with a message saying what to set.
  """
  plain = perf.plain_ops()  # checked on every call: a bad value is refused early
  if not _applied:
    if plain:
      _applied["oneDNN"] = (f"{ONEDNN_ENV}={os.environ.get(ONEDNN_ENV, 'unset')} "
                            f"(left as is: {perf.PLAIN_OPS_ENV})")
    else:
      set_here = enable_onednn()
      _applied["oneDNN"] = ("turned on" if set_here else
                            f"{ONEDNN_ENV}={os.environ.get(ONEDNN_ENV, 'unset')} (left as is)")
  return dict(_applied)


def _glibc() -> Optional[ctypes.CDLL]:
  """The process's glibc, or None (another C library, or not Linux)."""
  if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
    return None
  try:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc
  except (OSError, AttributeError):
    return None


def user_chose_malloc(environ: Optional[Mapping[str, str]] = None) -> bool:
  """Whether the environment sets glibc's malloc thresholds or tunables."""
  environ = os.environ if environ is None else environ
  return (any(name in environ for name in MALLOC_USER_ENV)
          or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""))


def keep_freed_memory(libc=None, environ: Optional[Mapping[str, str]] = None) -> bool:
  """Keeps freed blocks below 32 MiB in glibc's heap for reuse (see the module docstring).

  Args:
    libc: an object with glibc's `mallopt(param, value)`; None: the process's glibc.
    environ: the environment (None: os.environ); if it sets glibc's malloc
      thresholds or tunables, nothing is changed.
  Returns:
    True if both thresholds were set; False with `T2T_KERAS_PLAIN_OPS=1`.
  """
  if perf.plain_ops() or user_chose_malloc(environ):
    return False
  libc = _glibc() if libc is None else libc
  if libc is None:
    return False
  return (libc.mallopt(M_MMAP_THRESHOLD, KEEP_MMAP_THRESHOLD) == 1 and
          libc.mallopt(M_TRIM_THRESHOLD, KEEP_TRIM_THRESHOLD) == 1)
