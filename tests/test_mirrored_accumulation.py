"""MirroredStrategy replicas accumulating micro-batches train as one replica fed them joined."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.support.env import ENV, REPO
from tests.support.step_utils import LINEAR_ADAM, assert_same_training

STEPS = 20  # the micro-batches alternate 2 shapes (XLA compiles each on each replica)
# The summed gradient's norm is ~0.3: a clip of 0.1 is active at every step.
ACCUMULATE_HPARAMS = (LINEAR_ADAM + ",num_hidden_layers=1,weight_decay=0.1,clip_grad_norm=0.1,"
                      "optimizer_multistep_accumulate_steps=2")


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_two_replicas_accumulating_equal_one_replica_on_the_concatenated_batches(tmp_path, jit):
  """MirroredStrategy (2 logical CPUs), 2 micro-batches a step, weight decay, active
  clipping: per-step loss and grad_norm and the final weights equal one replica's
  fed, as micro-batch k, the rows of both replicas' micro-batch k. With XLA
  (`jit_compile`, the replicas only) the same: XLA fuses the float32 sums in
  another order, a relative 1e-7 per op, far inside the tolerances below."""
  out_path = str(tmp_path / "mirrored.npz")
  steps = STEPS
  out = subprocess.run([sys.executable, os.path.join(REPO, "tests", "scripts",
                                                     "mirrored_accumulate_steps.py"),
                        REPO, ACCUMULATE_HPARAMS, str(steps), out_path] + ["jit"] * jit,
                       env=ENV, capture_output=True, text=True, timeout=400)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  got = np.load(out_path)
  assert int(got["replicas"]) == 2
  assert int(got["mirrored_step"]) == int(got["single_step"]) == steps
  # Clipping was active at every step (the norm reported is before clipping).
  assert np.all(got["single_grad_norm"] > 0.1 * 1.5), got["single_grad_norm"]
  np.testing.assert_allclose(got["mirrored_loss"], got["single_loss"], rtol=1e-5)
  np.testing.assert_allclose(got["mirrored_grad_norm"], got["single_grad_norm"], rtol=1e-5)
  n = len([k for k in got.files if k.startswith("start_")])
  assert_same_training([got[f"single_{i}"] for i in range(n)],
                       [got[f"mirrored_{i}"] for i in range(n)],
                       [got[f"start_{i}"] for i in range(n)], steps)
