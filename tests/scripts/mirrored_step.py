"""One MirroredStrategy step over 2 logical CPUs vs one device over the same batch.

Run as a script: logical devices must be configured before TensorFlow starts.
Prints the max absolute weight difference.
"""

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
from tests.support.step_utils import LINEAR_ADAM, batches, one_step  # noqa: E402

hp = create_hparams("transformer_tiny", LINEAR_ADAM)
spec = ModelSpec(40, 40, 3)
a, b = batches(2, seed=0)
mirrored = Trainer(hp, spec, tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
single = Trainer(hp, spec, tf.distribute.OneDeviceStrategy("/cpu:0"))
single.model.set_weights(mirrored.model.get_weights())
start = [np.array(w) for w in single.model.get_weights()]
one_step(mirrored, [a, b])
from tests.support.step_utils import concat  # noqa: E402

one_step(single, [concat([a, b])])
diff = max(np.abs(x - y).max() for x, y in zip(mirrored.model.get_weights(),
                                               single.model.get_weights()))
moved = max(np.abs(x - y).max() for x, y in zip(start, single.model.get_weights()))
print(f"REPLICAS {mirrored.strategy.num_replicas_in_sync} DIFF {diff:.3e} MOVED {moved:.3e}")
