"""The shared embedding's softmax, `x·tableᵀ`, with its table gradient as `(xᵀ·dy)ᵀ`.

In float32 the table's gradient is computed as (xᵀ·dy)ᵀ rather than
TensorFlow's dyᵀ·x, whose left operand oneDNN's float32 kernel reads
transposed, slowly at 32,768 rows: forward + backward at 2048 x 512 x 32,768
took 392.5 against 518.5 ms (`bench/bench_tied_logits.py`, AMD EPYC Zen 5),
and the float32 transformer_base train step ran 1.056x faster (median of 24
paired timings); alone at 2048 x 128 x 8,192 and 2048 x 512 x 8,192 it
measured 1.03x and 1.06x. bfloat16 keeps TensorFlow's gradient (there the
swap made the step 0.986x), and so do depths over 512, where the swap
measured 0.97-0.98x (2048 x 1024 x 32,768, transformer_big's shape).
"""

from __future__ import annotations

import tensorflow as tf

from t2t_keras import perf


@tf.custom_gradient
def _logits_matmul_transposed_grad(x, table):
  def grad(dy):
    # dy·table, and the table's gradient (dyᵀ·x) as the transpose of xᵀ·dy.
    return tf.matmul(dy, table), tf.transpose(tf.matmul(x, dy, transpose_a=True))
  return tf.matmul(x, table, transpose_b=True), grad


def tied_logits_matmul(x: tf.Tensor, table: tf.Tensor) -> tf.Tensor:
  """x·tableᵀ: `[rows, hidden]` x `[vocab, hidden]` -> `[rows, vocab]`.

  The same product and gradients as `tf.matmul(x, table, transpose_b=True)`,
  which it is outside float32 at depths up to 512, and under `perf.plain_ops()`.
  """
  if (not perf.plain_ops() and x.dtype == tf.float32 and x.shape[-1] is not None
      and x.shape[-1] <= 512):
    return _logits_matmul_transposed_grad(x, table)
  return tf.matmul(x, table, transpose_b=True)
