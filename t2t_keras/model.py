"""The Transformer (T2T `models/transformer.py`) as a Keras 3 model.

`call(features)` is teacher-forced training/evaluation: inputs, targets -> logits
(and, on request, every attention weight). `encode`, `init_decoding_state` and
`decode_step` are the pieces of fast incremental decoding: the encoder runs
once, encoder-decoder keys/values are computed once per layer, and
self-attention keys/values live in fixed-size buffers that each step writes at
its index (shape-stable, so the loop compiles with XLA); `decoding_state.py`
owns that layout.

Keras saving: the model and its layers are registered as "t2t_keras>ClassName"
when this module is imported, and `get_config` holds the hparams (as
hparams.json does), so `model.save("m.keras")` round-trips through
`keras.models.load_model("m.keras")` once `t2t_keras.model` is imported.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

import keras
import tensorflow as tf

from data_gen.text_encoder import PAD_ID
from t2t_keras.decoding_state import DecodingState, Memory
from t2t_keras.hparams import HParams
from t2t_keras.layers import HParamsConfig
from t2t_keras.layers.attention import (attention_bias_ignore_padding,
                                        attention_bias_lower_triangle,
                                        attention_bias_prepend_inputs_full_attention,
                                        attention_bias_same_segment, attention_bias_visible)
from t2t_keras.layers.dropout import Dropout
from t2t_keras.layers.embedding import PositionEmbedding, SymbolModality
from t2t_keras.layers.initializers import get_variable_initializer
from t2t_keras.layers.transformer_layers import TransformerDecoder, TransformerEncoder


class AttentionScores(NamedTuple):
  """Attention weights of every layer, each `[batch, heads, length_q, length_kv]`.

  encoder: encoder self-attention (queries and keys: inputs).
  decoder: decoder self-attention (targets, causal).
  encdec: encoder-decoder attention (queries: targets, keys: inputs).
  """
  encoder: List[tf.Tensor]
  decoder: List[tf.Tensor]
  encdec: List[tf.Tensor]


def shift_right_3d(x: tf.Tensor, position: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Prepends a zero vector along length: `[batch, length, depth]` -> same shape.

  With `position` (int `[batch, length]`, packed examples' positions) every
  position 0 gets the zero vector, so that each packed example starts as it
  does alone (T2T fed it the previous example's last token instead).
  """
  x = tf.pad(x, [[0, 0], [1, 0], [0, 0]])[:, :-1, :]
  if position is not None:
    x *= tf.cast(tf.not_equal(position, 0), x.dtype)[..., None]
  return x


def packed_feature(features, key: str) -> Optional[Tuple[tf.Tensor, tf.Tensor]]:
  """(segmentation, position), int32 `[batch, length]`, of `key` in packed features
  (T2T's "<key>_segmentation" and "<key>_position", `training/inputs.pack_dataset`);
  None for unpacked features."""
  if key + "_segmentation" not in features:
    return None
  if key + "_position" not in features:
    raise ValueError(f"packed features hold {key}_segmentation but no {key}_position.")
  return (tf.cast(features[key + "_segmentation"], tf.int32),
          tf.cast(features[key + "_position"], tf.int32))


@keras.saving.register_keras_serializable(package="t2t_keras")
class Transformer(HParamsConfig, keras.Model):
  """Encoder-decoder Transformer.

  Args:
    hparams: an `HParams`.
    input_vocab_size / target_vocab_size: symbol counts (PAD=0, EOS=1). With
      `shared_embedding_and_softmax_weights` they must be equal.
    target_space_id: T2T's SpaceID of the targets, embedded and added to every
      encoder position when `use_target_space_embedding`.

  Call arguments:
    features: dict with "inputs" `[batch, input_length]` and "targets"
      `[batch, target_length]` int ids, 0-padded. With `hparams.prepend_mode`
      the targets are T2T's [inputs, 0, targets] (`inputs.py` builds them) and
      the encoder still reads the inputs, as T2T's Transformer did. Packed
      examples (T2T's packed datasets) add "inputs_segmentation",
      "inputs_position" `[batch, input_length]`, "targets_segmentation" and
      "targets_position" `[batch, target_length]`: each attention then stays
      within an example (segment) and positions restart with each, so each
      example gets the logits it has alone.
    training: Python bool.
    return_attention_scores: also return every attention weight.

  Returns:
    float32 logits `[batch, target_length, target_vocab_size]`; with
    return_attention_scores a pair of them and `AttentionScores`.
  """

  has_inputs = True  # `lm_model.TransformerLM` is the model of a problem without inputs
  # Besides the hparams, name, trainable and the dtype policy (a mixed_bfloat16 model
  # reloads as one); the sublayers are rebuilt from the hparams, so they need no entry.
  CONFIG_ATTRIBUTES = ("input_vocab_size", "target_vocab_size", "target_space_id")

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
    self.input_dropout = Dropout(hp.layer_prepostprocess_dropout, dtype=self.dtype_policy)
    self.target_dropout = Dropout(hp.layer_prepostprocess_dropout, dtype=self.dtype_policy)

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

  def embed_inputs(self, inputs, training=None, position=None) -> Tuple[tf.Tensor, tf.Tensor]:
    """Encoder input: embeddings (+ target space) + positions, dropout.

    inputs `[batch, length]` (and optionally each token's position, int
    `[batch, length]`, of packed examples) -> (x `[batch, length, hidden]`,
    float32 padding bias `[batch, 1, 1, length]`).
    """
    inputs = tf.cast(inputs, tf.int32)
    x = self.input_modality.embed(inputs)
    bias = attention_bias_ignore_padding(tf.cast(tf.equal(inputs, PAD_ID), tf.float32))
    if self.hparams.use_target_space_embedding:
      space = self.target_space_embedding(tf.constant([self.target_space_id]))
      x += tf.cast(space, x.dtype)[None]
    x = self.inputs_position(x, position=position)
    return self.input_dropout(x, training=training), bias

  def encode(self, inputs, training=None) -> Tuple[tf.Tensor, tf.Tensor]:
    """inputs `[batch, length]` -> (encoder_output `[batch, length, hidden]`,
    encoder-decoder bias float32 `[batch, 1, 1, length]`)."""
    encoder_output, bias, _ = self._encode(inputs, training)
    return encoder_output, bias

  def _encode(self, inputs, training, packed=None):
    """`encode` and the encoder's attention weights; `packed`: the inputs'
    (segmentation, position) of packed examples (`packed_feature`), or None."""
    x, bias = self.embed_inputs(inputs, training=training,
                                position=None if packed is None else packed[1])
    self_bias = bias if packed is None else attention_bias_same_segment(packed[0], packed[0])
    encoder_output, scores = self.encoder(x, self_bias, training=training,
                                          return_attention_scores=True)
    return encoder_output, bias, scores

  # -- Teacher-forced decoder ------------------------------------------------

  def embed_targets(self, targets, training=None, position=None) -> tf.Tensor:
    """Decoder input: shifted-right target embeddings + positions, dropout.

    targets `[batch, length]` (and optionally each token's position, int
    `[batch, length]`, of packed examples) -> `[batch, length, hidden]`.
    """
    x = shift_right_3d(self.target_modality.embed(targets), position)
    x = self.targets_position(x, position=position)
    return self.target_dropout(x, training=training)

  def decode(self, targets, encoder_output, encdec_bias, training=None) -> tf.Tensor:
    """targets `[batch, length]` -> float32 logits `[batch, length, vocab]`."""
    return self._decode(targets, encoder_output, encdec_bias, training)[0]

  def _decode(self, targets, encoder_output, encdec_bias, training, packed=None):
    """`decode` and the decoder's per-layer (self, encoder-decoder) attention weights;
    `packed`: the targets' (segmentation, position) of packed examples, or None."""
    x = self.embed_targets(targets, training=training,
                           position=None if packed is None else packed[1])
    if self.hparams.prepend_mode == "prepend_inputs_full_attention":
      # T2T's `transformer_prepare_decoder`: from the padding of the unshifted targets.
      self_bias = attention_bias_prepend_inputs_full_attention(
          tf.cast(tf.equal(targets, PAD_ID), tf.float32))
    else:
      self_bias = attention_bias_lower_triangle(tf.shape(targets)[1])
    if packed is not None:  # T2T: the causal bias plus one keeping examples apart
      self_bias += attention_bias_same_segment(packed[0], packed[0])
    x, scores = self.decoder(x, encoder_output, self_bias, encdec_bias, training=training,
                             return_attention_scores=True)
    return tf.cast(self.softmax.logits(x), tf.float32), scores

  def call(self, features, training=None, return_attention_scores=False):
    packed_inputs = packed_feature(features, "inputs")
    packed_targets = packed_feature(features, "targets")
    if (packed_inputs is None) != (packed_targets is None):
      raise ValueError("packed features need both inputs_ and targets_segmentation; got "
                       "only one.")
    encoder_output, encdec_bias, encoder = self._encode(features["inputs"], training,
                                                        packed_inputs)
    if packed_inputs is not None:  # targets see the inputs of their own example only
      encdec_bias = attention_bias_same_segment(packed_targets[0], packed_inputs[0])
    logits, decoder = self._decode(features["targets"], encoder_output, encdec_bias, training,
                                   packed_targets)
    if not return_attention_scores:
      return logits
    return logits, AttentionScores(encoder=encoder, decoder=[s for s, _ in decoder],
                                   encdec=[e for _, e in decoder])

  # -- Incremental decoding --------------------------------------------------

  def init_decoding_state(self, encoder_output, encdec_bias, decode_length,
                          beams: int = 1) -> DecodingState:
    """The state before step 0 of `decode_step` (see `DecodingState.init`).

    Args:
      encoder_output: `[batch, input_length, hidden]`.
      encdec_bias: `[batch, 1, 1, input_length]`.
      decode_length: positions in the self-attention buffers.
      beams: hypotheses per item that share the item's buffers (beam search).
    """
    memory = Memory(encdec_bias, self.decoder.memory_keys_values(encoder_output))
    return DecodingState.init(memory, decode_length, beams)

  def decode_step(self, ids, i, state: DecodingState) -> Tuple[tf.Tensor, DecodingState]:
    """One decoding step, the `symbols_to_logits_fn` of cached decoding.

    Args:
      ids: `[rows]` int ids of the previous step (0, i.e. a zero embedding, at i=0,
        which is what shift_right feeds in training). In beam search rows are
        item-major beams, and the state's history has one row per beam.
      i: scalar int32 step index (the position being predicted).
      state: from `init_decoding_state` or the previous step.
    Returns:
      (float32 logits `[rows, vocab]`, the state after step i).
    """
    x = self.target_modality.embed(tf.cast(ids, tf.int32)[:, None])
    x = self.targets_position(x, start_index=i)
    state, visible = state.begin_step(i)
    x, buffers = self.decoder.step(x, attention_bias_visible(visible), state.per_item,
                                   state.in_place, i)
    logits = tf.cast(self.softmax.logits(x), tf.float32)[:, 0, :]
    return logits, state.replace(in_place=buffers)
