"""Encoder and decoder stacks (T2T `transformer_encoder` / `transformer_decoder`).

Each sublayer is `postprocess(x, f(preprocess(x)))`; after the stack a final
`preprocess` is applied (a LayerNorm in pre-norm stacks, identity in post-norm).
"""

from __future__ import annotations

from typing import Dict, List, Optional

import keras
import tensorflow as tf

from t2t_keras.hparams import HParams
from t2t_keras.layers.attention import MultiHeadAttention
from t2t_keras.layers.ffn import DenseReluDense, LayerPrepostprocess


class HParamsLayer(keras.layers.Layer):
  """A layer configured by the whole HParams; `get_config` round-trips it."""

  def __init__(self, hparams: HParams, **kwargs):
    super().__init__(**kwargs)
    self.hparams = hparams

  @property
  def layers_(self) -> List[keras.layers.Layer]:
    """The stacked layers `layer_0`, `layer_1`, ... (stacks only)."""
    out = []
    while hasattr(self, f"layer_{len(out)}"):
      out.append(getattr(self, f"layer_{len(out)}"))
    return out

  def get_config(self):
    config = super().get_config()
    config["hparams"] = self.hparams.to_dict()
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["hparams"] = HParams(**config["hparams"])
    return cls(**config)


def _prepost_pair(hp: HParams, name: str, dtype_policy, input_shape):
  """The (preprocess, postprocess) wrappers of one sublayer, built."""
  pair = tuple(
      LayerPrepostprocess(sequence, hp.layer_prepostprocess_dropout, hp.norm_epsilon,
                          name=f"{name}_{kind}", dtype=dtype_policy)
      for kind, sequence in (("preprocess", hp.layer_preprocess_sequence),
                             ("postprocess", hp.layer_postprocess_sequence)))
  for layer in pair:
    layer.build(input_shape)
  return pair


def _attention(hp: HParams, name: str, dtype_policy) -> MultiHeadAttention:
  return MultiHeadAttention(hp.key_channels, hp.value_channels, hp.hidden_size,
                            hp.num_heads, hp.attention_dropout, hp.initializer,
                            hp.initializer_gain, name=name, dtype=dtype_policy)


def _ffn(hp: HParams, dtype_policy) -> DenseReluDense:
  return DenseReluDense(hp.filter_size, hp.hidden_size, hp.relu_dropout, hp.initializer,
                        hp.initializer_gain, name="ffn", dtype=dtype_policy)


class EncoderLayer(HParamsLayer):
  """One encoder layer: self-attention then FFN.

  Call arguments:
    x: `[batch, length, hidden]`; bias: `[batch, 1, 1, length]` padding bias.
  Returns:
    `[batch, length, hidden]`.
  """

  def build(self, input_shape):
    hp = self.hparams
    self.self_attention = _attention(hp, "self_attention", self.dtype_policy)
    self.self_attention.build(input_shape)
    self.ffn = _ffn(hp, self.dtype_policy)
    self.ffn.build(input_shape)
    self.pre, self.post = _prepost_pair(hp, "self_attention", self.dtype_policy, input_shape)
    self.ffn_pre, self.ffn_post = _prepost_pair(hp, "ffn", self.dtype_policy, input_shape)

  def call(self, x, bias, training=None):
    y = self.self_attention(self.pre(None, x, training=training), bias=bias,
                            training=training)
    x = self.post(x, y, training=training)
    y = self.ffn(self.ffn_pre(None, x, training=training), training=training)
    return self.ffn_post(x, y, training=training)


class DecoderLayer(HParamsLayer):
  """One decoder layer: causal self-attention, encoder-decoder attention, FFN.

  Call arguments:
    x: `[batch, length, hidden]`.
    encoder_output: `[batch, input_length, hidden]` (unused when the cache holds
      the precomputed encoder-decoder keys and values).
    self_bias: `[1 or batch, 1, length, length_kv]`; encdec_bias: `[batch, 1, 1, input_length]`.
    cache: None, or `{"k", "v", "k_encdec", "v_encdec"}` (see MultiHeadAttention).
    decode_index: scalar step written into the cache.
  Returns:
    `[batch, length, hidden]`, plus the new cache when a cache is given.
  """

  def build(self, input_shape):
    hp = self.hparams
    self.self_attention = _attention(hp, "self_attention", self.dtype_policy)
    self.self_attention.build(input_shape)
    self.encdec_attention = _attention(hp, "encdec_attention", self.dtype_policy)
    self.encdec_attention.build(input_shape, input_shape)
    self.ffn = _ffn(hp, self.dtype_policy)
    self.ffn.build(input_shape)
    self.pre, self.post = _prepost_pair(hp, "self_attention", self.dtype_policy, input_shape)
    self.encdec_pre, self.encdec_post = _prepost_pair(hp, "encdec_attention",
                                                      self.dtype_policy, input_shape)
    self.ffn_pre, self.ffn_post = _prepost_pair(hp, "ffn", self.dtype_policy, input_shape)

  def call(self, x, encoder_output, self_bias, encdec_bias, training=None, cache=None,
           decode_index=None):
    self_cache = encdec_cache = None
    if cache is not None:
      self_cache = {"k": cache["k"], "v": cache["v"]}
      encdec_cache = {"k_encdec": cache["k_encdec"], "v_encdec": cache["v_encdec"]}
    y = self.self_attention(self.pre(None, x, training=training), bias=self_bias,
                            training=training, cache=self_cache, decode_index=decode_index)
    if cache is not None:
      y, self_cache = y
    x = self.post(x, y, training=training)
    y = self.encdec_attention(self.encdec_pre(None, x, training=training), encoder_output,
                              bias=encdec_bias, training=training, cache=encdec_cache)
    if cache is not None:
      y = y[0]
    x = self.encdec_post(x, y, training=training)
    y = self.ffn(self.ffn_pre(None, x, training=training), training=training)
    x = self.ffn_post(x, y, training=training)
    if cache is not None:
      return x, dict(cache, **self_cache)
    return x


class TransformerEncoder(HParamsLayer):
  """`encoder_layers` EncoderLayers and the final preprocess.

  Call arguments: x `[batch, length, hidden]`, bias `[batch, 1, 1, length]`.
  Returns: `[batch, length, hidden]`.
  """

  def build(self, input_shape):
    hp = self.hparams
    # One attribute per layer: TF checkpoints do not follow Keras' list wrappers.
    for i in range(hp.encoder_layers):
      layer = EncoderLayer(hp, name=f"layer_{i}", dtype=self.dtype_policy)
      layer.build(input_shape)
      setattr(self, f"layer_{i}", layer)
    self.final = LayerPrepostprocess(hp.layer_preprocess_sequence, 0.0, hp.norm_epsilon,
                                     name="final_preprocess", dtype=self.dtype_policy)
    self.final.build(input_shape)

  def call(self, x, bias, training=None):
    for layer in self.layers_:
      x = layer(x, bias, training=training)
    return self.final(None, x, training=training)


class TransformerDecoder(HParamsLayer):
  """`decoder_layers` DecoderLayers and the final preprocess.

  Call arguments: as DecoderLayer, with `cache` a list of per-layer dicts.
  Returns: `[batch, length, hidden]`, plus the new cache list when given one.
  """

  def build(self, input_shape):
    hp = self.hparams
    for i in range(hp.decoder_layers):
      layer = DecoderLayer(hp, name=f"layer_{i}", dtype=self.dtype_policy)
      layer.build(input_shape)
      setattr(self, f"layer_{i}", layer)
    self.final = LayerPrepostprocess(hp.layer_preprocess_sequence, 0.0, hp.norm_epsilon,
                                     name="final_preprocess", dtype=self.dtype_policy)
    self.final.build(input_shape)

  def call(self, x, encoder_output, self_bias, encdec_bias, training=None,
           cache: Optional[List[Dict[str, tf.Tensor]]] = None, decode_index=None):
    new_cache = []
    for i, layer in enumerate(self.layers_):
      if cache is None:
        x = layer(x, encoder_output, self_bias, encdec_bias, training=training)
      else:
        x, layer_cache = layer(x, encoder_output, self_bias, encdec_bias, training=training,
                               cache=cache[i], decode_index=decode_index)
        new_cache.append(layer_cache)
    x = self.final(None, x, training=training)
    return (x, new_cache) if cache is not None else x
