"""Two MultiWorkerMirroredStrategy workers train as one device fed both halves at once."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from t2t_keras.hparams import create_hparams
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support.env import ENV, REPO, free_ports
from tests.support.step_utils import (LINEAR_ADAM, SPEC, assert_same_training, batches, concat,
                                      run_steps, split_rows)

SCRIPT = os.path.join(REPO, "tests", "scripts", "multi_worker_steps.py")
STEPS = 20  # the batches cycle through 4 shapes (XLA compiles each on each worker)
# Weight decay and an active clip (the summed gradient's norm is ~0.3) take part.
HPARAMS = LINEAR_ADAM + ",num_hidden_layers=1,weight_decay=0.1,clip_grad_norm=0.1"
_PORT_TAKEN = ("Address already in use", "Failed to add port", "bind")


def _run_two_workers(out_path, jit):
  """Both workers to the end; retried with new ports if one was taken meanwhile."""
  for _ in range(3):
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    procs = [subprocess.Popen(
        [sys.executable, SCRIPT, REPO, HPARAMS, str(STEPS), out_path] + ["jit"] * jit,
        env=dict(ENV, TF_CONFIG=json.dumps({"cluster": cluster,
                                            "task": {"type": "worker", "index": i}})),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    try:
      outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
      for p in procs:
        if p.poll() is None:
          p.kill()
          p.wait()
    if all(p.returncode == 0 for p in procs):
      return outputs
    if not any(m in out for out in outputs for m in _PORT_TAKEN):
      break
  raise AssertionError("\n----\n".join(out[-3000:] for out in outputs))


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_two_workers_equal_one_device_on_the_concatenated_batches(tmp_path, jit):
  """20 steps of 2 worker processes (with XLA: each worker's step compiled) against
  one device in a graph fed both workers' rows."""
  out_path = str(tmp_path / "chief.npz")
  outputs = _run_two_workers(out_path, jit)
  assert all(f"WORKER {i} OF 2 DONE" in out for i, out in enumerate(outputs)), outputs
  got = np.load(out_path)
  n = len([k for k in got.files if k.startswith("start_")])
  single = Trainer(create_hparams("transformer_tiny", HPARAMS), SPEC,
                   create_strategy("one_device"))
  single.model.set_weights([got[f"start_{i}"] for i in range(n)])
  # The one device sees the workers' blocks re-joined: the same rows, padded alike.
  want = run_steps(single, [concat(split_rows(b, 2)) for b in batches(STEPS, seed=4, shapes=4)], STEPS)
  final = single.model.get_weights()
  assert len(final) == n
  # Clipping was active at every step, so each update has the clip's norm.
  assert all(m["grad_norm"] > 0.1 * 1.5 for m in want), want
  np.testing.assert_allclose(got["loss"], [m["loss"] for m in want], rtol=1e-5)
  np.testing.assert_allclose(got["grad_norm"], [m["grad_norm"] for m in want], rtol=1e-5)
  assert_same_training(final, [got[f"final_{i}"] for i in range(n)],
                       [got[f"start_{i}"] for i in range(n)], STEPS)
