"""T2T's variable initializers (`utils/optimize.py:get_variable_initializer`).

T2T set one initializer, chosen by `hparams.initializer` and scaled by
`hparams.initializer_gain`, as the default of the model's variable scope, so it
reached every variable created without its own initializer: the dense kernels
(attention q/k/v/output, FFN conv1/conv2) and the target-space embedding. The
symbol embedding / softmax matrix and the learned position table keep their own
N(0, hidden^-0.5); LayerNorm scales start at one, biases and offsets at zero.
"""

from __future__ import annotations

from typing import Optional

import keras

from t2t_keras.hparams import INITIALIZERS


def get_variable_initializer(initializer: str = "uniform_unit_scaling", gain: float = 1.0,
                             seed: Optional[int] = None) -> keras.initializers.Initializer:
  """The Keras initializer T2T used for `initializer` and `gain`.

  * "uniform_unit_scaling": U(-l, l), l = sqrt(3 * gain / fan_avg), i.e. variance
    gain / fan_avg with fan_avg = (fan_in + fan_out) / 2 (Glorot uniform at gain 1).
  * "normal_unit_scaling": normal with variance gain / fan_avg, truncated at two
    standard deviations (TF1's variance_scaling "normal" was the truncated one).
  * "uniform": U(-0.1 * gain, 0.1 * gain).
  * "orthogonal": a (semi-)orthogonal matrix times gain.
  * "xavier" and "" (TF's default): Glorot uniform; gain is not used, as in T2T.

  Raises:
    ValueError: for a name T2T did not define.
  """
  if initializer == "uniform_unit_scaling":
    return keras.initializers.VarianceScaling(gain, "fan_avg", "uniform", seed=seed)
  if initializer == "normal_unit_scaling":
    return keras.initializers.VarianceScaling(gain, "fan_avg", "truncated_normal", seed=seed)
  if initializer == "uniform":
    return keras.initializers.RandomUniform(-0.1 * gain, 0.1 * gain, seed=seed)
  if initializer == "orthogonal":
    return keras.initializers.Orthogonal(gain, seed=seed)
  if initializer in ("xavier", ""):
    return keras.initializers.GlorotUniform(seed=seed)
  raise ValueError(f"initializer: unknown name {initializer!r}; supported (T2T's names): "
                   f"{', '.join(map(repr, INITIALIZERS))}.")
