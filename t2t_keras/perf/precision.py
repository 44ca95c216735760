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

from t2t_keras.perf import cpu_info

POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}

_warned_slow_bfloat16 = False  # the warning is given once per process


# hparams.activation_dtype (T2T's name) -> the --mixed_precision mode it selects.
MODE_OF_ACTIVATION_DTYPE = {"float32": "none", "bfloat16": "bfloat16", "float16": "float16"}


def mode_for(activation_dtype: str, flag_mode: str, flag_given: bool) -> str:
  """The mixed-precision mode of a run: hparams.activation_dtype's, or --mixed_precision's.

  activation_dtype "float32" (T2T's default) leaves the choice to --mixed_precision;
  "bfloat16" / "float16" select that mode, and an explicit --mixed_precision must
  then name the same one.

  Raises:
    ValueError: --mixed_precision was given and disagrees with activation_dtype.
  """
  wanted = MODE_OF_ACTIVATION_DTYPE[activation_dtype]
  if activation_dtype == "float32":
    return flag_mode
  if flag_given and flag_mode != wanted:
    raise ValueError(f"--mixed_precision={flag_mode} disagrees with hparams.activation_dtype="
                     f"{activation_dtype}, which trains with --mixed_precision={wanted}; drop "
                     f"the flag or give --mixed_precision={wanted}.")
  return wanted


def set_tf32(allow: Optional[bool]) -> None:
  """TensorFloat-32 for float32 matmuls and convolutions on GPUs that have it (A100,
  H100): None keeps TensorFlow's default (on); False computes float32 as float32, as
  T2T's float32 did on the GPUs of its time (they had no TF32). No effect on CPUs."""
  if allow is not None:
    tf.config.experimental.enable_tensor_float_32_execution(allow)


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
