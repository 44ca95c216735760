"""Scoring and continuing text with a language model (`lm_model.TransformerLM`).

Scoring is teacher-forced: log P(ids) = sum over the non-PAD positions of the
log-softmax of the model's logits at the id. A text is scored as it was
trained: stripped (as `languagemodel_from_files` strips its lines; here
`tokenizer.normalize_input`, which the SavedModel runs in-graph), its subword
ids + EOS.

Continuing: each prompt is its row's forced prefix, scored "free": the row
takes the prompt ids at a log-probability of 0, as T2T forces an LM's
`partial_targets` (logits 0 at the prompt id, -1e9 elsewhere), so the score
counts the continuation only. Then, over the model's cached `decode_step`,
greedy decoding (temperature 0), sampling (`sampling.sample`: temperature,
top_k) or, with beam_size > 1, T2T's beam search (`beam_search.beam_search`,
its length penalty `alpha` counting the prompt's positions as T2T's does). A
row stops at EOS or after `max_new_tokens` new ids (T2T's decode length of a
problem without inputs: the prompt's length + `extra_length`).

`continue_ids` is that search as a graph; `Continuer` traces it once for
Python (`sample_ids`, `sample_texts`, `trained_run.open_run(...).sample`), and
the language model's SavedModel traces the same function, so both give the
same ids for the same batch. Sampling draws depend on the batch (its rows and
width): the same prompts, seed and batch size give the same samples.

Prompts as text: T2T's `_get_language_modeling_inputs` adds a space to a
prompt that ends in ASCII punctuation (the subword vocabulary joins
punctuation and the space after it in one token, so the prompt's last token
is completed rather than ended); `t2t_prompt` does the same, and no prompt is
stripped.
"""

from __future__ import annotations

import dataclasses
import numbers
import random
import string
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from data_gen import tokenizer
from data_gen.text_encoder import EOS_ID, PAD_ID
from t2t_keras.decoding import beam_search, sampling, text_args
from t2t_keras.hparams import DecodeHParams

DEFAULT_BATCH_SIZE = 32  # prompts or texts per batch (T2T's decode batch from a file)
Seed = Union[int, Tuple[int, int]]


class Continuation(NamedTuple):
  """A continuation of one prompt.

  ids: the new ids, without the prompt and without EOS.
  log_prob: sum of the (untempered) log-probabilities of the new ids, EOS included.
  ended: the model emitted EOS (else `max_new_tokens` ran out).
  """
  ids: List[int]
  log_prob: float
  ended: bool


class Sample(NamedTuple):
  """A continuation of one text prompt (`LanguageModelRun.sample`).

  text: the continuation's text (the prompt not included).
  log_prob: natural-log P(continuation | prompt), its EOS included when it ended.
  ended: the model emitted EOS (else `max_new_tokens` ran out).
  ids: the continuation's subword ids (no EOS).
  """
  text: str
  log_prob: float
  ended: bool
  ids: List[int]


class TextScore(NamedTuple):
  """The score of one text (`LanguageModelRun.score`).

  log_prob: natural-log P(text + EOS).
  tokens: the ids scored: the text's subwords + EOS.
  perplexity: exp(-log_prob / tokens).
  """
  log_prob: float
  tokens: int
  perplexity: float


@dataclasses.dataclass(frozen=True)
class ContinueSettings:
  """How prompts are continued (the seed is given apart: see `continue_ids`).

  max_new_tokens: new ids at most per prompt, EOS included (T2T's extra_length).
  temperature: T2T's sampling_temp; 0 is greedy (argmax).
  top_k: T2T's sampling_keep_top_k; -1 keeps every id.
  beam_size: > 1 is beam search (temperature and top_k are then unused).
  alpha: beam search's length-penalty exponent.
  """
  max_new_tokens: int
  temperature: float = 1.0
  top_k: int = -1
  beam_size: int = 1
  alpha: float = 0.6

  @classmethod
  def from_decode_hparams(cls, decode_hp: DecodeHParams) -> "ContinueSettings":
    """T2T's decode hparams: extra_length new tokens; beam_size > 1 beam search
    (alpha), else sampling_method argmax (greedy) or random (sampling_temp,
    sampling_keep_top_k)."""
    argmax = decode_hp.sampling_method == "argmax"
    return cls(max_new_tokens=decode_hp.extra_length,
               temperature=0.0 if argmax else float(decode_hp.sampling_temp),
               top_k=-1 if argmax else decode_hp.sampling_keep_top_k,
               beam_size=decode_hp.beam_size, alpha=float(decode_hp.alpha))

  def check(self, vocab_size: int) -> None:
    """Refuses a bad setting in one line naming it, before any TensorFlow call
    (inside the traced loop the same mistake would come wrapped in its trace).

    Raises:
      ValueError: naming the setting and its value.
    """
    if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
      raise ValueError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}.")
    if not _is_number(self.temperature) or not self.temperature >= 0:  # NaN too
      raise ValueError("temperature must be a number >= 0 (0: greedy), got "
                       f"{self.temperature!r}.")
    if not _is_int(self.top_k) or not (self.top_k == -1 or 1 <= self.top_k <= vocab_size):
      raise ValueError(f"top_k must be -1 (keep every id) or an int in 1..{vocab_size} (the "
                       f"vocabulary), got {self.top_k!r}.")
    if not _is_int(self.beam_size) or self.beam_size < 1:
      raise ValueError(f"beam_size must be an int >= 1 (1: greedy or sampling), got "
                       f"{self.beam_size!r}.")
    if not _is_number(self.alpha) or not 0 <= self.alpha < float("inf"):
      raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha!r}.")


def _is_int(value) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def seed_pair(seed: Optional[Seed]) -> Tuple[int, int]:
  """The stateless seed of `seed`: an int (n -> (n, 0)), a pair of ints, or None: a
  fresh random one.

  Raises:
    ValueError: anything else, naming it.
  """
  if seed is None:
    return (random.SystemRandom().randrange(2**31), 0)
  pair = seed if isinstance(seed, (list, tuple)) else [seed, 0]
  if len(pair) != 2 or not all(_is_int(x) for x in pair) or \
      not all(-2**31 <= x < 2**31 for x in pair):
    raise ValueError(f"seed must be an int or a pair of ints (32-bit), got {seed!r}.")
  return (int(pair[0]), int(pair[1]))


# ------------------------------------------------------------------ scoring ---
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


def make_score_fn(model) -> Callable:
  """`score_ids` traced once: int32 `[batch, length]` -> float32 `[batch]`."""
  return tf.function(lambda targets: score_ids(model, targets),
                     input_signature=[tf.TensorSpec([None, None], tf.int32)])


def _pad(rows: Sequence[Sequence[int]], width: int) -> np.ndarray:
  out = np.zeros([len(rows), width], np.int32)
  for r, row in enumerate(rows):
    out[r, :len(row)] = row
  return out


def _check_batch_size(batch_size) -> None:
  if not _is_int(batch_size) or batch_size < 1:
    raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}.")


def text_scores(model, encoder, texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE,
                score_fn: Optional[Callable] = None) -> List[TextScore]:
  """`TextScore` of each text (stripped: `normalize_input`; its subword ids + EOS, as
  trained).

  Args:
    encoder: the run's `SubwordTextEncoder`.
    texts: a list of texts (str or UTF-8 bytes; one string is refused).
    score_fn: `make_score_fn(model)`, kept by callers that score often.
  Returns:
    one per text ([] for none).
  Raises:
    ValueError: one string, a bad item (named with its index) or batch_size.
  """
  texts = text_args.text_list(texts, "score()", "texts")
  _check_batch_size(batch_size)
  score_fn = score_fn or make_score_fn(model)
  encoded = [encoder.encode(tokenizer.normalize_input(t)) + [EOS_ID] for t in texts]
  out: List[TextScore] = []
  for start in range(0, len(encoded), batch_size):
    rows = encoded[start:start + batch_size]
    log_probs = score_fn(tf.constant(_pad(rows, max(map(len, rows))))).numpy()
    out += [TextScore(float(lp), len(row), float(np.exp(-lp / len(row))))
            for lp, row in zip(log_probs, rows)]
  return out


def score_texts(model, encoder, texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE,
                include_eos: bool = True) -> List[float]:
  """log P(text) of each text (natural log): `score_ids` of its subword ids (the text
  stripped, as trained).

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
  _check_batch_size(batch_size)
  if include_eos:
    return [s.log_prob for s in text_scores(model, encoder, texts, batch_size)]
  encoded = [encoder.encode(tokenizer.normalize_input(t)) for t in texts]
  scores: List[float] = []
  for start in range(0, len(encoded), batch_size):
    rows = encoded[start:start + batch_size]
    scores += score_ids(model, _pad(rows, max(1, max(map(len, rows))))).numpy().tolist()
  return scores


# --------------------------------------------------------------- continuing ---
def continue_ids(model, prompts: tf.Tensor, settings: ContinueSettings,
                 seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """Continues each prompt: the search as a graph (call it inside `tf.function`).

  Args:
    model: a `TransformerLM`.
    prompts: int `[batch, P]` prompt ids, 0-padded, no EOS (a row of PAD is no
      prompt; P >= 1).
    settings: `ContinueSettings`, checked (`ContinueSettings.check`).
    seed: int32 `[2]`, the stateless seed of sampling (unused otherwise).
  Returns:
    (ids int32 `[batch, P + max_new_tokens]`: each row's prompt and then its
    continuation, 0 after its EOS or its last new id; log_probs float32
    `[batch]`: natural-log P(continuation | prompt), EOS included where the
    row ended with it).
  """
  prompts = tf.cast(prompts, tf.int32)
  batch = tf.shape(prompts)[0]
  lengths = tf.reduce_sum(tf.cast(tf.not_equal(prompts, PAD_ID), tf.int32), axis=1)
  decode_length = tf.shape(prompts)[1] + settings.max_new_tokens
  limits = lengths + settings.max_new_tokens  # [batch]: each row's own decode length
  initial = tf.fill([batch], PAD_ID)  # T2T starts from PAD: shift_right's zero embedding
  beams = settings.beam_size

  def fn(ids, i, state):
    return model.decode_step(ids[:, i], i, state)

  # The beams of a row share its buffers (`decoding_state.py`: decode_length * beams
  # positions and a per-beam history of which entries are whose).
  state = model.init_decoding_state(batch, decode_length * beams)
  if beams > 1:
    state = state.replace(per_beam=tf.zeros([batch, decode_length, beams], tf.bool))
    options = beam_search.BeamSearchOptions(beams, model.target_vocab_size, settings.alpha,
                                            eos_id=EOS_ID, stop_early=True, top_beams=1)
    out = beam_search.beam_search(fn, initial, decode_length, options, state,
                                  decode_lengths=limits, prefix=prompts, prefix_scoring="free")
    ids, score = out.ids[:, 0, 1:], out.scores[:, 0]
    # A hypothesis that ended scores log P / ((5 + its length) / 6) ** alpha, its length
    # counting the prompt and EOS; one that did not (none of its row's ended) log P.
    is_eos = tf.equal(ids, EOS_ID)
    ended = tf.reduce_any(is_eos, axis=1)
    length = tf.argmax(tf.cast(is_eos, tf.int32), axis=1, output_type=tf.int32) + 1
    log_probs = tf.where(ended, score * beam_search.length_penalty(length, settings.alpha),
                         score)
    return ids, log_probs
  if settings.temperature == 0:
    out = sampling.greedy_search(fn, initial, decode_length, EOS_ID, state,
                                 decode_lengths=limits, prefix=prompts, prefix_scoring="free")
  else:
    out = sampling.sample(fn, initial, decode_length, settings.temperature, settings.top_k,
                          seed, EOS_ID, state, decode_lengths=limits, prefix=prompts,
                          prefix_scoring="free")
  return out.ids[:, 1:], out.scores


def new_ids(row: Sequence[int], prompt_length: int) -> Tuple[List[int], bool]:
  """(the new ids of a row of `continue_ids` without EOS and PAD, whether it ended)."""
  new = [int(t) for t in row[prompt_length:]]
  if EOS_ID in new:
    return [t for t in new[:new.index(EOS_ID)] if t != PAD_ID], True
  return [t for t in new if t != PAD_ID], False


class Continuer:
  """`continue_ids` traced once for `settings`, over Python lists of prompt ids.

  Args:
    model: a `TransformerLM`.
    settings: `ContinueSettings` (checked here).
    batch_size: prompts per batch, in the order given.
  Raises:
    ValueError: a bad setting, named with its value.
  """

  def __init__(self, model, settings: ContinueSettings, batch_size: int = DEFAULT_BATCH_SIZE):
    settings.check(model.target_vocab_size)
    _check_batch_size(batch_size)
    self.settings = settings
    self.batch_size = batch_size
    self._fn = tf.function(lambda prompts, seed: continue_ids(model, prompts, settings, seed),
                           input_signature=[tf.TensorSpec([None, None], tf.int32),
                                            tf.TensorSpec([2], tf.int32)])

  def __call__(self, prompts: Sequence[Sequence[int]], seed: Optional[Seed] = 0
               ) -> List[Continuation]:
    """A `Continuation` per prompt (ids without EOS; [] for none); seed as `seed_pair`.

    Raises:
      ValueError: a prompt holds EOS or PAD, or a bad seed.
    """
    seed = tf.constant(seed_pair(seed), tf.int32)
    prompts = [[int(t) for t in p] for p in prompts]
    if any(EOS_ID in p or PAD_ID in p for p in prompts):
      raise ValueError("prompts must not hold EOS (1) or PAD (0) ids.")
    results = []
    for start in range(0, len(prompts), self.batch_size):
      rows = prompts[start:start + self.batch_size]
      width = max(1, max(map(len, rows)))
      ids, log_probs = self._fn(tf.constant(_pad(rows, width)), seed)
      for row, prompt, log_prob in zip(ids.numpy(), rows, log_probs.numpy()):
        new, ended = new_ids(row, len(prompt))
        results.append(Continuation(new, float(log_prob), ended))
    return results


def sample_ids(model, prompts: Sequence[Sequence[int]], max_new_tokens: int,
               temperature: float = 1.0, top_k: int = -1, seed: Optional[Seed] = 0,
               beam_size: int = 1, alpha: float = 0.6,
               batch_size: int = DEFAULT_BATCH_SIZE) -> List[Continuation]:
  """Continues each prompt (ids without EOS; [] for none) by up to `max_new_tokens` ids.

  Args:
    model: a `TransformerLM`.
    temperature: T2T's sampling_temp; 0 is greedy (argmax).
    top_k: T2T's sampling_keep_top_k; -1 keeps every id.
    seed: an int or a pair; the same seed (and batches) gives the same samples;
      None: a fresh random one.
    beam_size: > 1 is T2T's beam search with length penalty `alpha`.
    batch_size: prompts per batch, in the order given.
  Returns:
    a `Continuation` per prompt ([] for none).
  Raises:
    ValueError: a bad setting, named with its value, before TensorFlow runs.
  """
  settings = ContinueSettings(max_new_tokens, temperature, top_k, beam_size, alpha)
  settings.check(model.target_vocab_size)
  seed_pair(seed)
  prompts = list(prompts)
  if not prompts:
    return []
  return Continuer(model, settings, batch_size)(prompts, seed)


def t2t_prompt(text: str) -> str:
  """T2T's prompt of `text`: a space added after final ASCII punctuation."""
  return text + " " if text and text[-1] in string.punctuation else text


def encode_prompts(encoder, prompts: Sequence[str]) -> List[List[int]]:
  """The subword ids of each prompt as T2T encodes it (`t2t_prompt`; no EOS)."""
  return [encoder.encode(t2t_prompt(p)) for p in prompts]


def continue_texts(continuer: Continuer, encoder, prompts: Sequence[str],
                   seed: Optional[Seed] = 0, cap: Optional[int] = None) -> List[Sample]:
  """A `Sample` per text prompt through `continuer`; `cap`: subword ids kept of
  a prompt (its first ones; T2T's max_input_size - 1), None: all."""
  encoded = encode_prompts(encoder, prompts)
  if cap is not None:
    encoded = [ids[:cap] for ids in encoded]
  return [Sample(encoder.decode(c.ids), c.log_prob, c.ended, c.ids)
          for c in continuer(encoded, seed)]


def sample_texts(model, encoder, prompts: Sequence[str], max_new_tokens: int,
                 temperature: float = 1.0, top_k: int = -1, seed: Optional[Seed] = 0,
                 beam_size: int = 1, alpha: float = 0.6,
                 batch_size: int = DEFAULT_BATCH_SIZE) -> List[Tuple[str, Continuation]]:
  """`sample_ids` of text prompts (`t2t_prompt`, not stripped; "" for no prompt):
  (the continuation's text, its `Continuation`) each; [] gives [].
  """
  prompts = text_args.text_list(prompts, "sample_texts()", "prompts", "prompts")
  settings = ContinueSettings(max_new_tokens, temperature, top_k, beam_size, alpha)
  settings.check(model.target_vocab_size)
  seed_pair(seed)
  if not prompts:
    return []
  samples = continue_texts(Continuer(model, settings, batch_size), encoder, prompts, seed)
  return [(s.text, Continuation(s.ids, s.log_prob, s.ended)) for s in samples]
