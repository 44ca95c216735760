"""T2T text encoders: `SubwordTextEncoder` (the `*.subwords` vocabularies).

Faithful to `tensor2tensor/data_generators/text_encoder.py`: same tokenizer,
escaping, greedy longest-prefix segmentation, vocabulary build and vocab file
format, so vocab files of existing T2T models load unchanged and a build from
the same token counts gives the same vocabulary.  Only the build is
reorganised for speed (`subword_builder.SubwordBuilder`); its results equal
T2T's algorithm.  One deliberate difference: `\n` never enters the alphabet,
because T2T always escapes it (so its `\n` subtoken is dead) and a `\n`
subtoken cannot be stored in the one-per-line vocab file.

Reserved ids: `<pad>` = 0, `<EOS>` = 1.  `encode` does not append EOS.
"""

import collections
import logging
import os
from collections.abc import Iterable, Mapping, Sequence

from data_gen import file_io
from data_gen import tokenizer
from data_gen.escaping import escape_token as _escape_token
from data_gen.escaping import make_alphabet as _make_alphabet
from data_gen.escaping import unescape_token as _unescape_token
from data_gen.subword_builder import SubwordBuilder

PAD = "<pad>"
EOS = "<EOS>"
RESERVED_TOKENS = [PAD, EOS]
NUM_RESERVED_TOKENS = len(RESERVED_TOKENS)
PAD_ID = RESERVED_TOKENS.index(PAD)  # 0
EOS_ID = RESERVED_TOKENS.index(EOS)  # 1

_CACHE_MAX_ENTRIES = 2 ** 20


class TextEncoder:
  """Base encoder: space-separated integers <-> ids (T2T `TextEncoder`)."""

  def __init__(self, num_reserved_ids: int = NUM_RESERVED_TOKENS):
    self._num_reserved_ids = num_reserved_ids

  @property
  def num_reserved_ids(self) -> int:
    return self._num_reserved_ids

  def encode(self, s: str) -> list[int]:
    return [int(w) + self._num_reserved_ids for w in s.split()]

  def decode(self, ids: Sequence[int]) -> str:
    return " ".join(self.decode_list(ids))

  def decode_list(self, ids: Sequence[int]) -> list[str]:
    ret = []
    for i in ids:
      if 0 <= i < self._num_reserved_ids:
        ret.append(RESERVED_TOKENS[int(i)])
      else:
        ret.append(str(i - self._num_reserved_ids))
    return ret

  @property
  def vocab_size(self) -> int:
    raise NotImplementedError()


class ByteTextEncoder(TextEncoder):
  """UTF-8 bytes shifted by the reserved ids (T2T `ByteTextEncoder`)."""

  def encode(self, s: str) -> list[int]:
    return [b + self._num_reserved_ids for b in s.encode("utf-8")]

  def decode(self, ids: Sequence[int]) -> str:
    out = []
    for i in ids:
      if 0 <= i < self._num_reserved_ids:
        out.append(RESERVED_TOKENS[int(i)].encode("utf-8"))
      else:
        out.append(bytes([i - self._num_reserved_ids]))
    return b"".join(out).decode("utf-8", "replace")

  def decode_list(self, ids: Sequence[int]) -> list[str]:
    return [RESERVED_TOKENS[int(i)] if 0 <= i < self._num_reserved_ids
            else chr(i - self._num_reserved_ids) for i in ids]

  @property
  def vocab_size(self) -> int:
    return 2 ** 8 + self._num_reserved_ids


def strip_ids(ids: Sequence[int], ids_to_strip: Iterable[int]) -> list[int]:
  """Drops trailing ids that are in `ids_to_strip` (T2T `strip_ids`)."""
  ids = list(ids)
  strip = set(ids_to_strip)
  while ids and ids[-1] in strip:
    ids.pop()
  return ids


def _check_reserved_tokens(reserved_tokens: Sequence[str] | None) -> list[str]:
  if reserved_tokens is None:
    return list(RESERVED_TOKENS)
  reserved_tokens = list(reserved_tokens)
  if reserved_tokens[:NUM_RESERVED_TOKENS] != RESERVED_TOKENS:
    raise ValueError("reserved_tokens must start with %r, got %r"
                     % (RESERVED_TOKENS, reserved_tokens))
  return reserved_tokens


class SubwordTextEncoder(TextEncoder):
  """Invertible subword encoder with T2T's vocabulary and vocab file format.

  `encode(s)`: tokenize (data_gen/tokenizer.py), escape each token and split
  it greedily into the longest subtokens of the vocabulary, from left to right.
  `decode(ids)`: concatenate subtoken strings, split at `_`, unescape, and
  detokenize.  `decode(encode(s)) == s` for every `str`.

  Construct with a vocab file (`SubwordTextEncoder("vocab.*.subwords")`) or
  build one: `build_from_generator`, `build_to_target_size`, or
  `SubwordTextEncoder().build_from_token_counts(...)`.
  """

  def __init__(self, filename: str | None = None):
    super().__init__(num_reserved_ids=NUM_RESERVED_TOKENS)
    self._alphabet = set()
    self._all_subtoken_strings = []
    self._subtoken_string_to_id = {}
    self._max_subtoken_len = 0
    self._cache = {}
    self.filename = filename
    if filename is not None:
      self._load_from_file(filename)

  # -- encoding ---------------------------------------------------------------

  def encode(self, s: str) -> list[int]:
    """Encodes `s` (str or UTF-8 bytes) to subtoken ids, without EOS."""
    if isinstance(s, bytes):
      s = s.decode("utf-8")
    return self._tokens_to_subtoken_ids(tokenizer.encode(s))

  def encode_without_tokenizing(self, token_text: str) -> list[int]:
    """Encodes `token_text` as one token (no tokenizer), without EOS."""
    if isinstance(token_text, bytes):
      token_text = token_text.decode("utf-8")
    return self._tokens_to_subtoken_ids([token_text])

  def decode(self, ids: Sequence[int], strip_extraneous: bool = False) -> str:
    """Decodes ids to text; out-of-range ids decode to nothing.

    Args:
      ids: subtoken ids, `[length]`.
      strip_extraneous: drop trailing PAD/EOS ids first.
    """
    if strip_extraneous:
      ids = strip_ids(ids, range(self._num_reserved_ids))
    return tokenizer.decode(self._subtoken_ids_to_tokens(ids))

  def decode_list(self, ids: Sequence[int]) -> list[str]:
    """The subtoken string of each id ("" when out of range)."""
    return [self._subtoken_id_to_subtoken_string(i) for i in ids]

  @property
  def vocab_size(self) -> int:
    return len(self._all_subtoken_strings)

  @property
  def all_subtoken_strings(self) -> tuple[str, ...]:
    return tuple(self._all_subtoken_strings)

  @property
  def alphabet(self) -> frozenset:
    """Characters that are not `\\<ord>;`-escaped (besides `\\n`)."""
    return frozenset(self._alphabet)

  @property
  def max_subtoken_length(self) -> int:
    return self._max_subtoken_len

  def _tokens_to_subtoken_ids(self, tokens: Iterable[str]) -> list[int]:
    if not self._subtoken_string_to_id:
      raise ValueError("This SubwordTextEncoder has no vocabulary: pass a vocab "
                       "file to the constructor or build one first")
    ret = []
    for token in tokens:
      ids = self._cache.get(token)
      if ids is None:
        ids = self._escaped_token_to_subtoken_ids(
            _escape_token(token, self._alphabet))
        if len(self._cache) >= _CACHE_MAX_ENTRIES:
          self._cache.clear()
        self._cache[token] = ids
      ret.extend(ids)
    return ret

  def _escaped_token_to_subtoken_ids(self, escaped_token: str) -> list[int]:
    ret = []
    start = 0
    token_len = len(escaped_token)
    lookup = self._subtoken_string_to_id
    while start < token_len:
      for end in range(min(token_len, start + self._max_subtoken_len),
                       start, -1):
        subtoken_id = lookup.get(escaped_token[start:end])
        if subtoken_id is not None:
          ret.append(subtoken_id)
          start = end
          break
      else:
        raise ValueError(
            "Cannot segment %r at position %d: no subtoken of the vocabulary "
            "matches; the vocabulary lacks alphabet character %r"
            % (escaped_token, start, escaped_token[start]))
    return ret

  def _subtoken_id_to_subtoken_string(self, subtoken: int) -> str:
    if 0 <= subtoken < len(self._all_subtoken_strings):
      return self._all_subtoken_strings[subtoken]
    return ""

  def _subtoken_ids_to_tokens(self, subtokens: Iterable[int]) -> list[str]:
    concatenated = "".join(
        self._subtoken_id_to_subtoken_string(s) for s in subtokens)
    ret = []
    for t in concatenated.split("_"):
      if t:
        unescaped = _unescape_token(t + "_")
        if unescaped:
          ret.append(unescaped)
    return ret

  def _init_subtokens_from_list(self, subtoken_strings: list[str]) -> None:
    self._all_subtoken_strings = list(subtoken_strings)
    self._max_subtoken_len = max([len(s) for s in subtoken_strings] + [0])
    # Later duplicates win, as in T2T's dict comprehension.
    self._subtoken_string_to_id = {
        s: i for i, s in enumerate(subtoken_strings) if s}
    self._cache = {}

  # -- vocab files ------------------------------------------------------------

  def _load_from_file(self, filename: str) -> None:
    """Reads a T2T vocab file: one (usually single-quoted) subtoken a line."""
    if not os.path.isfile(filename):
      raise ValueError("Vocab file %s not found" % filename)
    with open(filename, "rb") as f:
      lines = f.read().split(b"\n")
    if lines and not lines[-1]:
      lines.pop()
    subtokens = []
    quoted_format = None
    for lineno, raw in enumerate(lines, 1):
      subtokens.append(_parse_vocab_line(filename, lineno, raw, quoted_format))
      if quoted_format is None:
        quoted_format = raw.strip()[:1] in (b"'", b'"')
    for i, expected in enumerate(RESERVED_TOKENS):
      if i >= len(subtokens) or subtokens[i] != expected:
        raise ValueError(
            "Malformed vocab file %s, line %d: expected reserved token '%s' "
            "(T2T vocab files start with '<pad>' and '<EOS>'), got %r"
            % (filename, i + 1, expected,
               subtokens[i] if i < len(subtokens) else "end of file"))
    self._init_subtokens_from_list(subtokens)
    self._alphabet = _make_alphabet(subtokens)

  def store_to_file(self, filename: str, add_single_quotes: bool = True) -> None:
    """Writes the vocab in T2T's format, atomically (temp file + rename)."""
    lines = []
    for i, s in enumerate(self._all_subtoken_strings):
      if "\n" in s or not s or (not add_single_quotes and s != s.strip()):
        raise ValueError("Subtoken %d (%r) cannot be stored in a vocab file "
                         "(empty, contains a newline, or has surrounding "
                         "white space without quotes)" % (i, s))
      lines.append("'%s'\n" % s if add_single_quotes else s + "\n")
    # Mode 0666 & ~umask: a vocab must be readable by others (e.g. TF Serving).
    with file_io.atomic_open(filename) as f:
      f.writelines(lines)

  # -- building ---------------------------------------------------------------

  @classmethod
  def build_from_generator(cls, generator: Iterable[str],
                           target_vocab_size: int,
                           max_subtoken_length: int | None = None,
                           reserved_tokens: Sequence[str] | None = None
                           ) -> "SubwordTextEncoder":
    """Builds a vocab of about `target_vocab_size` from an iterable of text."""
    token_counts = collections.Counter()
    for item in generator:
      if isinstance(item, bytes):
        item = item.decode("utf-8")
      token_counts.update(tokenizer.encode(item))
    return cls.build_to_target_size(
        target_vocab_size, token_counts, 1, 1e3,
        max_subtoken_length=max_subtoken_length,
        reserved_tokens=reserved_tokens)

  @classmethod
  def build_to_target_size(cls, target_size: int,
                           token_counts: Mapping[str, int],
                           min_val: int, max_val: int,
                           max_subtoken_length: int | None = None,
                           reserved_tokens: Sequence[str] | None = None,
                           num_iterations: int = 4) -> "SubwordTextEncoder":
    """Bisects on `min_count` for a vocab size within 1% of `target_size`.

    Same search as T2T: try `min_count = (min_val + max_val) // 2`, accept if
    within 1%, else recurse into the half that moves towards the target and
    return whichever of the two is closer.  Precomputation is shared across
    the tries.
    """
    if min_val > max_val:
      raise ValueError("min_val (%r) must be <= max_val (%r)"
                       % (min_val, max_val))
    if target_size < 1:
      raise ValueError("target_size must be positive, got %r" % (target_size,))
    reserved_tokens = _check_reserved_tokens(reserved_tokens)
    builder = SubwordBuilder(token_counts, reserved_tokens, max_subtoken_length)

    def bisect(lo, hi):
      present_count = (hi + lo) // 2
      logging.debug("Trying min_count %d", present_count)  # the size found is what counts
      encoder = cls()
      encoder._init_from_builder(builder, present_count, num_iterations)
      size = encoder.vocab_size
      if (abs(size - target_size) * 100 < target_size or lo >= hi
          or present_count < 2):
        return encoder
      if size > target_size:
        other = bisect(present_count + 1, hi)
      else:
        other = bisect(lo, present_count - 1)
      if abs(other.vocab_size - target_size) < abs(size - target_size):
        return other
      return encoder

    return bisect(min_val, max_val)

  def build_from_token_counts(self, token_counts: Mapping[str, int],
                              min_count: int, num_iterations: int = 4,
                              reserved_tokens: Sequence[str] | None = None,
                              max_subtoken_length: int | None = None) -> None:
    """Builds the vocabulary in place from `{token: count}` (T2T algorithm).

    Each iteration segments every token with the current vocabulary, counts
    all substrings starting at subtoken boundaries (shorter than
    `max_subtoken_length` when given), keeps those counted at least
    `min_count` times from longest to shortest while subtracting an accepted
    string's count from its prefixes, adds the alphabet, and sorts by
    (count, string) descending after the reserved tokens.
    """
    reserved_tokens = _check_reserved_tokens(reserved_tokens)
    builder = SubwordBuilder(token_counts, reserved_tokens, max_subtoken_length)
    self._init_from_builder(builder, min_count, num_iterations)

  def _init_from_builder(self, builder, min_count, num_iterations) -> None:
    if num_iterations < 0:
      raise ValueError("num_iterations must be >= 0, got %r" % num_iterations)
    self._init_subtokens_from_list(builder.build(min_count, num_iterations))
    self._alphabet = set(builder.alphabet)


def _parse_vocab_line(filename: str, lineno: int, raw: bytes,
                      quoted_format: bool | None) -> str:
  try:
    s = raw.decode("utf-8").strip()
  except UnicodeDecodeError as e:
    raise ValueError("Malformed vocab file %s, line %d: not UTF-8 (%s)"
                     % (filename, lineno, e)) from None
  is_quoted = len(s) >= 2 and s[0] == s[-1] and s[0] in "'\""
  if is_quoted:
    s = s[1:-1]
  elif quoted_format or (quoted_format is None and s[:1] in ("'", '"')):
    raise ValueError(
        "Malformed vocab file %s, line %d: %r is not wrapped in quotes like "
        "the lines before it (expected e.g. 'the_')" % (filename, lineno, s))
  if not s:
    raise ValueError("Malformed vocab file %s, line %d: empty subtoken"
                     % (filename, lineno))
  return s
