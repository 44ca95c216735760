#!/usr/bin/env bash
# Runs pytest in-process under QEMU's user-mode emulation of another x86-64 CPU, so that
# TensorFlow and oneDNN see that CPU's instruction sets (CPUID) and pick its kernels:
# e.g. EPYC-Milan (Zen 3) has AVX2 but no AVX-512, so bfloat16 matmuls fall back to
# Eigen there. Subprocesses that the tests start run natively. About 20x slower than
# native: give it the test files that matter.
#
#   tests/scripts/pytest_on_emulated_cpu.sh EPYC-Milan tests/test_dense.py
#
# Needs qemu-user (Debian/Ubuntu: apt-get install qemu-user; QEMU >= 7.2 emulates AVX2);
# `qemu-x86_64 -cpu help` lists the CPU models.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 CPU_MODEL [pytest arguments...]" >&2
  exit 2
fi
cpu="$1"; shift
cd "$(dirname "$0")/../.."
if ! command -v qemu-x86_64 >/dev/null; then
  echo "$0: qemu-x86_64 not found; install it: apt-get install qemu-user" >&2
  exit 2
fi
# QEMU warns once per CPUID feature it cannot emulate (xsavec, ...): not our concern.
PY=${PY:-.venv/bin/python}  # the interpreter to emulate (cpu_matrix.sh passes its own)
exec qemu-x86_64 -cpu "$cpu" "$PY" -m pytest -p no:cacheprovider "$@" \
  2> >(grep -v "TCG doesn't support requested feature" >&2)
