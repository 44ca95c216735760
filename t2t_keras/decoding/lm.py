"""Scoring and sampling text with a language model (`lm_model.TransformerLM`).

Scoring is teacher-forced: log P(ids) = sum over the non-PAD positions of the
log-softmax of the model's logits at the id (a text is scored as it was
trained: its subword ids + EOS). Sampling continues prompts with the cached
incremental decoding of `decode_step`, through `sampling.sample` (temperature 0:
`sampling.greedy_search`); each prompt is its row's forced prefix, scored
"free": the row takes the prompt ids at a log-probability of 0, as T2T forces an
LM's `partial_targets` (logits 0 at the prompt id, -1e9 elsewhere), so the score
counts the continuation only.
"""

from __future__ import annotations

import numbers
from typing import List, NamedTuple, Sequence, Tuple

import numpy as np
import tensorflow as tf

from data_gen.text_encoder import EOS_ID, PAD_ID
from t2t_keras.decoding import sampling, text_args


class Continuation(NamedTuple):
  """A sampled continuation of one prompt.

  ids: the new ids, without the prompt and without EOS.
  log_prob: sum of the (untempered) log-probabilities of the new ids, EOS included.
  ended: the model emitted EOS (else `max_new_tokens` ran out).
  """
  ids: List[int]
  log_prob: float
  ended: bool


def score_ids(model, targets) -> tf.Tensor:
  """log P of each row of `targets` under `model` (dropout off).

  Args:
    model: a `TransformerLM`.
    targets: int `[batch, length]`, 0-padded (EOS included where it is scored).
  Returns:
    float32 `[batch]`: the sum over non-PAD positions of log-softmax(logits)[id].
  """
  targets = tf.cast(targets, tf.int32)
  logits = model({"targets": targets}, training=False)  # [batch, length, vocab]
  picked = tf.gather(tf.nn.log_softmax(logits), targets, batch_dims=2)  # [batch, length]
  return tf.reduce_sum(picked * tf.cast(tf.not_equal(targets, PAD_ID), tf.float32), axis=1)


def _pad(rows: Sequence[Sequence[int]], width: int) -> np.ndarray:
  out = np.zeros([len(rows), width], np.int32)
  for r, row in enumerate(rows):
    out[r, :len(row)] = row
  return out


def score_texts(model, encoder, texts: Sequence[str], batch_size: int = 32,
                include_eos: bool = True) -> List[float]:
  """log P(text) of each text (natural log), as `score_ids` of its subword ids.

  Args:
    encoder: the run's `SubwordTextEncoder`.
    texts: a list of texts (str or UTF-8 bytes; one string is refused).
    include_eos: score the EOS after the text too (the training examples end in it).
  Returns:
    one score per text ([] for none).
  Raises:
    ValueError: one string, a bad item (named with its index) or batch_size.
  """
  texts = text_args.text_list(texts, "score_texts()", "texts")
  if not _is_int(batch_size) or batch_size < 1:
    raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}.")
  encoded = [encoder.encode(t) + ([EOS_ID] if include_eos else []) for t in texts]
  scores: List[float] = []
  for start in range(0, len(encoded), batch_size):
    rows = encoded[start:start + batch_size]
    scores += score_ids(model, _pad(rows, max(1, max(map(len, rows))))).numpy().tolist()
  return scores


def _is_int(value) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_sampling(model, max_new_tokens, temperature, top_k, seed) -> None:
  """Refuses a bad sampling setting in one line naming it, before any TensorFlow
  call (inside the traced loop the same mistake would come wrapped in its trace)."""
  if not _is_int(max_new_tokens) or max_new_tokens < 1:
    raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}.")
  if not isinstance(temperature, numbers.Real) or isinstance(temperature, bool) or \
      not temperature >= 0:  # NaN too
    raise ValueError(f"temperature must be a number >= 0 (0: greedy), got {temperature!r}.")
  vocab = model.target_vocab_size
  if not _is_int(top_k) or not (top_k == -1 or 1 <= top_k <= vocab):
    raise ValueError(f"top_k must be -1 (keep every id) or an int in 1..{vocab} (the "
                     f"vocabulary), got {top_k!r}.")
  pair = seed if isinstance(seed, (list, tuple)) else [seed, 0]
  if len(pair) != 2 or not all(_is_int(x) for x in pair):
    raise ValueError(f"seed must be an int or a pair of ints, got {seed!r}.")


def sample_ids(model, prompts: Sequence[Sequence[int]], max_new_tokens: int,
               temperature: float = 1.0, top_k: int = -1, seed: int = 0) -> List[Continuation]:
  """Continues each prompt (ids without EOS; [] for none) by up to `max_new_tokens` ids.

  Args:
    model: a `TransformerLM`.
    temperature: T2T's sampling_temp; 0 is greedy (argmax).
    top_k: T2T's sampling_keep_top_k; -1 keeps every id.
    seed: the same seed gives the same samples.
  Returns:
    a `Continuation` per prompt ([] for none).
  Raises:
    ValueError: a bad setting, named with its value, before TensorFlow runs.
  """
  _check_sampling(model, max_new_tokens, temperature, top_k, seed)
  prompts = [list(p) for p in prompts]
  if not prompts:
    return []
  if any(EOS_ID in p or PAD_ID in p for p in prompts):
    raise ValueError("prompts must not hold EOS (1) or PAD (0) ids.")
  lengths = np.array([len(p) for p in prompts], np.int32)
  width = int(lengths.max(initial=0))
  decode_length = width + max_new_tokens

  def run(prefix, prefix_lengths):
    state = model.init_decoding_state(tf.shape(prefix)[0], decode_length)

    def fn(ids, i, state):
      return model.decode_step(ids[:, i], i, state)

    initial = tf.zeros([tf.shape(prefix)[0]], tf.int32)
    limits = prefix_lengths + max_new_tokens
    if temperature == 0:
      out = sampling.greedy_search(fn, initial, decode_length, EOS_ID, state,
                                   decode_lengths=limits, prefix=prefix,
                                   prefix_scoring="free")
    else:
      out = sampling.sample(fn, initial, decode_length, temperature, top_k, seed, EOS_ID,
                            state, decode_lengths=limits, prefix=prefix,
                            prefix_scoring="free")
    return out.ids, out.scores

  ids, scores = tf.function(run)(tf.constant(_pad(prompts, max(width, 1))),
                                 tf.constant(lengths))
  results = []
  for row, length, score in zip(ids.numpy(), lengths, scores.numpy()):
    new = row[1 + length:].tolist()  # column 0 is the initial id
    ended = EOS_ID in new
    new = new[:new.index(EOS_ID)] if ended else [t for t in new if t != PAD_ID]
    results.append(Continuation(new, float(score), ended))
  return results


def sample_texts(model, encoder, prompts: Sequence[str], max_new_tokens: int,
                 temperature: float = 1.0, top_k: int = -1,
                 seed: int = 0) -> List[Tuple[str, Continuation]]:
  """`sample_ids` of text prompts: (the continuation's text, its `Continuation`) each.

  `prompts` is a list of texts (str or UTF-8 bytes; one string is refused; "" for no
  prompt); [] gives [].
  """
  prompts = text_args.text_list(prompts, "sample_texts()", "prompts", "prompts")
  _check_sampling(model, max_new_tokens, temperature, top_k, seed)
  out = sample_ids(model, [encoder.encode(p) for p in prompts], max_new_tokens, temperature,
                   top_k, seed)
  return [(encoder.decode(c.ids), c) for c in out]
