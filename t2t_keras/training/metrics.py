"""T2T's evaluation metrics as sums, so that replicas and batches add up exactly.

`metric_sums(logits, labels)` returns numerators and denominators; `finalize`
divides them. Names follow T2T's summaries: accuracy, accuracy_top5,
accuracy_per_sequence, neg_log_perplexity (and loss = its negation, the
unsmoothed token-mean cross-entropy that T2T reports in evaluation), and
perplexity = exp(loss), a language model's usual figure.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import tensorflow as tf

from data_gen.text_encoder import PAD_ID

SUM_KEYS = ("xent", "weights", "correct", "correct_top5", "sequences_correct", "sequences")


def metric_sums(logits: tf.Tensor, labels: tf.Tensor,
                weights: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
  """Per-batch sums.

  Args:
    logits: float `[batch, length, vocab]`; labels: int `[batch, length]`, 0 = PAD.
    weights: optional float32 `[batch, length]` of the positions that count
      (default: labels != 0; prepend mode: the targets part, `losses.target_weights`).
  Returns:
    dict of float32 scalars keyed by SUM_KEYS.
  """
  logits = tf.cast(logits, tf.float32)
  labels = tf.cast(labels, tf.int32)
  if weights is None:
    weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
  xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
  _, top5 = tf.math.top_k(logits, k=min(5, logits.shape[-1]))
  in_top5 = tf.cast(tf.reduce_any(tf.equal(top5, labels[..., None]), -1), tf.float32)
  # A sequence is right when no non-pad position is wrong (T2T padded_sequence_accuracy).
  wrong = tf.reduce_sum((1.0 - correct) * weights, axis=-1)
  has_tokens = tf.cast(tf.reduce_sum(weights, -1) > 0, tf.float32)
  return {
      "xent": tf.reduce_sum(xent * weights),
      "weights": tf.reduce_sum(weights),
      "correct": tf.reduce_sum(correct * weights),
      "correct_top5": tf.reduce_sum(in_top5 * weights),
      "sequences_correct": tf.reduce_sum(tf.cast(tf.equal(wrong, 0.0), tf.float32) * has_tokens),
      "sequences": tf.reduce_sum(has_tokens),
  }


def finalize(sums: Dict[str, float]) -> Dict[str, float]:
  """Metric values from accumulated sums."""
  w = max(float(sums["weights"]), 1.0)
  n = max(float(sums["sequences"]), 1.0)
  nlp = -float(sums["xent"]) / w
  # exp of the per-token loss; inf past float range (a model that has not learnt).
  perplexity = math.exp(-nlp) if -nlp < 709.0 else math.inf
  return {"loss": -nlp, "neg_log_perplexity": nlp, "perplexity": perplexity,
          "accuracy": float(sums["correct"]) / w,
          "accuracy_top5": float(sums["correct_top5"]) / w,
          "accuracy_per_sequence": float(sums["sequences_correct"]) / n}
