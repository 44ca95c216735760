"""Dropout with 16-bit random draws: Keras' dropout at half the random-number cost.

Keras' `Dropout` draws one uniform number per element in the input's dtype
(TensorFlow's `stateless_dropout`). Each float32 draw costs one 32-bit Philox
word; the generator, TensorFlow's own kernel (built for a baseline x86 ISA),
was 12% of a mixed-bfloat16 transformer_base train step on a 2-core Sapphire
Rapids (with the compare and select: ~20%). And a bfloat16 draw has 7 bits of
mantissa: `uniform < 0.1` then happens with probability 13/128 = 0.1016, not
the rate asked for.

Here each 32-bit word gives two 16-bit draws: an element is kept when its draw
`d` (uniform over 0..65535) satisfies `d >= round(rate * 65536)`, so the drop
probability is the rate to within 2^-17 (0.1 -> 6554 / 65536 = 0.100006) in
every dtype, for half the generator work. Kept elements are scaled by
`1 / (1 - rate)` as in `tf.nn.dropout`, which T2T used.

With `T2T_KERAS_PLAIN_OPS=1` dropout is TensorFlow's `stateless_dropout` with
the same seed (`dropout`), as Keras' `Dropout` runs it (`dropout_layer`).

Replicas. Keras' seed generator keeps its state in a variable, mirrored across
the replicas of a distribution strategy, so every replica would draw the same
masks. T2T built one tower per GPU with its own random ops: independent masks.
`replica_seed` folds the replica's id into the seed when there are several
replicas, so each draws its own stream, reproducible from the random seed; one
replica draws exactly as before (on either path).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from t2t_keras import perf

_DRAW_LEVELS = 1 << 16


def drop_threshold(rate: float) -> int:
  """Draws below this (out of 65536) are dropped: round(rate * 65536)."""
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"dropout rate must be in [0, 1), got {rate}.")
  return int(round(rate * _DRAW_LEVELS))


def keep_mask(shape, rate: float, seed: tf.Tensor) -> tf.Tensor:
  """Bool mask of `shape`, True with probability 1 - rate (to within 2^-17).

  The mask of `dropout`'s 16-bit draws.

  Args:
    shape: 1-D int32 shape tensor (or list).
    rate: drop probability in [0, 1).
    seed: int32 `[2]` stateless seed.
  """
  size = tf.reduce_prod(shape)
  words = tf.random.stateless_uniform([(size + 1) // 2], seed, minval=None, maxval=None,
                                      dtype=tf.uint32)
  draws = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
  return tf.reshape(draws >= tf.constant(drop_threshold(rate), tf.uint16), shape)


def dropout(x: tf.Tensor, rate: float, seed: tf.Tensor, noise_shape=None) -> tf.Tensor:
  """`x` with elements zeroed with probability `rate`, the rest scaled by 1 / (1 - rate).

  Under `perf.plain_ops()`: `tf.nn.experimental.stateless_dropout` with the same seed.

  Args:
    x: any float tensor, e.g. `[batch, length, depth]`.
    seed: int32 `[2]` stateless seed.
    noise_shape: optional shape broadcastable to `x`'s (shared mask entries).
  """
  if perf.plain_ops():
    return tf.nn.experimental.stateless_dropout(x, rate, seed, noise_shape=noise_shape)
  shape = tf.shape(x) if noise_shape is None else noise_shape
  keep = keep_mask(shape, rate, seed)
  # One multiply by a 0 / (1 / (1 - rate)) mask, forward and backward.
  mask = tf.where(keep, tf.constant(1.0 / (1.0 - rate), x.dtype), tf.constant(0.0, x.dtype))
  return x * mask


def replica_seed(seed: tf.Tensor) -> tf.Tensor:
  """int32 `[2]` `seed` for this replica: `seed` itself with one replica in sync,
  else `seed` with the replica's id (0 .. replicas - 1, across workers) folded in."""
  context = tf.distribute.get_replica_context()
  if context is None or context.num_replicas_in_sync == 1:
    return seed
  folded = tf.random.experimental.stateless_fold_in(seed, context.replica_id_in_sync_group)
  return tf.cast(folded, tf.int32)


def dropout_layer(layer: keras.layers.Dropout, inputs: tf.Tensor, training=False) -> tf.Tensor:
  """`layer`'s output: `dropout` seeded by the layer's seed generator when training.

  Keras' own `Dropout.call` (the same seed generator) under `perf.plain_ops()` with
  one replica; with several, each replica's seed is its own (`replica_seed`).

  Args:
    layer: a `keras.layers.Dropout`.
    inputs: any shape, e.g. `[batch, length, depth]`.
    training: Python bool or None (None and False: identity).
  """
  context = tf.distribute.get_replica_context()
  one_replica = context is None or context.num_replicas_in_sync == 1
  if perf.plain_ops() and one_replica:
    return keras.layers.Dropout.call(layer, inputs, training=training)
  if not training or layer.rate <= 0:
    return inputs
  # SeedGenerator keeps an int64 state; stateless ops (and XLA) take int32.
  seed = tf.cast(tf.math.floormod(layer.seed_generator.next(), tf.int32.max - 1), tf.int32)
  seed = replica_seed(seed)
  noise_shape = None
  if layer.noise_shape is not None:
    noise_shape = [tf.shape(inputs)[i] if d is None else d
                   for i, d in enumerate(layer.noise_shape)]
  return dropout(inputs, layer.rate, seed, noise_shape)
