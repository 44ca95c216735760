"""In-graph twin of `SentencePieceEncoder`; `graph_encoder` picks a vocab file's twin.

`GraphSentencePieceEncoder(model_path)` encodes `[batch]` strings to ragged ids
and decodes ids to strings with TF Text's `SentencepieceTokenizer`, giving the
ids and text of `sentencepiece_encoder.SentencePieceEncoder` (the same
sentencepiece library runs inside the op). It has `GraphSubwordEncoder`'s
interface (`vocab_size`, `encode`, `normalize_input`, `decode(ids, cut_at_eos)`),
so the SavedModel exports take either.

SavedModel: the model's bytes are an attribute of the tokenizer's resource op,
so an export holds them in its graph and needs no file at serving time; the
model file is also kept as the tracked asset `vocab_file` (copied into
`assets/`, as the subword vocabulary is) for clients that want the Python encoder.
"""

import os

import tensorflow as tf
import tensorflow_text as tf_text

from data_gen import sentencepiece_encoder, text_encoder, tokenizer
from data_gen.graph_text_encoder import GraphSubwordEncoder, before_first, strip_input


def graph_encoder(vocab_path: str, name=None):
  """The in-graph encoder of a vocab file: SentencePiece model or T2T `.subwords` file."""
  if sentencepiece_encoder.is_sentencepiece_vocab(vocab_path):
    return GraphSentencePieceEncoder(vocab_path, name=name)
  return GraphSubwordEncoder(vocab_path, name=name)


class GraphSentencePieceEncoder(tf.Module):
  """`SentencePieceEncoder` as TensorFlow ops (see the module docstring).

  Args:
    model_path: path of a `*.spm.model` file, as `str` or `os.PathLike`.
    name: module name.
  """

  def __init__(self, model_path, name: str | None = None):
    super().__init__(name=name)
    if not isinstance(model_path, (str, os.PathLike)):
      raise ValueError("model_path must be a str or os.PathLike, got %r of type %s"
                       % (model_path, type(model_path).__name__))
    path = os.fspath(model_path)
    encoder = sentencepiece_encoder.SentencePieceEncoder(path)
    self.vocab_file = tf.saved_model.Asset(path)
    self._vocab_size = encoder.vocab_size
    self._tokenizer = tf_text.SentencepieceTokenizer(
        model=encoder.serialized_model, out_type=tf.int32, add_bos=False, add_eos=False)
    strip = tokenizer.strip_ranges()
    self._strip_starts = tf.constant(strip[:, 0], tf.int64)
    self._strip_ends = tf.constant(strip[:, 1], tf.int64)

  @property
  def vocab_size(self) -> int:
    return self._vocab_size

  def encode(self, strings) -> tf.RaggedTensor:
    """Encodes UTF-8 text to ids (no EOS appended).

    Args:
      strings: `tf.string` `[batch]` (or a scalar).

    Returns:
      `tf.RaggedTensor` int64 `[batch, (num_ids)]`; for a scalar input, a
      `[num_ids]` int64 tensor.
    """
    strings = tf.convert_to_tensor(strings, tf.string)
    if strings.shape.rank == 0:
      return self.encode(strings[tf.newaxis])[0]
    if strings.shape.rank != 1:
      raise ValueError("strings must be a [batch] or scalar tf.string tensor, got shape %s"
                       % strings.shape)
    ids = self._tokenizer.tokenize(strings)
    if not isinstance(ids, tf.RaggedTensor):  # a batch of unknown size can come back dense
      ids = tf.RaggedTensor.from_tensor(ids)
    return tf.cast(ids, tf.int64)

  def normalize_input(self, strings: tf.Tensor) -> tf.Tensor:
    """`tokenizer.normalize_input` in-graph (`graph_text_encoder.strip_input`)."""
    return strip_input(strings, self._strip_starts, self._strip_ends)

  def decode(self, ids, cut_at_eos: bool = False) -> tf.Tensor:
    """Decodes ids to text, as `SentencePieceEncoder.decode`.

    Args:
      ids: int `tf.RaggedTensor` `[batch, (length)]`, or a dense int tensor
        `[batch, length]` whose trailing 0s (PAD) are dropped, or `[length]`.
      cut_at_eos: drop the first EOS (id 1) and everything after it.

    Returns:
      `tf.string` `[batch]` (a scalar for `[length]` input).
    """
    if not isinstance(ids, tf.RaggedTensor):
      ids = tf.convert_to_tensor(ids)
      if ids.shape.rank == 1:
        return self.decode(ids[tf.newaxis], cut_at_eos)[0]
      if ids.shape.rank != 2:
        raise ValueError("ids must be [batch, length] or [length], got shape %s" % ids.shape)
      ids = tf.RaggedTensor.from_tensor(ids, padding=tf.cast(text_encoder.PAD_ID, ids.dtype))
    ids = tf.cast(ids, tf.int32)
    if cut_at_eos:
      ids = tf.ragged.boolean_mask(ids, before_first(ids, text_encoder.EOS_ID))
    # Ids outside the vocabulary (only a broken model emits them) decode to nothing, as
    # the subword twin does, instead of failing the batch.
    flat = ids.flat_values
    ids = tf.ragged.boolean_mask(ids, ids.with_flat_values(
        tf.logical_and(flat >= 0, flat < self._vocab_size)))
    return self._tokenizer.detokenize(ids)
