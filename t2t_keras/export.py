"""SavedModel export for TF Serving: raw text in, translations out.

`export_saved_model` writes `<export_dir>/<version>/` (TF Serving's versioned
layout, tag `serve`, a new integer version each time, written under a temp name
and renamed, so a poller never sees half a model) with two signatures:

  * `serving_default`: `inputs` tf.string `[batch]` raw sentences -> `outputs`
    tf.string `[batch]` (`[batch, beams]` with return_beams) and `scores`
    float32 `[batch]` (`[batch, beams]`). Tokenization and detokenization run
    in the graph (`GraphSubwordEncoder`: TF core + TF-Text ops only).
  * `serialized_example` (T2T's `serving_input_fn`): `input` tf.string
    `[batch]` serialized `tf.train.Example`s with int64 `inputs` ids (EOS
    appended by the client) -> `outputs` int32 `[batch, length]`
    (`[batch, beams, length]`), 0-padded after EOS, and `scores`.

Input handling (both signatures): an input with no tokens (an empty or
whitespace-only sentence, or no ids) gives an empty output and score 0 (the
model is not asked to translate nothing, as in `TextDecoder`); longer inputs
are cut to `max_input_size` subword tokens (+ EOS). The vocab files are assets
and `assets.extra/tf_serving_warmup_requests` holds warm-up PredictRequests.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Dict, List, Optional, Sequence

import tensorflow as tf

from data_gen.graph_text_encoder import GraphSubwordEncoder
from t2t_keras import decoding
from t2t_keras.hparams import DecodeHParams, HParams
from t2t_keras.model import Transformer

EOS_ID = decoding.EOS_ID
TEXT_SIGNATURE = "serving_default"
EXAMPLE_SIGNATURE = "serialized_example"
TEXT_INPUT_KEY = "inputs"
EXAMPLE_INPUT_KEY = "input"  # T2T's receiver tensor key
WARMUP_FILENAME = "tf_serving_warmup_requests"
WARMUP_SENTENCES = ("Hello world.", "")


def input_cap(decode_hp: DecodeHParams, hparams: HParams) -> int:
  """Maximum subword tokens per input (EOS not counted).

  `decode_hp.max_input_size` when > 0, else `hparams.max_length - 1`, so that
  with EOS the input fits the model's `max_length` positions (a learned
  position table has only that many rows).
  """
  if decode_hp.max_input_size > 0:
    return decode_hp.max_input_size
  return max(hparams.max_length - 1, 1)


def _truncate_and_add_eos(ids: tf.RaggedTensor, cap: int) -> tf.Tensor:
  """ragged int `[batch, (n)]` -> int32 `[batch, min(n, cap) + 1]` 0-padded, EOS ended."""
  ids = tf.cast(ids[:, :cap], tf.int32)
  eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, tf.int32))
  return tf.concat([ids, eos], axis=1).to_tensor(0)


def _mask_empty(ids: tf.Tensor, scores: tf.Tensor, empty: tf.Tensor):
  """Zeroes ids `[batch, ...]` and scores of rows where bool `empty` `[batch]`."""
  ids = tf.where(_expand_like(empty, ids), tf.zeros_like(ids), ids)
  scores = tf.where(_expand_like(empty, scores), tf.zeros_like(scores), scores)
  return ids, scores


def _ids_to_text(encoder: GraphSubwordEncoder, ids: tf.Tensor) -> tf.Tensor:
  """int32 `[batch, length]` -> tf.string `[batch]`, cut at EOS, PAD dropped."""
  before_eos = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1), 0)
  keep = tf.logical_and(before_eos, tf.not_equal(ids, 0))
  return encoder.decode(tf.ragged.boolean_mask(ids, keep))


class ServingModule(tf.Module):
  """The exported module: the model, both encoders and the two signatures.

  Args:
    model: a built Transformer with restored weights.
    hparams: its HParams.
    decode_hp: beam_size, alpha, extra_length, return_beams, max_input_size are
      baked into the graph.
    vocab_files: {"inputs": path, "targets": path} of T2T `.subwords` files.
  """

  def __init__(self, model: Transformer, hparams: HParams, decode_hp: DecodeHParams,
               vocab_files: Dict[str, str]):
    super().__init__(name="t2t_serving")
    for side in ("inputs", "targets"):
      if side not in vocab_files or not os.path.exists(vocab_files[side]):
        raise ValueError(f"vocab_files[{side!r}] must name an existing vocab file, got "
                         f"{vocab_files.get(side)!r}.")
    # Track the model's raw tf.Variables, not the Keras objects: the session-based
    # loader TF Serving uses restores only these (as Keras' ExportArchive does).
    self.model_variables = [v.value for v in model.variables]
    self._model_fn = lambda: model  # a closure, so the Keras model is not tracked
    self.decode_hp = decode_hp
    self.hparams = hparams
    self.cap = input_cap(decode_hp, hparams)
    self.input_encoder = GraphSubwordEncoder(vocab_files["inputs"])
    if os.path.abspath(vocab_files["targets"]) == os.path.abspath(vocab_files["inputs"]):
      self.target_encoder = self.input_encoder
    else:
      self.target_encoder = GraphSubwordEncoder(vocab_files["targets"])
    # One traced decoder shared by both signatures: beam search is traced once.
    self.decode_padded = tf.function(
        self._decode, input_signature=[tf.TensorSpec([None, None], tf.int32),
                                       tf.TensorSpec([None], tf.bool)])
    self.serve_text = tf.function(
        self._serve_text, input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    self.serve_examples = tf.function(
        self._serve_examples, input_signature=[tf.TensorSpec([None], tf.string,
                                                             name="input")])

  def _decode(self, ids: tf.Tensor, empty: tf.Tensor):
    """ids int32 `[batch, length]` -> masked (ids, scores) as `decode_ids`."""
    out, scores = decoding.decode_ids(self._model_fn(), ids, self.decode_hp, self.hparams,
                                      use_cache=True)
    return _mask_empty(out, scores, empty)

  def _serve_text(self, inputs: tf.Tensor) -> Dict[str, tf.Tensor]:
    """tf.string `[batch]` -> {"outputs": tf.string, "scores": float32}."""
    empty = tf.equal(tf.strings.strip(inputs), "")
    pieces = self.input_encoder.encode(inputs)
    empty = tf.logical_or(empty, tf.equal(pieces.row_lengths(), 0))
    ids, scores = self.decode_padded(_truncate_and_add_eos(pieces, self.cap), empty)
    if self.decode_hp.return_beams:
      shape = tf.shape(ids)
      text = _ids_to_text(self.target_encoder, tf.reshape(ids, [-1, shape[2]]))
      text = tf.reshape(text, shape[:2])
    else:
      text = _ids_to_text(self.target_encoder, ids)
    text = tf.where(_expand_like(empty, text), "", text)
    return {"outputs": text, "scores": scores}

  def _serve_examples(self, serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
    """serialized Examples `[batch]` -> {"outputs": int32 ids, "scores": float32}."""
    parsed = tf.io.parse_example(serialized, {"inputs": tf.io.VarLenFeature(tf.int64)})
    ids = tf.RaggedTensor.from_sparse(parsed["inputs"])
    ids = tf.ragged.boolean_mask(ids, tf.not_equal(ids, 0))
    tokens = _drop_trailing_eos(ids)  # so the cap counts tokens only; EOS is re-added
    empty = tf.equal(tokens.row_lengths(), 0)
    out, scores = self.decode_padded(_truncate_and_add_eos(tokens, self.cap), empty)
    return {"outputs": out, "scores": scores}


def _expand_like(mask: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
  """bool `[batch]` broadcastable against `like` `[batch, ...]`."""
  return tf.reshape(mask, tf.concat([tf.shape(mask), tf.ones([tf.rank(like) - 1],
                                                             tf.int32)], 0))


def _drop_trailing_eos(ids: tf.RaggedTensor) -> tf.RaggedTensor:
  """int `[batch, (n)]` without the last id of each row whose last id is EOS."""
  position = tf.range(tf.size(ids.flat_values, out_type=ids.row_splits.dtype))
  is_last = tf.equal(position, tf.gather(ids.row_limits() - 1, ids.value_rowids()))
  drop = tf.logical_and(is_last, tf.equal(ids.flat_values, EOS_ID))
  return tf.ragged.boolean_mask(ids, ids.with_flat_values(tf.logical_not(drop)))


# -- Versioned export -----------------------------------------------------------

def existing_versions(export_dir: str) -> List[int]:
  """Integer version subdirectories of `export_dir`, sorted."""
  if not os.path.isdir(export_dir):
    return []
  return sorted(int(n) for n in os.listdir(export_dir) if re.fullmatch(r"[0-9]+", n))


def _warmup_requests(module: ServingModule, encoders: Dict) -> List:
  """PredictionLogs with one PredictRequest per signature (real sentences)."""
  from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2
  logs = []
  sentences = list(WARMUP_SENTENCES)
  examples = [make_example(encoders["inputs"].encode(s) + [EOS_ID]) for s in sentences]
  for signature, key, values in ((TEXT_SIGNATURE, TEXT_INPUT_KEY,
                                  [s.encode("utf-8") for s in sentences]),
                                 (EXAMPLE_SIGNATURE, EXAMPLE_INPUT_KEY, examples)):
    request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(
        signature_name=signature))
    request.inputs[key].CopyFrom(tf.make_tensor_proto(values, dtype=tf.string))
    logs.append(prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request)))
  return logs


def make_example(ids: Sequence[int]) -> bytes:
  """Serialized tf.train.Example with int64 `inputs` (T2T's `_make_example`)."""
  feature = {"inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=list(ids)))}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def export_saved_model(model: Transformer, hparams: HParams, decode_hp: DecodeHParams,
                       vocab_files: Dict[str, str], export_dir: str,
                       encoders: Optional[Dict] = None) -> str:
  """Writes a new version `<export_dir>/<N>/` (N = last version + 1) and returns it.

  Args:
    model, hparams, decode_hp, vocab_files: as `ServingModule`.
    export_dir: the model base path TF Serving polls.
    encoders: Python encoders (for the warm-up Examples); default: read from
      `vocab_files`.
  """
  if encoders is None:
    from data_gen import text_encoder
    encoders = {s: text_encoder.SubwordTextEncoder(vocab_files[s])
                for s in ("inputs", "targets")}
  module = ServingModule(model, hparams, decode_hp, vocab_files)
  os.makedirs(export_dir, exist_ok=True)
  tmp = os.path.join(export_dir, f".tmp-export-{os.getpid()}")
  shutil.rmtree(tmp, ignore_errors=True)
  signatures = {TEXT_SIGNATURE: module.serve_text.get_concrete_function(),
                EXAMPLE_SIGNATURE: module.serve_examples.get_concrete_function()}
  tf.saved_model.save(module, tmp, signatures=signatures)
  extra = os.path.join(tmp, "assets.extra")
  os.makedirs(extra, exist_ok=True)
  with tf.io.TFRecordWriter(os.path.join(extra, WARMUP_FILENAME)) as writer:
    for log in _warmup_requests(module, encoders):
      writer.write(log.SerializeToString())
  while True:  # never overwrite a version, even with a concurrent exporter
    version = (existing_versions(export_dir) or [0])[-1] + 1
    target = os.path.join(export_dir, str(version))
    try:
      os.rename(tmp, target)  # fails if target exists and is non-empty
      return target
    except OSError:
      if not os.path.exists(target):
        raise
