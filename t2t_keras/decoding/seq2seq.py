"""Decoding a Transformer: cached (fast) or uncached, beam / greedy / sampling.

`decode_ids` is the in-graph core, shared by the decoder CLI and the exporter:
inputs `[batch, length]` ids -> output ids and scores; `make_decode_fn` makes it a
tf.function. Text (encoding, input cuts, T2T's `decode_from_file` order, one output
line per input line) is `text_decoder.py`'s.

Maximum decode length: T2T uses `padded input length + extra_length` for the
whole batch, so a sentence's output depends on its batch. Here each sentence's
cap is its own non-pad input length (EOS included) + extra_length, and it is
exactly T2T's decode_length for that sentence decoded alone: no EOS is forced;
at its cap the sentence stops growing; beam search returns the best finished
hypothesis (length-normalised score) or, if none finished, the best alive one
without EOS (raw log-prob); early stopping uses the sentence's own
`((5 + cap) / 6) ** alpha`; greedy and sampling stop at the cap without EOS.
So a sentence decodes the same alone or in any batch, and as T2T decodes it
alone. The paper used extra 50 (parsing 300); T2T's default is 100.

Prepend mode (`hparams.prepend_mode` != "none", T2T's `transformer_prepend`
sets; docs/decoding.md): the run was trained on `inputs + [0] + targets` as its
decoder's sequence. T2T (1.15) decoded it in `Transformer._fast_decode`, its
cached path, with `partial_targets = inputs + [0]` (EOS included) forced
through the logits, so each forced id scored 0, for the prefix + extra_length
steps (the length penalty counting the prefix too), and dropped the prefix
from the output. Here the same for each sentence (`prepend_prefix`, forced by
the search and scored "free"), with one fix: T2T's searches ended the
hypothesis at the inputs' forced EOS, so every T2T output was empty; here a
forced id ends nothing. Cached decoding is causal throughout, as T2T's was;
uncached decoding uses the model's own training bias (with
prepend_inputs_full_attention the inputs part sees itself whole), so for that
mode the two can differ. Forced target prefixes are refused for these runs.
"""

from __future__ import annotations

import functools
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

from data_gen.text_encoder import EOS_ID, PAD_ID
from t2t_keras.decoding import beam_search, inference_choices, sampling
from t2t_keras.decoding.search_utils import ForcedPrefix, forced_prefix
from t2t_keras.decoding_state import DecodingState, Memory
from t2t_keras.hparams import DecodeHParams
from t2t_keras.model import Transformer


PREPEND_PREFIX_ERROR = (
    "forced target prefixes: a run with hparams.prepend_mode={mode!r} already decodes "
    "after its inputs and a 0 forced as T2T's prefix; decode it without a prefix.")


def _input_lengths(inputs: tf.Tensor) -> tf.Tensor:
  """Non-pad length of each row, EOS included: `[batch]` int32."""
  return tf.reduce_sum(tf.cast(tf.not_equal(inputs, PAD_ID), tf.int32), axis=1)


def prepends_inputs(model) -> bool:
  """Whether `model` (a Transformer or an ensemble of them) was trained in prepend mode."""
  return getattr(getattr(model, "hparams", None), "prepend_mode", "none") != "none"


def prepend_prefix(inputs: tf.Tensor) -> ForcedPrefix:
  """T2T's `partial_targets` of prepend mode, per row: its inputs (EOS included)
  and a 0, forced and scored "free" (0 each, as T2T's forced logits give).

  inputs `[batch, length]` int ids ending in EOS, 0-padded -> `ForcedPrefix` with
  ids `[batch, length + 2]` and lengths `[batch]` = input length + 1 (the 0 counts).
  """
  inputs = tf.cast(inputs, tf.int32)
  return forced_prefix(tf.pad(inputs, [[0, 0], [0, 1]]), "free",
                       lengths=_input_lengths(inputs) + 1)


def _from_columns(ids: tf.Tensor, starts: tf.Tensor, width) -> tf.Tensor:
  """Each row's ids from its own column on: ids `[batch, (beams,) length]`, starts
  `[batch]` -> `[batch, (beams,) width]` (starts + width <= length)."""
  columns = starts[:, None] + tf.range(width)[None, :]  # [batch, width]
  return tf.gather(ids, columns, axis=ids.shape.rank - 1, batch_dims=1)


class RowSettings(NamedTuple):
  """Decode settings of each batch row, tensors of a search traced once (the
  SavedModel's per-request settings). Each is `[batch]`:

  alpha: float32, beam search's length-penalty exponent (no effect at beam 1).
  extra_length: int32, in 0..decode_hp.extra_length (which sizes the buffers).
  top_beams: int32, in 1..beam_size: the hypotheses the caller uses, which set
    the row's stopping criterion (`beam_search.BeamSearchOptions.top_beams`).
  """
  alpha: tf.Tensor
  extra_length: tf.Tensor
  top_beams: tf.Tensor


def make_symbols_to_logits_fn(model: Transformer, use_cache: bool = True) -> Callable:
  """The `symbols_to_logits_fn(ids, i, state)` of the decoding loops for `model`.

  cached: `model.decode_step` on the last id, with the state of
  `initial_state(..., use_cache=True)`.
  uncached: re-runs the decoder over the whole prefix each step (T2T's slow
  path), reading only the state's `per_item` memory (encoder output and bias).
  """
  def cached(ids, i, state):
    return model.decode_step(ids[:, i], i, state)

  def uncached(ids, i, state):
    memory = state.per_item
    targets = ids[:, 1:]  # positions > i are still 0 and causally invisible at i
    logits = model.decode(targets, memory.encoder_output, memory.bias, training=False)
    return tf.gather(logits, i, axis=1), state

  return cached if use_cache else uncached


def initial_state(model: Transformer, encoder_output: tf.Tensor, encdec_bias: tf.Tensor,
                  decode_length, beams: int = 1, use_cache: bool = True) -> DecodingState:
  """The decoding state before step 0 (see `decoding_state.py`).

  cached: `model.init_decoding_state`: encoder-decoder keys/values once per
  item, empty self-attention buffers shared by the beams of an item, and with
  beams > 1 the per-beam history. uncached: only the encoder output and bias,
  repeated once to one row per hypothesis (item-major) for beam search.
  """
  if use_cache:
    return model.init_decoding_state(encoder_output, encdec_bias, decode_length, beams)
  memory = Memory(encdec_bias, encoder_output=encoder_output)
  return DecodingState(per_item=memory.repeat(beams) if beams > 1 else memory)


def decode_ids(model: Transformer, inputs: tf.Tensor, decode_hp: DecodeHParams,
               use_cache: bool = True, decode_length: Optional[int] = None,
               prefix: Optional[tf.Tensor] = None,
               rows: Optional[RowSettings] = None) -> Tuple[tf.Tensor, tf.Tensor]:
  """Decodes a batch of padded input ids (run it inside tf.function).

  Args:
    inputs: `[batch, input_length]` int ids ending in EOS, 0-padded.
    decode_hp: beam_size, alpha, extra_length, return_beams; with beam_size 1
      sampling_method, sampling_temp and sampling_keep_top_k.
    decode_length: static output buffer length (default input_length +
      extra_length); each sentence stops at min(its cap, decode_length), its
      cap being its non-pad input length + extra_length. Prepend mode (see
      the module docstring): the output follows the forced `inputs + [0]`,
      which is not part of it: the default is extra_length, and a sentence's
      cap counts its prefix (input length + 1) + extra_length steps.
    prefix: optional `[batch, P]` int target ids each output starts with
      (0-padded, no EOS), forced in every search (`beam_search.beam_search`);
      scores count them. A sentence's cap is then at least its prefix + 1
      (the default buffer at least P + 1), so a long prefix is never cut.
      None, or an empty row, decodes exactly as without.
    rows: optional `RowSettings`, each row's alpha, extra_length and
      top_beams in place of decode_hp's (whose extra_length still sizes the
      default buffer). Values equal to decode_hp's decode as without.

  Raises:
    ValueError: a `prefix` for a prepend-mode model.

  Returns:
    ids int32 `[batch, decode_length]` (or `[batch, beam, decode_length]` with
    return_beams), 0-padded after EOS or after the sentence's cap (an output
    that reached its cap has no EOS); scores float32 `[batch]` (or
    `[batch, beam]`): length-normalised scores of beams that ended in EOS, raw
    log-probs where no beam of the sentence did, or the summed log-prob for
    greedy decoding (T2T's conventions). Prepend mode: the ids and scores of
    the output after the forced prefix; the scores count its ids only (the
    prefix's count 0), and a beam's length penalty the prefix's positions too.
  """
  inputs = tf.cast(inputs, tf.int32)
  width = inputs.shape[1] if inputs.shape[1] is not None else tf.shape(inputs)[1]
  prepend = prepends_inputs(model)
  if decode_length is None:
    decode_length = (0 if prepend else width) + decode_hp.extra_length
  extra = (decode_hp.extra_length if rows is None else tf.cast(rows.extra_length, tf.int32))
  cap = _input_lengths(inputs) + extra
  search_length = decode_length  # the search's buffer: with prepend_mode, prefix + output
  if prepend:
    if prefix is not None:
      raise ValueError(PREPEND_PREFIX_ERROR.format(mode=model.hparams.prepend_mode))
    prefix = prepend_prefix(inputs)
    cap = prefix.lengths + extra
    search_length = width + 1 + decode_length  # the longest prefix, then the output
  elif prefix is not None:
    prefix = tf.cast(prefix, tf.int32)
    cap = tf.maximum(cap, _input_lengths(prefix) + 1)
    if isinstance(decode_length, int) and prefix.shape[1] is not None:
      decode_length = max(decode_length, prefix.shape[1] + 1)
    else:
      decode_length = tf.maximum(decode_length, tf.shape(prefix)[1] + 1)
    search_length = decode_length
  beams = decode_hp.beam_size
  encoder_output, encdec_bias = model.encode(inputs, training=False)
  state = initial_state(model, encoder_output, encdec_bias, search_length, beams, use_cache)
  fn = make_symbols_to_logits_fn(model, use_cache)
  initial = tf.fill([tf.shape(inputs)[0]], PAD_ID)  # T2T starts from PAD
  if beams > 1:
    options = beam_search.BeamSearchOptions(
        beams, model.target_vocab_size, decode_hp.alpha, eos_id=EOS_ID, stop_early=True,
        top_beams=beams if decode_hp.return_beams else 1)
    out = beam_search.beam_search(
        fn, initial, search_length, options, state, decode_lengths=cap, prefix=prefix,
        alphas=None if rows is None else rows.alpha,
        top_beams=None if rows is None else rows.top_beams)
    ids = out.ids[:, :, 1:]
    if prepend:
      ids = _from_columns(ids, prefix.lengths, decode_length)
    return (ids, out.scores) if decode_hp.return_beams else (ids[:, 0], out.scores[:, 0])
  if decode_hp.sampling_method == "argmax":
    out = sampling.greedy_search(fn, initial, search_length, EOS_ID, state,
                                 decode_lengths=cap, prefix=prefix)
  else:
    out = sampling.sample(fn, initial, search_length, decode_hp.sampling_temp,
                          decode_hp.sampling_keep_top_k, eos_id=EOS_ID, state=state,
                          decode_lengths=cap, prefix=prefix)
  ids, scores = out.ids[:, 1:], out.scores
  if prepend:
    ids = _from_columns(ids, prefix.lengths, decode_length)
  return (ids[:, None], scores[:, None]) if decode_hp.return_beams else (ids, scores)


def make_decode_fn(model: Transformer, decode_hp: DecodeHParams, use_cache: bool = True,
                   jit_compile: bool = False, decoded_model=None,
                   with_prefix: bool = False) -> Callable:
  """A tf.function inputs `[batch, length]` -> (ids, scores) of `decode_ids`
  (with_prefix: (inputs, prefix `[batch, P]`) -> the same, the prefix forced).

  With jit_compile the function is traced per input shape (decode_length is then
  static, as XLA needs); callers pad lengths to a few buckets to bound retracing.
  A mixed-bfloat16 model decodes through its bfloat16 twin (`inference_choices`):
  this is the one place that choice is made. The function's `decoded_model` is
  what it runs; pass it back as `decoded_model` to share it between functions
  (its weights are a snapshot: `inference.copy_weights` refreshes them).
  """
  decoded = decoded_model if decoded_model is not None else inference_choices.inference_model(model)
  fn = functools.partial(decode_ids, decoded, decode_hp=decode_hp, use_cache=use_cache)
  if with_prefix:
    fn = functools.partial(lambda f, inputs, prefix: f(inputs, prefix=prefix), fn)
  if jit_compile:
    fn = tf.function(fn, jit_compile=True)
  else:
    fn = tf.function(fn, input_signature=[tf.TensorSpec([None, None], tf.int32)] *
                     (2 if with_prefix else 1))
  fn.decoded_model = decoded
  return fn


def prepend_inputs(inputs: tf.Tensor, targets: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """T2T's prepended targets (`preprocess_example_common`): each row's inputs (EOS
  included), a 0, then its targets.

  inputs `[batch, n]`, targets `[batch, m]` int ids, 0-padded -> (ids
  `[batch, n + 1 + m]` 0-padded, targets' non-PAD positions `[batch, n + 1 + m]` bool).
  """
  inputs, targets = tf.cast(inputs, tf.int32), tf.cast(targets, tf.int32)
  n, m = tf.shape(inputs)[1], tf.shape(targets)[1]
  lengths = _input_lengths(inputs)[:, None]  # [batch, 1]
  j = tf.range(n + 1 + m)[None, :]
  t = j - lengths - 1  # the target position at column j
  # Columns of [inputs, 0, targets]: the 0 (column n) at the row's end of inputs and after
  # its targets.
  column = tf.where(j < lengths, j, tf.where((t >= 0) & (t < m), n + 1 + t, n))
  joined = tf.concat([inputs, tf.zeros_like(inputs[:, :1]), targets], axis=1)
  ids = tf.gather(joined, column, batch_dims=1)
  return ids, tf.logical_and(t >= 0, tf.not_equal(ids, PAD_ID))


def score_targets(model: Transformer, inputs, targets) -> tf.Tensor:
  """log P(targets | inputs) summed over target tokens (EOS included): `[batch]`.

  Prepend mode: the model reads `prepend_inputs(inputs, targets)` and the targets'
  positions alone count, as decoding's scores count them (and T2T's evaluation).
  """
  inputs, targets = tf.cast(inputs, tf.int32), tf.cast(targets, tf.int32)
  scored = tf.not_equal(targets, PAD_ID)
  if prepends_inputs(model):
    targets, scored = prepend_inputs(inputs, targets)
  logits = model({"inputs": inputs, "targets": targets}, training=False)
  token = tf.gather(tf.nn.log_softmax(logits), targets, batch_dims=2)
  return tf.reduce_sum(token * tf.cast(scored, tf.float32), axis=1)


def strip_ids(ids: Sequence[int]) -> List[int]:
  """Ids up to (not including) the first EOS, without PAD (T2T `_save_until_eos`)."""
  out = []
  for i in ids:
    if i == EOS_ID:
      break
    if i != PAD_ID:
      out.append(int(i))
  return out
