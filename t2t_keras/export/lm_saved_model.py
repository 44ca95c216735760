"""SavedModel export of a language model for TF Serving: prompts in, continuations out.

`export_saved_model` writes `<export_dir>/<version>/` as `saved_model.py` does
(TF Serving's versioned layout, tag `serve`, written whole and renamed, warm-up
requests in `assets.extra/tf_serving_warmup_requests`, traced in
`perf.portable_graph()` so that no XLA is in it), with two signatures:

  * `serving_default`: `inputs` tf.string `[batch]` raw prompts -> `outputs`
    tf.string `[batch]`, each prompt's continuation (the prompt not included),
    `scores` float32 `[batch]`, natural-log P(continuation | prompt) (EOS
    included where it ended), and `errors` tf.string `[batch]`. The decode
    settings are baked in (`lm.ContinueSettings` of the decode hparams: greedy,
    sampling with the export's seed, or beam search; extra_length new tokens).
  * `score`: `inputs` tf.string `[batch]` texts -> `log_prob` float32 `[batch]`
    (natural-log P(text + EOS)), `tokens` int32 `[batch]` (subwords + EOS) and
    `perplexity` float32 `[batch]`, and `errors`.

Both are `LanguageModelRun.sample` and `score` (and `t2t_keras_decoder` on a
language model) in-graph: prompts take T2T's space after final punctuation
(`lm.t2t_prompt`) and are not stripped; texts scored are stripped
(`normalize_input`); the encoder is `graph_encoder`'s (subword or SentencePiece), the search
`lm.continue_ids`. A request is one batch: sampling draws depend on the batch,
so a request gives the decoder's samples for the same lines decoded in one
batch (at most its batch_size lines, in the same order). With max_input_size > 0
a prompt keeps its first max_input_size - 1 subwords, said in `errors`. A row that is
not valid UTF-8 gets "" (score 0; log_prob 0, tokens 0) and a message in `errors`,
without failing the batch.
"""

from __future__ import annotations

import os
import string
from typing import Dict

import tensorflow as tf

from data_gen.graph_sentencepiece_encoder import graph_encoder
from data_gen.graph_text_encoder import is_valid_utf8
from data_gen.text_encoder import EOS_ID, PAD_ID
from t2t_keras import perf
from t2t_keras.decoding import lm, text_rules
from t2t_keras.export import saved_model
from t2t_keras.hparams import DecodeHParams

TEXT_SIGNATURE = saved_model.TEXT_SIGNATURE
SCORE_SIGNATURE = "score"
INPUT_KEY = saved_model.TEXT_INPUT_KEY
WARMUP_PROMPTS = ("Hello world.", "")
# A prompt ending in one of these gets a space (lm.t2t_prompt).
_FINAL_PUNCTUATION = "(?s).*[%s]" % "".join("\\" + c for c in string.punctuation)


def cut_message(decode_hp: DecodeHParams) -> str:
  """The `errors` entry of a prompt cut by max_input_size."""
  return (f"prompt cut to its first {text_rules.input_cap(decode_hp)} subword tokens "
          f"(max_input_size={decode_hp.max_input_size})")


class LanguageModelServing(tf.Module):
  """The exported module of a language model: its variables, encoder and signatures.

  Args:
    model: a built `TransformerLM` with restored weights.
    decode_hp: the decode hparams baked in (`lm.ContinueSettings.from_decode_hparams`;
      max_input_size).
    vocab_file: the vocabulary of its targets (`.subwords` or SentencePiece `.spm.model`).
    seed: the stateless sampling seed (an int or a pair, `lm.seed_pair`).
  """

  def __init__(self, model, decode_hp: DecodeHParams, vocab_file: str, seed=0):
    super().__init__(name="t2t_lm_serving")
    if not os.path.exists(vocab_file):
      raise ValueError(f"vocab_file must name an existing vocab file, got {vocab_file!r}.")
    self.settings = lm.ContinueSettings.from_decode_hparams(decode_hp)
    self.settings.check(model.target_vocab_size)
    self.seed = lm.seed_pair(seed)
    self.decode_hp = decode_hp
    self.cap = text_rules.input_cap(decode_hp)
    # The raw tf.Variables, not the Keras objects: TF Serving's loader, which restores into a
    # TF1 Session, restores only these (as saved_model.ServingModule keeps them).
    self.model_variables = [v.value for v in model.variables]
    self._model_fn = lambda: model  # a closure, so the Keras model is not tracked
    self.encoder = graph_encoder(vocab_file)
    spec = [tf.TensorSpec(None, tf.string, name=INPUT_KEY)]
    self.serve_text = tf.function(self._serve_text, input_signature=spec)
    self.serve_score = tf.function(self._serve_score, input_signature=spec)

  def _valid(self, inputs: tf.Tensor):
    """tf.string `[batch]` -> (valid UTF-8 bool `[batch]`, the rows with "" for invalid ones)."""
    inputs = saved_model.as_batch(inputs, INPUT_KEY)
    valid = is_valid_utf8(inputs)
    return valid, tf.where(valid, inputs, "")

  def _serve_text(self, inputs: tf.Tensor) -> Dict[str, tf.Tensor]:
    """prompts tf.string `[batch]` -> {"outputs": tf.string, "scores": float32,
    "errors": tf.string}, each `[batch]`."""
    valid, prompts = self._valid(inputs)
    final_punctuation = tf.strings.regex_full_match(prompts, _FINAL_PUNCTUATION)
    prompts = tf.where(final_punctuation, prompts + " ", prompts)  # = lm.t2t_prompt
    pieces = tf.cast(self.encoder.encode(prompts), tf.int32)  # [batch, (n)]
    errors = tf.where(valid, "", saved_model.INVALID_UTF8_ERROR)
    if self.cap is not None:
      errors = tf.where(pieces.row_lengths() > self.cap, cut_message(self.decode_hp), errors)
      pieces = pieces[:, :self.cap]
    ids = pieces.to_tensor(PAD_ID)
    ids = tf.pad(ids, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(ids)[1])]])  # width >= 1
    out, scores = lm.continue_ids(self._model_fn(), ids, self.settings,
                                  tf.constant(self.seed, tf.int32))
    # The new ids: past each row's prompt (`lm.new_ids`), cut at EOS, PAD dropped.
    past_prompt = tf.range(tf.shape(out)[1])[None, :] >= tf.cast(pieces.row_lengths(),
                                                                  tf.int32)[:, None]
    new = tf.ragged.boolean_mask(out, tf.logical_and(past_prompt, tf.not_equal(out, PAD_ID)))
    text = saved_model.ids_to_text(self.encoder, new.to_tensor(PAD_ID))
    return {"outputs": tf.where(valid, text, ""),
            "scores": tf.where(valid, scores, tf.zeros_like(scores)), "errors": errors}

  def _serve_score(self, inputs: tf.Tensor) -> Dict[str, tf.Tensor]:
    """texts tf.string `[batch]` -> {"log_prob": float32, "tokens": int32,
    "perplexity": float32, "errors": tf.string}, each `[batch]` (`lm.text_scores`)."""
    valid, texts = self._valid(inputs)
    pieces = tf.cast(self.encoder.encode(self.encoder.normalize_input(texts)), tf.int32)
    eos = tf.fill([pieces.nrows(), 1], tf.constant(EOS_ID, tf.int32))
    targets = tf.concat([pieces, eos], axis=1).to_tensor(PAD_ID)
    log_prob = lm.score_ids(self._model_fn(), targets)
    tokens = tf.cast(pieces.row_lengths(), tf.int32) + 1
    perplexity = tf.exp(-log_prob / tf.cast(tokens, tf.float32))
    zero = tf.zeros_like(log_prob)
    return {"log_prob": tf.where(valid, log_prob, zero),
            "tokens": tf.where(valid, tokens, tf.zeros_like(tokens)),
            "perplexity": tf.where(valid, perplexity, zero),
            "errors": tf.where(valid, "", saved_model.INVALID_UTF8_ERROR)}


def export_saved_model(model, decode_hp: DecodeHParams, vocab_file: str, export_dir: str,
                       seed=0) -> str:
  """Writes a new version `<export_dir>/<N>/` (N = last version + 1) and returns it.

  Args:
    model, decode_hp, vocab_file, seed: as `LanguageModelServing`.
    export_dir: the model base path TF Serving polls.
  Raises:
    ValueError: a decode setting the language model cannot take, named.
    errors.StorageError: the disk filled up; no version appears.
  """
  module = LanguageModelServing(model, decode_hp, vocab_file, seed)
  os.makedirs(export_dir, exist_ok=True)
  saved_model.remove_stale_exports(export_dir)
  with perf.portable_graph():  # traced for a stock model server: no XLA
    signatures = {TEXT_SIGNATURE: module.serve_text.get_concrete_function(),
                  SCORE_SIGNATURE: module.serve_score.get_concrete_function()}
  prompts = [p.encode("utf-8") for p in WARMUP_PROMPTS]
  warmup = [saved_model.predict_log(name, INPUT_KEY, prompts) for name in signatures]
  return saved_model.write_version(export_dir, module, signatures, warmup)

