"""Dropout with 16-bit random draws (`t2t_keras.perf.dropout`).

The layer subclasses Keras' `Dropout` (same config, same seed generator and
state variable), so models and checkpoints are unchanged.
"""

from __future__ import annotations

import keras

from t2t_keras.perf import dropout


class Dropout(keras.layers.Dropout):
  """`keras.layers.Dropout` computed by `perf.dropout.dropout_layer`.

  Call arguments:
    inputs: any shape, e.g. `[batch, length, depth]`.
    training: Python bool or None (None and False: identity).
  """

  def call(self, inputs, training=False):
    return dropout.dropout_layer(self, inputs, training)
