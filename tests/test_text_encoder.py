"""Tests for data_gen/text_encoder.py (T2T's SubwordTextEncoder)."""

import collections
import os
import random

import hypothesis
from hypothesis import strategies as st
import pytest

from data_gen import text_encoder
from data_gen import tokenizer

SubwordTextEncoder = text_encoder.SubwordTextEncoder

_SETTINGS = hypothesis.settings(max_examples=200, deadline=None)
_SPECIAL = list("_\\ \n\t0123456789;u.,'-") + [
    "\u00e4", "\u00df", "\u0301", "\u00bd", "\U0001F44D", "\U0001F3FD",
    "\u4e2d", "\x00"]
_TEXT = st.text(alphabet=st.one_of(st.characters(), st.sampled_from(_SPECIAL)),
                max_size=40)

_WORDS = ("the cat sat on mat and Haus hat nur einen Eingang der die das "
          "Katze schläft 42 2024 3.14 file_name snake_case C:\\path a\\b "
          "naïve café 👍 👍🏽 don't re-use e\u0301 x\ty").split(" ")


def _corpus(num_lines, seed):
  rng = random.Random(seed)
  return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 9)))
          + rng.choice(["", ".", "!", " ?", "\n"]) for _ in range(num_lines)]


@pytest.fixture(scope="module")
def token_counts():
  return tokenizer.corpus_token_counts(_corpus(300, seed=1),
                                       split_on_newlines=False)


@pytest.fixture(scope="module")
def encoder(token_counts):
  enc = SubwordTextEncoder()
  enc.build_from_token_counts(token_counts, min_count=3)
  return enc


# -- a straightforward reference of T2T's build, written from its description -


def _reference_segment(escaped, vocab, max_len):
  out, start = [], 0
  while start < len(escaped):
    for end in range(min(len(escaped), start + max_len), start, -1):
      if escaped[start:end] in vocab:
        out.append(escaped[start:end])
        start = end
        break
    else:
      raise AssertionError("cannot segment %r" % escaped)
  return out


def _reference_build(token_counts, min_count, num_iterations=4,
                     max_subtoken_length=None):
  reserved = ["<pad>", "<EOS>"]
  alphabet = {c for t in list(token_counts) + reserved for c in t}
  alphabet |= set("\\_u;0123456789")
  alphabet.discard("\n")  # Documented deviation: "\n" is always escaped.
  vocab, max_len = set(alphabet), 1
  for _ in range(num_iterations):
    counts = collections.defaultdict(int)
    for token, count in token_counts.items():
      escaped = text_encoder._escape_token(token, alphabet)
      start = 0
      for sub in _reference_segment(escaped, vocab, max_len):
        stop = len(escaped) + 1
        if max_subtoken_length is not None:
          stop = min(stop, start + max_subtoken_length)
        for end in range(start + 1, stop):
          counts[escaped[start:end]] += count
        start += len(sub)
    by_length = collections.defaultdict(list)
    for s, c in counts.items():
      if c >= min_count:
        by_length[len(s)].append(s)
    chosen = []
    for length in sorted(by_length, reverse=True):
      for s in by_length[length]:
        c = counts[s]
        if c >= min_count:
          if s not in alphabet:
            chosen.append((c, s))
          for prefix_len in range(1, length):
            counts[s[:prefix_len]] -= c
    chosen += [(counts.get(a, 0), a) for a in alphabet]
    chosen.sort(reverse=True)
    subtokens = reserved + [s for _, s in chosen]
    vocab, max_len = set(subtokens), max(len(s) for s in subtokens)
  return subtokens


def _random_word_counts(seed):
  """Zipf-like counts of random words over a small alphabet."""
  rng = random.Random(seed)
  letters = "abcde\u00e4\u00df_\\1 "
  words = {"".join(rng.choice(letters) for _ in range(rng.randint(1, 12)))
           for _ in range(400)}
  return {w: max(1, int(200 / (rank + 1)))
          for rank, w in enumerate(sorted(words))}


@pytest.mark.parametrize("min_count, max_subtoken_length, corpus", [
    (2, None, "sentences"), (5, None, "sentences"), (3, 4, "sentences"),
    (1, 200, "sentences"), (2, None, "random"), (4, 6, "random")])
def test_fast_build_equals_reference(token_counts, min_count,
                                     max_subtoken_length, corpus):
  if corpus == "random":
    token_counts = _random_word_counts(seed=3)
  enc = SubwordTextEncoder()
  enc.build_from_token_counts(token_counts, min_count,
                              max_subtoken_length=max_subtoken_length)
  expected = _reference_build(token_counts, min_count,
                              max_subtoken_length=max_subtoken_length)
  assert list(enc.all_subtoken_strings) == expected
  assert enc.all_subtoken_strings[:2] == ("<pad>", "<EOS>")


def test_build_to_target_size(token_counts):
  sizes = {}
  for k in range(1, 31):
    enc = SubwordTextEncoder()
    enc.build_from_token_counts(token_counts, k)
    sizes[k] = enc.vocab_size
  assert sizes[1] > sizes[30]
  # Reachable target: lands within 1%.
  target = sizes[4]
  enc = SubwordTextEncoder.build_to_target_size(target, token_counts, 1, 30)
  assert abs(enc.vocab_size - target) * 100 < target
  # Unreachable targets: the closest size (min_count 1, resp. 30) comes back.
  big = SubwordTextEncoder.build_to_target_size(10 * sizes[1], token_counts,
                                                1, 30)
  assert big.vocab_size == max(sizes.values())
  small = SubwordTextEncoder.build_to_target_size(1, token_counts, 1, 30)
  assert small.vocab_size == min(sizes.values())


def test_build_from_generator_counts_tokens_like_the_tokenizer():
  lines = _corpus(100, seed=2)
  from_gen = SubwordTextEncoder.build_from_generator(lines, 150)
  counts = collections.Counter(t for l in lines for t in tokenizer.encode(l))
  direct = SubwordTextEncoder.build_to_target_size(150, counts, 1, 1e3)
  assert from_gen.all_subtoken_strings == direct.all_subtoken_strings


# -- escaping ----------------------------------------------------------------


def test_escape_and_unescape_hand_computed():
  alphabet = set("abc") | set("\\_u;0123456789")
  # "\" -> "\\", "_" -> "\u", x (not in alphabet) -> "\120;", "\n" -> "\10;".
  assert (text_encoder._escape_token("a_b\\cx\n", alphabet)
          == "a\\ub\\\\c\\120;\\10;_")
  assert text_encoder._unescape_token("a\\ub\\\\c\\120;\\10;_") == "a_b\\cx\n"
  assert text_encoder._unescape_token("\\\\u_") == "\\u"  # left to right
  assert text_encoder._unescape_token("\\1114112;") == "\u3013"  # > U+10FFFF
  assert text_encoder._unescape_token("\\12") == "\\12"  # no ";": literal


# -- encode / decode ---------------------------------------------------------


@_SETTINGS
@hypothesis.given(_TEXT)
def test_round_trip_is_exact(encoder, text):
  ids = encoder.encode(text)
  assert all(0 <= i < encoder.vocab_size for i in ids)
  assert text_encoder.EOS_ID not in ids and text_encoder.PAD_ID not in ids
  assert encoder.decode(ids) == text
  # Lone surrogates (possible in a str) have no UTF-8 form.
  utf8 = text.encode("utf-8", "surrogatepass")
  if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
    assert encoder.encode(utf8) == ids


def test_decode_details(encoder):
  ids = encoder.encode("the cat")
  assert encoder.decode(ids + [1, 0, 0], strip_extraneous=True) == "the cat"
  assert encoder.decode([-1, encoder.vocab_size] + ids) == "the cat"
  assert "".join(encoder.decode_list(ids)) == "the_cat_"
  assert encoder.decode_list([-1]) == [""]


def test_encode_without_tokenizing(encoder):
  ids = encoder.encode_without_tokenizing("the cat")  # one token, with space
  assert encoder.decode_list(ids)[-1].endswith("_")
  assert "".join(encoder.decode_list(ids)).count("_") == 1
  assert encoder.decode(ids) == "the cat"


# -- vocab files -------------------------------------------------------------


_HAND_VOCAB = ["<pad>", "<EOS>", "the_", "cat", "ca", "_", "t", "h", "e",
               "c", "a", "s", ", _", ",", " ", "\\", "u", ";"] + list(
                   "0123456789")


def _write(path, text):
  with open(path, "w", encoding="utf-8", newline="\n") as f:
    f.write(text)
  return str(path)


def test_hand_made_vocab_file(tmp_path):
  path = _write(tmp_path / "hand.subwords",
                "".join("'%s'\n" % s for s in _HAND_VOCAB))
  enc = SubwordTextEncoder(path)
  ids = {s: i for i, s in enumerate(_HAND_VOCAB)}
  assert enc.vocab_size == len(_HAND_VOCAB)
  # "the cats, the cat" -> tokens the|cats|, |the|cat -> escaped
  # "the_" -> [the_]; "cats_" -> [cat, s, _] (no "cats", "s_");
  # ", _" -> [, _]; "the_" -> [the_]; "cat_" -> [cat, _].
  assert enc.encode("the cats, the cat") == [
      ids[s] for s in ["the_", "cat", "s", "_", ", _", "the_", "cat", "_"]]
  # "tea_": no "tea"/"te" -> t, e, then no "a_" -> a, _.
  assert enc.encode("tea") == [ids[s] for s in ["t", "e", "a", "_"]]
  # "x" is not in the alphabet -> "\120;_".
  assert enc.encode("x") == [ids[s] for s in ["\\", "1", "2", "0", ";", "_"]]
  # "c_" -> tokens "c", "_" -> "c_" -> [c, _]; "\u_" -> [\, u, _].
  assert enc.encode("c_") == [ids[s] for s in ["c", "_", "\\", "u", "_"]]
  assert enc.decode([ids["the_"], ids["cat"], ids["_"]]) == "the cat"


def test_store_and_load_round_trip(tmp_path, encoder):
  path = str(tmp_path / "vocab.test.subwords")
  encoder.store_to_file(path)
  with open(path, encoding="utf-8", newline="\n") as f:
    lines = f.read().split("\n")
  assert lines[:2] == ["'<pad>'", "'<EOS>'"] and lines[-1] == ""
  assert len(lines) - 1 == encoder.vocab_size
  assert os.listdir(tmp_path) == ["vocab.test.subwords"]  # no temp left
  loaded = SubwordTextEncoder(path)
  assert loaded.all_subtoken_strings == encoder.all_subtoken_strings
  assert loaded.alphabet == encoder.alphabet
  text = "Die Katze 👍🏽 schläft_auf\\dem C:\\path\n\nnaïve 3.14!"
  assert loaded.encode(text) == encoder.encode(text)
  # Unquoted format: refused when a subtoken has outer spaces, else loads.
  plain = str(tmp_path / "plain.subwords")
  with pytest.raises(ValueError, match="surrounding white space"):
    encoder.store_to_file(plain, add_single_quotes=False)
  hand = SubwordTextEncoder(_write(tmp_path / "hand.subwords", "".join(
      "'%s'\n" % s for s in _HAND_VOCAB if s.strip())))
  hand.store_to_file(plain, add_single_quotes=False)
  assert SubwordTextEncoder(plain).all_subtoken_strings == (
      hand.all_subtoken_strings)


def test_failed_store_leaves_old_file(tmp_path, encoder):
  path = str(tmp_path / "v.subwords")
  encoder.store_to_file(path)
  before = open(path, "rb").read()
  bad = SubwordTextEncoder(path)
  bad._init_subtokens_from_list(list(bad.all_subtoken_strings) + ["a\nb"])
  with pytest.raises(ValueError, match="cannot be stored"):
    bad.store_to_file(path)
  assert open(path, "rb").read() == before
  assert os.listdir(tmp_path) == ["v.subwords"]


@pytest.mark.parametrize("content, message", [
    ("'<pad>'\n'<EOS>'\n'ab\n", r"line 3: .* is not wrapped in quotes"),
    ("'<pad>'\n'<EOS>'\n''\n", r"line 3: empty subtoken"),
    ("'<EOS>'\n'<pad>'\n", r"line 1: expected reserved token '<pad>'"),
    ("'<pad>'\n", r"line 2: expected reserved token '<EOS>'"),
])
def test_malformed_vocab_file(tmp_path, content, message):
  path = _write(tmp_path / "bad.subwords", content)
  with pytest.raises(ValueError, match=r"bad\.subwords.*" + message):
    SubwordTextEncoder(path)


def test_vocab_file_not_utf8_or_missing(tmp_path):
  path = tmp_path / "bin.subwords"
  path.write_bytes(b"'<pad>'\n'<EOS>'\n'\xff_'\n")
  with pytest.raises(ValueError, match=r"bin\.subwords, line 3: not UTF-8"):
    SubwordTextEncoder(str(path))
  with pytest.raises(ValueError, match="not found"):
    SubwordTextEncoder(str(tmp_path / "missing.subwords"))


def test_bad_build_arguments(token_counts):
  with pytest.raises(ValueError, match="reserved_tokens must start with"):
    SubwordTextEncoder().build_from_token_counts(
        token_counts, 2, reserved_tokens=["<EOS>", "<pad>"])
  with pytest.raises(ValueError, match=r"min_val \(5\) must be <= max_val"):
    SubwordTextEncoder.build_to_target_size(100, token_counts, 5, 1)
  with pytest.raises(ValueError, match="target_size must be positive"):
    SubwordTextEncoder.build_to_target_size(0, token_counts, 1, 5)
  with pytest.raises(ValueError, match="max_subtoken_length must be >= 1"):
    SubwordTextEncoder().build_from_token_counts(token_counts, 2,
                                                 max_subtoken_length=0)


def test_extra_reserved_tokens_come_first(token_counts):
  enc = SubwordTextEncoder()
  enc.build_from_token_counts(token_counts, 3,
                              reserved_tokens=["<pad>", "<EOS>", "<mask>"])
  assert enc.all_subtoken_strings[:3] == ("<pad>", "<EOS>", "<mask>")
  assert enc.decode(enc.encode("the cat")) == "the cat"


def test_byte_text_encoder():
  enc = text_encoder.ByteTextEncoder()
  assert enc.encode("a\u00e4") == [97 + 2, 0xC3 + 2, 0xA4 + 2]
  assert enc.decode(enc.encode("a\u00e4")) == "a\u00e4"
  assert enc.vocab_size == 258
