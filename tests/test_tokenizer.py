"""Tests for data_gen/tokenizer.py (T2T's invertible word tokenizer)."""

import re
import sys
import unicodedata

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from data_gen import tokenizer

_SETTINGS = hypothesis.settings(max_examples=200, deadline=None)
_SPECIAL = list("_\\ \n\t\r0123456789;u.,'-") + [
    "\u00e4", "\u00df", "\u0301", "\u0663", "\u00bd", "\U0001F44D",
    "\U0001F3FD", "\u4e2d", "\u3000", "\u00a0", "\x00"]
_TEXT = st.text(alphabet=st.one_of(st.characters(), st.sampled_from(_SPECIAL)),
                max_size=40)


def _is_alnum(c):
  return unicodedata.category(c)[0] in "LN"


def _reference_encode(text):
  """T2T's algorithm written out: scan characters, split at class changes."""
  if not text:
    return []
  tokens, start = [], 0
  for pos in range(1, len(text)):
    if _is_alnum(text[pos]) != _is_alnum(text[pos - 1]):
      token = text[start:pos]
      if token != " " or start == 0:
        tokens.append(token)
      start = pos
  tokens.append(text[start:])
  return tokens


def test_alphanumeric_ranges_match_unicodedata_on_sample():
  ranges = tokenizer.alphanumeric_ranges()
  assert np.all(ranges[:, 0] < ranges[:, 1])
  assert np.all(ranges[1:, 0] > ranges[:-1, 1])  # maximal, disjoint runs
  starts = ranges[:, 0]
  rng = np.random.default_rng(0)
  sample = np.concatenate([np.arange(0, 0x3000),
                           rng.integers(0, sys.maxunicode, 20000)])
  for c in sample.tolist():
    i = np.searchsorted(starts, c, side="right") - 1
    in_ranges = i >= 0 and c < ranges[i, 1]
    assert in_ranges == _is_alnum(chr(c)), hex(c)


def test_word_regex_equals_alphanumeric_ranges_on_every_code_point():
  # The fast tokenizer relies on `[^\W_]` == categories L*/N*.
  everything = "".join(map(chr, range(sys.maxunicode + 1)))
  spans = [m.span() for m in re.finditer(r"[^\W_]+", everything)]
  assert np.array_equal(np.array(spans), tokenizer.alphanumeric_ranges())


@pytest.mark.parametrize("text, expected", [
    ("Dude - that's so cool.",
     ["Dude", " - ", "that", "'", "s", "so", "cool", "."]),
    ("", []),
    (" ", [" "]),
    (" a b ", [" ", "a", "b", " "]),  # first and last single spaces stay
    ("a  b", ["a", "  ", "b"]),
    ("x_y\\z", ["x", "_", "y", "\\", "z"]),  # "_" is not alphanumeric
    ("e\u0301t\u00e9", ["e", "\u0301", "t\u00e9"]),  # combining mark is Mn
    ("12\u00bd3 \u0663", ["12\u00bd3", "\u0663"]),  # No and Nd are alnum
    ("a\n\nb", ["a", "\n\n", "b"]),
])
def test_encode_hand_computed(text, expected):
  assert tokenizer.encode(text) == expected
  assert tokenizer.decode(expected) == text


@_SETTINGS
@hypothesis.given(_TEXT)
def test_encode_matches_reference_and_round_trips(text):
  tokens = tokenizer.encode(text)
  assert tokens == _reference_encode(text)
  assert all(tokens)
  assert tokenizer.decode(tokens) == text


def test_corpus_token_counts():
  lines = ["  the cat, the hat\n", b"the\xc3\xa4 end", "ignored"]
  counts = tokenizer.corpus_token_counts(lines, corpus_max_lines=2)
  # Line 1 stripped -> "the cat, the hat": the, cat, ", ", the, hat.
  assert counts == {"the": 2, "cat": 1, ", ": 1, "hat": 1,
                    "the\u00e4": 1, "end": 1}
  unstripped = tokenizer.corpus_token_counts([" a "], split_on_newlines=False)
  assert unstripped == {" ": 2, "a": 1}


def test_bad_input():
  with pytest.raises(ValueError, match="expects a str"):
    tokenizer.encode(b"bytes")
  with pytest.raises(ValueError, match="corpus_max_lines"):
    tokenizer.corpus_token_counts(["a"], corpus_max_lines=-1)
