"""Dropout with 16-bit random draws (`t2t_keras.perf.dropout`).

The layer subclasses Keras' `Dropout` (same config, same seed generator and
state variable), so models and checkpoints are unchanged. `noise_shape` gives
T2T's broadcast dims (`common_layers.dropout_with_broadcast_dims`).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import keras

from t2t_keras.perf import dropout


def noise_shape(broadcast_dims: Sequence[int], rank: int) -> Optional[Tuple[Optional[int], ...]]:
  """Keras' `noise_shape` sharing a dropout mask along `broadcast_dims` of rank-`rank`
  inputs: 1 on those dims, None (the input's size) elsewhere; None for no dims.

  As T2T's `dropout_with_broadcast_dims`: a negative dim counts from the end.
  """
  if not broadcast_dims:
    return None
  shared = {dim % rank for dim in broadcast_dims}
  return tuple(1 if i in shared else None for i in range(rank))


@keras.saving.register_keras_serializable(package="t2t_keras")
class Dropout(keras.layers.Dropout):
  """`keras.layers.Dropout` computed by `perf.dropout.dropout_layer`.

  Call arguments:
    inputs: any shape, e.g. `[batch, length, depth]`.
    training: Python bool or None (None and False: identity).
  """

  def call(self, inputs, training=False):
    return dropout.dropout_layer(self, inputs, training)
