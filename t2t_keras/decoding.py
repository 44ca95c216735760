"""Decoding a Transformer: cached (fast) or uncached, beam / greedy / sampling.

`decode_ids` is the in-graph core, shared by the decoder CLI and the exporter:
inputs `[batch, length]` ids -> output ids and scores. `TextDecoder` wraps it
for text files with T2T's `decode_from_file` behaviour (longest lines first,
results in input order, one output line per input line).

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
"""

from __future__ import annotations

import functools
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from t2t_keras import beam_search
from t2t_keras.hparams import DecodeHParams, HParams
from t2t_keras.model import Transformer

EOS_ID = 1


def _input_lengths(inputs: tf.Tensor) -> tf.Tensor:
  """Non-pad length of each row, EOS included: `[batch]` int32."""
  return tf.reduce_sum(tf.cast(tf.not_equal(inputs, 0), tf.int32), axis=1)


def make_symbols_to_logits_fn(model: Transformer, use_cache: bool = True,
                              static: Optional[Dict] = None):
  """Returns the `symbols_to_logits_fn` of `beam_search` for `model`.

  cached: `model.decode_step` on the last id with fixed-size key/value buffers.
  uncached: re-runs the decoder over the whole prefix each step (T2T's slow path),
  reading only `cache["encoder_output"]` and `cache["encdec_bias"]`.

  static: optional second output of `split_cache`: the tensors that never
  change and are the same for every beam of an item. They stay out of
  `cache`, which beam search repeats per beam and reorders every step; `cache`
  is then the first output of `split_cache` and is returned in that form.
  The cached fn then also takes and returns the third output, the key/value
  buffers, as beam search's `slot_states`: fn(ids, i, cache, slots).
  """
  def cached(ids, i, cache):
    return model.decode_step(ids[:, i], i, cache)

  def cached_beams(ids, i, cache, slots):
    state = {"encdec_bias": static["encdec_bias"], "history": cache["history"],
             "layers": [dict(own, **fixed) for own, fixed in
                        zip(slots["layers"], static["layers"])]}
    logits, state = model.decode_step(ids[:, i], i, state)
    return logits, dict(cache, history=state["history"]), _slot_buffers(state)

  def uncached(ids, i, cache):
    fixed = cache if static is None else static
    targets = ids[:, 1:]  # positions > i are still 0 and causally invisible at i
    logits = model.decode(targets, fixed["encoder_output"], fixed["encdec_bias"],
                          training=False)
    return tf.gather(logits, i, axis=1), cache

  if not use_cache:
    return uncached
  return cached if static is None else cached_beams


def _slot_buffers(cache: Dict) -> Dict:
  """The self-attention buffers of a decoding cache: beam search's `slot_states`."""
  return {"layers": [{"k": layer["k"], "v": layer["v"]} for layer in cache["layers"]]}


def split_cache(cache: Dict, beam_size: int) -> Tuple[Dict, Dict, Optional[Dict]]:
  """Splits a decoding cache into (per-beam state, static part, slot buffers).

  Everything that is fixed during decoding and equal across the beams of an
  item stays out of the per-beam state, so no step reorders it. Cached path
  (`model.init_cache(..., beams=beam_size)`): the encoder-decoder bias and
  keys/values keep one row per item (the beams of an item attend to them
  together, see `MultiHeadAttention`); the self-attention buffers are beam
  search's `slot_states` (never reordered); the per-beam state is the small
  "history" table that beam search repeats and reorders. Uncached path: the
  encoder output and bias are repeated to `[batch * beam_size, ...]` once, in
  beam search's item-major row order; the per-beam state is empty and there
  are no slot buffers.
  """
  if "layers" not in cache:  # uncached
    tile = lambda t: tf.repeat(t, beam_size, axis=0)
    static = {"encoder_output": tile(cache["encoder_output"]),
              "encdec_bias": tile(cache["encdec_bias"])}
    return {}, static, None
  static = {"encdec_bias": cache["encdec_bias"],
            "layers": [{"k_encdec": layer["k_encdec"], "v_encdec": layer["v_encdec"]}
                       for layer in cache["layers"]]}
  return {"history": cache["history"]}, static, _slot_buffers(cache)


def decode_ids(model: Transformer, inputs: tf.Tensor, decode_hp: DecodeHParams,
               hparams: HParams, use_cache: bool = True,
               decode_length: Optional[int] = None) -> Tuple[tf.Tensor, tf.Tensor]:
  """Decodes a batch of padded input ids (run it inside tf.function).

  Args:
    inputs: `[batch, input_length]` int ids ending in EOS, 0-padded.
    decode_hp: beam_size, alpha, extra_length, return_beams.
    hparams: sampling_method / sampling_temp / sampling_keep_top_k for beam 1.
    decode_length: static output buffer length (default input_length +
      extra_length); each sentence stops at min(its cap, decode_length), its
      cap being its non-pad input length + extra_length.

  Returns:
    ids int32 `[batch, decode_length]` (or `[batch, beam, decode_length]` with
    return_beams), 0-padded after EOS or after the sentence's cap (an output
    that reached its cap has no EOS); scores float32 `[batch]` (or
    `[batch, beam]`): length-normalised scores of beams that ended in EOS, raw
    log-probs where no beam of the sentence did, or the summed log-prob for
    greedy decoding (T2T's conventions).
  """
  inputs = tf.cast(inputs, tf.int32)
  if decode_length is None:
    known = inputs.shape[1]
    decode_length = (known if known is not None else tf.shape(inputs)[1]) + \
        decode_hp.extra_length
  cap = _input_lengths(inputs) + decode_hp.extra_length
  encoder_output, encdec_bias = model.encode(inputs, training=False)
  if use_cache:
    cache = model.init_cache(encoder_output, encdec_bias, decode_length,
                             beams=decode_hp.beam_size)
  else:
    cache = {"encoder_output": encoder_output, "encdec_bias": encdec_bias}
  initial = tf.zeros([tf.shape(inputs)[0]], tf.int32)
  if decode_hp.beam_size > 1:
    cache, static, slots = split_cache(cache, decode_hp.beam_size)
    fn = make_symbols_to_logits_fn(model, use_cache, static)
    top = decode_hp.beam_size if decode_hp.return_beams else 1
    ids, scores = beam_search.beam_search(
        fn, initial, decode_hp.beam_size, decode_length, model.target_vocab_size,
        decode_hp.alpha, states=cache, eos_id=EOS_ID, stop_early=True, top_beams=top,
        slot_states=slots, decode_lengths=cap)
    ids = ids[:, :, 1:]
    return (ids, scores) if decode_hp.return_beams else (ids[:, 0], scores[:, 0])
  fn = make_symbols_to_logits_fn(model, use_cache)
  if hparams.sampling_method == "argmax":
    ids, scores = beam_search.greedy_search(fn, initial, decode_length, EOS_ID, cache,
                                            decode_lengths=cap)
  else:
    ids, scores = beam_search.sample(fn, initial, decode_length, hparams.sampling_temp,
                                     hparams.sampling_keep_top_k, eos_id=EOS_ID,
                                     states=cache, decode_lengths=cap)
  ids = ids[:, 1:]
  return (ids[:, None], scores[:, None]) if decode_hp.return_beams else (ids, scores)


def make_decode_fn(model: Transformer, decode_hp: DecodeHParams, hparams: HParams,
                   use_cache: bool = True, jit_compile: bool = False) -> Callable:
  """A tf.function inputs `[batch, length]` -> (ids, scores).

  With jit_compile the function is traced per input shape (decode_length is then
  static, as XLA needs); callers pad lengths to a few buckets to bound retracing.
  """
  fn = functools.partial(decode_ids, model, decode_hp=decode_hp, hparams=hparams,
                         use_cache=use_cache)
  if jit_compile:
    return tf.function(fn, jit_compile=True)
  return tf.function(fn, input_signature=[tf.TensorSpec([None, None], tf.int32)])


def score_targets(model: Transformer, inputs, targets) -> tf.Tensor:
  """log P(targets | inputs) summed over target tokens (EOS included): `[batch]`."""
  logits = model({"inputs": inputs, "targets": targets}, training=False)
  log_probs = tf.nn.log_softmax(logits)
  targets = tf.cast(targets, tf.int32)
  token = tf.gather(log_probs, targets, batch_dims=2)
  return tf.reduce_sum(token * tf.cast(tf.not_equal(targets, 0), tf.float32), axis=1)


def strip_ids(ids: Sequence[int]) -> List[int]:
  """Ids up to (not including) the first EOS, without PAD (T2T `_save_until_eos`)."""
  out = []
  for i in ids:
    if i == EOS_ID:
      break
    if i != 0:
      out.append(int(i))
  return out
