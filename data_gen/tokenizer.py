"""T2T's invertible word tokenizer (`tensor2tensor/data_generators/tokenizer.py`).

Text is split at every boundary between alphanumeric characters (Unicode
categories L* and N*) and all other characters.  A token that is a single
space is dropped unless it is the first or the last token; `decode` puts a
space back between two adjacent alphanumeric tokens, so
`decode(encode(text)) == text` for every string.

Example: "Dude - that's so cool." ->
["Dude", " - ", "that", "'", "s", "so", "cool", "."]
"""

import collections
import functools
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np


@functools.lru_cache(maxsize=None)
def alphanumeric_ranges() -> np.ndarray:
  """Code point ranges of T2T's alphanumeric set, `int64 [num_ranges, 2]`.

  Row `[start, end)` is a maximal run of code points whose Unicode category
  starts with "L" or "N" (per this Python's `unicodedata`), scanning
  `range(sys.maxunicode)` exactly as T2T's `_ALPHANUMERIC_CHAR_SET` does.
  The in-graph encoder classifies characters with these same ranges so both
  agree on every code point.
  """
  flags = np.zeros(sys.maxunicode + 1, dtype=np.int8)
  for i in range(sys.maxunicode):
    if unicodedata.category(chr(i))[0] in "LN":
      flags[i] = 1
  edges = np.flatnonzero(np.diff(np.concatenate([[0], flags, [0]])))
  return edges.reshape(-1, 2).astype(np.int64)


@functools.lru_cache(maxsize=None)
def _alphanumeric_set() -> frozenset:
  return frozenset(
      chr(c) for start, end in alphanumeric_ranges() for c in range(start, end))


# Cf characters that carry meaning at the start of a number (prepended
# concatenation marks); every other Cf character is invisible formatting.
_PREPENDED_MARKS = frozenset([0x600, 0x601, 0x602, 0x603, 0x604, 0x605, 0x6DD, 0x70F,
                              0x890, 0x891, 0x8E2, 0x110BD, 0x110CD])


def _is_strippable(code_point: int) -> bool:
  char = chr(code_point)
  category = unicodedata.category(char)
  return (char.isspace() or category == "Cc"
          or (category == "Cf" and code_point not in _PREPENDED_MARKS))


@functools.lru_cache(maxsize=None)
def strip_ranges() -> np.ndarray:
  """Code point ranges `int64 [num_ranges, 2]` (`[start, end)`) that `normalize_input` strips.

  White space (`str.isspace`: tab, CR, U+00A0, U+2028, U+3000, ...), control
  characters (Cc, e.g. NUL) and invisible format characters (Cf, e.g. U+200B
  zero-width space, U+FEFF byte order mark; not the prepended number marks).
  The in-graph twin (`GraphSubwordEncoder.normalize_input`) uses these ranges.
  """
  flags = np.zeros(sys.maxunicode + 2, dtype=np.int8)
  for i in range(sys.maxunicode + 1):
    if _is_strippable(i):
      flags[i] = 1
  edges = np.flatnonzero(np.diff(np.concatenate([[0], flags])))
  return edges.reshape(-1, 2).astype(np.int64)


@functools.lru_cache(maxsize=None)
def _strip_chars() -> str:
  return "".join(chr(c) for start, end in strip_ranges() for c in range(start, end))


def normalize_input(text: str) -> str:
  """THE input normalisation of decoding and serving: strip `strip_ranges()` at both ends.

  Inner characters are kept (the encoder escapes what its alphabet lacks). A line
  that normalises to "" is empty: decoders and the SavedModel output "" for it
  without running the model. T2T's decoder strips lines with `str.strip()`; this
  also strips control and invisible format characters, in Python and in-graph alike.
  """
  return text.strip(_strip_chars())


# For `str` patterns, `\w` is exactly "category L* or N*, or `_`" (asserted
# over every code point in tests/test_tokenizer.py), so runs of `[^\W_]` are
# T2T's alphanumeric runs; the regex engine finds them far faster than a
# Python loop or a character class of ~700 ranges.
_TOKEN_REGEX = re.compile(r"[^\W_]+|[\W_]+")


def encode(text: str) -> list[str]:
  """Splits `text` into T2T tokens (see module docstring).

  Args:
    text: a `str`.

  Returns:
    A list of non-empty strings, each all-alphanumeric or all-other.

  Raises:
    ValueError: if `text` is not a `str`.
  """
  if not isinstance(text, str):
    raise ValueError("tokenizer.encode expects a str, got %r of type %s"
                     % (text, type(text).__name__))
  tokens = _TOKEN_REGEX.findall(text)
  last = len(tokens) - 1
  return [t for i, t in enumerate(tokens) if t != " " or i == 0 or i == last]


def decode(tokens: Sequence[str]) -> str:
  """Inverse of `encode`: joins tokens, with a space between two alnum ones."""
  alnum = _alphanumeric_set()
  ret = []
  prev_is_alnum = False
  for token in tokens:
    is_alnum = token[0] in alnum
    if prev_is_alnum and is_alnum:
      ret.append(" ")
    ret.append(token)
    prev_is_alnum = is_alnum
  return "".join(ret)


def corpus_token_counts(lines: Iterable[str],
                        corpus_max_lines: int | None = None,
                        split_on_newlines: bool = True) -> collections.Counter:
  """Counts tokens in a corpus, like T2T's `tokenizer.corpus_token_counts`.

  Args:
    lines: an iterable of text (`str`, or UTF-8 `bytes`), e.g. an open file.
    corpus_max_lines: read at most this many items (None or 0: all).
    split_on_newlines: if True (T2T's default), each item is stripped of
      surrounding white space first, as T2T does for every line it reads.

  Returns:
    A `collections.Counter` mapping token -> number of occurrences.
  """
  if corpus_max_lines is not None and corpus_max_lines < 0:
    raise ValueError("corpus_max_lines must be >= 0 or None, got %r"
                     % (corpus_max_lines,))
  counts = collections.Counter()
  for i, line in enumerate(lines):
    if corpus_max_lines and i >= corpus_max_lines:
      break
    if isinstance(line, bytes):
      line = line.decode("utf-8")
    counts.update(encode(line.strip() if split_on_newlines else line))
  return counts
