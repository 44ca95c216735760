"""Alignments from hand-built models whose cross-attention is known, and the word mapping.

The models (tests/support/alignment_models.py) are hand-set Transformers: one whose
target position i attends most to source position i, and token models whose layers
and heads each attend by a known permutation of the tokens. The expectations are
hand-computed from those constructions, or recomputed in NumPy from the weights set
there.
"""

import math
import re

import numpy as np
import pytest
import tensorflow as tf

from data_gen import text_encoder, tokenizer
from data_gen.text_encoder import EOS_ID
from t2t_keras.decoding import alignments as al
from t2t_keras.hparams import create_hparams
from t2t_keras.model import Transformer
from tests.support.alignment_models import (COMMON, HEADS_SPEC, IDENTITY, INPUTS, OUTPUTS, SHARP,
                                            SIGMA_A, SIGMA_B, WANT, D, numpy_position_attention,
                                            numpy_token_attention, position_model, token_model)

# -- The position model ------------------------------------------------------------

@pytest.fixture(scope="module")
def positions():
  return position_model()


def test_position_attention_is_the_numpy_recomputation_and_peaks_on_the_diagonal(positions):
  inputs = np.array([[3, 4, 5, 6, 7, EOS_ID], [3, 4, EOS_ID, 0, 0, 0]])
  targets = np.array([[9, 9, 9, 9], [9, 9, 9, 9]])
  got = al.alignment_attention(positions, inputs, targets).numpy()
  assert got.shape == (2, 4, 6) and got.dtype == np.float32
  for row in range(2):
    want = numpy_position_attention(inputs[row], 4)
    np.testing.assert_allclose(got[row], want, rtol=1e-4, atol=1e-6)
    for t in range(4):  # every unpadded source position, EOS included
      if inputs[row, t]:
        assert want[t].argmax() == t and want[t, t] > 0.5, (row, t, want[t])


def test_position_alignments_source_longer_and_shorter(positions):
  long_source, short_source = [3, 4, 5, 6, 7, 8, EOS_ID], [3, 4, EOS_ID]
  got = al.alignments(positions, None, [long_source, short_source],
                      [[5, 5, 5, EOS_ID], [5, 5, 5, 5, 5]], level="subword")
  assert got[0] == "0-0 1-1 2-2"
  # Target 2 attends most to the source EOS (position 2), which is never aligned to:
  # it and the targets after it go to the real source token of largest weight.
  want = numpy_position_attention(short_source, 5)
  assert want[2].argmax() == 2
  rest = " ".join(f"{want[t, :2].argmax()}-{t}" for t in range(2, 5))
  assert got[1] == "0-0 1-1 " + rest


def test_empty_rows_trailing_padding_and_a_pad_inside_the_hypothesis(positions):
  source = [3, 4, 5, 6, EOS_ID]
  got = al.alignments(
      positions, None,
      [source, source, [EOS_ID, 0], source + [0, 0], source, source],
      [[EOS_ID, 0, 0], [], [7, 8], [7, 8, EOS_ID, 0, 9], [7, 0, 8], [7, 8, 9, 0, 0]],
      level="subword")
  # A PAD inside the hypothesis is fed (so position 2 keeps its input) but gets no pair,
  # and the target after it is target 1. A row without EOS is taken whole.
  assert got == ["", "", "", "0-0 1-1", "0-0 2-1", "0-0 1-1 2-2"]


def test_mixed_bfloat16_position_model_aligns_alike():
  model = position_model(policy="mixed_bfloat16")
  got = al.alignment_attention(model, np.array([[3, 4, 5, 6, EOS_ID]]), np.array([[9] * 4]))
  want = numpy_position_attention([3, 4, 5, 6, EOS_ID], 4)
  # bfloat16 keeps 8 significant bits; over the few ops here weights move by a few %.
  np.testing.assert_allclose(got.numpy()[0], want, atol=0.03)
  assert al.alignments(model, None, [[3, 4, 5, 6, 7, EOS_ID]], [[9, 9, 9]],
                       level="subword") == ["0-0 1-1 2-2"]


def test_cached_decoding_attends_as_the_teacher_forced_pass(monkeypatch):
  """What the alignment reads is what cached decoding attended with at each step, and a
  row does not depend on the tokens after it (so EOS need not be fed)."""
  tf.keras.utils.set_random_seed(5)
  model = Transformer(create_hparams("transformer_tiny", f"hidden_size={D},{COMMON},"
                                     "num_heads=4,num_hidden_layers=2"), 30)
  model.build()
  inputs = np.array([[5, 9, 12, 7, EOS_ID], [4, 8, EOS_ID, 0, 0]])
  hypotheses = np.array([[11, 3, 17, 6], [20, 2, 9, 14]])
  want = al.alignment_attention(model, inputs, hypotheses).numpy()
  np.testing.assert_allclose(al.alignment_attention(model, inputs, hypotheses[:, :2]).numpy(),
                             want[:, :2], rtol=1e-5, atol=1e-7)
  attention = model.decoder.layers_[-1].encdec_attention
  original, seen = attention._attention_weights, []

  def record(*args, **kwargs):
    weights = original(*args, **kwargs)
    seen.append(tf.reduce_mean(tf.cast(weights, tf.float32), axis=1).numpy()[:, 0])
    return weights

  encoder_output, bias = model.encode(tf.constant(inputs, tf.int32), training=False)
  state = model.init_decoding_state(encoder_output, bias, hypotheses.shape[1])
  monkeypatch.setattr(attention, "_attention_weights", record)
  previous = np.zeros(2, np.int32)  # step 0 reads the zero vector, as shift right
  for i in range(hypotheses.shape[1]):
    _, state = model.decode_step(tf.constant(previous), tf.constant(i, tf.int32), state)
    previous = hypotheses[:, i].astype(np.int32)
  assert len(seen) == hypotheses.shape[1]
  np.testing.assert_allclose(np.stack(seen, axis=1), want, rtol=1e-4, atol=1e-6)
  assert np.abs(want[:, 1:] - want[:, :1]).max() > 1e-3  # the rows differ by step


# -- The token models: layers, heads, ensembles ---------------------------------------

@pytest.fixture(scope="module")
def tokens():
  return token_model(HEADS_SPEC)


@pytest.mark.parametrize("layer, heads, want", [
    (-1, 0, "sigma_b"),  # the default: the last layer, its heads averaged
    (1, 2, "sigma_b"),
    (-1, 1, "identity"),  # the first head alone
    (0, 0, "sigma_a"), (-2, 1, "sigma_a")])
def test_layer_and_heads_choose_the_attention(tokens, layer, heads, want):
  assert al.alignments(tokens, None, INPUTS, OUTPUTS, layer=layer, heads=heads,
                       level="subword") == WANT[want]


@pytest.mark.parametrize("layer, heads", [(0, 0), (1, 0), (1, 1), (-1, 2)])
def test_token_attention_is_the_numpy_recomputation(tokens, layer, heads):
  hypotheses = [[4, 2, 6, 3, 5], [3, 3, 2], [2, 6, 2]]  # OUTPUTS before EOS
  sources = [r[:r.index(EOS_ID) + 1] for r in INPUTS]
  pad = lambda rows: np.array([r + [0] * (8 - len(r)) for r in rows])
  got = al.alignment_attention(tokens, pad(sources), pad(hypotheses), layer, heads).numpy()
  for row in range(3):
    want = numpy_token_attention(HEADS_SPEC, pad(sources)[row], pad(hypotheses)[row],
                                 layer % 2, heads)
    np.testing.assert_allclose(got[row], want, rtol=1e-4, atol=1e-6)


def test_mixed_bfloat16_token_model_chooses_alike():
  model = token_model(HEADS_SPEC, policy="mixed_bfloat16")
  assert al.alignments(model, None, INPUTS, OUTPUTS, level="subword") == WANT["sigma_b"]
  assert al.alignments(model, None, INPUTS, OUTPUTS, heads=1,
                       level="subword") == WANT["identity"]


class _Members:
  """What an ensemble object offers the module: its members."""

  def __init__(self, members):
    self.members = members


def test_an_ensemble_averages_the_chosen_attention():
  # Each member's last layer adds ln 3 to one pattern and ln 2.5 to sigma_a: alone each
  # picks its own pattern, averaged sigma_a wins (2.5 + 2.5 against 3 + 1 each).
  spec = lambda first: [[[(SHARP, IDENTITY)]] * 2,
                        [[(math.log(3.0), first), (math.log(2.5), SIGMA_A)]] * 2]
  x, y = token_model(spec(IDENTITY)), token_model(spec(SIGMA_B))
  assert al.alignments(x, None, INPUTS[:1], OUTPUTS[:1], level="subword") == WANT["identity"][:1]
  assert al.alignments(y, None, INPUTS[:1], OUTPUTS[:1], level="subword") == WANT["sigma_b"][:1]
  for pair in ([x, y], _Members([x, y])):
    assert al.alignments(pair, None, INPUTS[:1], OUTPUTS[:1],
                         level="subword") == WANT["sigma_a"][:1]
  inputs, targets = np.array(INPUTS[:1]), np.array([OUTPUTS[0][:5]])
  want = (numpy_token_attention(spec(IDENTITY), inputs[0], targets[0], 1, 0)
          + numpy_token_attention(spec(SIGMA_B), inputs[0], targets[0], 1, 0)) / 2
  np.testing.assert_allclose(al.alignment_attention([x, y], inputs, targets).numpy()[0], want,
                             rtol=1e-4, atol=1e-6)


def test_bad_arguments_are_errors(tokens):
  with pytest.raises(ValueError, match=r"layer must be in \[-2, 2\).*got 2"):
    al.alignments(tokens, None, INPUTS, OUTPUTS, layer=2, level="subword")
  with pytest.raises(ValueError, match=r"heads must be in \[0, 2\].*got 3"):
    al.alignments(tokens, None, INPUTS, OUTPUTS, heads=3, level="subword")
  with pytest.raises(ValueError, match=r"level must be one of.*'char'"):
    al.alignments(tokens, None, INPUTS, OUTPUTS, level="char")
  with pytest.raises(ValueError, match="needs the encoders"):
    al.alignments(tokens, None, INPUTS, OUTPUTS)
  with pytest.raises(ValueError, match="3 input rows and 2 output rows"):
    al.alignments(tokens, None, INPUTS, OUTPUTS[:2], level="subword")
  with pytest.raises(ValueError, match=r"input_ids_rows\[1\] must end in EOS"):
    al.alignments(tokens, None, [INPUTS[0], [2, 3]], OUTPUTS[:2], level="subword")
  with pytest.raises(ValueError, match="at least one model"):
    al.alignments([], None, INPUTS, OUTPUTS, level="subword")


# -- Selection, hard alignment and Pharaoh on hand-set tensors ------------------------

def test_select_attention_layer_and_heads_on_hand_set_weights():
  # One query over four real source tokens; three heads of layer 1 that disagree.
  layer1 = np.array([[[[.7, .3, 0, 0]], [[0, .6, .4, 0]], [[0, 0, 1, 0]]]], np.float32)
  layer0 = np.array([[[[0, 0, .1, .9]]] * 3], np.float32)
  encdec = [tf.constant(layer0), tf.constant(layer1, tf.bfloat16)]
  best = lambda layer, heads: al.hard_alignments(
      al.select_attention(encdec, layer, heads).numpy()[0], 4)
  assert best(-1, 1) == [(0, 0)]  # head 0: .7
  assert best(-1, 2) == [(1, 0)]  # (.3 + .6) / 2 = .45 against .35 and .2
  assert best(-1, 0) == best(1, 3) == [(2, 0)]  # totals .7, .9, 1.4
  assert best(0, 0) == best(-2, 1) == [(3, 0)]
  mean = al.select_attention(encdec, -1, 2)
  assert mean.dtype == tf.float32
  np.testing.assert_allclose(mean.numpy()[0, 0], [.35, .45, .2, 0], atol=4e-3)  # bfloat16 in
  for layer, heads, match in ((2, 0, "layer"), (-3, 0, "layer"), (0, 4, "heads"),
                              (0, -1, "heads")):
    with pytest.raises(ValueError, match=match):
      al.select_attention(encdec, layer, heads)
  with pytest.raises(ValueError, match="this model has none"):
    al.select_attention([None], 0, 0)


def test_hard_alignments_exclude_eos_and_break_ties_low():
  attention = np.array([[.1, .7, .2, 0], [.4, .4, .2, 0], [.1, .2, .3, .4], [1, 0, 0, 0]])
  # Column 3 is the source EOS: row 2's largest weight is not a candidate.
  assert al.hard_alignments(attention, 3) == [(1, 0), (0, 1), (2, 2), (0, 3)]
  assert al.hard_alignments(attention, 3, target_length=2) == [(1, 0), (0, 1)]
  assert al.hard_alignments(attention, 4)[2] == (3, 2)
  assert al.hard_alignments(attention, 0) == []
  assert al.hard_alignments(attention, 3, target_length=0) == []
  assert al.hard_alignments(np.zeros([0, 5]), 4) == []
  with pytest.raises(ValueError, match="source_length"):
    al.hard_alignments(attention, 5)
  with pytest.raises(ValueError, match="target_length"):
    al.hard_alignments(attention, 3, target_length=5)
  with pytest.raises(ValueError, match=r"\[target, source\]"):
    al.hard_alignments(attention[0], 3)


def test_pharaoh_sorts_by_target_then_source_and_dedupes():
  assert al.pharaoh([]) == ""
  assert al.pharaoh([(2, 1), (0, 1), (1, 0), (0, 1), (np.int64(3), 0)]) == "1-0 3-0 0-1 2-1"
  with pytest.raises(ValueError, match=">= 0"):
    al.pharaoh([(0, -1)])


# -- Subwords to words ----------------------------------------------------------------

# A vocabulary written by hand, so that each segmentation below is known: greedy
# longest prefix over these subwords (a single-character subword for every
# character and digit the escapes need). "é" is in no subword: it is escaped.
HAND_SUBWORDS = ["<pad>", "<EOS>", "Hello_", ", _", "wor", "ld_", "!", " _", "Don_", "'_",
                 "t_", "st", "op_", "._", "caf", "\\", "2", "3", ";_", ";", "x_", "u_", "y_",
                 "3_", "5_", "ok_", "t", "a_", ")", ", (_", "b_"]
# (text, its subwords, per subword the indices of its words in text.split()).
HAND_CASES = [
    # Punctuation glued to words, a multi-subword word, "Don't" three tokens, one word.
    ("Hello, world! Don't stop.",
     ["Hello_", ", _", "wor", "ld_", "!", " _", "Don_", "'_", "t_", "st", "op_", "._"],
     [(0,), (0,), (1,), (1,), (1,), (), (2,), (2,), (2,), (3,), (3,), (3,)]),
    # "é" as \233; across five subwords, "_" as \u across two, a number with a point.
    ("caf\u00e9 x_y 3.5",
     ["caf", "\\", "2", "3", "3", ";_", "x_", "\\", "u_", "y_", "3_", "._", "5_"],
     [(0,)] * 6 + [(1,)] * 4 + [(2,)] * 3),
    # A word that starts with an escape: its first pieces decode to "\" glued to "ok".
    ("ok \u00e9t\u00e9", ["ok_", "\\", "2", "3", "3", ";", "t", "\\", "2", "3", "3", ";_"],
     [(0,)] + [(1,)] * 11),
    # A punctuation token with inner white space belongs to both words.
    ("a), (b", ["a_", ")", ", (_", "b_"], [(0,), (0,), (0, 1), (1,)]),
]


@pytest.fixture(scope="module")
def hand_encoder(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "hand.subwords"
  path.write_text("".join(f"'{s}'\n" for s in HAND_SUBWORDS), encoding="utf-8")
  return text_encoder.SubwordTextEncoder(str(path))


@pytest.mark.parametrize("text, subwords, words", HAND_CASES)
def test_subword_words_on_a_hand_written_vocabulary(hand_encoder, text, subwords, words):
  ids = hand_encoder.encode(text)
  assert hand_encoder.decode_list(ids) == subwords  # the premise: this segmentation
  assert hand_encoder.decode(ids) == text
  assert al.subword_words(ids, hand_encoder) == words


def test_leading_space_and_closing_subwords_belong_to_no_word(hand_encoder):
  ids = [HAND_SUBWORDS.index(" _"), HAND_SUBWORDS.index("ok_")]
  assert hand_encoder.decode(ids) == " ok"
  assert al.subword_words(ids, hand_encoder) == [(), (0,)]
  assert al.subword_words([], hand_encoder) == []


def test_word_alignments_join_subword_pairs(hand_encoder):
  encoders = {"inputs": hand_encoder, "targets": hand_encoder}
  source, target = hand_encoder.encode(HAND_CASES[0][0]), hand_encoder.encode("a), (b")
  # Source words: Hello, | world! ...; target words: a), | (b.
  pairs = [(0, 0), (1, 1), (2, 2), (3, 3), (8, 3)]
  assert al.word_alignments(pairs, source, target, encoders) == [(0, 0), (1, 0), (1, 1),
                                                                  (2, 1)]


def test_word_level_alignments_from_the_position_model(hand_encoder):
  model = position_model(vocab_size=len(HAND_SUBWORDS))
  encoders = {"inputs": hand_encoder, "targets": hand_encoder}
  line = "  Hello, world! Don't stop.\t"
  source = hand_encoder.encode(tokenizer.normalize_input(line)) + [EOS_ID]
  target = hand_encoder.encode("a), (b") + [EOS_ID]
  # Subword pairs i-i for i < 4: (Hello_, a_) (", _", ")") (wor, ", (_") (ld_, b_).
  assert al.alignments(model, encoders, [source], [target]) == ["0-0 1-0 1-1"]
  assert al.alignments(model, encoders, [source], [target], level="subword") == [
      "0-0 1-1 2-2 3-3"]


def _prefix_oracle(ids, encoder):
  """Words of each subword from prefixes: subword k spells the characters that
  decode(ids[:k+1]) adds to decode(ids[:k]); valid when every prefix decodes to a
  prefix of the text (no escapes), which it asserts."""
  text = encoder.decode(ids)
  word_of, words = [-1] * len(text), 0
  for m in re.finditer(r"\S+", text):
    word_of[m.start():m.end()] = [words] * (m.end() - m.start())
    words += 1
  out, before = [], ""
  for k in range(len(ids)):
    now = encoder.decode(ids[:k + 1])
    assert now.startswith(before) and text.startswith(now), (before, now, text)
    out.append(tuple(sorted({word_of[c] for c in range(len(before), len(now))} - {-1})))
    before = now
  return out


ORACLE_TEXTS = ["Don't stop, (please)!", "3.14 and 1,000 dogs", "well-known e-mail: x@y.z",
                "a  b", "a), (b", "the  dogs' house.", "It's 9:30 -- isn't it?"]
UNSEEN = ["housedogs stopped, knownly."]  # not in the corpus: split into many subwords


def test_subword_words_on_a_corpus_vocabulary_match_the_prefix_oracle():
  corpus = ORACLE_TEXTS * 3 + ["the dog and the house", "stop the dogs, please",
                               "known dogs do not stop"] * 4
  encoder = text_encoder.SubwordTextEncoder()
  encoder.build_from_token_counts(tokenizer.corpus_token_counts(corpus), 2)
  multi = 0
  for text in ORACLE_TEXTS + UNSEEN:
    ids = encoder.encode(text)
    got = al.subword_words(ids, encoder)
    assert got == _prefix_oracle(ids, encoder), text
    assert {w for ws in got for w in ws} == set(range(len(text.split()))), text
    multi += len(ids) > len(tokenizer.encode(text))
  assert multi  # some word is split into several subwords


def test_an_encoder_without_subword_strings_maps_by_prefixes():
  class Ids:
    def decode(self, ids):
      return " ".join(f"w{i}" if i % 2 else f"{i}-" for i in ids).replace("- ", "-")
  # ids 2, 3, 5, 4, 7 decode to "2-w3 w5 4-w7": [(0,), (0,), (1,), (2,), (2,)]
  assert al.subword_words([2, 3, 5, 4, 7], Ids()) == [(0,), (0,), (1,), (2,), (2,)]
