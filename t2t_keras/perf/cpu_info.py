"""What the CPU is and whether it has native bfloat16, read from /proc/cpuinfo.

No TensorFlow here: the demo's budget, the trainer's mixed-precision warning
and the benchmarks all ask the same question. Every function takes the text of
/proc/cpuinfo (read when None) so that tests can pass a fake one; where the file
is absent (not Linux) the answers are "unknown" and "no native bfloat16".
"""

from __future__ import annotations

import platform
from typing import Dict, FrozenSet, Optional

CPUINFO_PATH = "/proc/cpuinfo"
# The x86 flags of the instructions that make bfloat16 matmuls faster than
# float32 ones (oneDNN uses them); without them bfloat16 is emulated via float32.
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")


def read_cpuinfo(path: Optional[str] = None) -> str:
  """The text of /proc/cpuinfo (or of `path`), or "" where it cannot be read."""
  try:
    with open(path or CPUINFO_PATH, encoding="utf-8") as f:
      return f.read()
  except OSError:
    return ""


def first_processor(cpuinfo: Optional[str] = None) -> Dict[str, str]:
  """The `key: value` fields of the first processor block of /proc/cpuinfo.

  Args:
    cpuinfo: text of /proc/cpuinfo (read when None).

  Returns:
    {field name: value}, both stripped; {} when the text has no fields.
  """
  if cpuinfo is None:
    cpuinfo = read_cpuinfo()
  fields: Dict[str, str] = {}
  for line in cpuinfo.splitlines():
    if not line.strip():
      if fields:
        break  # a blank line ends the first processor's block
      continue
    key, sep, value = line.partition(":")
    if sep:
      fields.setdefault(key.strip(), value.strip())
  return fields


def cpu_flags(cpuinfo: Optional[str] = None) -> FrozenSet[str]:
  """The first processor's `flags` (x86) or `Features` (ARM) as a set."""
  fields = first_processor(cpuinfo)
  return frozenset((fields.get("flags") or fields.get("Features") or "").split())


def cpu_model(cpuinfo: Optional[str] = None) -> str:
  """The CPU's model name with its family and model numbers where known.

  For example "AMD EPYC (family 25 model 17)". Falls back to
  `platform.processor()` and then "unknown CPU" without /proc/cpuinfo.
  """
  fields = first_processor(cpuinfo)
  name = fields.get("model name") or platform.processor() or "unknown CPU"
  if "cpu family" in fields and "model" in fields:
    return f"{name} (family {fields['cpu family']} model {fields['model']})"
  return name


def native_bfloat16(cpuinfo: Optional[str] = None) -> bool:
  """Whether the CPU has native bfloat16 arithmetic (AVX512_BF16 or AMX-BF16).

  Args:
    cpuinfo: text of /proc/cpuinfo (read when None; False where it is absent).
  """
  return bool(set(BFLOAT16_FLAGS) & cpu_flags(cpuinfo))


def bfloat16_support(cpuinfo: Optional[str] = None) -> str:
  """"yes (avx512_bf16)" or "no (no avx512_bf16/amx_bf16)": the answer and its reason."""
  found = [f for f in BFLOAT16_FLAGS if f in cpu_flags(cpuinfo)]
  if found:
    return f"yes ({'/'.join(found)})"
  return f"no (no {'/'.join(BFLOAT16_FLAGS)})"


def describe(cpuinfo: Optional[str] = None) -> str:
  """One line for benchmark output and logs.

  For example "AMD EPYC (family 25 model 17); native bfloat16: no (no
  avx512_bf16/amx_bf16)".
  """
  if cpuinfo is None:
    cpuinfo = read_cpuinfo()
  return f"{cpu_model(cpuinfo)}; native bfloat16: {bfloat16_support(cpuinfo)}"
