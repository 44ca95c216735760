"""Symbol embeddings shared with the softmax, and position signals.

T2T's "symbol modality" (`layers/modalities.py`): one `[vocab, hidden]` matrix
initialized N(0, hidden^-0.5), rows gathered and multiplied by sqrt(hidden), PAD
(id 0) rows zeroed, and the same matrix transposed (no bias) for the logits
(`t2t_keras.perf.tied_logits`).
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from data_gen.text_encoder import PAD_ID
from t2t_keras.perf.tied_logits import tied_logits_matmul


def get_timing_signal_1d(length, channels: int, min_timescale: float = 1.0,
                         max_timescale: float = 1.0e4, start_index=0,
                         layout: str = "concat") -> tf.Tensor:
  """Sinusoid position signal of positions start_index.., `[1, length, channels]` float32.

  layout="concat" is T2T's `get_timing_signal_1d`: `[sin | cos]` halves with
  inverse timescales `min * (max/min)^(-i / (channels/2 - 1))`.
  layout="interleaved" is the paper's (§3.5): `PE[pos, 2i] = sin(pos / 10000^(2i/d))`,
  `PE[pos, 2i+1] = cos(pos / 10000^(2i/d))` (min_timescale scales positions as in T2T).
  """
  return timing_signal_given_position(tf.range(length)[None] + start_index, channels,
                                      min_timescale, max_timescale, layout)


def timing_signal_given_position(position, channels: int, min_timescale: float = 1.0,
                                 max_timescale: float = 1.0e4,
                                 layout: str = "concat") -> tf.Tensor:
  """The sinusoid signal of given positions (T2T's `add_timing_signal_1d_given_position`).

  Args:
    position: int `[batch, length]`, e.g. packed examples' positions, restarting
      at 0 in each example.
    channels, min_timescale, max_timescale, layout: as `get_timing_signal_1d`.
  Returns:
    float32 `[batch, length, channels]`.
  """
  position = tf.cast(position, tf.float32)
  num_timescales = channels // 2
  if layout == "concat":
    log_increment = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * tf.exp(
        tf.range(num_timescales, dtype=tf.float32) * -log_increment)
    scaled = position[..., None] * inv_timescales
    signal = tf.concat([tf.sin(scaled), tf.cos(scaled)], axis=-1)
  elif layout == "interleaved":
    exponents = tf.range(num_timescales, dtype=tf.float32) * 2.0 / channels
    inv_timescales = min_timescale * tf.pow(max_timescale / min_timescale, -exponents)
    scaled = position[..., None] * inv_timescales
    signal = tf.reshape(tf.stack([tf.sin(scaled), tf.cos(scaled)], axis=-1),
                        tf.concat([tf.shape(position), [2 * num_timescales]], 0))
  else:
    raise ValueError(f"layout must be 'concat' or 'interleaved', got {layout!r}.")
  return tf.pad(signal, [[0, 0], [0, 0], [0, channels % 2]])


@keras.saving.register_keras_serializable(package="t2t_keras")
class PositionEmbedding(keras.layers.Layer):
  """Adds a position signal chosen by T2T's `hparams.pos`.

  Args:
    pos: "timing" (T2T sinusoid), "timing_paper" (interleaved), "emb" (learned
      `[max_length, depth]` table, N(0, depth^-0.5), as T2T's
      `add_positional_embedding`), or "none".
    max_length: rows of the learned table (ignored for sinusoids); positions
      past them get no signal.

  Call arguments:
    x: `[batch, length, depth]`.
    start_index: scalar position of `x[:, 0]` (incremental decoding).
    position: optional int `[batch, length]`, the position of each token (packed
      examples: T2T's "inputs_position" / "targets_position"); replaces
      start_index.

  Returns:
    `[batch, length, depth]`.
  """

  def __init__(self, pos: str = "timing", max_length: int = 256,
               min_timescale: float = 1.0, max_timescale: float = 1.0e4, **kwargs):
    super().__init__(**kwargs)
    if pos not in ("timing", "timing_paper", "emb", "none"):
      raise ValueError(f"pos must be timing, timing_paper, emb or none; got {pos!r}.")
    self.pos = pos
    self.max_length = max_length
    self.min_timescale = min_timescale
    self.max_timescale = max_timescale

  def build(self, input_shape):
    self.depth = input_shape[-1]
    if self.pos == "emb":
      self.embedding = self.add_weight(
          name="pos_emb", shape=(self.max_length, self.depth),
          initializer=keras.initializers.RandomNormal(0.0, self.depth ** -0.5))

  def call(self, x, start_index=0, position=None):
    if self.pos == "none":
      return x
    if position is None:
      position = tf.range(tf.shape(x)[1])[None] + tf.cast(start_index, tf.int32)
    if self.pos == "emb":
      signal = self._learned_signal(position)
    else:
      layout = "concat" if self.pos == "timing" else "interleaved"
      signal = timing_signal_given_position(position, self.depth, self.min_timescale,
                                            self.max_timescale, layout)
    return x + tf.cast(signal, x.dtype)

  def _learned_signal(self, position):
    """`[1 or batch, length, depth]`: the table's rows at `position`; zero past its
    max_length rows (T2T's `add_positional_embedding` pads the table), so that any
    input or output length decodes, as with sinusoids."""
    position = tf.cast(position, tf.int32)
    rows = tf.gather(tf.convert_to_tensor(self.embedding),
                     tf.minimum(position, self.max_length - 1))
    return rows * tf.cast(position < self.max_length, rows.dtype)[..., None]

  def get_config(self):
    config = super().get_config()
    config.update(pos=self.pos, max_length=self.max_length,
                  min_timescale=self.min_timescale, max_timescale=self.max_timescale)
    return config


@keras.saving.register_keras_serializable(package="t2t_keras")
class SymbolModality(keras.layers.Layer):
  """T2T's symbol modality: embedding lookup and (optionally tied) softmax weights.

  Args:
    vocab_size: number of symbols; id 0 is PAD.
    hidden_size: embedding depth.
    multiply_embedding_mode: "sqrt_depth" (scale lookups by sqrt(hidden)) or "none".
    with_embedding / with_softmax: which roles this matrix plays.

  `embed(ids)`: `[batch, length]` int -> `[batch, length, hidden]`, PAD rows zero.
  `logits(x)`: `[batch, length, hidden]` -> `[batch, length, vocab]` = x·Wᵀ.
  """

  def __init__(self, vocab_size: int, hidden_size: int,
               multiply_embedding_mode: str = "sqrt_depth", with_embedding: bool = True,
               with_softmax: bool = True, **kwargs):
    super().__init__(**kwargs)
    if vocab_size < 2:
      raise ValueError(f"vocab_size must be >= 2 (PAD and EOS), got {vocab_size}.")
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.multiply_embedding_mode = multiply_embedding_mode
    self.with_embedding = with_embedding
    self.with_softmax = with_softmax

  def build(self, input_shape=None):
    self.weights_var = self.add_weight(
        name="weights", shape=(self.vocab_size, self.hidden_size),
        initializer=keras.initializers.RandomNormal(0.0, self.hidden_size ** -0.5))

  def embed(self, ids):
    ids = tf.cast(ids, tf.int32)
    table = tf.cast(tf.convert_to_tensor(self.weights_var), self.compute_dtype)
    x = tf.gather(table, ids)
    if self.multiply_embedding_mode == "sqrt_depth":
      x *= tf.cast(self.hidden_size ** 0.5, x.dtype)
    return x * tf.cast(tf.not_equal(ids, PAD_ID), x.dtype)[..., None]

  def logits(self, x):
    table = tf.cast(tf.convert_to_tensor(self.weights_var), x.dtype)
    # A plain 2-D matmul: broadcasting BatchMatMul is slower on CPU.
    flat = tf.reshape(x, [-1, self.hidden_size])
    logits = tied_logits_matmul(flat, table)
    return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], [self.vocab_size]], 0))

  def call(self, ids):
    return self.embed(ids)

  def get_config(self):
    config = super().get_config()
    config.update(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                  multiply_embedding_mode=self.multiply_embedding_mode,
                  with_embedding=self.with_embedding, with_softmax=self.with_softmax)
    return config
