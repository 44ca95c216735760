r"""In-graph twin of `SubwordTextEncoder`: TensorFlow + TF Text ops only.

`GraphSubwordEncoder(vocab_filename)` encodes `[batch]` strings to ragged
subtoken ids and decodes ids back to strings, giving exactly the ids and
strings of `text_encoder.SubwordTextEncoder` for the same vocab file.  It uses
no `py_function`, so it runs inside `tf.data`, `tf.function` and an exported
SavedModel.

Encode, step by step (`[batch]` strings):
1. `unicode_decode` to code points; classify each as alphanumeric with a
   `searchsorted` over the code point ranges of `tokenizer.alphanumeric_ranges`
   (the same Unicode data as the Python tokenizer, not RE2's);
2. tokens start where the class changes; single-space tokens that are neither
   first nor last are dropped;
3. escape each character (`\` -> `\\`, `_` -> `\u`, not in the alphabet
   hash table -> `\<ord>;`), join per token and append `_`;
4. greedy longest-prefix segmentation with `tensorflow_text.WordpieceTokenizer`
   (`suffix_indicator=""`) over a `StaticHashTable` subtoken -> id.
Decode reverses it: gather subtoken strings, join, split at `_`, unescape with
`regex_split` (kept delimiters) + `string_to_number` + `unicode_encode`, and
put a space between adjacent tokens that start with alphanumeric characters.

`normalize_input` is the twin of `tokenizer.normalize_input` (the one input
normalisation of decoding and serving) and `is_valid_utf8` flags bad rows, so a
server can answer them without failing the batch.  `encode` needs valid UTF-8
(else `InvalidArgumentError`).  One corner differs
from Python: ids whose `\<n>;` escape names a surrogate code point decode to
U+FFFD here, where Python returns a lone surrogate (which has no UTF-8 form).

SavedModel: the tables are built from in-memory tensors when the module is
constructed, so they are saved with it.  Pass the vocab path as a string or as
a `tf.saved_model.Asset`; either way the module keeps it as the tracked asset
`vocab_file`, so `tf.saved_model.save` copies the vocab file into the
SavedModel's `assets/` for clients that want the Python encoder.
"""

import os

import tensorflow as tf
import tensorflow_text as tf_text

from data_gen import text_encoder
from data_gen import tokenizer

_ESCAPE_PATTERN = r"\\u|\\\\|\\[0-9]+;"
_MAX_CODE_POINT = 0x10FFFF
_UNDEFINED_CHAR = 0x3013  # T2T's replacement for an impossible code point.


class GraphSubwordEncoder(tf.Module):
  """`SubwordTextEncoder` as TensorFlow ops (see the module docstring).

  Args:
    vocab_filename: path of a T2T `*.subwords` vocab file, as `str`,
      `os.PathLike` or `tf.saved_model.Asset`.
    name: module name.
  """

  def __init__(self, vocab_filename, name: str | None = None):
    super().__init__(name=name)
    if isinstance(vocab_filename, tf.saved_model.Asset):
      self.vocab_file = vocab_filename
      path = vocab_filename.asset_path.numpy().decode("utf-8")
    elif isinstance(vocab_filename, (str, os.PathLike)):
      path = os.fspath(vocab_filename)
      self.vocab_file = tf.saved_model.Asset(path)
    else:
      raise ValueError(
          "vocab_filename must be a str, os.PathLike or tf.saved_model.Asset, "
          "got %r of type %s" % (vocab_filename, type(vocab_filename).__name__))
    encoder = text_encoder.SubwordTextEncoder(path)
    self._vocab_size = encoder.vocab_size
    # Later duplicates win, as in the Python encoder's dict.
    ids_by_string = {s: i for i, s in enumerate(encoder.all_subtoken_strings)
                     if s}
    self._subtoken_table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(ids_by_string), tf.string),
            tf.constant(list(ids_by_string.values()), tf.int64)),
        default_value=-1)
    alphabet = sorted(ord(c) for c in encoder.alphabet)
    self._alphabet_table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(alphabet, tf.int64),
            tf.ones([len(alphabet)], tf.int64)),
        default_value=0)
    self._subtoken_strings = tf.constant(encoder.all_subtoken_strings,
                                         tf.string)
    ranges = tokenizer.alphanumeric_ranges()
    self._alnum_starts = tf.constant(ranges[:, 0], tf.int64)
    self._alnum_ends = tf.constant(ranges[:, 1], tf.int64)
    strip = tokenizer.strip_ranges()
    self._strip_starts = tf.constant(strip[:, 0], tf.int64)
    self._strip_ends = tf.constant(strip[:, 1], tf.int64)
    self._wordpiece = tf_text.WordpieceTokenizer(
        self._subtoken_table, suffix_indicator="",
        max_bytes_per_word=2 ** 31 - 1,
        max_chars_per_token=max(1, encoder.max_subtoken_length),
        token_out_type=tf.int64, unknown_token=None)

  @property
  def vocab_size(self) -> int:
    return self._vocab_size

  def encode(self, strings) -> tf.RaggedTensor:
    """Encodes UTF-8 text to subtoken ids (no EOS appended).

    Args:
      strings: `tf.string` `[batch]` (or a scalar), valid UTF-8.

    Returns:
      `tf.RaggedTensor` int64 `[batch, (num_ids)]`; for a scalar input, a
      `[num_ids]` int64 tensor.
    """
    strings = tf.convert_to_tensor(strings, tf.string)
    if strings.shape.rank == 0:
      return self.encode(strings[tf.newaxis])[0]
    if strings.shape.rank != 1:
      raise ValueError("strings must be a [batch] or scalar tf.string tensor, "
                       "got shape %s" % strings.shape)
    code_points = tf.strings.unicode_decode(strings, "UTF-8", errors="strict")
    tokens, tokens_per_row = self._escaped_tokens(code_points)
    pieces = self._wordpiece.tokenize(tokens)  # [num_tokens, (pieces)]
    return tf.RaggedTensor.from_row_lengths(
        pieces, tokens_per_row, validate=False).merge_dims(1, 2)

  def normalize_input(self, strings: tf.Tensor) -> tf.Tensor:
    """`tokenizer.normalize_input` in-graph (`strip_input`).

    Args:
      strings: `tf.string` `[batch]`, valid UTF-8.

    Returns:
      `tf.string` `[batch]`.
    """
    return strip_input(strings, self._strip_starts, self._strip_ends)

  def decode(self, ids, cut_at_eos: bool = False) -> tf.Tensor:
    """Decodes subtoken ids to text, as `SubwordTextEncoder.decode`.

    Args:
      ids: int `tf.RaggedTensor` `[batch, (length)]`, or a dense int tensor
        `[batch, length]` whose trailing 0s (PAD) are dropped, or `[length]`.
      cut_at_eos: drop the first EOS (id 1) and everything after it.

    Returns:
      `tf.string` `[batch]` (a scalar for `[length]` input).
    """
    if not isinstance(ids, tf.RaggedTensor):
      ids = tf.convert_to_tensor(ids)
      if ids.shape.rank == 1:
        return self.decode(ids[tf.newaxis], cut_at_eos)[0]
      if ids.shape.rank != 2:
        raise ValueError("ids must be [batch, length] or [length], got shape "
                         "%s" % ids.shape)
      ids = tf.RaggedTensor.from_tensor(ids, padding=tf.cast(text_encoder.PAD_ID, ids.dtype))
    ids = tf.cast(ids, tf.int64)
    if cut_at_eos:
      ids = tf.ragged.boolean_mask(ids, before_first(ids, text_encoder.EOS_ID))
    flat = ids.flat_values
    valid = tf.logical_and(flat >= 0, flat < self._vocab_size)
    strings = tf.where(
        valid, tf.gather(self._subtoken_strings, tf.where(valid, flat, 0)), "")
    joined = tf.strings.reduce_join(ids.with_flat_values(strings), axis=1)
    pieces = tf.strings.split(joined, sep="_")
    pieces = tf.ragged.boolean_mask(pieces, tf.strings.length(pieces) > 0)
    tokens = pieces.with_flat_values(_unescape(pieces.flat_values))
    return _detokenize(tokens, self._is_alnum)

  def _is_alnum(self, code_points: tf.Tensor) -> tf.Tensor:
    """bool, same shape as int64 `code_points` `[n]`."""
    i = tf.searchsorted(self._alnum_starts, code_points, side="right") - 1
    end = tf.gather(self._alnum_ends, tf.maximum(i, 0))
    return tf.logical_and(i >= 0, code_points < end)

  def _escaped_tokens(self, code_points: tf.RaggedTensor):
    """T2T tokens of each row, escaped.

    Args:
      code_points: int32 `tf.RaggedTensor` `[batch, (chars)]`.

    Returns:
      (`tf.string` `[num_tokens]` escaped tokens ending in `_`,
       int64 `[batch]` number of tokens of each row).
    """
    cp = tf.cast(code_points.flat_values, tf.int64)
    row_ids = code_points.value_rowids()
    pos = (tf.range(tf.size(cp, out_type=tf.int64))
           - tf.gather(code_points.row_starts(), row_ids))
    row_len = tf.gather(code_points.row_lengths(), row_ids)
    alnum = self._is_alnum(cp)
    prev_alnum = tf.concat([[False], alnum[:-1]], axis=0)
    is_start = tf.logical_or(pos == 0, tf.not_equal(alnum, prev_alnum))
    starts = tf.where(is_start)[:, 0]
    token_of_char = tf.cumsum(tf.cast(is_start, tf.int64)) - 1
    token_len = tf.concat(
        [starts[1:], tf.size(cp, out_type=tf.int64)[tf.newaxis]], 0) - starts
    token_pos = tf.gather(pos, starts)
    is_last = tf.equal(token_pos + token_len, tf.gather(row_len, starts))
    is_space = tf.logical_and(token_len == 1, tf.gather(cp, starts) == 32)
    # T2T drops a " " token unless it is the first or the last token.
    keep_token = tf.logical_not(tf.logical_and(
        is_space, tf.logical_and(token_pos > 0, tf.logical_not(is_last))))
    keep_char = tf.gather(keep_token, token_of_char)
    escaped = self._escape_chars(tf.boolean_mask(cp, keep_char))
    tokens = tf.strings.reduce_join(
        tf.RaggedTensor.from_row_lengths(
            escaped, tf.boolean_mask(token_len, keep_token), validate=False),
        axis=1)
    tokens_per_row = tf.math.unsorted_segment_sum(
        tf.cast(keep_token, tf.int64), tf.gather(row_ids, starts),
        code_points.nrows())
    return tf.strings.join([tokens, "_"]), tokens_per_row

  def _escape_chars(self, cp: tf.Tensor) -> tf.Tensor:
    """Escaped form of each int64 code point `[n]` -> `tf.string` `[n]`."""
    char = tf.strings.unicode_encode(tf.cast(cp, tf.int32)[:, tf.newaxis],
                                     "UTF-8")
    in_alphabet = tf.logical_and(self._alphabet_table.lookup(cp) > 0, cp != 10)
    numeric = tf.strings.join(["\\", tf.strings.as_string(cp), ";"])
    return tf.where(cp == ord("\\"), "\\\\",
                    tf.where(cp == ord("_"), "\\u",
                             tf.where(in_alphabet, char, numeric)))


def is_valid_utf8(strings: tf.Tensor) -> tf.Tensor:
  """bool, same shape as `tf.string` `strings`: True where the bytes are valid UTF-8
  (as Python's `bytes.decode("utf-8")` accepts: no overlongs, no surrogates)."""
  fixed = tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace",
                                       replacement_char=0xFFFD)
  return tf.equal(fixed, strings)


def strip_input(strings: tf.Tensor, strip_starts: tf.Tensor, strip_ends: tf.Tensor) -> tf.Tensor:
  """`tokenizer.normalize_input` in-graph: strips white space, control and format
  characters (the int64 `[start, end)` code point ranges `tokenizer.strip_ranges()`,
  as `strip_starts`, `strip_ends`) at both ends of each row of `tf.string` `[batch]`
  valid UTF-8 `strings`; returns `tf.string` `[batch]`."""
  code_points = tf.strings.unicode_decode(strings, "UTF-8", errors="strict")
  cp = tf.cast(code_points.flat_values, tf.int64)
  i = tf.searchsorted(strip_starts, cp, side="right") - 1
  strip = tf.logical_and(i >= 0, cp < tf.gather(strip_ends, tf.maximum(i, 0)))
  rows = code_points.value_rowids()
  pos = tf.range(tf.size(cp, out_type=tf.int64)) - tf.gather(code_points.row_starts(), rows)
  n = code_points.nrows()
  big = tf.int64.max
  first = tf.math.unsorted_segment_min(tf.where(strip, big, pos), rows, n)
  last = tf.math.unsorted_segment_max(tf.where(strip, tf.constant(-1, tf.int64), pos), rows, n)
  keep = tf.logical_and(pos >= tf.gather(first, rows), pos <= tf.gather(last, rows))
  kept = tf.ragged.boolean_mask(code_points, code_points.with_flat_values(keep))
  return tf.strings.unicode_encode(kept, "UTF-8")


def before_first(ids: tf.RaggedTensor, value: int) -> tf.RaggedTensor:
  """bool ragged, True before the first `value` of each row."""
  hit = tf.cast(tf.equal(ids.flat_values, value), tf.int64)
  inclusive = tf.cumsum(hit)
  exclusive = tf.concat([[0], inclusive], axis=0)
  base = tf.gather(exclusive, tf.gather(ids.row_starts(), ids.value_rowids()))
  return ids.with_flat_values(tf.equal(inclusive - base, 0))


def _unescape(escaped: tf.Tensor) -> tf.Tensor:
  """T2T `_unescape_token` on `tf.string` `[n]` (without the final `_`)."""
  parts = tf_text.regex_split(escaped, _ESCAPE_PATTERN, _ESCAPE_PATTERN)
  p = parts.flat_values
  is_num = tf.strings.regex_full_match(p, r"\\[0-9]+;")
  digits = tf.where(is_num, tf.strings.regex_replace(p, r"^\\0*([0-9]+);$",
                                                     r"\1"), "0")
  # More than 7 significant digits is beyond U+10FFFF (and beyond int64
  # for long ones), so never parse those.
  short = tf.strings.length(digits) <= 7
  value = tf.strings.to_number(tf.where(short, digits, "0"), tf.int64)
  value = tf.where(tf.logical_and(short, value <= _MAX_CODE_POINT), value,
                   _UNDEFINED_CHAR)
  char = tf.strings.unicode_encode(tf.cast(value, tf.int32)[:, tf.newaxis],
                                   "UTF-8", errors="replace")
  mapped = tf.where(tf.equal(p, "\\u"), "_",
                    tf.where(tf.equal(p, "\\\\"), "\\",
                             tf.where(is_num, char, p)))
  return tf.strings.reduce_join(parts.with_flat_values(mapped), axis=1)


def _detokenize(tokens: tf.RaggedTensor, is_alnum) -> tf.Tensor:
  """`tokenizer.decode` per row of `tf.string` `[batch, (tokens)]`."""
  flat = tokens.flat_values
  first = tf.strings.unicode_decode(
      tf.strings.substr(flat, 0, 1, unit="UTF8_CHAR"), "UTF-8",
      errors="replace")
  alnum = is_alnum(tf.cast(first.flat_values, tf.int64))
  pos = (tf.range(tf.size(flat, out_type=tf.int64))
         - tf.gather(tokens.row_starts(), tokens.value_rowids()))
  prev_alnum = tf.concat([[False], alnum[:-1]], axis=0)
  space = tf.logical_and(pos > 0, tf.logical_and(alnum, prev_alnum))
  spaced = tf.where(space, tf.strings.join([" ", flat]), flat)
  return tf.strings.reduce_join(tokens.with_flat_values(spaced), axis=1)
