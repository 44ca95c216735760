"""MirroredStrategy over 2 logical CPUs with accumulation vs one device, a few steps.

  python tests/scripts/mirrored_accumulate_steps.py <repo> <hparams> <steps> <out.npz> [jit]

With `jit` the mirrored trainer compiles its step with XLA (`jit_compile=True`),
the one device does not.

Run as a script: logical devices must be configured before TensorFlow starts.
Global micro-batch k of step s is step_utils.batches(2 * steps, seed=6, shapes=2)[2 s + k];
replica r's micro-batch k is its r-th block of rows (step_utils.split_rows), and
the one device is fed the blocks re-joined. `hparams` must accumulate 2
micro-batches. Writes both trainers' start and final weights and per-step
loss and grad_norm to <out.npz>.
"""

import os
import sys

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])

sys.path.insert(0, sys.argv[1])
from t2t_keras.hparams import create_hparams  # noqa: E402
from t2t_keras.rundir.settings import ModelSpec  # noqa: E402
from t2t_keras.training.trainer import Trainer  # noqa: E402
from tests.support.step_utils import batches, concat, run_steps, split_rows  # noqa: E402

hparams, steps, out_path = sys.argv[2], int(sys.argv[3]), sys.argv[4]
hp = create_hparams("transformer_tiny", hparams)
assert hp.optimizer_multistep_accumulate_steps == 2, hparams
spec = ModelSpec(40, 40, 3)
jit = sys.argv[5:] == ["jit"]
mirrored = Trainer(hp, spec, tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]),
                   jit_compile=jit)
single = Trainer(hp, spec, tf.distribute.OneDeviceStrategy("/cpu:0"))
single.model.set_weights(mirrored.model.get_weights())
start = [np.array(w) for w in single.model.get_weights()]
micro = batches(2 * steps, seed=6, shapes=2)
# One input pipeline: each next() hands element r to replica r.
per_replica = [block for b in micro for block in split_rows(b, 2)]
got = run_steps(mirrored, per_replica, steps)
want = run_steps(single, [concat(split_rows(b, 2)) for b in micro], steps)
arrays = {}
for name, trainer, metrics in (("mirrored", mirrored, got), ("single", single, want)):
  arrays[name + "_loss"] = [m["loss"] for m in metrics]
  arrays[name + "_grad_norm"] = [m["grad_norm"] for m in metrics]
  arrays.update({f"{name}_{i}": np.array(w) for i, w in enumerate(trainer.model.get_weights())})
arrays.update({f"start_{i}": w for i, w in enumerate(start)})
np.savez(out_path + ".tmp.npz", replicas=mirrored.strategy.num_replicas_in_sync,
         mirrored_step=mirrored.step, single_step=single.step, **arrays)
os.replace(out_path + ".tmp.npz", out_path)
