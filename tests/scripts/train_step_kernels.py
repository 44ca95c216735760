"""Ops of the train step without a GPU kernel for their dtypes, per precision and strategy.

  python tests/scripts/train_step_kernels.py <repo> <out.json>

Run as a script: logical devices must be configured before TensorFlow starts.
For each case (precision, strategy, jit_compile) a small Transformer takes one
train step (`Trainer.train_step`, dropout on); the traced step's graph and every
function it reaches are checked against the kernel registry of the installed
(CUDA) TensorFlow with `t2t_keras/perf/gpu_kernels.py`: XLA-compiled functions against
XLA_GPU_JIT kernels, the rest against GPU kernels. Writes {case: {"missing": [...],
"ops": n, "xla_functions": n}}.
"""

import json
import os
import sys

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])

sys.path.insert(0, sys.argv[1])
from t2t_keras.hparams import create_hparams  # noqa: E402
from t2t_keras.perf import gpu_kernels, precision  # noqa: E402
from t2t_keras.rundir.settings import ModelSpec  # noqa: E402
from t2t_keras.training.trainer import Trainer  # noqa: E402
from tests.support.step_utils import batches, split_rows  # noqa: E402

CASES = [("none", "one_device", False), ("bfloat16", "one_device", False),
         ("float16", "one_device", False), ("bfloat16", "mirrored", False),
         ("float32", "mirrored", True)]
results = {}
for mode, strategy_name, jit in CASES:
  precision.set_mixed_precision("none" if mode == "float32" else mode)
  strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if strategy_name == "mirrored"
              else tf.distribute.OneDeviceStrategy("/cpu:0"))
  trainer = Trainer(create_hparams("transformer_tiny", "num_hidden_layers=1"),
                    ModelSpec(40, 40, 3), strategy, jit_compile=jit)
  replicas = strategy.num_replicas_in_sync
  parts = [p for b in batches(1, seed=6) for p in split_rows(b, replicas)]
  spec = {k: tf.TensorSpec([None, None], tf.int64) for k in ("inputs", "targets")}
  dataset = tf.data.Dataset.from_generator(lambda: iter(parts), output_signature=spec)  # pylint: disable=cell-var-from-loop
  iterator = iter(strategy.distribute_datasets_from_function(lambda ctx: dataset))  # pylint: disable=cell-var-from-loop
  trainer.train_step(iterator)
  graph = trainer._train_fn.get_concrete_function(iterator).graph.as_graph_def()  # pylint: disable=protected-access
  library = gpu_kernels.graph_library(graph)
  functions = gpu_kernels.reachable_functions(library, ["__graph__"])
  xla = gpu_kernels.xla_functions(library, functions)
  missing = (gpu_kernels.missing_gpu_kernels(library, functions - xla) +
             gpu_kernels.missing_gpu_kernels(library, xla, device_types=("XLA_GPU_JIT",)))
  results[f"{mode}/{strategy_name}/jit={jit}"] = {
      "missing": [list(m[:3]) + [m[3]] for m in missing],
      "ops": sum(len(library[f].node_def) for f in functions), "xla_functions": len(xla)}
precision.set_mixed_precision("none")
with open(sys.argv[2] + ".tmp", "w", encoding="utf-8") as f:
  json.dump(results, f)
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
