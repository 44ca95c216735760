"""Tests for data_gen/graph_text_encoder.py: same ids and strings as Python."""

import os
import random

import hypothesis
from hypothesis import strategies as st
import pytest
import tensorflow as tf

from data_gen import graph_text_encoder
from data_gen import text_encoder
from data_gen import tokenizer

_SETTINGS = hypothesis.settings(max_examples=100, deadline=None)
_SPECIAL = list("_\\ \n\t0123456789;u.,'-") + [
    "\u00e4", "\u00df", "\u0301", "\u00bd", "\U0001F44D", "\U0001F3FD",
    "\u4e2d", "\u3000", "\x00"]
# Valid UTF-8 only: tf.string carries bytes, so lone surrogates cannot occur.
_TEXT = st.text(alphabet=st.one_of(st.characters(codec="utf-8"),
                                   st.sampled_from(_SPECIAL)), max_size=40)
_WORDS = ("the cat sat on mat and Haus hat nur einen Eingang der die das "
          "Katze schläft 42 2024 3.14 file_name C:\\path naïve café 👍 👍🏽 "
          "don't re-use e\u0301 x\ty").split(" ")


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  rng = random.Random(0)
  lines = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 9)))
           for _ in range(300)]
  enc = text_encoder.SubwordTextEncoder()
  enc.build_from_token_counts(tokenizer.corpus_token_counts(lines), 3)
  path = str(tmp_path_factory.mktemp("vocab") / "vocab.mixed.subwords")
  enc.store_to_file(path)
  return path


@pytest.fixture(scope="module")
def encoders(vocab_file):
  python_enc = text_encoder.SubwordTextEncoder(vocab_file)
  graph_enc = graph_text_encoder.GraphSubwordEncoder(vocab_file)
  encode = tf.function(graph_enc.encode,
                       input_signature=[tf.TensorSpec([None], tf.string)])
  decode = tf.function(
      graph_enc.decode,
      input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)])
  return python_enc, graph_enc, encode, decode


def _texts(batch):
  return [s.numpy().decode("utf-8") for s in batch]


@_SETTINGS
@hypothesis.given(st.lists(_TEXT, min_size=1, max_size=8))
def test_graph_equals_python(encoders, texts):
  python_enc, _, encode, decode = encoders
  ids = encode(tf.constant([t.encode("utf-8") for t in texts], tf.string))
  assert ids.to_list() == [python_enc.encode(t) for t in texts]
  assert _texts(decode(ids)) == texts


@_SETTINGS
@hypothesis.given(st.lists(st.lists(st.integers(-3, 200), max_size=12),
                           min_size=1, max_size=4))
def test_decode_of_arbitrary_ids_equals_python(encoders, id_lists):
  python_enc, _, _, decode = encoders
  assert python_enc.vocab_size < 200  # so out-of-range ids are covered
  got = _texts(decode(tf.ragged.constant(id_lists, dtype=tf.int64,
                                         ragged_rank=1)))
  assert got == [python_enc.decode(ids) for ids in id_lists]


def test_dense_scalar_and_cut_at_eos(encoders):
  python_enc, graph_enc, _, _ = encoders
  a, b = python_enc.encode("the cat"), python_enc.encode("Die Katze 42")
  dense = tf.constant([a + [1] + b + [0, 0], b + [1] + [0] * (len(a) + 2)])
  assert _texts(graph_enc.decode(dense, cut_at_eos=True)) == [
      "the cat", "Die Katze 42"]
  # Without cutting, EOS decodes to its string and only trailing 0s go.
  assert _texts(graph_enc.decode(dense)) == [
      python_enc.decode(a + [1] + b), python_enc.decode(b + [1])]
  assert graph_enc.decode(tf.constant(a)).numpy().decode() == "the cat"
  assert graph_enc.encode(tf.constant("the cat")).numpy().tolist() == a
  empty = graph_enc.encode(tf.constant([], tf.string))
  assert empty.shape[0] == 0


def test_hand_made_vocab(tmp_path):
  vocab = ["<pad>", "<EOS>", "the_", "cat", "ca", "_", "t", "h", "e", "c",
           "a", "s", ", _", ",", " ", "\\", "u", ";"] + list("0123456789")
  path = tmp_path / "hand.subwords"
  path.write_text("".join("'%s'\n" % s for s in vocab), encoding="utf-8")
  enc = graph_text_encoder.GraphSubwordEncoder(str(path))
  ids = {s: i for i, s in enumerate(vocab)}
  got = enc.encode(tf.constant(["the cats, the cat", "tea", "x", "c_"]))
  # Computed by hand in tests/test_text_encoder.py::test_hand_made_vocab_file.
  assert got.to_list() == [
      [ids[s] for s in ["the_", "cat", "s", "_", ", _", "the_", "cat", "_"]],
      [ids[s] for s in ["t", "e", "a", "_"]],
      [ids[s] for s in ["\\", "1", "2", "0", ";", "_"]],
      [ids[s] for s in ["c", "_", "\\", "u", "_"]]]


def test_in_tf_data(encoders):
  python_enc, graph_enc, _, _ = encoders
  texts = ["the cat sat.", "Haus_hat\\nur", "", "👍🏽  42"]
  ds = tf.data.Dataset.from_tensor_slices(texts).map(graph_enc.encode)
  assert [x.numpy().tolist() for x in ds] == [python_enc.encode(t)
                                              for t in texts]


def test_saved_model_round_trip(tmp_path, encoders, vocab_file):
  python_enc, _, _, _ = encoders
  module = tf.Module()
  module.encoder = graph_text_encoder.GraphSubwordEncoder(
      tf.saved_model.Asset(vocab_file))
  module.encode = tf.function(
      lambda s: module.encoder.encode(s).to_tensor(),
      input_signature=[tf.TensorSpec([None], tf.string)])
  module.decode = tf.function(
      lambda ids: module.encoder.decode(ids, cut_at_eos=True),
      input_signature=[tf.TensorSpec([None, None], tf.int64)])
  export_dir = str(tmp_path / "saved")
  tf.saved_model.save(module, export_dir)
  assert os.listdir(os.path.join(export_dir, "assets")) == [
      os.path.basename(vocab_file)]
  loaded = tf.saved_model.load(export_dir)
  texts = ["naïve café 👍", "the_cat C:\\path"]
  ids = loaded.encode(tf.constant(texts)).numpy().tolist()
  expected = [python_enc.encode(t) for t in texts]
  assert [row[:len(e)] for row, e in zip(ids, expected)] == expected
  assert _texts(loaded.decode(tf.constant(ids, tf.int64))) == texts


def test_bad_input(encoders):
  _, graph_enc, _, _ = encoders
  with pytest.raises(ValueError, match="vocab_filename must be"):
    graph_text_encoder.GraphSubwordEncoder(42)
  with pytest.raises(ValueError, match=r"strings must be .* got shape"):
    graph_enc.encode(tf.constant([["a"]]))
  with pytest.raises(ValueError, match=r"ids must be .* got shape"):
    graph_enc.decode(tf.zeros([1, 1, 1], tf.int64))
  with pytest.raises(tf.errors.InvalidArgumentError):
    graph_enc.encode(tf.constant([b"\xff"]))
