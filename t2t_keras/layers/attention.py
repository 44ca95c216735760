"""T2T multi-head dot-product attention and its bias helpers.

Faithful to `common_attention.multihead_attention` with `dot_product_attention`:
q, k, v and output projections have no bias, q is scaled by
`key_depth_per_head ** -0.5` before the matmul, dropout acts on the attention
weights, and key and value depths may differ.

With `max_relative_position > 0` it is T2T's `dot_product_attention_relative`
(Shaw et al. 2018, for self-attention): learned embeddings of the clipped
distance `clip(key_position - query_position, -max, max)`, one table for keys
and one for values (`[2 * max + 1, depth / heads]`, shared by the heads), add
`q · key_embedding(distance)` to each logit and `sum(weight · value_embedding)`
to each output. Cached decoding (`attend_step`) gives the query of step `t`
the distances of keys `0..t` to `t`, as the full call does.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import keras
import tensorflow as tf

from t2t_keras.decoding_state import KeyValue
from t2t_keras.layers.dropout import Dropout, noise_shape
from t2t_keras.layers.initializers import get_variable_initializer
from t2t_keras.perf.buffers import write_rows, written_prefix


def large_compatible_negative(dtype: tf.DType) -> float:
  """A large negative that stays finite in `dtype` (T2T: -1e9; fp16: its min)."""
  if dtype == tf.float16:
    return float(tf.float16.min)
  return -1e9


def attention_bias_ignore_padding(padding: tf.Tensor) -> tf.Tensor:
  """Bias masking padded memory positions.

  Args:
    padding: float `[batch, memory_length]`, 1.0 at padding.
  Returns:
    float32 `[batch, 1, 1, memory_length]`: -1e9 at padding, 0 elsewhere.
  """
  padding = tf.cast(padding, tf.float32)
  return (padding * large_compatible_negative(tf.float32))[:, None, None, :]


def attention_bias_lower_triangle(length) -> tf.Tensor:
  """Causal bias: `[1, 1, length, length]`, -1e9 above the diagonal."""
  band = tf.linalg.band_part(tf.ones([length, length], tf.float32), -1, 0)
  return (large_compatible_negative(tf.float32) * (1.0 - band))[None, None]


def attention_bias_same_segment(query_segment: tf.Tensor, memory_segment: tf.Tensor) -> tf.Tensor:
  """Bias keeping packed examples apart (T2T's `attention_bias_same_segment`).

  A query sees only the keys of its own segment (packed padding, segment 0,
  sees padding only, so that no softmax row is empty).

  Args:
    query_segment: int `[batch, length_q]`; memory_segment: int `[batch, length_m]`.
  Returns:
    float32 `[batch, 1, length_q, length_m]`: -1e9 between different segments, 0 within one.
  """
  other = tf.not_equal(query_segment[:, :, None], memory_segment[:, None, :])
  return (tf.cast(other, tf.float32) * large_compatible_negative(tf.float32))[:, None]


def attention_bias_prepend_inputs_full_attention(padding: tf.Tensor) -> tf.Tensor:
  """T2T's self-attention bias of prepend_mode="prepend_inputs_full_attention".

  Positions up to the first padding position (the inputs and the 0 that ends
  them) form the inputs part; each later position is numbered 1, 2, ... (padding
  positions counting on). A query sees every key whose number is not greater
  than its own: the inputs part sees itself whole, targets see the inputs and
  the targets before them.

  Args:
    padding: float `[batch, length]`, 1.0 where the (unshifted) target id is 0.
  Returns:
    float32 `[batch, 1, length, length]`: -1e9 where a query must not see a key.
  """
  padding = tf.cast(padding, tf.float32)
  in_target = tf.cumsum(padding, axis=1, exclusive=True)
  number = tf.cumsum(in_target, axis=1)  # [batch, length]
  hidden = tf.greater(number[:, None, :], number[:, :, None])  # [batch, query, key]
  return (tf.cast(hidden, tf.float32) * large_compatible_negative(tf.float32))[:, None]


def split_heads(x: tf.Tensor, num_heads: int) -> tf.Tensor:
  """`[batch, length, depth]` -> `[batch, heads, length, depth / heads]`."""
  shape = tf.shape(x)
  depth = x.shape[-1]
  x = tf.reshape(x, [shape[0], shape[1], num_heads, depth // num_heads])
  return tf.transpose(x, [0, 2, 1, 3])


def combine_heads(x: tf.Tensor) -> tf.Tensor:
  """`[batch, heads, length, depth_per_head]` -> `[batch, length, depth]`."""
  x = tf.transpose(x, [0, 2, 1, 3])
  shape = tf.shape(x)
  return tf.reshape(x, [shape[0], shape[1], x.shape[2] * x.shape[3]])


def write_position(buffer: tf.Tensor, step: tf.Tensor, index) -> tf.Tensor:
  """Writes one step into a fixed-size key or value buffer.

  Args:
    buffer: `[items, heads, max_length * group, depth]` (from
      `perf.buffers.new_buffer`): `group` consecutive rows of `step` (the
      beams of an item in beam search, else 1) share an item's buffer,
      position-major: step `index` writes positions
      `index * group ... index * group + group - 1`.
    step: `[items * group, heads, 1, depth]`; row `item * group + g` is written
      at position `index * group + g` of its item.
    index: scalar int32.
  Returns:
    The updated buffer (same shape, so the decoding loop stays shape-stable for
    XLA). Only the written positions are touched (`perf.buffers.write_rows`):
    without XLA in place, as XLA does by itself.
  """
  shape = tf.shape(buffer)
  heads, length = shape[1], shape[2]
  group = tf.shape(step)[0] // shape[0]
  entries = tf.shape(step)[0] * heads
  entry = tf.range(entries)
  row, head = entry // heads, entry % heads
  position = tf.cast(index, tf.int32) * group + row % group
  # Row of [items * heads * length, depth] that (item, head, position) is.
  flat_rows = ((row // group) * heads + head) * length + position
  updates = tf.reshape(tf.cast(step, buffer.dtype), [entries, -1])
  flat = write_rows(tf.reshape(buffer, [-1, shape[3]]), flat_rows, updates)
  return tf.reshape(flat, shape)


def _group_rows(x: tf.Tensor, group) -> tf.Tensor:
  """`[batch * group, heads, length, d]` -> `[batch, heads, group * length, d]`."""
  shape = tf.shape(x)
  x = tf.reshape(x, [-1, group, shape[1], shape[2], shape[3]])
  x = tf.transpose(x, [0, 2, 1, 3, 4])
  return tf.reshape(x, [-1, shape[1], group * shape[2], shape[3]])


def _ungroup_rows(x: tf.Tensor, group) -> tf.Tensor:
  """Inverse of `_group_rows`."""
  shape = tf.shape(x)
  x = tf.reshape(x, [shape[0], shape[1], group, shape[2] // group, shape[3]])
  x = tf.transpose(x, [0, 2, 1, 3, 4])
  return tf.reshape(x, [shape[0] * group, shape[1], shape[2] // group, shape[3]])


def relative_positions(query_positions: tf.Tensor, key_positions: tf.Tensor,
                       max_relative_position: int) -> tf.Tensor:
  """Embedding rows of clipped relative distances (T2T `_generate_relative_positions_matrix`).

  Args:
    query_positions: int32 `[length_q]`; key_positions: int32 `[length_k]`.
    max_relative_position: distances are clipped to +-this.
  Returns:
    int32 `[length_q, length_k]`: `clip(key - query, -max, max) + max`, in
    `[0, 2 * max]`.
  """
  distance = key_positions[None, :] - query_positions[:, None]
  m = max_relative_position
  return tf.clip_by_value(distance, -m, m) + m


def attention_bias_visible(visible: tf.Tensor) -> tf.Tensor:
  """Bias from a bool mask broadcastable to `[batch, heads, length_q, length_kv]`:
  float32, 0 where True (attended), -1e9 where False."""
  return tf.where(visible, 0.0, large_compatible_negative(tf.float32))


@keras.saving.register_keras_serializable(package="t2t_keras")
class MultiHeadAttention(keras.layers.Layer):
  """T2T multi-head attention (`common_attention.multihead_attention`).

  Args:
    key_channels: total key depth over all heads (T2T `attention_key_channels`).
    value_channels: total value depth over all heads.
    output_depth: depth of the output projection (hidden_size).
    num_heads: number of heads; must divide both channel counts.
    attention_dropout: dropout rate on the attention weights.
    attention_dropout_broadcast_dims: dims of the weights `[batch, heads,
      length_q, length_kv]` along which their dropout mask is shared (T2T's
      `dot_product_attention` `dropout_broadcast_dims`, e.g. (0, 1)).
    initializer / initializer_gain: T2T's kernel initializer name and gain (see
      `initializers.get_variable_initializer`).
    max_relative_position: > 0 makes it relative self-attention (see the
      module docstring; needs key_channels == value_channels); 0: plain.

  Call arguments:
    query_antecedent: `[batch, length_q, depth]`.
    memory_antecedent: `[batch, length_m, depth]`, or None for self-attention.
    bias: float32, broadcastable to `[batch, heads, length_q, length_kv]`.
    training: Python bool or None.
    return_attention_scores: also return the attention weights.

  Returns:
    `[batch, length_q, output_depth]`; with return_attention_scores a pair of it
    and the weights `[batch, heads, length_q, length_kv]` (before dropout).

  Incremental decoding uses `attend` (precomputed keys and values, e.g. of
  `compute_memory_kv`) and `attend_step` (self-attention writing each step into
  fixed-size buffers), each with one return type.
  """

  def __init__(self, key_channels: int, value_channels: int, output_depth: int,
               num_heads: int, attention_dropout: float = 0.0,
               initializer: str = "uniform_unit_scaling", initializer_gain: float = 1.0,
               max_relative_position: int = 0,
               attention_dropout_broadcast_dims: Sequence[int] = (), **kwargs):
    super().__init__(**kwargs)
    if max_relative_position < 0:
      raise ValueError(f"max_relative_position must be >= 0, got {max_relative_position}.")
    if max_relative_position and key_channels != value_channels:
      raise ValueError("relative attention needs key_channels == value_channels, got "
                       f"{key_channels} and {value_channels}.")
    for name, value in (("key_channels", key_channels), ("value_channels", value_channels)):
      if value % num_heads:
        raise ValueError(f"{name}={value} must be divisible by num_heads={num_heads}.")
    get_variable_initializer(initializer, initializer_gain)  # Validates the name.
    self.key_channels, self.value_channels = key_channels, value_channels
    self.output_depth, self.num_heads = output_depth, num_heads
    self.attention_dropout = attention_dropout
    self.attention_dropout_broadcast_dims = tuple(attention_dropout_broadcast_dims)
    self.initializer, self.initializer_gain = initializer, initializer_gain
    self.max_relative_position = max_relative_position

  def build(self, query_antecedent_shape, memory_antecedent_shape=None):
    query_shape, memory_shape = query_antecedent_shape, memory_antecedent_shape
    dense = lambda units, name: keras.layers.Dense(
        units, use_bias=False, name=name,
        kernel_initializer=get_variable_initializer(self.initializer, self.initializer_gain),
        dtype=self.dtype_policy)
    self.q = dense(self.key_channels, "q")
    self.k = dense(self.key_channels, "k")
    self.v = dense(self.value_channels, "v")
    self.output_transform = dense(self.output_depth, "output_transform")
    memory_shape = memory_shape or query_shape
    self.q.build(query_shape)
    self.k.build(memory_shape)
    self.v.build(memory_shape)
    self.output_transform.build(tuple(query_shape[:-1]) + (self.value_channels,))
    self.dropout = Dropout(self.attention_dropout,
                           noise_shape=noise_shape(self.attention_dropout_broadcast_dims, 4),
                           dtype=self.dtype_policy)
    self.relative_keys = self.relative_values = None
    if self.max_relative_position:
      table = lambda name: self.add_weight(
          name=name, shape=(2 * self.max_relative_position + 1,
                            self.key_channels // self.num_heads),
          initializer=get_variable_initializer(self.initializer, self.initializer_gain))
      self.relative_keys = table("relative_positions_keys")
      self.relative_values = table("relative_positions_values")

  def compute_memory_kv(self, memory: tf.Tensor) -> KeyValue:
    """Keys and values of `memory` `[batch, len, depth]`, split into heads."""
    return KeyValue(split_heads(self.k(memory), self.num_heads),
                    split_heads(self.v(memory), self.num_heads))

  def _queries(self, query_antecedent: tf.Tensor) -> tf.Tensor:
    return split_heads(self.q(query_antecedent), self.num_heads)

  def _relative(self, table, rows: tf.Tensor, dtype) -> tf.Tensor:
    """Rows `[length_q or 1, length_k]` of a relative table: `[..., depth / heads]`."""
    return tf.gather(tf.cast(table, dtype), rows)

  def _attention_weights(self, q, k, bias, relative_rows=None):
    """softmax(q·kᵀ·depth^-0.5 + bias): `[batch, heads, length_q, length_kv]`.

    relative_rows (relative attention): `[length_q, length_kv]` table rows, or
    `[1, length_kv]` shared by every query (T2T `_relative_attention_inner`).
    """
    q *= tf.cast((self.key_channels // self.num_heads) ** -0.5, q.dtype)
    logits = tf.matmul(q, k, transpose_b=True)
    if relative_rows is not None:
      logits += _relative_matmul(q, self._relative(self.relative_keys, relative_rows, q.dtype),
                                 transpose=True)
    # Bias and softmax in float32, whatever the compute dtype: -1e9 then stays
    # finite for float16 and bfloat16 exp sums keep their precision.
    logits = tf.cast(logits, tf.float32)
    if bias is not None:
      logits += tf.cast(bias, tf.float32)
    return tf.cast(tf.nn.softmax(logits), q.dtype)

  def _context(self, weights, v, relative_rows=None):
    """weights·v, plus the relative value embeddings weighted alike."""
    context = tf.matmul(weights, v)
    if relative_rows is not None:
      context += _relative_matmul(
          weights, self._relative(self.relative_values, relative_rows, weights.dtype),
          transpose=False)
    return context

  def call(self, query_antecedent, memory_antecedent=None, bias=None, training=None,
           return_attention_scores=False):
    q = self._queries(query_antecedent)
    source = query_antecedent if memory_antecedent is None else memory_antecedent
    k, v = self.compute_memory_kv(source)
    rows = None
    if self.max_relative_position:
      if memory_antecedent is not None:
        raise ValueError("relative attention is self-attention: memory_antecedent must be None.")
      positions = tf.range(tf.shape(q)[2])
      rows = relative_positions(positions, positions, self.max_relative_position)
    weights = self._attention_weights(q, k, bias, rows)
    context = self._context(self.dropout(weights, training=training), v, rows)
    x = self.output_transform(combine_heads(context))
    return (x, weights) if return_attention_scores else x

  def attend(self, query_antecedent: tf.Tensor, keys_values: KeyValue, bias,
             relative_rows=None) -> tf.Tensor:
    """Decoding rows attending to precomputed keys and values (no dropout).

    Args:
      query_antecedent: `[rows, length_q, depth]`, rows item-major: each group
        of `rows / items` consecutive rows (the beams of an item in beam
        search, else 1) attends to its item's keys and values.
      keys_values: `KeyValue` with `items` rows.
      bias: `[items, 1, group * length_q or 1, length_kv]`, queries group-major.
      relative_rows: relative attention only: int32 `[1, length_kv]`, the
        relative-table rows of every query's keys (one query position).

    Returns:
      `[rows, length_q, output_depth]`.
    """
    q = self._queries(query_antecedent)
    # The `group` beams of an item share one memory, so they attend to it as
    # `group * length_q` queries of one row instead of reading `group` tiled
    # (or reordered) copies of it.
    group = tf.shape(q)[0] // tf.shape(keys_values.k)[0]
    weights = self._attention_weights(_group_rows(q, group), keys_values.k, bias,
                                      relative_rows)
    context = _ungroup_rows(self._context(weights, keys_values.v, relative_rows), group)
    return self.output_transform(combine_heads(context))

  def attend_step(self, query_antecedent: tf.Tensor, buffers: KeyValue, index,
                  bias) -> Tuple[tf.Tensor, KeyValue]:
    """Self-attention of one decoding step through fixed-size buffers.

    Writes the step's key and value at `index` (see `write_position`), then
    attends as `attend` does.

    Args:
      query_antecedent: `[rows, 1, depth]`.
      buffers: `KeyValue` `[items, heads, max_length * group, depth / heads]`.
      index: scalar int32 step.
      bias: `[items, 1, group, max_length * group]` (which entries each row sees).

    Returns:
      (`[rows, 1, output_depth]`, the buffers with this step written).
    """
    step = self.compute_memory_kv(query_antecedent)
    buffers = KeyValue(write_position(buffers.k, step.k, index),
                       write_position(buffers.v, step.v, index))
    # Positions past this step are masked; without XLA only the written prefix is read.
    group = tf.shape(query_antecedent)[0] // tf.shape(buffers.k)[0]
    k, v, bias = written_prefix(buffers.k, buffers.v, bias, (tf.cast(index, tf.int32) + 1) * group)
    visible = KeyValue(k, v)
    rows = None
    if self.max_relative_position:  # Buffer position p holds step p // group.
      key_steps = tf.range(tf.shape(k)[2]) // group
      rows = relative_positions(tf.reshape(tf.cast(index, tf.int32), [1]), key_steps,
                                self.max_relative_position)
    return self.attend(query_antecedent, visible, bias, rows), buffers

  def compute_output_shape(self, query_antecedent_shape, memory_antecedent_shape=None):
    return tuple(query_antecedent_shape[:-1]) + (self.output_depth,)

  def get_config(self):
    config = super().get_config()
    config.update(key_channels=self.key_channels, value_channels=self.value_channels,
                  output_depth=self.output_depth, num_heads=self.num_heads,
                  attention_dropout=self.attention_dropout, initializer=self.initializer,
                  initializer_gain=self.initializer_gain,
                  max_relative_position=self.max_relative_position,
                  attention_dropout_broadcast_dims=self.attention_dropout_broadcast_dims)
    return config


def _relative_matmul(x: tf.Tensor, embeddings: tf.Tensor, transpose: bool) -> tf.Tensor:
  """The relative term of T2T's `_relative_attention_inner`.

  Args:
    x: `[batch, heads, length_q, depth or length_k]`.
    embeddings: `[length_q or 1, length_k, depth]` (1: the same for every query).
    transpose: x has depth (logits: x·eᵀ) rather than length_k (context: x·e).
  Returns:
    `[batch, heads, length_q, length_k or depth]`.
  """
  if embeddings.shape[0] == 1:  # One matrix for all rows: a plain matmul.
    return tf.matmul(x, embeddings[0], transpose_b=transpose)
  # One matmul per query position, batch and heads as its rows (as T2T does).
  shape = tf.shape(x)
  rows = tf.reshape(tf.transpose(x, [2, 0, 1, 3]), [shape[2], shape[0] * shape[1], shape[3]])
  out = tf.matmul(rows, tf.cast(embeddings, x.dtype), transpose_b=transpose)
  out = tf.reshape(out, [shape[2], shape[0], shape[1], tf.shape(out)[2]])
  return tf.transpose(out, [1, 2, 0, 3])
