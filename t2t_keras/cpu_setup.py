"""Process set-up for CPU speed, applied by every command before TensorFlow loads.

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
"""

from __future__ import annotations

import os
import platform
from typing import Dict, MutableMapping, Optional

ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"

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
  """Applies the set-up once per process; returns what it did (for the benchmarks' logs)."""
  if not _applied:
    set_here = enable_onednn()
    _applied["oneDNN"] = ("turned on" if set_here else
                          f"{ONEDNN_ENV}={os.environ.get(ONEDNN_ENV, 'unset')} (left as is)")
  return dict(_applied)
