"""T2T's evaluation metrics as sums, so that replicas and batches add up exactly.

`metric_sums(logits, labels)` returns numerators and denominators; `finalize`
divides them. Names follow T2T's summaries: accuracy, accuracy_top5,
accuracy_per_sequence, neg_log_perplexity (and loss = its negation, the
unsmoothed token-mean cross-entropy that T2T reports in evaluation), and
perplexity = exp(loss), a language model's usual figure; approx_bleu is T2T's
approx_bleu_score (`utils/bleu_hook.bleu_score`): BLEU (0 to 1, T2T's
`compute_bleu`: 4-grams, its smoothing of orders without a match) of the
teacher-forced argmax against the targets, on ids. T2T averaged one BLEU per
batch over the batches and counted padding as tokens; here its n-gram counts are
sums, so the value is one corpus BLEU over every non-pad target position of the
dev set, the same whatever the batching or the number of replicas.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import tensorflow as tf

from data_gen.text_encoder import PAD_ID

BLEU_ORDER = 4  # T2T's compute_bleu max_order
BLEU_KEYS = tuple(f"bleu_{kind}_{n}" for kind in ("matches", "possible")
                  for n in range(1, BLEU_ORDER + 1))
SUM_KEYS = ("xent", "weights", "correct", "correct_top5", "sequences_correct",
            "sequences") + BLEU_KEYS


def metric_sums(logits: tf.Tensor, labels: tf.Tensor,
                weights: Optional[tf.Tensor] = None,
                segments: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
  """Per-batch sums.

  Args:
    logits: float `[batch, length, vocab]`; labels: int `[batch, length]`, 0 = PAD.
    weights: optional float32 `[batch, length]` of the positions that count
      (default: labels != 0; prepend mode: the targets part, `losses.target_weights`).
    segments: optional int `[batch, length]` example ids of packed rows
      (`targets_segmentation`): n-grams stay within one example.
  Returns:
    dict of float32 scalars keyed by SUM_KEYS.
  """
  logits = tf.cast(logits, tf.float32)
  labels = tf.cast(labels, tf.int32)
  if weights is None:
    weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
  xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels),
                    tf.float32)
  _, top5 = tf.math.top_k(logits, k=min(5, logits.shape[-1]))
  in_top5 = tf.cast(tf.reduce_any(tf.equal(top5, labels[..., None]), -1), tf.float32)
  # A sequence is right when no non-pad position is wrong (T2T padded_sequence_accuracy).
  wrong = tf.reduce_sum((1.0 - correct) * weights, axis=-1)
  has_tokens = tf.cast(tf.reduce_sum(weights, -1) > 0, tf.float32)
  argmax = tf.argmax(logits, -1, output_type=tf.int32)
  return {
      **bleu_sums(argmax, labels, weights > 0, segments),
      "xent": tf.reduce_sum(xent * weights),
      "weights": tf.reduce_sum(weights),
      "correct": tf.reduce_sum(correct * weights),
      "correct_top5": tf.reduce_sum(in_top5 * weights),
      "sequences_correct": tf.reduce_sum(tf.cast(tf.equal(wrong, 0.0), tf.float32) * has_tokens),
      "sequences": tf.reduce_sum(has_tokens),
  }


def bleu_sums(hypotheses: tf.Tensor, references: tf.Tensor, mask: tf.Tensor,
              segments: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
  """BLEU's clipped n-gram matches and hypothesis n-grams, per order, summed over a batch.

  Each row's hypothesis and reference are its positions where `mask` holds (the
  same positions for both, so their lengths are equal and the brevity penalty is 1).
  A hypothesis n-gram at position i counts min(count in the hypothesis, count in
  the reference) / (count in the hypothesis): over the copies of one n-gram that
  adds up to BLEU's clipped count, found with [length, length] comparisons rather
  than a table of n-grams.
  """
  hyp, ref = tf.cast(hypotheses, tf.int32), tf.cast(references, tf.int32)
  same = None
  if segments is not None:
    segments = tf.cast(segments, tf.int32)
    same = segments[:, :, None] == segments[:, None, :]
  valid = tf.cast(mask, tf.bool)
  hyp_ref = hyp[:, :, None] == ref[:, None, :]  # [batch, i, j]: unigram i of hyp == j of ref
  hyp_hyp = hyp[:, :, None] == hyp[:, None, :]
  eq_hr, eq_hh, ok, seg = hyp_ref, hyp_hyp, valid, same
  out = {}
  for n in range(1, BLEU_ORDER + 1):
    if n > 1:  # extend each (n-1)-gram comparison by the next position
      eq_hr = eq_hr[:, :-1, :-1] & hyp_ref[:, n - 1:, n - 1:]
      eq_hh = eq_hh[:, :-1, :-1] & hyp_hyp[:, n - 1:, n - 1:]
      ok = ok[:, :-1] & valid[:, n - 1:]
      if segments is not None:  # an n-gram within one packed example
        ok = ok & (segments[:, :-(n - 1)] == segments[:, n - 1:])
        seg = seg[:, :-1, :-1]
    pair = ok[:, :, None] & ok[:, None, :]
    if seg is not None:
      pair = pair & seg
    in_hyp = tf.reduce_sum(tf.cast(eq_hh & pair, tf.float32), -1)
    in_ref = tf.reduce_sum(tf.cast(eq_hr & pair, tf.float32), -1)
    okf = tf.cast(ok, tf.float32)
    clipped = tf.math.divide_no_nan(tf.minimum(in_hyp, in_ref), in_hyp) * okf
    # Per row the fractions add up to a whole number: round away float error.
    out[f"bleu_matches_{n}"] = tf.reduce_sum(tf.round(tf.reduce_sum(clipped, -1)))
    out[f"bleu_possible_{n}"] = tf.reduce_sum(okf)
  return out


def approx_bleu(sums: Dict[str, float]) -> float:
  """T2T's compute_bleu from summed n-gram counts (brevity penalty 1: equal lengths)."""
  smooth, precisions = 1.0, []
  for n in range(1, BLEU_ORDER + 1):
    matches, possible = float(sums[f"bleu_matches_{n}"]), float(sums[f"bleu_possible_{n}"])
    if possible <= 0:
      precisions.append(0.0)
    elif matches > 0:
      precisions.append(matches / possible)
    else:  # T2T's smoothing of an order without a match
      smooth *= 2
      precisions.append(1.0 / (smooth * possible))
  if max(precisions) <= 0:
    return 0.0
  return math.exp(sum(math.log(p) for p in precisions if p) / BLEU_ORDER)


def finalize(sums: Dict[str, float]) -> Dict[str, float]:
  """Metric values from accumulated sums (approx_bleu when they hold BLEU's counts)."""
  w = max(float(sums["weights"]), 1.0)
  n = max(float(sums["sequences"]), 1.0)
  nlp = -float(sums["xent"]) / w
  # exp of the per-token loss; inf past float range (a model that has not learnt).
  perplexity = math.exp(-nlp) if -nlp < 709.0 else math.inf
  return {"loss": -nlp, "neg_log_perplexity": nlp, "perplexity": perplexity,
          "accuracy": float(sums["correct"]) / w,
          "accuracy_top5": float(sums["correct_top5"]) / w,
          "accuracy_per_sequence": float(sums["sequences_correct"]) / n,
          **({"approx_bleu": approx_bleu(sums)} if all(k in sums for k in BLEU_KEYS) else {})}
