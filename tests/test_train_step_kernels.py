"""Every op of the train step has a GPU kernel for its dtype, checked statically.

No GPU here, but the installed TensorFlow is the CUDA build: its kernel registry lists
every GPU kernel (`t2t_keras/perf/gpu_kernels.py`). One step is traced per case, float32, mixed
bfloat16 and mixed float16 on one device, and MirroredStrategy over 2 logical CPUs
(mixed bfloat16; float32 with `jit_compile`), dropout on; XLA-compiled functions (the
fused layer norm and cross-entropy, and with jit_compile each replica's pass) must have
XLA_GPU_JIT kernels, every other op a GPU kernel. An op without one would run on the
host inside every step. The cross-device reduction on real GPUs (NCCL) is not what
logical CPU devices trace, so it is not covered here.
"""

import json
import os
import subprocess
import sys

from tests.support.env import ENV, REPO


def test_every_op_of_the_train_step_has_a_gpu_kernel(tmp_path):
  out_path = str(tmp_path / "kernels.json")
  result = subprocess.run([sys.executable, os.path.join(REPO, "tests", "scripts",
                                                        "train_step_kernels.py"), REPO, out_path],
                          env=ENV, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  cases = json.load(open(out_path, encoding="utf-8"))
  assert len(cases) == 5
  for case, found in cases.items():
    assert found["missing"] == [], (case, found["missing"][:10])
    assert found["ops"] > 1000, case  # the walk reached the model, not just the loop shell
    # layer norm and cross-entropy forward and backward, per replica (+ jit_compile's pass)
    assert found["xla_functions"] >= 4, case
  assert cases["float32/mirrored/jit=True"]["xla_functions"] > cases[
      "bfloat16/mirrored/jit=False"]["xla_functions"]
