"""T2T's label-smoothed, padding-weighted cross-entropy (`common_layers`).

`padded_cross_entropy` returns the numerator and denominator separately so that
the trainer can sum them over micro-batches and replicas and divide once:
T2T's loss of a step is sum(token losses) / sum(non-pad weights) over all GPUs.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import tensorflow as tf

from data_gen.text_encoder import PAD_ID
from t2t_keras.perf import xent as xent_lib


def smoothing_normalizer(vocab_size: int, label_smoothing: float) -> float:
  """Entropy of the smoothed target distribution (T2T's `normalizing` constant).

  Subtracting it makes a perfect prediction cost 0; it does not change gradients.
  """
  confidence = 1.0 - label_smoothing
  low = (1.0 - confidence) / (vocab_size - 1)
  return -(confidence * math.log(confidence) + (vocab_size - 1) * low * math.log(low + 1e-20))


def smoothing_cross_entropy(logits: tf.Tensor, labels: tf.Tensor,
                            label_smoothing: float) -> tf.Tensor:
  """Per-token cross-entropy against smoothed one-hot targets.

  The gold class gets 1 - label_smoothing and every other class, PAD included,
  label_smoothing / (vocab - 1), as in T2T. Computed in closed form, never
  building the `[batch, length, vocab]` soft targets, by
  `t2t_keras.perf.xent.smoothed_xent`; the gradient comes back in the logits' dtype.

  Args:
    logits: `[batch, length, vocab]` (any float dtype; computed in float32).
    labels: `[batch, length]` int ids.
  Returns:
    float32 `[batch, length]`.
  """
  vocab_size = logits.shape[-1]
  confidence = 1.0 - label_smoothing
  low = (1.0 - confidence) / (vocab_size - 1)
  xent = xent_lib.smoothed_xent(logits, tf.cast(labels, tf.int32), confidence, low)
  return xent - smoothing_normalizer(vocab_size, label_smoothing)


def weights_nonzero(labels: tf.Tensor) -> tf.Tensor:
  """T2T's `weights_nonzero`: float32 1.0 at every label but PAD (0)."""
  return tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)


def weights_prepend_inputs_to_targets(labels: tf.Tensor) -> tf.Tensor:
  """T2T's `weights_prepend_inputs_to_targets`: 1.0 at the non-PAD labels past
  the first 0 of each row (the targets part of [inputs, 0, targets]).

  Args:
    labels: int `[batch, length]`.
  Returns:
    float32 `[batch, length]`.
  """
  past_first_zero = tf.cumsum(tf.cast(tf.equal(labels, PAD_ID), tf.float32), axis=1)
  return tf.cast(tf.not_equal(past_first_zero * tf.cast(labels, tf.float32), 0.0), tf.float32)


def target_weights(labels: tf.Tensor, prepend_mode: str, training: bool) -> tf.Tensor:
  """The loss weights T2T's `T2TModel` takes for `labels` `[batch, length]`.

  As T2T: with prepend_inputs_full_attention always, and with
  prepend_inputs_masked_attention outside training, only the targets part
  counts (`weights_prepend_inputs_to_targets`); else every non-PAD label.
  """
  if prepend_mode == "prepend_inputs_full_attention" or (
      prepend_mode == "prepend_inputs_masked_attention" and not training):
    return weights_prepend_inputs_to_targets(labels)
  return weights_nonzero(labels)


def padded_cross_entropy(logits: tf.Tensor, labels: tf.Tensor, label_smoothing: float,
                         weights: Optional[tf.Tensor] = None) -> Tuple[tf.Tensor, tf.Tensor]:
  """Sum of smoothed token losses and sum of weights (default: labels != 0).

  Args:
    logits: `[batch, length, vocab]`; labels: `[batch, length]`, 0 = PAD.
    weights: optional float32 `[batch, length]` (`target_weights`).
  Returns:
    (float32 scalar loss numerator, float32 scalar weight sum).
  """
  if weights is None:
    weights = weights_nonzero(labels)
  xent = smoothing_cross_entropy(logits, labels, label_smoothing)
  return tf.reduce_sum(xent * weights), tf.reduce_sum(weights)
