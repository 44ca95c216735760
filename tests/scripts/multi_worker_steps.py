"""One MultiWorkerMirroredStrategy worker (TF_CONFIG) trains a few steps on fixed batches.

  python tests/scripts/multi_worker_steps.py <repo> <hparams> <steps> <out.npz> [jit]

With `jit` the step is compiled with XLA (`jit_compile=True`).
Global batch k is step_utils.batches(steps, seed=4, shapes=4)[k]; worker i of n feeds its
i-th block of rows (step_utils.split_rows). The chief writes the initial and final
weights and each step's loss and grad_norm to <out.npz>.
"""

import sys

sys.path.insert(0, sys.argv[1])
from t2t_keras.perf import process  # noqa: E402

process.configure_process()

import json  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402

from t2t_keras.hparams import create_hparams  # noqa: E402
from t2t_keras.rundir.settings import ModelSpec  # noqa: E402
from t2t_keras.training.trainer import Trainer, create_strategy  # noqa: E402
from tests.support.step_utils import batches, run_steps, split_rows  # noqa: E402

hparams, steps, out_path = sys.argv[2], int(sys.argv[3]), sys.argv[4]
strategy = create_strategy("multi_worker_mirrored")
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
workers = strategy.num_replicas_in_sync
trainer = Trainer(create_hparams("transformer_tiny", hparams), ModelSpec(40, 40, 3), strategy,
                  jit_compile=sys.argv[5:] == ["jit"])
start = [np.array(w) for w in trainer.model.get_weights()]
mine = [split_rows(b, workers)[task] for b in batches(steps, seed=4, shapes=4)]
metrics = run_steps(trainer, mine, steps)
if task == 0:
  arrays = {f"start_{i}": w for i, w in enumerate(start)}
  arrays.update({f"final_{i}": np.array(w) for i, w in enumerate(trainer.model.get_weights())})
  np.savez(out_path + ".tmp.npz", loss=[m["loss"] for m in metrics],
           grad_norm=[m["grad_norm"] for m in metrics], **arrays)
  os.replace(out_path + ".tmp.npz", out_path)
print(f"WORKER {task} OF {workers} DONE", flush=True)
