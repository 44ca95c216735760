"""Feed-forward block and T2T's layer_preprocess / layer_postprocess sequences."""

from __future__ import annotations

from typing import Sequence

import keras

from t2t_keras.layers.dense import Dense
from t2t_keras.layers.dropout import Dropout, noise_shape
from t2t_keras.layers.initializers import get_variable_initializer
from t2t_keras.layers.layer_norm import LayerNorm


@keras.saving.register_keras_serializable(package="t2t_keras")
class DenseReluDense(keras.layers.Layer):
  """T2T `dense_relu_dense`: dense(filter, relu, bias) -> dropout -> dense(hidden, bias).

  Kernels use T2T's `initializer` / `initializer_gain`; biases start at zero.
  `relu_dropout_broadcast_dims` (dims of the hidden `[batch, length, filter]`)
  share the dropout mask along them, as T2T without its pad remover (on XLA; on
  GPU T2T flattened the batch's non-pad tokens into one row first, so dim 1
  there also shared one mask across the batch's examples).

  Call arguments:
    x: `[batch, length, hidden_size]`.
  Returns:
    `[batch, length, output_size]`.
  """

  def __init__(self, filter_size: int, output_size: int, relu_dropout: float = 0.0,
               initializer: str = "uniform_unit_scaling", initializer_gain: float = 1.0,
               relu_dropout_broadcast_dims: Sequence[int] = (), **kwargs):
    super().__init__(**kwargs)
    self.filter_size = filter_size
    self.output_size = output_size
    self.relu_dropout = relu_dropout
    self.relu_dropout_broadcast_dims = tuple(relu_dropout_broadcast_dims)
    self.initializer = initializer
    self.initializer_gain = initializer_gain
    get_variable_initializer(initializer, initializer_gain)  # Validates the name.

  def build(self, input_shape):
    # Names follow T2T's historical "conv1"/"conv2".
    kernel = lambda: get_variable_initializer(self.initializer, self.initializer_gain)
    self.conv1 = Dense(self.filter_size, activation="relu", kernel_initializer=kernel(),
                       name="conv1", dtype=self.dtype_policy)
    self.conv2 = Dense(self.output_size, kernel_initializer=kernel(),
                       name="conv2", dtype=self.dtype_policy)
    self.conv1.build(input_shape)
    self.conv2.build(tuple(input_shape[:-1]) + (self.filter_size,))
    self.dropout = Dropout(self.relu_dropout,
                           noise_shape=noise_shape(self.relu_dropout_broadcast_dims, 3),
                           dtype=self.dtype_policy)

  def call(self, x, training=None):
    h = self.dropout(self.conv1(x, training=training), training=training)
    return self.conv2(h, training=training)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[:-1]) + (self.output_size,)

  def get_config(self):
    config = super().get_config()
    config.update(filter_size=self.filter_size, output_size=self.output_size,
                  relu_dropout=self.relu_dropout, initializer=self.initializer,
                  initializer_gain=self.initializer_gain,
                  relu_dropout_broadcast_dims=self.relu_dropout_broadcast_dims)
    return config


@keras.saving.register_keras_serializable(package="t2t_keras")
class LayerPrepostprocess(keras.layers.Layer):
  """T2T's `layer_prepostprocess`: apply a sequence of "a", "d", "n", "z" ops.

  "a" adds the residual `previous`, "z" adds zero (a no-op kept for override
  compatibility), "n" is LayerNorm (epsilon from hparams), "d" is dropout; the
  literal "none" is the identity. `broadcast_dims` (of `[batch, length, depth]`)
  share the dropout mask along them (T2T's
  `layer_prepostprocess_dropout_broadcast_dims`). Pre-norm uses "n" before and "da" after each
  sublayer; the paper's post-norm uses "none" before and "dan" after.

  Call arguments:
    previous: `[batch, length, depth]` residual input (needed for "a"), or None.
    x: `[batch, length, depth]`.
  Returns:
    `[batch, length, depth]`.
  """

  def __init__(self, sequence: str, dropout: float = 0.0, epsilon: float = 1e-6,
               broadcast_dims: Sequence[int] = (), **kwargs):
    super().__init__(**kwargs)
    if sequence != "none" and set(sequence) - set("adnz"):
      raise ValueError(f"sequence must be 'none' or letters from 'adnz', got {sequence!r}.")
    self.sequence = sequence
    self.dropout_rate = dropout
    self.epsilon = epsilon
    self.broadcast_dims = tuple(broadcast_dims)

  def build(self, input_shape):
    if self.sequence == "none":
      return
    for i, op in enumerate(self.sequence):
      if op == "n":
        # An attribute per norm: TF checkpoints do not follow Keras' list wrappers.
        norm = LayerNorm(epsilon=self.epsilon, name=f"layer_norm_{i}", dtype=self.dtype_policy)
        norm.build(input_shape)
        setattr(self, f"layer_norm_{i}", norm)
    self.dropout = Dropout(self.dropout_rate, noise_shape=noise_shape(self.broadcast_dims, 3),
                           dtype=self.dtype_policy)

  def call(self, previous, x, training=None):
    if self.sequence == "none":
      return x
    for i, op in enumerate(self.sequence):
      if op == "a":
        if previous is None:
          raise ValueError("sequence contains 'a' but no residual input was given.")
        x = x + previous
      elif op == "n":
        x = getattr(self, f"layer_norm_{i}")(x, training=training)
      elif op == "d":
        x = self.dropout(x, training=training)
    return x

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    config = super().get_config()
    config.update(sequence=self.sequence, dropout=self.dropout_rate, epsilon=self.epsilon,
                  broadcast_dims=self.broadcast_dims)
    return config
