"""Decoding's key/value buffers written in place, and read only up to the written step.

Cached decoding appends each step's keys and values to per-layer buffers
(`decoding_state.DecodingState`). Written as TensorFlow's value semantics ask,
every step would copy every buffer: `[items, heads, decode_length * beams,
depth / heads]` per layer. In a graph (not eager, not under XLA) the buffers are
made by TensorFlow's `Empty` and written by `InplaceUpdate`, which writes into
the buffer itself; under XLA a scatter, which XLA performs in place. And
without XLA, attention reads only the written prefix of the buffers instead of
all `decode_length` positions masked (XLA needs fixed shapes; the graph runtime
does not): on a 2-core Zen 5 the prefix slices were 11% of a worst-case mixed
bfloat16 decode's op time, the whole masked buffers would be read every step.

Plain (`T2T_KERAS_PLAIN_OPS=1`): zeros and a copying scatter
(`tf.tensor_scatter_nd_update`; for 16-bit floats, which it has no GPU kernel
for, a scatter into zeros and a select), and attention over the whole buffer
with the mask. Every op of either path has GPU kernels for float32, bfloat16
and float16 (`tests/test_export.py` checks the SavedModel's decode loop
against the installed CUDA build's kernel registry).
Whether a graph is compiled by XLA is read from TensorFlow's private
`control_flow_util`, only here.
"""

from __future__ import annotations

from typing import Tuple

import tensorflow as tf
from tensorflow.python.ops import control_flow_util  # pylint: disable=g-direct-tensorflow-import

from t2t_keras import perf


def in_xla_context() -> bool:
  """Whether the graph being traced is compiled by XLA (`tf.function(jit_compile=True)`)."""
  return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def _in_place() -> bool:
  return not (perf.plain_ops() or tf.executing_eagerly() or in_xla_context())


def new_buffer(shape, dtype: tf.DType) -> tf.Tensor:
  """A zero buffer that `write_rows` may write in place.

  In a graph TensorFlow's `Empty`, which graph optimizers never fold into a
  constant nor merge with another buffer of the same shape (a constant or a
  shared buffer written in place would leak one call's or one layer's entries
  into another). Otherwise (eager, XLA, plain) zeros.
  """
  if not _in_place():
    return tf.zeros(shape, dtype)
  return tf.raw_ops.Empty(shape=tf.cast(tf.stack(shape), tf.int32), dtype=dtype, init=True)


def write_rows(buffer: tf.Tensor, rows: tf.Tensor, updates: tf.Tensor) -> tf.Tensor:
  """`buffer` `[n, ...]` with rows `rows` `[k]` replaced by `updates` `[k, ...]`.

  In a graph TensorFlow's `InplaceUpdate` writes into `buffer` itself: the
  caller must hold no other use of the old value (a decoding loop's buffer is
  read only after its write), and the buffer must come from `new_buffer`.
  Otherwise a scatter (under XLA performed in place; eagerly and plain, a copy:
  no caller's tensor is ever changed).
  """
  if _in_place():
    return tf.raw_ops.InplaceUpdate(x=buffer, i=rows, v=updates)
  if buffer.dtype not in (tf.bfloat16, tf.float16) or in_xla_context():
    return tf.tensor_scatter_nd_update(buffer, rows[:, None], updates)
  # TensorScatterUpdate has no GPU kernel for bfloat16/float16; ScatterNd and
  # SelectV2 do. The rows are distinct, so the scatter into zeros only places.
  shape = tf.shape(buffer, out_type=rows.dtype)
  placed = tf.scatter_nd(rows[:, None], updates, shape)
  written = tf.scatter_nd(rows[:, None], tf.ones_like(rows), shape[:1])
  mask = tf.reshape(tf.cast(written, tf.bool), tf.concat([shape[:1], tf.ones_like(shape[1:])], 0))
  return tf.where(mask, placed, buffer)


def written_prefix(keys: tf.Tensor, values: tf.Tensor, bias: tf.Tensor,
                   written) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """The keys, values and bias attention reads after `written` buffer positions are filled.

  Args:
    keys, values: `[items, heads, length, depth / heads]` buffers.
    bias: `[..., length]`, masking the positions not yet written.
    written: scalar int32, positions filled.
  Returns:
    the first `written` positions of each without XLA; the whole buffers and
    bias (the mask hides the rest) under XLA, which needs fixed shapes, and plain.
  """
  if perf.plain_ops() or in_xla_context():
    return keys, values, bias
  return keys[:, :, :written], values[:, :, :written], bias[..., :written]
