r"""Source-target token alignments from the encoder-decoder attention.

T2T outputs none; OpenNMT-tf (`with_alignments: hard`) and CTranslate2
(`return_attention`) do. This module gives the same kind of alignment for a
decoded hypothesis, in Pharaoh format: `"0-0 1-2 2-1"`, each pair
`source index-target index`, ascending by target, then source.

Which attention. The hypothesis is run through the model once, teacher-forced
(`Transformer.call(..., return_attention_scores=True)`, no dropout): the target
token `t` is predicted by decoder position `t`, whose input is token `t - 1`
(shift right; position 0 reads the zero vector), so the attention that
prediction used is the encoder-decoder attention of query position `t`. Cached
decoding (`Transformer.decode_step`) computes that same attention at its step
`t`, from the same weights, encoder keys and prefix, so these are the weights
the search attended with, up to rounding (tests/test_alignments.py records each
cached step's weights and compares). The decoder is causal: tokens after `t` cannot change row `t`,
so neither the hypothesis' EOS nor anything after it is fed.

Layer and heads. `layer` picks the decoder layer (0 the first, negative from
the end; default -1, the last) and `heads` averages its first `heads` heads (0,
the default: all of them). CTranslate2's decoder spec takes the same two numbers
(`alignment_layer`, default -1; `alignment_heads`, default 1) and OpenNMT-tf's
`attention_reduction` defaults to FIRST_HEAD_LAST_LAYER: there the first head
is the one guided alignment trains. T2T trains no head for alignment, so no head
is special and the default is the average of the last layer's heads
(OpenNMT-tf's AVERAGE_LAST_LAYER); `heads=1` is their default choice. For an
ensemble the chosen attention is averaged over its members.

Hard alignment (OpenNMT-tf's "hard"): each target subword is aligned to the
source subword of largest weight, ties to the lowest index (`numpy.argmax`).
Excluded on both sides: EOS and padding. A target PAD id (a weak model may emit
id 0 before EOS; decoding's `strip_ids` drops it from the text) is fed as
decoding fed it but gets no pair, and target indices count the other tokens.
The source EOS is never an alignment target: the argmax runs over the real
source tokens only, even where EOS holds the most weight.

Word level. Each subword belongs to the whitespace-separated word (`str.split`)
of the text its characters decode into: for the source, the decoded input ids
(the line after `tokenizer.normalize_input`, or its kept part when decoding cut
it to `max_input_size`); for the target, the output text (`encoder.decode` of
the hypothesis without EOS and PAD; the decoder's replacement of line breaks and
tabs by spaces keeps the same words). The characters of a subword are found from
the SubwordTextEncoder's own layout: subword strings are concatenated, split
into tokens at `_`, unescaped (a `\233;` escape is one character, whichever
subwords hold its pieces), and the tokens placed in the detokenized text. A
subword of only white space or only a token's closing `_` belongs to no word; one
that spans a punctuation run with inner white space (`), (`) belongs to each word
it touches. Source word `i` and target word `j` are aligned if any subword of `i`
is aligned to any subword of `j`.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from data_gen import tokenizer
from data_gen.escaping import unescape_token
from data_gen.text_encoder import EOS_ID, PAD_ID

LEVELS = ("subword", "word")
Pair = Tuple[int, int]  # (source index, target index)
# The escapes `escaping.unescape_token` replaces, each by one character.
_ESCAPE = re.compile(r"\\u|\\\\|\\([0-9]+);")


# -- Attention -------------------------------------------------------------------

def _members(model) -> List:
  """The Transformers to average: a list's items, an `Ensemble`'s members, else [model]."""
  if isinstance(model, (list, tuple)):
    models = list(model)
  else:
    models = list(getattr(model, "members", None) or [model])
  if not models:
    raise ValueError("alignments need at least one model, got an empty list.")
  return models


def check_selection(model, layer: int = -1, heads: int = 0) -> None:
  """Refuses a `layer` or `heads` that some Transformer of `model` (see `alignments`)
  lacks: ValueError naming the valid range."""
  for member in _members(model):
    _check_selection(member.hparams.decoder_layers, member.hparams.num_heads, layer, heads)


def _check_selection(num_layers: int, num_heads: int, layer: int, heads: int) -> int:
  """`layer` as an index in [0, num_layers); ValueError for a layer or heads out of range."""
  if not -num_layers <= layer < num_layers:
    raise ValueError(f"layer must be in [-{num_layers}, {num_layers}) (decoder layers, "
                     f"negative from the end), got {layer}.")
  if not 0 <= heads <= num_heads:
    raise ValueError(f"heads must be in [0, {num_heads}] (0: all {num_heads} heads "
                     f"averaged, k: the first k), got {heads}.")
  return layer % num_layers


def select_attention(encdec: Sequence[tf.Tensor], layer: int = -1, heads: int = 0) -> tf.Tensor:
  """One layer's encoder-decoder attention, averaged over heads.

  Args:
    encdec: per decoder layer, weights `[batch, heads, length_q, length_kv]`
      (`AttentionScores.encdec`).
    layer: decoder layer, negative from the end.
    heads: average the first `heads` heads; 0 all of them.
  Returns:
    float32 `[batch, length_q, length_kv]`.
  """
  encdec = list(encdec)
  if not encdec or encdec[0] is None:
    raise ValueError("alignments need encoder-decoder attention; this model has none.")
  weights = encdec[_check_selection(len(encdec), int(encdec[0].shape[1]), layer, heads)]
  weights = tf.cast(weights, tf.float32)  # a mixed_bfloat16 model's weights are bfloat16
  if heads:
    weights = weights[:, :heads]
  return tf.reduce_mean(weights, axis=1)


def alignment_attention(model, inputs, targets, layer: int = -1, heads: int = 0) -> tf.Tensor:
  """The attention alignments are read from, by one teacher-forced pass.

  Args:
    model: a `Transformer`, an `Ensemble` or a list of Transformers sharing the
      vocabularies (their selected attention is averaged).
    inputs: int `[batch, input_length]`, the encoded inputs as decoding fed them
      (EOS included), 0-padded.
    targets: int `[batch, target_length]`, hypotheses, 0-padded.
    layer, heads: see `select_attention`.
  Returns:
    float32 `[batch, target_length, input_length]`: row `t` is the attention
    of the position that predicts `targets[:, t]` (its input is `targets[:, t-1]`).
  """
  features = {"inputs": tf.cast(inputs, tf.int32), "targets": tf.cast(targets, tf.int32)}
  models = _members(model)
  total = None
  for member in models:
    _, scores = member(features, training=False, return_attention_scores=True)
    weights = select_attention(scores.encdec, layer, heads)
    total = weights if total is None else total + weights
  return total / len(models)


# -- Hard alignment and Pharaoh format ----------------------------------------------

def hard_alignments(attention, source_length: int,
                    target_length: Optional[int] = None) -> List[Pair]:
  """Each target token aligned to its source token of largest weight.

  Args:
    attention: `[target_positions, source_positions]` weights of one sentence.
    source_length: real source tokens (columns `0 .. source_length - 1`); the
      columns after them (EOS, padding) are never aligned to.
    target_length: target tokens to align (rows `0 .. target_length - 1`);
      None: every row.
  Returns:
    `[(source, target)]`, one pair per target token in target order, ties to
    the lowest source index; `[]` when either side is empty.
  """
  attention = np.asarray(attention, np.float32)
  if attention.ndim != 2:
    raise ValueError(f"attention must be [target, source], got shape {attention.shape}.")
  rows, columns = attention.shape
  target_length = rows if target_length is None else target_length
  if not 0 <= source_length <= columns:
    raise ValueError(f"source_length must be in [0, {columns}], got {source_length}.")
  if not 0 <= target_length <= rows:
    raise ValueError(f"target_length must be in [0, {rows}], got {target_length}.")
  if source_length == 0 or target_length == 0:
    return []
  best = np.argmax(attention[:target_length, :source_length], axis=1)
  return [(int(s), t) for t, s in enumerate(best)]


def pharaoh(pairs) -> str:
  """`(source, target)` pairs -> `"s-t s-t ..."`, deduplicated, by target then source."""
  unique = {(int(s), int(t)) for s, t in pairs}
  if any(s < 0 or t < 0 for s, t in unique):
    raise ValueError(f"alignment indices must be >= 0, got {sorted(unique)}.")
  return " ".join(f"{s}-{t}" for s, t in sorted(unique, key=lambda p: (p[1], p[0])))


# -- Subwords to words --------------------------------------------------------------

def _token_characters(concatenated: str) -> Tuple[List[str], List[List[Tuple[int, int]]]]:
  """Tokens as `SubwordTextEncoder.decode` keeps them, and per token per character
  the `[start, end)` span of `concatenated` (the joined subword strings) it came from."""
  tokens, spans = [], []
  start = 0
  for piece in concatenated.split("_"):
    if piece:  # decode drops empty pieces
      chars, char_spans, at = [], [], 0
      for m in list(_ESCAPE.finditer(piece)) + [None]:
        literal_end = len(piece) if m is None else m.start()
        for k in range(at, literal_end):
          chars.append(piece[k])
          char_spans.append((start + k, start + k + 1))
        if m is not None:
          chars.append(unescape_token(m.group(0)))
          char_spans.append((start + m.start(), start + m.end()))
          at = m.end()
      tokens.append("".join(chars))
      spans.append(char_spans)
    start += len(piece) + 1  # and the "_" that ended it
  return tokens, spans


def _word_of_characters(text: str) -> List[int]:
  """Per character of `text`, the index of its `str.split()` word, -1 for white space."""
  out, words, inside = [], 0, False
  for char in text:
    if char.isspace():
      inside = False
      out.append(-1)
    else:
      if not inside:
        words += 1
        inside = True
      out.append(words - 1)
  return out


def subword_words(ids: Sequence[int], encoder) -> List[Tuple[int, ...]]:
  """The words each subword belongs to.

  Args:
    ids: subword ids without EOS or PAD, `[length]`.
    encoder: a `SubwordTextEncoder` (any encoder with `decode`: see below).
  Returns:
    Per id, the sorted indices into `encoder.decode(ids).split()` of the words
    its characters lie in (see the module docstring); `()` for none.

  An encoder without subword strings (`all_subtoken_strings`) is mapped by
  prefixes: id `k` belongs to the last word of `decode(ids[:k + 1])`.
  """
  ids = [int(i) for i in ids]
  if not hasattr(encoder, "all_subtoken_strings"):
    out = []
    for k in range(len(ids)):
      count = len(encoder.decode(ids[:k + 1]).split())
      out.append((count - 1,) if count else ())
    return out
  strings = encoder.decode_list(ids)
  concatenated = "".join(strings)
  tokens, spans = _token_characters(concatenated)
  text = tokenizer.decode(tokens)
  word_of = _word_of_characters(text)
  # Position in `concatenated` -> word index of the character it spells (-1: none).
  word_at = [-1] * len(concatenated)
  cursor = 0
  for token, char_spans in zip(tokens, spans):
    if not text.startswith(token, cursor):
      cursor += 1  # the space `tokenizer.decode` puts between two alphanumeric tokens
    for i, (begin, end) in enumerate(char_spans):
      for position in range(begin, end):
        word_at[position] = word_of[cursor + i]
    cursor += len(token)
  out, begin = [], 0
  for string in strings:
    found = {word_at[p] for p in range(begin, begin + len(string))} - {-1}
    out.append(tuple(sorted(found)))
    begin += len(string)
  return out


def word_alignments(pairs, source_ids: Sequence[int], target_ids: Sequence[int],
                    encoders: Dict) -> List[Pair]:
  """Subword pairs -> word pairs.

  Args:
    pairs: `(source subword, target subword)` indices into the two id lists.
    source_ids / target_ids: subword ids without EOS or PAD.
    encoders: {"inputs": encoder, "targets": encoder}.
  Returns:
    The `(source word, target word)` pairs of any aligned subwords, word indices
    into `decode(ids).split()` of each side, deduplicated, by target then source.
  """
  source_words = subword_words(source_ids, encoders["inputs"])
  target_words = subword_words(target_ids, encoders["targets"])
  found = {(ws, wt) for s, t in pairs for ws in source_words[s] for wt in target_words[t]}
  return sorted(found, key=lambda p: (p[1], p[0]))


# -- Batched, from a model ---------------------------------------------------------

def _source_row(row, index: int) -> List[int]:
  """An encoded input up to and including its first EOS."""
  row = [int(i) for i in row]
  if EOS_ID not in row:
    raise ValueError(f"input_ids_rows[{index}] must end in EOS={EOS_ID} as decoding fed "
                     f"it (padding after it is allowed), got {row}.")
  return row[:row.index(EOS_ID) + 1]


def _hypothesis_row(row) -> List[int]:
  """A hypothesis up to (not including) its first EOS, without trailing PAD."""
  row = [int(i) for i in row]
  if EOS_ID in row:
    row = row[:row.index(EOS_ID)]
  while row and row[-1] == PAD_ID:
    row.pop()
  return row


def alignments(model, encoders: Optional[Dict], input_ids_rows: Sequence[Sequence[int]],
               output_ids_rows: Sequence[Sequence[int]], layer: int = -1, heads: int = 0,
               level: str = "word") -> List[str]:
  """Pharaoh alignments of decoded hypotheses, one string per row.

  Args:
    model: a `Transformer` (float32 or mixed_bfloat16), an `Ensemble`, or a
      list of Transformers sharing the vocabularies.
    encoders: {"inputs": encoder, "targets": encoder}; only read for
      level="word" (None is fine for "subword").
    input_ids_rows: per row the encoded input as decoding fed it, ending in
      EOS (`LineDecoder._encode`), padding after it allowed.
    output_ids_rows: per row the decoded ids (what the search returned: EOS and
      padding may follow; a row without EOS is taken whole).
    layer: decoder layer whose encoder-decoder attention is read (negative from
      the end; default the last).
    heads: average the first `heads` heads of that layer; 0 (default) all.
    level: "word" (indices of whitespace-separated words of the input line and
      the output text) or "subword" (indices of subword ids without EOS/PAD).
  Returns:
    Per row `"s-t s-t ..."` ascending by target then source; "" for an empty
    hypothesis or input. All rows run as one batch, eagerly.
  """
  if level not in LEVELS:
    raise ValueError(f"level must be one of {LEVELS}, got {level!r}.")
  if len(input_ids_rows) != len(output_ids_rows):
    raise ValueError(f"need one output row per input row, got {len(input_ids_rows)} "
                     f"input rows and {len(output_ids_rows)} output rows.")
  if level == "word" and encoders is None:
    raise ValueError('level="word" needs the encoders {"inputs": ..., "targets": ...}.')
  models = _members(model)
  check_selection(models, layer, heads)  # fail before running anything
  sources = [_source_row(row, i) for i, row in enumerate(input_ids_rows)]
  hypotheses = [_hypothesis_row(row) for row in output_ids_rows]
  todo = [i for i, (s, h) in enumerate(zip(sources, hypotheses))
          if len(s) > 1 and any(t != PAD_ID for t in h)]
  out = [""] * len(sources)
  if not todo:
    return out
  pad = lambda rows: np.array([r + [PAD_ID] * (max(map(len, rows)) - len(r)) for r in rows],
                              np.int32)
  weights = alignment_attention(models, pad([sources[i] for i in todo]),
                                pad([hypotheses[i] for i in todo]), layer, heads).numpy()
  for row, i in enumerate(todo):
    kept = [t for t, token in enumerate(hypotheses[i]) if token != PAD_ID]
    source_ids = sources[i][:-1]  # without EOS
    pairs = hard_alignments(weights[row][kept], len(source_ids))
    if level == "word":
      target_ids = [hypotheses[i][t] for t in kept]
      pairs = word_alignments(pairs, source_ids, target_ids, encoders)
    out[i] = pharaoh(pairs)
  return out
