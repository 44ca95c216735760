"""The Transformer (T2T `models/transformer.py`) as a Keras 3 model.

`call(features)` is teacher-forced training/evaluation: inputs, targets -> logits.
`encode`, `init_cache` and `decode_step` are the pieces of fast incremental
decoding: the encoder runs once, encoder-decoder keys/values are computed once
per layer, and self-attention keys/values live in fixed-size buffers that each
step writes at its index (shape-stable, so the loop compiles with XLA).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import keras
import tensorflow as tf

from t2t_keras.hparams import HParams
from t2t_keras.layers.attention import (attention_bias_ignore_padding,
                                        attention_bias_lower_triangle,
                                        large_compatible_negative)
from t2t_keras.layers.embedding import PositionEmbedding, SymbolModality
from t2t_keras.layers.initializers import get_variable_initializer
from t2t_keras.layers.transformer_layers import TransformerDecoder, TransformerEncoder

Cache = Dict[str, Any]


def shift_right_3d(x: tf.Tensor) -> tf.Tensor:
  """Prepends a zero vector along length: `[batch, length, depth]` -> same shape."""
  return tf.pad(x, [[0, 0], [1, 0], [0, 0]])[:, :-1, :]


class Transformer(keras.Model):
  """Encoder-decoder Transformer.

  Args:
    hparams: an `HParams`.
    input_vocab_size / target_vocab_size: symbol counts (PAD=0, EOS=1). With
      `shared_embedding_and_softmax_weights` they must be equal.
    target_space_id: T2T's SpaceID of the targets, embedded and added to every
      encoder position when `use_target_space_embedding`.

  Call arguments:
    features: dict with "inputs" `[batch, input_length]` and "targets"
      `[batch, target_length]` int ids, 0-padded.
    training: Python bool.

  Returns:
    float32 logits `[batch, target_length, target_vocab_size]`.
  """

  def __init__(self, hparams: HParams, input_vocab_size: int,
               target_vocab_size: Optional[int] = None, target_space_id: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.hparams = hparams
    self.input_vocab_size = input_vocab_size
    self.target_vocab_size = target_vocab_size or input_vocab_size
    self.target_space_id = target_space_id
    hp = hparams
    if hp.shared_embedding_and_softmax_weights and (
        self.input_vocab_size != self.target_vocab_size):
      raise ValueError(
          "shared_embedding_and_softmax_weights=True needs one vocabulary for inputs and "
          f"targets, got sizes {self.input_vocab_size} and {self.target_vocab_size}; "
          "override with --hparams='shared_embedding_and_softmax_weights=false'.")
    if not 0 <= target_space_id < 32:
      raise ValueError(f"target_space_id must be in [0, 32), got {target_space_id}.")
    modality = lambda vocab, name: SymbolModality(
        vocab, hp.hidden_size, hp.multiply_embedding_mode, name=name, dtype=self.dtype_policy)
    if hp.shared_embedding_and_softmax_weights:
      self.input_modality = self.target_modality = self.softmax = modality(
          self.target_vocab_size, "shared")
    else:
      self.input_modality = modality(self.input_vocab_size, "input_emb")
      self.target_modality = (self.input_modality if hp.shared_embedding else
                              modality(self.target_vocab_size, "target_emb"))
      self.softmax = modality(self.target_vocab_size, "softmax")
    # T2T created it without an initializer: the model-wide `hp.initializer` applies.
    self.target_space_embedding = keras.layers.Embedding(
        32, hp.hidden_size,
        embeddings_initializer=get_variable_initializer(hp.initializer, hp.initializer_gain),
        name="target_space_embedding", dtype=self.dtype_policy)
    position = lambda name: PositionEmbedding(hp.pos, hp.max_length, hp.min_timescale,
                                              hp.max_timescale, name=name,
                                              dtype=self.dtype_policy)
    self.inputs_position = position("inputs_positional_embedding")
    self.targets_position = position("targets_positional_embedding")
    self.encoder = TransformerEncoder(hp, name="encoder", dtype=self.dtype_policy)
    self.decoder = TransformerDecoder(hp, name="decoder", dtype=self.dtype_policy)
    self.input_dropout = keras.layers.Dropout(hp.layer_prepostprocess_dropout,
                                              dtype=self.dtype_policy)
    self.target_dropout = keras.layers.Dropout(hp.layer_prepostprocess_dropout,
                                               dtype=self.dtype_policy)

  def build(self, input_shape=None):
    shape = (None, None, self.hparams.hidden_size)
    for modality in {id(m): m for m in (self.input_modality, self.target_modality,
                                        self.softmax)}.values():
      modality.build()
    self.target_space_embedding.build((None,))
    self.inputs_position.build(shape)
    self.targets_position.build(shape)
    self.encoder.build(shape)
    self.decoder.build(shape)
    self.built = True

  # -- Encoder ---------------------------------------------------------------

  def embed_inputs(self, inputs, training=None) -> Tuple[tf.Tensor, tf.Tensor]:
    """Encoder input: embeddings (+ target space) + positions, dropout.

    inputs `[batch, length]` -> (x `[batch, length, hidden]`, float32 padding bias
    `[batch, 1, 1, length]`).
    """
    inputs = tf.cast(inputs, tf.int32)
    x = self.input_modality.embed(inputs)
    bias = attention_bias_ignore_padding(tf.cast(tf.equal(inputs, 0), tf.float32))
    if self.hparams.use_target_space_embedding:
      space = self.target_space_embedding(tf.constant([self.target_space_id]))
      x += tf.cast(space, x.dtype)[None]
    x = self.inputs_position(x)
    return self.input_dropout(x, training=training), bias

  def encode(self, inputs, training=None) -> Tuple[tf.Tensor, tf.Tensor]:
    """inputs `[batch, length]` -> (encoder_output `[batch, length, hidden]`,
    encoder-decoder bias float32 `[batch, 1, 1, length]`)."""
    x, bias = self.embed_inputs(inputs, training=training)
    return self.encoder(x, bias, training=training), bias

  # -- Teacher-forced decoder ------------------------------------------------

  def embed_targets(self, targets, training=None) -> tf.Tensor:
    """Decoder input: shifted-right target embeddings + positions, dropout.

    targets `[batch, length]` -> `[batch, length, hidden]`.
    """
    x = shift_right_3d(self.target_modality.embed(targets))
    x = self.targets_position(x)
    return self.target_dropout(x, training=training)

  def decode(self, targets, encoder_output, encdec_bias, training=None) -> tf.Tensor:
    """targets `[batch, length]` -> float32 logits `[batch, length, vocab]`."""
    x = self.embed_targets(targets, training=training)
    self_bias = attention_bias_lower_triangle(tf.shape(targets)[1])
    x = self.decoder(x, encoder_output, self_bias, encdec_bias, training=training)
    return tf.cast(self.softmax.logits(x), tf.float32)

  def call(self, features, training=None):
    encoder_output, encdec_bias = self.encode(features["inputs"], training=training)
    return self.decode(features["targets"], encoder_output, encdec_bias, training=training)

  # -- Incremental decoding --------------------------------------------------

  def init_cache(self, encoder_output, encdec_bias, decode_length, beams: int = 1) -> Cache:
    """Cache for `decode_step`: every tensor has the batch as leading dim.

    Args:
      encoder_output: `[batch, input_length, hidden]`.
      encdec_bias: `[batch, 1, 1, input_length]`.
      decode_length: positions in the self-attention buffers.
      beams: hypotheses per item that share the item's buffers (beam search).
        With beams > 1 each item's buffers hold `decode_length * beams`
        positions, position `t * beams + slot` written by beam slot `slot` at
        step t, and the cache gets a "history" table for beam search to
        repeat and reorder per beam.

    Returns:
      {"encdec_bias": `[batch, 1, 1, input_length]`, "layers": [per layer
      {"k", "v": zeros `[batch, heads, decode_length * beams, depth/heads]`,
       "k_encdec", "v_encdec": `[batch, heads, input_length, depth/heads]`}]},
      plus, when beams > 1, "history": False `[batch, decode_length, beams]`
      (`history[row, t, slot]`: position t of this row's hypothesis is the one
      slot `slot` wrote at step t).
    """
    hp = self.hparams
    batch = tf.shape(encoder_output)[0]
    dtype = encoder_output.dtype
    layers = []
    for layer in self.decoder.layers_:
      k_encdec, v_encdec = layer.encdec_attention.compute_memory_kv(encoder_output)
      layers.append({
          "k": tf.zeros([batch, hp.num_heads, decode_length * beams,
                         hp.key_channels // hp.num_heads], dtype),
          "v": tf.zeros([batch, hp.num_heads, decode_length * beams,
                         hp.value_channels // hp.num_heads], dtype),
          "k_encdec": k_encdec, "v_encdec": v_encdec})
    cache = {"encdec_bias": encdec_bias, "layers": layers}
    if beams > 1:
      cache["history"] = tf.zeros([batch, decode_length, beams], tf.bool)
    return cache

  def decode_step(self, ids, i, cache: Cache) -> Tuple[tf.Tensor, Cache]:
    """One decoding step.

    Args:
      ids: `[batch]` int ids of the previous step (0, i.e. a zero embedding, at i=0,
        which is what shift_right feeds in training).
      i: scalar int32 step index (the position being predicted).
      cache: from `init_cache` or the previous step. In beam search (a
        "history" `[batch, decode_length, beams]` is present) rows are
        item-major beams; "encdec_bias", "k", "v", "k_encdec" and "v_encdec"
        have one row per item, row `item * beams + slot` writes step i at
        position `i * beams + slot` of its item's buffers and attends to the
        positions its history marks.
    Returns:
      (float32 logits `[batch, vocab]`, new cache).
    """
    x = self.target_modality.embed(tf.cast(ids, tf.int32)[:, None])
    x = self.targets_position(x, start_index=i)
    negative = large_compatible_negative(tf.float32)
    new_cache = dict(cache)
    if "history" in cache:
      history = cache["history"]
      beams = history.shape[2]
      rows, decode_length = tf.shape(history)[0], tf.shape(history)[1]
      own_slot = tf.equal(tf.range(rows)[:, None] % beams, tf.range(beams))  # [rows, beams]
      written = tf.logical_and(own_slot[:, None, :],
                               tf.equal(tf.range(decode_length), i)[:, None])
      history = tf.logical_or(history, written)  # [rows, length, beams]
      new_cache["history"] = history
      # [items, 1, beams (queries), length * beams (keys, position-major)].
      self_bias = tf.reshape(tf.where(history, 0.0, negative),
                             [rows // beams, 1, beams, decode_length * beams])
    else:
      decode_length = tf.shape(cache["layers"][0]["k"])[2]
      # Positions after i are not written yet: mask them like the causal bias does.
      future = tf.cast(tf.range(decode_length) > i, tf.float32)
      self_bias = (future * negative)[None, None, None, :]
    x, layers = self.decoder(x, None, self_bias, cache["encdec_bias"], training=False,
                             cache=cache["layers"], decode_index=i)
    logits = tf.cast(self.softmax.logits(x), tf.float32)[:, 0, :]
    new_cache["layers"] = layers
    return logits, new_cache

  def get_config(self):
    return {"hparams": self.hparams.to_dict(), "input_vocab_size": self.input_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "target_space_id": self.target_space_id, "name": self.name}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["hparams"] = HParams(**config["hparams"])
    return cls(**config)
