"""Encoder and decoder stacks (T2T `transformer_encoder` / `transformer_decoder`).

Each sublayer is `postprocess(x, f(preprocess(x)))`; after the stack a final
`preprocess` is applied (a LayerNorm in pre-norm stacks, identity in post-norm).
"""

from __future__ import annotations

from typing import List, Tuple

import keras
import tensorflow as tf

from t2t_keras.decoding_state import KeyValue, Memory
from t2t_keras.hparams import DROPOUT_BROADCAST_DIMS_RANKS, HParams, broadcast_dims
from t2t_keras.layers import HParamsConfig
from t2t_keras.layers.attention import MultiHeadAttention
from t2t_keras.layers.ffn import DenseReluDense, LayerPrepostprocess


class HParamsLayer(HParamsConfig, keras.layers.Layer):
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


def _broadcast_dims(hp: HParams, name: str) -> Tuple[int, ...]:
  """The dims of the hparams field `name` (e.g. "0,1" -> (0, 1))."""
  return broadcast_dims(getattr(hp, name), DROPOUT_BROADCAST_DIMS_RANKS[name], name)


def _prepost_pair(hp: HParams, name: str, dtype_policy, input_shape):
  """The (preprocess, postprocess) wrappers of one sublayer, built."""
  pair = tuple(
      LayerPrepostprocess(sequence, hp.layer_prepostprocess_dropout, hp.norm_epsilon,
                          _broadcast_dims(hp, "layer_prepostprocess_dropout_broadcast_dims"),
                          name=f"{name}_{kind}", dtype=dtype_policy)
      for kind, sequence in (("preprocess", hp.layer_preprocess_sequence),
                             ("postprocess", hp.layer_postprocess_sequence)))
  for layer in pair:
    layer.build(input_shape)
  return pair


def _attention(hp: HParams, name: str, dtype_policy) -> MultiHeadAttention:
  """The attention sublayer `name`; self-attention is of `hp.self_attention_type`.

  As in T2T's transformer_encoder / transformer_decoder, encoder-decoder
  attention is always plain dot-product attention. T2T's relative attention
  (`dot_product_attention_relative`) took no broadcast dims: its weights get an
  unshared dropout mask whatever `attention_dropout_broadcast_dims` says.
  """
  relative = name == "self_attention" and hp.self_attention_type == "dot_product_relative"
  shared = () if relative else _broadcast_dims(hp, "attention_dropout_broadcast_dims")
  return MultiHeadAttention(hp.key_channels, hp.value_channels, hp.hidden_size,
                            hp.num_heads, hp.attention_dropout, hp.initializer,
                            hp.initializer_gain,
                            max_relative_position=hp.max_relative_position if relative else 0,
                            attention_dropout_broadcast_dims=shared, name=name, dtype=dtype_policy)


def _ffn(hp: HParams, dtype_policy) -> DenseReluDense:
  return DenseReluDense(hp.filter_size, hp.hidden_size, hp.relu_dropout, hp.initializer,
                        hp.initializer_gain,
                        _broadcast_dims(hp, "relu_dropout_broadcast_dims"), name="ffn",
                        dtype=dtype_policy)


def _feed_forward(layer, x, training):
  """The FFN sublayer of an encoder or decoder layer, with its pre/postprocess."""
  y = layer.ffn(layer.ffn_pre(None, x, training=training), training=training)
  return layer.ffn_post(x, y, training=training)


@keras.saving.register_keras_serializable(package="t2t_keras")
class EncoderLayer(HParamsLayer):
  """One encoder layer: self-attention then FFN.

  Call arguments:
    x: `[batch, length, hidden]`; bias: `[batch, 1, 1, length]` padding bias.
    return_attention_scores: also return the self-attention weights.
  Returns:
    `[batch, length, hidden]`; with return_attention_scores a pair of it and
    the weights `[batch, heads, length, length]`.
  """

  def build(self, input_shape):
    hp = self.hparams
    self.self_attention = _attention(hp, "self_attention", self.dtype_policy)
    self.self_attention.build(input_shape)
    self.ffn = _ffn(hp, self.dtype_policy)
    self.ffn.build(input_shape)
    self.pre, self.post = _prepost_pair(hp, "self_attention", self.dtype_policy, input_shape)
    self.ffn_pre, self.ffn_post = _prepost_pair(hp, "ffn", self.dtype_policy, input_shape)

  def call(self, x, bias, training=None, return_attention_scores=False):
    y, scores = self.self_attention(self.pre(None, x, training=training), bias=bias,
                                    training=training, return_attention_scores=True)
    x = _feed_forward(self, self.post(x, y, training=training), training)
    return (x, scores) if return_attention_scores else x


@keras.saving.register_keras_serializable(package="t2t_keras")
class DecoderLayer(HParamsLayer):
  """One decoder layer: causal self-attention, encoder-decoder attention, FFN.

  Args:
    hparams: an `HParams`.
    encdec: False for a model without inputs (a language model): no
      encoder-decoder attention sublayer, as T2T's decoder layer skips it (and
      creates no variables for it) when encoder_output is None.

  Call arguments:
    x: `[batch, length, hidden]`.
    encoder_output: `[batch, input_length, hidden]` (None when not `encdec`).
    self_bias: `[1 or batch, 1, length, length]`; encdec_bias: `[batch, 1, 1, input_length]`.
    return_attention_scores: also return the attention weights.
  Returns:
    `[batch, length, hidden]`; with return_attention_scores a pair of it and
    (self-attention weights `[batch, heads, length, length]`, encoder-decoder
    weights `[batch, heads, length, input_length]`, None when not `encdec`).

  `step` is the same layer for one incremental decoding step.
  """

  CONFIG_ATTRIBUTES = ("encdec",)

  def __init__(self, hparams: HParams, encdec: bool = True, **kwargs):
    super().__init__(hparams, **kwargs)
    self.encdec = encdec

  def build(self, input_shape):
    hp = self.hparams
    self.self_attention = _attention(hp, "self_attention", self.dtype_policy)
    self.self_attention.build(input_shape)
    if self.encdec:
      self.encdec_attention = _attention(hp, "encdec_attention", self.dtype_policy)
      self.encdec_attention.build(input_shape, input_shape)
    self.ffn = _ffn(hp, self.dtype_policy)
    self.ffn.build(input_shape)
    self.pre, self.post = _prepost_pair(hp, "self_attention", self.dtype_policy, input_shape)
    if self.encdec:
      self.encdec_pre, self.encdec_post = _prepost_pair(hp, "encdec_attention",
                                                        self.dtype_policy, input_shape)
    self.ffn_pre, self.ffn_post = _prepost_pair(hp, "ffn", self.dtype_policy, input_shape)

  def call(self, x, encoder_output, self_bias, encdec_bias, training=None,
           return_attention_scores=False):
    y, self_scores = self.self_attention(self.pre(None, x, training=training), bias=self_bias,
                                         training=training, return_attention_scores=True)
    x = self.post(x, y, training=training)
    encdec_scores = None
    if self.encdec:
      y, encdec_scores = self.encdec_attention(
          self.encdec_pre(None, x, training=training), encoder_output, bias=encdec_bias,
          training=training, return_attention_scores=True)
      x = self.encdec_post(x, y, training=training)
    x = _feed_forward(self, x, training)
    return (x, (self_scores, encdec_scores)) if return_attention_scores else x

  def step(self, x, self_bias, encdec_bias, memory: KeyValue, buffers: KeyValue,
           index) -> Tuple[tf.Tensor, KeyValue]:
    """One incremental decoding step (inference: no dropout).

    Args:
      x: `[rows, 1, hidden]`, the step's input of each hypothesis.
      self_bias: what each row's self-attention sees (`DecodingState.begin_step`).
      encdec_bias: `[items, 1, 1, input_length]`.
      memory: this layer's encoder-decoder keys and values, `items` rows (None
        when not `encdec`).
      buffers: this layer's self-attention buffers (see `attend_step`).
      index: scalar int32 step.

    Returns:
      (`[rows, 1, hidden]`, the buffers with this step written).
    """
    y, buffers = self.self_attention.attend_step(self.pre(None, x, training=False), buffers,
                                                 index, self_bias)
    x = self.post(x, y, training=False)
    if self.encdec:
      y = self.encdec_attention.attend(self.encdec_pre(None, x, training=False), memory,
                                       encdec_bias)
      x = self.encdec_post(x, y, training=False)
    return _feed_forward(self, x, False), buffers


class _Stack(HParamsLayer):
  """`num_layers` layers `layer_i` of `layer_class` and the final preprocess."""

  layer_class = None

  def num_layers(self) -> int:
    raise NotImplementedError

  def _layer_kwargs(self):
    return {}

  def build(self, input_shape):
    hp = self.hparams
    # One attribute per layer: TF checkpoints do not follow Keras' list wrappers.
    for i in range(self.num_layers()):
      layer = self.layer_class(hp, name=f"layer_{i}", dtype=self.dtype_policy,
                               **self._layer_kwargs())
      layer.build(input_shape)
      setattr(self, f"layer_{i}", layer)
    self.final = LayerPrepostprocess(hp.layer_preprocess_sequence, 0.0, hp.norm_epsilon,
                                     name="final_preprocess", dtype=self.dtype_policy)
    self.final.build(input_shape)


@keras.saving.register_keras_serializable(package="t2t_keras")
class TransformerEncoder(_Stack):
  """`encoder_layers` EncoderLayers and the final preprocess.

  Call arguments: x `[batch, length, hidden]`, bias `[batch, 1, 1, length]`,
    return_attention_scores.
  Returns: `[batch, length, hidden]`; with return_attention_scores a pair of it
    and the list of each layer's weights.
  """

  layer_class = EncoderLayer

  def num_layers(self) -> int:
    return self.hparams.encoder_layers

  def call(self, x, bias, training=None, return_attention_scores=False):
    scores = []
    for layer in self.layers_:
      x, layer_scores = layer(x, bias, training=training, return_attention_scores=True)
      scores.append(layer_scores)
    x = self.final(None, x, training=training)
    return (x, scores) if return_attention_scores else x


@keras.saving.register_keras_serializable(package="t2t_keras")
class TransformerDecoder(_Stack):
  """`decoder_layers` DecoderLayers and the final preprocess.

  Args:
    hparams: an `HParams`.
    encdec: False for a decoder without encoder-decoder attention (see DecoderLayer).

  Call arguments: as DecoderLayer.
  Returns: `[batch, length, hidden]`; with return_attention_scores a pair of it
    and the list of each layer's (self, encoder-decoder) weights.

  Incremental decoding: `memory_keys_values` once, then `step` per position.
  """

  layer_class = DecoderLayer
  CONFIG_ATTRIBUTES = ("encdec",)

  def __init__(self, hparams: HParams, encdec: bool = True, **kwargs):
    super().__init__(hparams, **kwargs)
    self.encdec = encdec

  def num_layers(self) -> int:
    return self.hparams.decoder_layers

  def _layer_kwargs(self):
    return {"encdec": self.encdec}

  def call(self, x, encoder_output, self_bias, encdec_bias, training=None,
           return_attention_scores=False):
    scores = []
    for layer in self.layers_:
      x, layer_scores = layer(x, encoder_output, self_bias, encdec_bias, training=training,
                              return_attention_scores=True)
      scores.append(layer_scores)
    x = self.final(None, x, training=training)
    return (x, scores) if return_attention_scores else x

  def memory_keys_values(self, encoder_output) -> Tuple[KeyValue, ...]:
    """Each layer's encoder-decoder keys and values of `[items, input_length, hidden]`."""
    return tuple(layer.encdec_attention.compute_memory_kv(encoder_output)
                 for layer in self.layers_)

  def step(self, x, self_bias, memory: Memory, buffers: Tuple[KeyValue, ...],
           index) -> Tuple[tf.Tensor, Tuple[KeyValue, ...]]:
    """One incremental decoding step of the stack (see `DecoderLayer.step`).

    `memory` is None for a decoder without encoder-decoder attention.

    Returns:
      (`[rows, 1, hidden]`, every layer's buffers with this step written).
    """
    written = []
    layers = self.layers_
    memory_layers = memory.layers if self.encdec else (None,) * len(layers)
    bias = memory.bias if self.encdec else None
    for layer, keys_values, layer_buffers in zip(layers, memory_layers, buffers):
      x, layer_buffers = layer.step(x, self_bias, bias, keys_values, layer_buffers,
                                    index)
      written.append(layer_buffers)
    return self.final(None, x, training=False), tuple(written)
