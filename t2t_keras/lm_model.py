"""T2T's Transformer without inputs: a decoder-only language model.

T2T's `Transformer.body` with `has_input` false (a problem whose features are
only "targets", e.g. `languagemodel_lm1b32k`): no encoder, and the decoder
layers skip encoder-decoder attention (T2T passes encoder_output None, so
those sublayers and their variables do not exist). The decoder input is
`transformer_prepare_decoder`'s: target embeddings shifted right, the position
signal, dropout; its self-attention bias is the causal lower triangle. No
target-space embedding (T2T adds it in the encoder only).

`call(features)` is teacher-forced; `init_decoding_state` and `decode_step` are
the cached incremental decoding of `decoding_state.py`'s layout, with no
`per_item` memory. `decoding/lm.py` scores and samples text with them.
"""

from __future__ import annotations

from typing import Optional, Tuple

import keras
import tensorflow as tf

from t2t_keras import errors
from t2t_keras.decoding_state import DecodingState, KeyValue
from t2t_keras.hparams import HParams
from t2t_keras.layers import HParamsConfig
from t2t_keras.layers.attention import (attention_bias_lower_triangle,
                                        attention_bias_same_segment, attention_bias_visible)
from t2t_keras.layers.dropout import Dropout
from t2t_keras.layers.embedding import PositionEmbedding, SymbolModality
from t2t_keras.layers.transformer_layers import TransformerDecoder
from t2t_keras.model import AttentionScores, packed_feature, shift_right_3d
from t2t_keras.perf.buffers import new_buffer


@keras.saving.register_keras_serializable(package="t2t_keras")
class TransformerLM(HParamsConfig, keras.Model):
  """Decoder-only Transformer (T2T's Transformer on a targets-only problem).

  Args:
    hparams: an `HParams` (prepend_mode must be "none": T2T prepends a
      problem's inputs, which a language model does not have).
    target_vocab_size: symbol count (PAD=0, EOS=1).

  Call arguments:
    features: dict with "targets" `[batch, length]` int ids, 0-padded; any
      "inputs" is ignored (an LM's batches hold an empty one). Packed examples
      (several texts per row, T2T's packed datasets) add "targets_segmentation"
      and "targets_position" `[batch, length]`: self-attention then stays within
      each text and positions restart with it, so each text gets the logits it
      has alone.
    training: Python bool.
    return_attention_scores: also return every attention weight.

  Returns:
    float32 logits `[batch, length, target_vocab_size]`; with
    return_attention_scores a pair of them and `AttentionScores` (its encoder
    and encdec lists empty).
  """

  has_inputs = False
  CONFIG_ATTRIBUTES = ("target_vocab_size",)

  def __init__(self, hparams: HParams, target_vocab_size: int, **kwargs):
    super().__init__(**kwargs)
    if hparams.prepend_mode != "none":
      raise ValueError(f"hparams.prepend_mode={hparams.prepend_mode!r} prepends a problem's "
                       "inputs to its targets, and a language-model problem has no inputs; "
                       "use prepend_mode=none.")
    self.hparams = hparams
    self.target_vocab_size = target_vocab_size
    hp = hparams
    modality = lambda name: SymbolModality(target_vocab_size, hp.hidden_size,
                                           hp.multiply_embedding_mode, name=name,
                                           dtype=self.dtype_policy)
    if hp.shared_embedding_and_softmax_weights:
      self.target_modality = self.softmax = modality("shared")
    else:
      self.target_modality, self.softmax = modality("target_emb"), modality("softmax")
    self.targets_position = PositionEmbedding(
        hp.pos, hp.max_length, hp.min_timescale, hp.max_timescale,
        name="targets_positional_embedding", dtype=self.dtype_policy)
    self.decoder = TransformerDecoder(hp, encdec=False, name="decoder", dtype=self.dtype_policy)
    self.target_dropout = Dropout(hp.layer_prepostprocess_dropout, dtype=self.dtype_policy)

  def build(self, input_shape=None):
    shape = (None, None, self.hparams.hidden_size)
    for modality in {id(m): m for m in (self.target_modality, self.softmax)}.values():
      modality.build()
    self.targets_position.build(shape)
    self.decoder.build(shape)
    self.built = True

  def embed_targets(self, targets, training=None, position=None) -> tf.Tensor:
    """targets `[batch, length]` (and optionally each token's position, int
    `[batch, length]`, of packed texts) -> shifted-right embeddings + positions,
    dropout: `[batch, length, hidden]`."""
    x = shift_right_3d(self.target_modality.embed(tf.cast(targets, tf.int32)), position)
    return self.target_dropout(self.targets_position(x, position=position), training=training)

  def call(self, features, training=None, return_attention_scores=False):
    targets = features["targets"]
    packed = packed_feature(features, "targets")
    x = self.embed_targets(targets, training=training,
                           position=None if packed is None else packed[1])
    self_bias = attention_bias_lower_triangle(tf.shape(targets)[1])
    if packed is not None:  # T2T: the causal bias plus one keeping texts apart
      self_bias += attention_bias_same_segment(packed[0], packed[0])
    x, scores = self.decoder(x, None, self_bias, None, training=training,
                             return_attention_scores=True)
    logits = tf.cast(self.softmax.logits(x), tf.float32)
    if not return_attention_scores:
      return logits
    return logits, AttentionScores(encoder=[], decoder=[s for s, _ in scores], encdec=[])

  def encode(self, inputs, training=None):
    """Refuses: what translates inputs (t2t_keras_decoder, the exporter) gets a clear error."""
    del inputs, training
    raise errors.ConfigError(
        "this run is a language model (its problem has no inputs): there is nothing to "
        "translate; score and sample text with t2t_keras.decoding.lm (docs/language_models.md).")

  # -- Incremental decoding --------------------------------------------------

  def init_decoding_state(self, batch_size, decode_length) -> DecodingState:
    """The state before step 0: zero self-attention buffers, one row per sequence.

    Args:
      batch_size: rows (scalar int or int32 tensor).
      decode_length: positions the buffers hold.
    Returns:
      `DecodingState(per_beam=(), per_item=(), in_place=buffers)`, each layer's
      `KeyValue` `[batch, heads, decode_length, depth / heads]`.
    """
    hp = self.hparams
    dtype = tf.as_dtype(self.compute_dtype)
    empty = lambda depth: new_buffer(
        [batch_size, hp.num_heads, decode_length, depth // hp.num_heads], dtype)
    buffers = tuple(KeyValue(empty(hp.key_channels), empty(hp.value_channels))
                    for _ in range(hp.decoder_layers))
    return DecodingState(in_place=buffers)

  def decode_step(self, ids, i, state: DecodingState) -> Tuple[tf.Tensor, DecodingState]:
    """One cached decoding step, the `symbols_to_logits_fn` of `sampling.py`.

    Args:
      ids: `[batch]` int ids of the previous position (0 at i=0: the zero
        embedding shift_right feeds in training).
      i: scalar int32 position being predicted.
      state: from `init_decoding_state` or the previous step.
    Returns:
      (float32 logits `[batch, vocab]`, the state with position i written).
    """
    x = self.target_modality.embed(tf.cast(ids, tf.int32)[:, None])
    x = self.targets_position(x, start_index=i)
    state, visible = state.begin_step(i)
    x, buffers = self.decoder.step(x, attention_bias_visible(visible), None, state.in_place, i)
    logits = tf.cast(self.softmax.logits(x), tf.float32)[:, 0, :]
    return logits, state.replace(in_place=buffers)


def build_language_model(hparams: HParams, target_vocab_size: int,
                         dtype: Optional[str] = None, name: str = "transformer") -> TransformerLM:
  """A built `TransformerLM` (variables created)."""
  model = TransformerLM(hparams, target_vocab_size, name=name, dtype=dtype)
  model.build()
  return model
