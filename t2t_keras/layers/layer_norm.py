"""T2T's layer norm: Keras' `LayerNormalization` over the last axis, T2T's epsilon.

Training runs through `t2t_keras.perf.layer_norm` (one fused kernel forward,
one backward). The layer subclasses Keras' `LayerNormalization` (same weights,
names and config), so checkpoints and the T2T import are unchanged.
"""

from __future__ import annotations

import keras

from t2t_keras.perf import layer_norm


@keras.saving.register_keras_serializable(package="t2t_keras")
class LayerNorm(keras.layers.LayerNormalization):
  """Keras' `LayerNormalization` over the last axis, computed by `perf.layer_norm.layer_norm`.

  Its scale and offset stay float32 in a model whose weights are bfloat16 (the
  "bfloat16" policy becomes "mixed_bfloat16"): Keras never autocasts them, so
  the norm computes as in the model's mixed-precision twin.

  Call arguments:
    inputs: `[batch, length, depth]`.
    training: fused XLA forward/backward when true, Keras' ops otherwise.
  Returns:
    `[batch, length, depth]` in the compute dtype.
  """

  def __init__(self, epsilon: float = 1e-6, **kwargs):
    if (kwargs.get("axis", -1) not in (-1, [-1]) or kwargs.get("rms_scaling")
        or not kwargs.get("center", True) or not kwargs.get("scale", True)):
      raise ValueError("LayerNorm normalizes the last axis with scale and bias (T2T's); "
                       f"got {kwargs}.")
    kwargs.pop("axis", None)
    policy = keras.dtype_policies.get(kwargs.get("dtype") or keras.config.dtype_policy())
    if policy.name == "bfloat16":
      kwargs["dtype"] = "mixed_bfloat16"
    super().__init__(epsilon=epsilon, **kwargs)

  def call(self, inputs, training=None):
    return layer_norm.layer_norm(self, inputs, training)
