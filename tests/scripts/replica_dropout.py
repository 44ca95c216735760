"""Dropout masks of two MirroredStrategy replicas fed the same batch.

  python tests/scripts/replica_dropout.py <repo> <out.npz>

Run as a script: logical devices must be configured before TensorFlow starts.
A small Transformer with every dropout at 0.3 is built twice from one random
seed under MirroredStrategy over 2 logical CPUs; each replica computes training
logits of the same batch, in a graph and compiled with XLA (as the trainer calls
a compiled step: `training._on_replica_device`), with the speed cases and with
`T2T_KERAS_PLAIN_OPS=1`. Writes each replica's logits per case.
"""

import os
import sys

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])

sys.path.insert(0, sys.argv[1])
import keras  # noqa: E402

from t2t_keras import perf
from t2t_keras.hparams import create_hparams  # noqa: E402
from t2t_keras.rundir import model_factory, settings
from t2t_keras.training import trainer  # noqa: E402

DROPOUT = ("layer_prepostprocess_dropout=0.3,attention_dropout=0.3,relu_dropout=0.3,"
           "num_hidden_layers=1,hidden_size=32,filter_size=64,num_heads=2")
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
batch = {k: tf.constant(rng.integers(2, 40, size=(3, 7)), tf.int64) for k in ("inputs", "targets")}
arrays = {}
for plain in ("0", "1"):
  os.environ[perf.PLAIN_OPS_ENV] = plain
  for build in range(2):
    with strategy.scope():
      keras.utils.set_random_seed(1)
      model = model_factory.build_model(create_hparams("transformer_tiny", DROPOUT),
                                  settings.ModelSpec(40, 40, 3))
    for jit in (False, True):
      logits = lambda b: model(b, training=True)  # noqa: E731
      if jit:
        logits = trainer._on_replica_device(tf.function(logits, jit_compile=True))  # pylint: disable=protected-access
      out = tf.function(lambda b: strategy.run(logits, args=(b,)))(batch)  # pylint: disable=cell-var-from-loop
      for r, value in enumerate(strategy.experimental_local_results(out)):
        arrays[f"plain{plain}_build{build}_jit{int(jit)}_replica{r}"] = value.numpy()
np.savez(sys.argv[2] + ".tmp.npz", **arrays)
os.replace(sys.argv[2] + ".tmp.npz", sys.argv[2])
