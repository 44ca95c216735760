"""SavedModel export for TF Serving: raw text in, translations out.

`export_saved_model` writes `<export_dir>/<version>/` (TF Serving's versioned
layout, tag `serve`, a new integer version each time, written under a temp name
and renamed, so a poller never sees half a model) with these signatures:

  * `serving_default`: `inputs` tf.string `[batch]` raw sentences -> `outputs`
    tf.string `[batch]` (`[batch, beams]` with return_beams) and `scores`
    float32 `[batch]` (`[batch, beams]`). Tokenization and detokenization run
    in the graph (`GraphSubwordEncoder`, or `GraphSentencePieceEncoder` for a
    SentencePiece vocabulary, its model embedded: TF core + TF-Text ops only).
  * `serialized_example` (T2T's `serving_input_fn`): `input` tf.string
    `[batch]` serialized `tf.train.Example`s with int64 `inputs` ids (EOS
    appended by the client) -> `outputs` int32 `[batch, length]`
    (`[batch, beams, length]`), 0-padded after EOS, and `scores`.
  * `beam_<K>`, one per beam size K (`beam_sizes`; default the decode
    hparams' beam_size), decode settings per request: `inputs` as
    `serving_default`, and optional `alpha` float32, `extra_length` int32 and
    `n_best` int32, each one value for the whole request (`[1]`) or one per row
    (`[batch]`); absent, they take the export's alpha, extra_length and n_best
    (beam_size with return_beams, else 1). -> `outputs` tf.string `[batch, K]`
    (a row's n_best hypotheses, best first, then ""), `scores` float32
    `[batch, K]` (0 after n_best) and `errors`. extra_length above the
    export's is cut to it (the buffers are sized by it) and said in `errors`;
    alpha < 0 or not finite, extra_length < 0, n_best outside 1..K, or a
    setting of another length are an InvalidArgumentError naming it. The two
    signatures above keep one input: TF Serving's batching (`--enable_batching`)
    needs every input, defaults included, to have the batch's rows.

Every signature runs on a stock `tensorflow_model_server`: nothing in the
graph needs XLA (the server disables it at start-up; the export is traced in
`perf.portable_graph()`), and every op of the decode loop has GPU kernels for
float32, bfloat16 and float16.

Input handling (both signatures): an input with no tokens (an empty or
whitespace-only sentence, or no ids) gives an empty output and score 0 (the
model is not asked to translate nothing, as in `TextDecoder`). Input length is
`TextDecoder`'s rule (`text_rules.input_cap`): by default no input is cut,
whatever its length (as T2T's serving input; a learned position table adds
nothing past its `max_length` rows); with decode hparam `max_input_size` > 0
(baked in at export) an input keeps `max_input_size - 1` subword tokens + EOS,
and a text row that was cut says so in `errors`. Text inputs get the same
normalisation as `TextDecoder` (`tokenizer.normalize_input`, in-graph twin), so
both give the same output for every line. A row that is not valid UTF-8 gets an
empty output, score 0 and a message in `errors` (tf.string `[batch]`, "" for
rows neither cut nor invalid) without failing the batch; an input that is not a
`[batch]` vector is an InvalidArgumentError saying so. Output text never holds a
line break or tab (`text_rules.OUTPUT_BREAKS` become spaces, as in `TextDecoder`).

The vocab files are assets and `assets.extra/tf_serving_warmup_requests` holds
warm-up PredictRequests. Every exported file is readable by others
(`0o666 & ~umask`, whatever the source files' modes), and temp dirs of killed
exports (`file_io.temp_path` names, `.export.<host>-<pid>.incomplete`) are
removed by the next export once their process is gone or they are a day old.
"""

from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Sequence

import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from data_gen import file_io, sentencepiece_encoder
from data_gen.graph_sentencepiece_encoder import graph_encoder
from data_gen.graph_text_encoder import GraphSubwordEncoder, is_valid_utf8
from data_gen.text_encoder import EOS_ID, PAD_ID
from t2t_keras import errors, perf
from t2t_keras.decoding import seq2seq, text_rules
from t2t_keras.hparams import DecodeHParams, HParams
from t2t_keras.model import Transformer

TEXT_SIGNATURE = "serving_default"
EXAMPLE_SIGNATURE = "serialized_example"
TEXT_INPUT_KEY = "inputs"
EXAMPLE_INPUT_KEY = "input"  # T2T's receiver tensor key
WARMUP_FILENAME = "tf_serving_warmup_requests"
WARMUP_SENTENCES = ("Hello world.", "")
INVALID_UTF8_ERROR = "input is not valid UTF-8; send UTF-8 text"
_BREAKS_PATTERN = "[%s]" % "".join("\\x{%x}" % ord(c) for c in text_rules.OUTPUT_BREAKS)
STALE_EXPORT_SECONDS = 24 * 3600
SETTING_KEYS = ("alpha", "extra_length", "n_best")


def settings_signature(beam_size: int) -> str:
  """The name of the signature with per-request settings at `beam_size`."""
  return f"beam_{beam_size}"


def truncation_message(decode_hp: DecodeHParams) -> str:
  """The `errors` entry of a text row cut by `max_input_size` ("" when nothing is cut)."""
  cap = text_rules.input_cap(decode_hp)
  if cap is None:
    return ""
  return (f"input cut to {cap} subword tokens + EOS (max_input_size="
          f"{decode_hp.max_input_size}); the rest was not translated")


def _truncate_and_add_eos(ids: tf.RaggedTensor, cap: Optional[int]) -> tf.Tensor:
  """ragged int `[batch, (n)]` -> int32 `[batch, min(n, cap) + 1]` 0-padded, EOS ended."""
  if cap is not None:
    ids = ids[:, :cap]
  ids = tf.cast(ids, tf.int32)
  eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, tf.int32))
  return tf.concat([ids, eos], axis=1).to_tensor(PAD_ID)


def _mask_empty(ids: tf.Tensor, scores: tf.Tensor, empty: tf.Tensor):
  """Zeroes ids `[batch, ...]` and scores of rows where bool `empty` `[batch]`."""
  ids = tf.where(_expand_like(empty, ids), tf.zeros_like(ids), ids)
  scores = tf.where(_expand_like(empty, scores), tf.zeros_like(scores), scores)
  return ids, scores


def ids_to_text(encoder: GraphSubwordEncoder, ids: tf.Tensor) -> tf.Tensor:
  """int32 `[batch, length]` -> tf.string `[batch]`, cut at EOS, PAD dropped.

  `encoder`: a `GraphSubwordEncoder` or a `GraphSentencePieceEncoder` (`graph_encoder`).

  As `TextDecoder` (`decoding.strip_ids`): every PAD a model emits is dropped,
  not only the trailing ones.
  """
  text = encoder.decode(tf.ragged.boolean_mask(ids, tf.not_equal(ids, PAD_ID)), cut_at_eos=True)
  return tf.strings.regex_replace(text, _BREAKS_PATTERN, " ")  # = text_rules.clean_output


def as_batch(values: tf.Tensor, name: str) -> tf.Tensor:
  """A `[batch]` vector, or InvalidArgumentError naming the signature input."""
  check = tf.debugging.assert_rank(
      values, 1, message=f"signature input {name} must be a [batch] vector of strings "
      "(one per sentence/example), not a matrix or a scalar; got a tensor of another rank")
  with tf.control_dependencies([check]):
    return tf.reshape(values, [-1])


class ServingModule(tf.Module):
  """The exported module: the model, both encoders and the two signatures.

  Args:
    model: a built Transformer with restored weights.
    hparams: its HParams (input length needs none of them: `text_rules.input_cap`).
    decode_hp: beam_size, alpha, extra_length, return_beams, max_input_size are
      baked into the graph (alpha, extra_length, n_best as `beam_<K>` defaults).
    vocab_files: {"inputs": path, "targets": path} of T2T `.subwords` files or
      SentencePiece models (`.spm.model`).
    beam_sizes: the beam sizes of the `beam_<K>` signatures (default:
      decode_hp.beam_size).
  """

  def __init__(self, model: Transformer, hparams: HParams, decode_hp: DecodeHParams,
               vocab_files: Dict[str, str], beam_sizes: Sequence[int] = ()):
    super().__init__(name="t2t_serving")
    beam_sizes = tuple(sorted(set(beam_sizes))) or (decode_hp.beam_size,)
    if any(not isinstance(k, int) or k < 1 for k in beam_sizes):
      raise ValueError(f"beam_sizes must be integers >= 1, got {list(beam_sizes)}.")
    for side in ("inputs", "targets"):
      if side not in vocab_files or not os.path.exists(vocab_files[side]):
        raise ValueError(f"vocab_files[{side!r}] must name an existing vocab file, got "
                         f"{vocab_files.get(side)!r}.")
    # Track the model's raw tf.Variables, not the Keras objects: TF Serving's loader,
    # which restores into a TF1 Session, restores only these (as Keras' ExportArchive does).
    self.model_variables = [v.value for v in model.variables]
    self._model_fn = lambda: model  # a closure, so the Keras model is not tracked
    self.decode_hp = decode_hp
    self.cap = text_rules.input_cap(decode_hp)
    self.input_encoder = graph_encoder(vocab_files["inputs"])
    if os.path.abspath(vocab_files["targets"]) == os.path.abspath(vocab_files["inputs"]):
      self.target_encoder = self.input_encoder
    else:
      self.target_encoder = graph_encoder(vocab_files["targets"])
    # One traced decoder shared by both signatures: beam search is traced once.
    self.decode_padded = tf.function(
        self._decode, input_signature=[tf.TensorSpec([None, None], tf.int32),
                                       tf.TensorSpec([None], tf.bool)])
    # Unknown rank, so a server that does not check shapes still reaches the
    # rank check of `as_batch` (a clear error, not a shape clash deep inside).
    self.serve_text = tf.function(
        self._serve_text, input_signature=[tf.TensorSpec(None, tf.string, name="inputs")])
    self.serve_examples = tf.function(
        self._serve_examples, input_signature=[tf.TensorSpec(None, tf.string, name="input")])
    self.beam_sizes = beam_sizes
    self.serve_settings = {settings_signature(k): self._settings_function(k)
                           for k in beam_sizes}

  def _decode(self, ids: tf.Tensor, empty: tf.Tensor):
    """ids int32 `[batch, length]` -> masked (ids, scores) as `decode_ids`.

    The export's settings go in as `beam_<K>`'s defaults do, one per row: the same
    arithmetic (a vector power for the length penalty rounds apart from a scalar
    one), so a `beam_<K>` request without settings gives these outputs bit for bit.
    """
    hp = self.decode_hp
    batch = tf.shape(ids)[0]
    return self._decode_rows(hp, ids, empty, tf.fill([batch], tf.constant(hp.alpha, tf.float32)),
                             tf.fill([batch], hp.extra_length),
                             tf.fill([batch], self._default_n_best(hp.beam_size)))

  def _default_n_best(self, beam_size: int) -> int:
    """Hypotheses returned without an `n_best`: all with return_beams, else the best."""
    return beam_size if self.decode_hp.return_beams else 1

  def _encode_text(self, inputs: tf.Tensor):
    """tf.string `[batch]` -> (valid UTF-8 `[batch]`, no tokens `[batch]`, pieces
    ragged `[batch, (n)]`)."""
    inputs = as_batch(inputs, TEXT_INPUT_KEY)
    valid = is_valid_utf8(inputs)
    inputs = self.input_encoder.normalize_input(tf.where(valid, inputs, ""))
    empty = tf.equal(inputs, "")
    pieces = self.input_encoder.encode(inputs)
    return valid, tf.logical_or(empty, tf.equal(pieces.row_lengths(), 0)), pieces

  def _row_errors(self, valid: tf.Tensor, pieces: tf.RaggedTensor) -> tf.Tensor:
    """tf.string `[batch]`: not UTF-8, or cut by max_input_size, else ""."""
    errors = tf.where(valid, "", INVALID_UTF8_ERROR)
    if self.cap is not None:
      cut = tf.logical_and(valid, pieces.row_lengths() > self.cap)
      errors = tf.where(cut, truncation_message(self.decode_hp), errors)
    return errors

  def _serve_text(self, inputs: tf.Tensor) -> Dict[str, tf.Tensor]:
    """tf.string `[batch]` -> {"outputs": tf.string, "scores": float32, "errors": tf.string}."""
    valid, empty, pieces = self._encode_text(inputs)
    ids, scores = self.decode_padded(_truncate_and_add_eos(pieces, self.cap), empty)
    if self.decode_hp.return_beams:
      shape = tf.shape(ids)
      text = ids_to_text(self.target_encoder, tf.reshape(ids, [-1, shape[2]]))
      text = tf.reshape(text, shape[:2])
    else:
      text = ids_to_text(self.target_encoder, ids)
    text = tf.where(_expand_like(empty, text), "", text)
    return {"outputs": text, "scores": scores, "errors": self._row_errors(valid, pieces)}

  def _settings_function(self, beam_size: int):
    """The `beam_<beam_size>` signature: `_serve_rows` with the export's settings as
    the defaults of its optional inputs (saved as the SignatureDef's `defaults`)."""
    hp = self.decode_hp.replace(beam_size=beam_size, return_beams=True)
    ids_spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.bool)]
    row_specs = [tf.TensorSpec([None], tf.float32, name="alpha"),
                 tf.TensorSpec([None], tf.int32, name="extra_length"),
                 tf.TensorSpec([None], tf.int32, name="n_best")]

    def _decode_rows(ids, empty, alpha, extra_length, n_best):  # a named graph function
      return self._decode_rows(hp, ids, empty, alpha, extra_length, n_best)

    decode = tf.function(_decode_rows, input_signature=ids_spec + [
        tf.TensorSpec([None], spec.dtype) for spec in row_specs])
    n_best = self._default_n_best(beam_size)
    alpha_default = tf.constant([self.decode_hp.alpha], tf.float32)
    extra_default = tf.constant([self.decode_hp.extra_length], tf.int32)
    n_best_default = tf.constant([n_best], tf.int32)

    def serve(inputs, alpha=alpha_default, extra_length=extra_default, n_best=n_best_default):
      return self._serve_rows(decode, beam_size, inputs, alpha, extra_length, n_best)

    return tf.function(serve, input_signature=[tf.TensorSpec(None, tf.string, name="inputs")]
                       + row_specs)

  def _decode_rows(self, hp: DecodeHParams, ids: tf.Tensor, empty: tf.Tensor,
                   alpha: tf.Tensor, extra_length: tf.Tensor, n_best: tf.Tensor):
    """Masked (ids, scores) of `decode_ids` with each row's settings `[batch]`."""
    rows = seq2seq.RowSettings(alpha, extra_length, n_best)
    out, scores = seq2seq.decode_ids(self._model_fn(), ids, hp, use_cache=True, rows=rows)
    return _mask_empty(out, scores, empty)

  def _serve_rows(self, decode, beam_size: int, inputs: tf.Tensor, alpha: tf.Tensor,
                  extra_length: tf.Tensor, n_best: tf.Tensor) -> Dict[str, tf.Tensor]:
    """tf.string `[batch]` and settings `[1]` or `[batch]` -> {"outputs": tf.string
    `[batch, beam_size]`, "scores": float32 `[batch, beam_size]`, "errors"}."""
    valid, empty, pieces = self._encode_text(inputs)
    batch = tf.shape(empty)[0]
    alpha, extra_length, n_best = (
        _per_row(value, name, batch)
        for value, name in zip((alpha, extra_length, n_best), SETTING_KEYS))
    signature = settings_signature(beam_size)
    checks = [
        tf.debugging.assert_equal(
            tf.reduce_all(tf.logical_and(tf.math.is_finite(alpha), alpha >= 0)), True,
            message=f"{signature}: alpha must be finite and >= 0 (the length penalty's "
            "exponent; 0: none)"),
        tf.debugging.assert_non_negative(
            extra_length, message=f"{signature}: extra_length must be >= 0 (output tokens "
            "beyond the input's length)"),
        tf.debugging.assert_equal(
            tf.reduce_all(tf.logical_and(n_best >= 1, n_best <= beam_size)), True,
            message=f"{signature}: n_best must be between 1 and the signature's beam size "
            f"{beam_size}")]
    with tf.control_dependencies(checks):
      most = self.decode_hp.extra_length
      capped = tf.logical_and(tf.logical_and(valid, tf.logical_not(empty)), extra_length > most)
      ids, scores = decode(_truncate_and_add_eos(pieces, self.cap), empty, alpha,
                           tf.minimum(extra_length, most), n_best)
    shape = tf.shape(ids)
    text = tf.reshape(ids_to_text(self.target_encoder, tf.reshape(ids, [-1, shape[2]])),
                      shape[:2])
    absent = tf.logical_or(empty[:, None], tf.range(beam_size)[None, :] >= n_best[:, None])
    errors = self._row_errors(valid, pieces)
    note = (f"extra_length cut to the export's maximum {most} (t2t_keras_exporter "
            "--decode_hparams=extra_length=N raises it)")
    errors = tf.where(capped, tf.where(tf.equal(errors, ""), note, errors + "; " + note), errors)
    return {"outputs": tf.where(absent, "", text),
            "scores": tf.where(absent, tf.zeros_like(scores), scores), "errors": errors}

  def _serve_examples(self, serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
    """serialized Examples `[batch]` -> {"outputs": int32 ids, "scores": float32}."""
    serialized = as_batch(serialized, EXAMPLE_INPUT_KEY)
    parsed = tf.io.parse_example(serialized, {"inputs": tf.io.VarLenFeature(tf.int64)})
    ids = tf.RaggedTensor.from_sparse(parsed["inputs"])
    ids = tf.ragged.boolean_mask(ids, tf.not_equal(ids, PAD_ID))
    tokens = _drop_trailing_eos(ids)  # so the cap counts tokens only; EOS is re-added
    empty = tf.equal(tokens.row_lengths(), 0)
    out, scores = self.decode_padded(_truncate_and_add_eos(tokens, self.cap), empty)
    return {"outputs": out, "scores": scores}


def _per_row(value: tf.Tensor, name: str, batch: tf.Tensor) -> tf.Tensor:
  """A setting `[1]` or `[batch]` -> `[batch]`, or InvalidArgumentError naming it."""
  size = tf.size(value)
  check = tf.debugging.assert_equal(
      tf.logical_or(tf.equal(size, 1), tf.equal(size, batch)), True,
      message=f"signature input {name} must hold one value for the whole request or one per "
      "row of inputs")
  with tf.control_dependencies([check]):
    return tf.broadcast_to(tf.reshape(value, [-1]), [batch])


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

def check_export_dir(export_dir: str) -> None:
  """Refuses a SavedModel base path that is a file or names a version itself.

  Raises:
    ValueError: with the exporter's one-line message.
  """
  if os.path.exists(export_dir) and not os.path.isdir(export_dir):
    raise ValueError(f"--export_dir={export_dir} is a file, not a directory.")
  base, last = os.path.split(os.path.normpath(export_dir))
  if last.isdigit():  # TF Serving would take a numbered directory for a version
    raise ValueError(
        f"--export_dir={export_dir} ends in a version number, but it is the model base path "
        f"(tensorflow_model_server's --model_base_path): each export adds a new version "
        f"<export_dir>/<N>. Give --export_dir={base or '.'} to write its next version.")


def existing_versions(export_dir: str) -> List[int]:
  """Integer version subdirectories of `export_dir`, sorted."""
  if not os.path.isdir(export_dir):
    return []
  return sorted(int(n) for n in os.listdir(export_dir) if re.fullmatch(r"[0-9]+", n))


def predict_log(signature: str, key: str, values: Sequence[bytes]):
  """A warm-up record: the PredictionLog of one PredictRequest of tf.string `values`
  `[batch]` as input `key` of `signature`."""
  request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(
      signature_name=signature))
  request.inputs[key].CopyFrom(tf.make_tensor_proto(list(values), dtype=tf.string))
  return prediction_log_pb2.PredictionLog(
      predict_log=prediction_log_pb2.PredictLog(request=request))


def _warmup_requests(module: ServingModule, encoders: Dict) -> List:
  """PredictionLogs with one PredictRequest per signature (real sentences; the
  `beam_<K>` ones with their default settings)."""
  sentences = list(WARMUP_SENTENCES)
  texts = [s.encode("utf-8") for s in sentences]
  examples = [make_example(encoders["inputs"].encode(s) + [EOS_ID]) for s in sentences]
  requests = [(TEXT_SIGNATURE, TEXT_INPUT_KEY, texts),
              (EXAMPLE_SIGNATURE, EXAMPLE_INPUT_KEY, examples)]
  requests += [(name, TEXT_INPUT_KEY, texts) for name in module.serve_settings]
  return [predict_log(signature, key, values) for signature, key, values in requests]


def remove_stale_exports(export_dir: str, max_age_secs: float = STALE_EXPORT_SECONDS) -> List[str]:
  """Removes the temp dirs of killed exporters; returns their paths.

  A temp dir is removed when it is older than `max_age_secs`, or when it names
  this host (or no host: older versions) and a process id that no longer runs
  (`file_io.abandoned`). Temp dirs of running exporters, here or on another
  host, are kept.
  """
  return file_io.remove_abandoned(export_dir, max_age_secs)


def _full_disk_reason(error: BaseException) -> str:
  """The strerror of a full disk in `error` (TensorFlow puts it after the path)."""
  text = str(error)
  for number in sorted(errors.STORAGE_ERRNOS):
    if os.strerror(number) in text:
      return os.strerror(number)
  return " ".join(text.split())[:200]


def _is_full_disk(error: BaseException) -> bool:
  """An OSError ENOSPC/EDQUOT/EFBIG, or TensorFlow's error for one (its file writers
  raise ResourceExhausted for ENOSPC, OutOfRange for EFBIG, with the strerror text)."""
  if isinstance(error, OSError):
    return errors.is_storage_error(error)
  if isinstance(error, tf.errors.ResourceExhaustedError):
    return True
  text = str(error)
  return any(os.strerror(number) in text for number in errors.STORAGE_ERRNOS)


def make_example(ids: Sequence[int]) -> bytes:
  """Serialized tf.train.Example with int64 `inputs` (T2T's `_make_example`)."""
  feature = {"inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=list(ids)))}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def export_saved_model(model: Transformer, hparams: HParams, decode_hp: DecodeHParams,
                       vocab_files: Dict[str, str], export_dir: str,
                       encoders: Optional[Dict] = None, beam_sizes: Sequence[int] = ()) -> str:
  """Writes a new version `<export_dir>/<N>/` (N = last version + 1) and returns it.

  Args:
    model, hparams, decode_hp, vocab_files, beam_sizes: as `ServingModule`.
    export_dir: the model base path TF Serving polls.
    encoders: Python encoders (for the warm-up Examples); default: read from
      `vocab_files`.

  Raises:
    errors.StorageError: the disk (or a quota or file size limit) filled up; the
      partial export is removed and no version appears.
  """
  if encoders is None:
    encoders = {s: sentencepiece_encoder.load_vocab(vocab_files[s])
                for s in ("inputs", "targets")}
  module = ServingModule(model, hparams, decode_hp, vocab_files, beam_sizes)
  os.makedirs(export_dir, exist_ok=True)
  remove_stale_exports(export_dir)
  with perf.portable_graph():  # traced for a stock model server: no XLA
    signatures = {TEXT_SIGNATURE: module.serve_text.get_concrete_function(),
                  EXAMPLE_SIGNATURE: module.serve_examples.get_concrete_function()}
    for name, function in module.serve_settings.items():
      function.get_concrete_function()
      signatures[name] = function  # the function, so its defaults are saved
  return write_version(export_dir, module, signatures, _warmup_requests(module, encoders))


def write_version(export_dir: str, module: tf.Module, signatures: Dict,
                  warmup_logs: Sequence) -> str:
  """Saves `module` with `signatures` (traced in `perf.portable_graph()`) and the
  warm-up records `warmup_logs` (`predict_log`) as the next version `<export_dir>/<N>/`,
  written whole (a temporary directory, then renamed); returns its path.

  Raises:
    errors.StorageError: the disk (or a quota or file size limit) filled up; the
      partial export is removed and no version appears.
  """
  def next_version() -> str:  # never overwrite a version, even with a concurrent exporter
    return os.path.join(export_dir, str((existing_versions(export_dir) or [0])[-1] + 1))

  try:
    with file_io.atomic_directory(os.path.join(export_dir, ".export"), next_version) as write:
      with perf.portable_graph():
        tf.saved_model.save(module, write.tmp, signatures=signatures)
      extra = os.path.join(write.tmp, "assets.extra")
      os.makedirs(extra, exist_ok=True)
      with tf.io.TFRecordWriter(os.path.join(extra, WARMUP_FILENAME)) as writer:
        for log in warmup_logs:
          writer.write(log.SerializeToString())
      file_io.make_tree_readable(write.tmp)
  except (OSError, tf.errors.OpError) as e:
    if _is_full_disk(e):
      raise errors.StorageError(
          f"no space left writing the SavedModel in {export_dir} ({_full_disk_reason(e)}); free "
          "some space and export again: no version was written.") from None
    raise
  return write.path
