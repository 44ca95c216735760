"""The Keras mixed-precision policy of a process: training, decoding and export share it.

The commands set it from --mixed_precision before they build a model
(`set_mixed_precision`); the model then computes in that policy's dtype while
its weights stay float32.
"""

from __future__ import annotations

import logging
from typing import Optional

import keras
import tensorflow as tf

from t2t_keras import cpu_info

POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}

_warned_slow_bfloat16 = False  # the warning is given once per process


def set_mixed_precision(mode: str, cpuinfo: Optional[str] = None) -> None:
  """Sets the global Keras policy for `mode`: none, bfloat16 or float16.

  float16 trains with dynamic loss scaling. bfloat16 on a machine without a GPU
  whose CPU lacks native bfloat16 arithmetic (read from the CPU flags, see
  cpu_info.py) logs a warning, once: there bfloat16 is emulated and training is
  slower than in float32.

  Args:
    mode: none, bfloat16 or float16.
    cpuinfo: text of /proc/cpuinfo (read when None; tests pass a fake one).
  Raises:
    ValueError: another `mode`.
  """
  global _warned_slow_bfloat16
  if mode not in POLICIES:
    raise ValueError(f"mixed_precision must be one of {sorted(POLICIES)}, got {mode!r}.")
  keras.mixed_precision.set_global_policy(POLICIES[mode])
  if (mode == "bfloat16" and not _warned_slow_bfloat16 and
      not tf.config.list_physical_devices("GPU") and not cpu_info.native_bfloat16(cpuinfo)):
    _warned_slow_bfloat16 = True
    logging.getLogger(__name__).warning(
        "mixed_precision=bfloat16 on a CPU without native bfloat16 (%s): bfloat16 math is "
        "emulated there, so training and decoding will be slower than with "
        "mixed_precision=none.",
        cpu_info.describe(cpuinfo))
