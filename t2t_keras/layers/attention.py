"""T2T multi-head dot-product attention and its bias helpers.

Faithful to `common_attention.multihead_attention` with `dot_product_attention`:
q, k, v and output projections have no bias, q is scaled by
`key_depth_per_head ** -0.5` before the matmul, dropout acts on the attention
weights, and key and value depths may differ.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import keras
import tensorflow as tf

from t2t_keras.layers.initializers import get_variable_initializer


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
    buffer: `[items, heads, max_length * group, depth]`: `group` consecutive
      rows of `step` (the beams of an item in beam search, else 1) share an
      item's buffer, position-major: step `index` writes positions
      `index * group ... index * group + group - 1`.
    step: `[items * group, heads, 1, depth]`; row `item * group + g` is written
      at position `index * group + g` of its item.
    index: scalar int32.
  Returns:
    The updated buffer (same shape, so the decoding loop stays shape-stable for
    XLA). A scatter touches only the written positions; blending with a one-hot
    mask would read and write the whole buffer every step.
  """
  shape = tf.shape(buffer)
  heads = shape[1]
  group = tf.shape(step)[0] // shape[0]
  entries = tf.shape(step)[0] * heads
  entry = tf.range(entries)
  row, head = entry // heads, entry % heads
  position = tf.cast(index, tf.int32) * group + row % group
  indices = tf.stack([row // group, head, position], axis=1)
  updates = tf.reshape(tf.cast(step, buffer.dtype), [entries, -1])
  return tf.tensor_scatter_nd_update(buffer, indices, updates)


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


class MultiHeadAttention(keras.layers.Layer):
  """T2T multi-head attention (`common_attention.multihead_attention`).

  Args:
    key_channels: total key depth over all heads (T2T `attention_key_channels`).
    value_channels: total value depth over all heads.
    output_depth: depth of the output projection (hidden_size).
    num_heads: number of heads; must divide both channel counts.
    attention_dropout: dropout rate on the attention weights.
    initializer / initializer_gain: T2T's kernel initializer name and gain (see
      `initializers.get_variable_initializer`).

  Call arguments:
    query_antecedent: `[batch, length_q, depth]`.
    memory_antecedent: `[batch, length_m, depth]`, or None for self-attention.
    bias: float32, broadcastable to `[batch, heads, length_q, length_kv]`.
    training: Python bool or None.
    cache: optional dict for incremental decoding. Self-attention: `{"k", "v"}`
      fixed-size buffers `[batch / group, heads, max_length * group,
      depth/heads]` into which the step's key/value are written at
      `decode_index` (see `write_position`). Encoder-decoder attention:
      `{"k_encdec", "v_encdec"}` precomputed with `compute_memory_kv`, with
      `batch / group` rows. Either way each group of `group` consecutive query
      rows (the beams of an item in beam search, else 1) attends to its item's
      memory together, and `bias` has `batch / group` rows and `group` query
      positions: for self-attention it selects each beam's own history.
    decode_index: scalar int32 position written in the self-attention cache.

  Returns:
    `[batch, length_q, output_depth]`, and the updated cache when one is given.
  """

  def __init__(self, key_channels: int, value_channels: int, output_depth: int,
               num_heads: int, attention_dropout: float = 0.0,
               initializer: str = "uniform_unit_scaling", initializer_gain: float = 1.0,
               **kwargs):
    super().__init__(**kwargs)
    for name, value in (("key_channels", key_channels), ("value_channels", value_channels)):
      if value % num_heads:
        raise ValueError(f"{name}={value} must be divisible by num_heads={num_heads}.")
    self.key_channels = key_channels
    self.value_channels = value_channels
    self.output_depth = output_depth
    self.num_heads = num_heads
    self.attention_dropout = attention_dropout
    self.initializer = initializer
    self.initializer_gain = initializer_gain
    get_variable_initializer(initializer, initializer_gain)  # Validates the name.

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
    self.dropout = keras.layers.Dropout(self.attention_dropout, dtype=self.dtype_policy)

  def compute_memory_kv(self, memory: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Keys and values of `memory` `[batch, len, depth]`, split into heads."""
    return (split_heads(self.k(memory), self.num_heads),
            split_heads(self.v(memory), self.num_heads))

  def _attention_weights(self, q, k, bias):
    """softmax(q·kᵀ·depth^-0.5 + bias): `[batch, heads, length_q, length_kv]`."""
    q *= tf.cast((self.key_channels // self.num_heads) ** -0.5, q.dtype)
    # Bias and softmax in float32, whatever the compute dtype: -1e9 then stays
    # finite for float16 and bfloat16 exp sums keep their precision.
    logits = tf.cast(tf.matmul(q, k, transpose_b=True), tf.float32)
    if bias is not None:
      logits += tf.cast(bias, tf.float32)
    return tf.cast(tf.nn.softmax(logits), q.dtype)

  def attention_weights(self, query_antecedent, memory_antecedent=None, bias=None):
    """The attention distribution of `call` (no dropout), for inspection.

    Returns:
      float `[batch, heads, length_q, length_kv]`.
    """
    source = query_antecedent if memory_antecedent is None else memory_antecedent
    q = split_heads(self.q(query_antecedent), self.num_heads)
    k = split_heads(self.k(source), self.num_heads)
    return self._attention_weights(q, k, bias)

  def call(self, query_antecedent, memory_antecedent=None, bias=None, training=None,
           cache: Optional[Dict[str, tf.Tensor]] = None, decode_index=None):
    q = split_heads(self.q(query_antecedent), self.num_heads)
    new_cache = None
    if cache is not None and "k_encdec" in cache:
      k, v = cache["k_encdec"], cache["v_encdec"]
    else:
      source = query_antecedent if memory_antecedent is None else memory_antecedent
      k, v = self.compute_memory_kv(source)
      if cache is not None:
        k = write_position(cache["k"], k, decode_index)
        v = write_position(cache["v"], v, decode_index)
        new_cache = {"k": k, "v": v}
    group = None
    if cache is not None:
      # Beam search: the `group` beams of an item (item-major rows) share one
      # memory, so they attend to it as `group * length_q` queries of one row
      # instead of reading `group` tiled (or reordered) copies of it.
      group = tf.shape(q)[0] // tf.shape(k)[0]
      q = _group_rows(q, group)
    weights = self._attention_weights(q, k, bias)
    weights = self.dropout(weights, training=training)
    context = tf.matmul(weights, v)
    if group is not None:
      context = _ungroup_rows(context, group)
    x = self.output_transform(combine_heads(context))
    if cache is not None:
      return x, new_cache if new_cache is not None else cache
    return x

  def compute_output_shape(self, query_antecedent_shape, memory_antecedent_shape=None):
    return tuple(query_antecedent_shape[:-1]) + (self.output_depth,)

  def get_config(self):
    config = super().get_config()
    config.update(key_channels=self.key_channels, value_channels=self.value_channels,
                  output_depth=self.output_depth, num_heads=self.num_heads,
                  attention_dropout=self.attention_dropout, initializer=self.initializer,
                  initializer_gain=self.initializer_gain)
    return config
