"""Keras' `Dense` whose bias gradient is summed in float32 in mixed bfloat16.

The special case lives in `t2t_keras.perf.bias_grad`. The layer subclasses
Keras' `Dense` (same weights, names and config), so checkpoints and the T2T
import are unchanged.
"""

from __future__ import annotations

import keras

from t2t_keras.perf import bias_grad


@keras.saving.register_keras_serializable(package="t2t_keras")
class Dense(keras.layers.Dense):
  """Keras' `Dense` computed by `perf.bias_grad.dense`.

  Call arguments:
    inputs: `[batch, length, depth]` (any rank >= 2).
  Returns:
    `[batch, length, units]` in the compute dtype.
  """

  def call(self, inputs, training=None):
    return bias_grad.dense(self, inputs, training)
