"""Tests for t2t_keras/scoring/evalb.py and t2t_keras_parse_eval, on hand-scored trees.

Bracket lists in the comments are (start, end) over word positions after the
punctuation words are removed, end exclusive.
"""

import dataclasses
import math
import pathlib
import random

from absl import app, flags
from absl.testing import flagsaver
import pytest

from data_gen import trees, wsj_parsing as wp
from t2t_keras.cli import parse_eval
from t2t_keras.scoring import evalb

CAT = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))"
# Words The cat sat (. deleted). Gold: S(0,3) NP(0,2) VP(2,3).
CAT_BAD = "(TOP (S (NP (DT The)) (VP (VB cat) (VBD sat)) (. .)))"
# Test: S(0,3) NP(0,1) VP(1,3). Matched S only: 1 of 3 / 3.
# VP(1,3) crosses gold NP(0,2): 1 crossing. Tags: cat VB != NN: 2 of 3.

GAVE_GOLD = "( (S (NP-SBJ (PRP He)) (VP (VBD gave) (PRT (RP up))) (, ,) " \
            "(ADVP (RB sadly)) (. .)) )"
# Words He gave up sadly; the unlabeled outer bracket is not counted.
# Gold: S(0,4) NP(0,1) VP(1,3) PRT=ADVP(2,3) ADVP(3,4): 5 brackets.
GAVE_TEST = "(ROOT (S (NP (PRP He)) (VP (VBD gave) (ADVP (RP up)) (, ,) " \
            "(ADVP (RB sadly))) (. .)))"
# Test: S(0,4) NP(0,1) VP(1,4) ADVP(2,3) ADVP(3,4): 5 brackets (ROOT not).
# Matched S, NP, ADVP(2,3) (ADVP=PRT), ADVP(3,4): 4. No crossing.

DOGS_GOLD = "(S (NP (NP (NNS dogs))) (VP (VBP bark)))"
# Gold: S(0,2) NP(0,1) NP(0,1) VP(1,2): 4 brackets (unary chain counts twice).
DOGS_TEST = "(S (NP (NNS dogs)) (VP (VBP bark)))"
# Test: S(0,2) NP(0,1) VP(1,2): 3. Multiset matching: 3 matched.


def test_reads_brackets_like_evalb():
  terms, brackets, length = evalb.read_brackets(CAT)
  assert terms == [("The", "DT"), ("cat", "NN"), ("sat", "VBD")]
  assert sorted(brackets) == [(0, 2, "NP"), (0, 3, "S"), (0, 3, "TOP"),
                              (2, 3, "VP")]
  assert length == 4  # punctuation counts for length; only -NONE- does not


@pytest.mark.parametrize("gold,test,want", [
    # (matched, gold, test, crossing, words, correct tags)
    (CAT, CAT, (3, 3, 3, 0, 3, 3)),
    (CAT, CAT_BAD, (1, 3, 3, 1, 3, 2)),
    (GAVE_GOLD, GAVE_TEST, (4, 5, 5, 0, 4, 4)),
    (DOGS_GOLD, DOGS_TEST, (3, 4, 3, 0, 2, 2)),
    (DOGS_TEST, DOGS_GOLD, (3, 3, 4, 0, 2, 2)),
    # A bracket over punctuation only is empty once `:` is removed and
    # uncounted: gold S(0,1) NP(0,1), test the same.
    ("(S (NP (NN x)) (PRN (: --)) (. .))", "(S (NP (NN x)) (: --) (. .))",
     (2, 2, 2, 0, 1, 1)),
    # A trace and the NP-SBJ it leaves empty are not counted:
    # gold S(0,1) VP(0,1); test the same.
    ("(S (NP-SBJ (-NONE- *)) (VP (VB go)))", "(S (VP (VB go)))",
     (2, 2, 2, 0, 1, 1)),
])
def test_sentence_counts(gold, test, want):
  s = evalb.score_sentence(gold, test)
  assert s.status == 0, s.message
  assert (s.matched, s.gold, s.test, s.crossing, s.words,
          s.correct_tags) == want


def test_unlabeled_scoring_ignores_labels():
  params = evalb.EvalbParams(labeled=False)
  # Spans: gold S(0,3) NP(0,2) VP(2,3); test (0,3) (0,2) (2,3) all labeled X.
  test = "(TOP (X (X (DT The) (NN cat)) (X (VBD sat)) (. .)))"
  s = evalb.score_sentence(CAT, test, params)
  assert (s.matched, s.gold, s.test) == (3, 3, 3)
  assert evalb.score_sentence(CAT, test).matched == 0


@pytest.mark.parametrize("test,status,message", [
    # A punctuation tag on a word the gold tags NN: EVALB sees 2 vs 1 words.
    ("(S (NP (NN x)) (NN .))", 1, "length unmatch"),
    ("(S (NP (NN y)) (. .))", 1, "words unmatch"),
    ("(S (. .))", 2, "no words"),
    ("", 2, "no words"),
    ("(S (NP (NN x))", 1, "unbalanced"),
])
def test_error_and_skip_sentences(test, status, message):
  s = evalb.score_sentence("(S (NP (NN x)) (. .))", test)
  assert s.status == status
  assert message in s.message


def test_corpus_totals_sum_counts_over_valid_sentences():
  gold = [CAT, GAVE_GOLD, DOGS_GOLD, CAT]
  test = [CAT_BAD, GAVE_TEST, DOGS_TEST, "(TOP (S (NN The) (NN dog) (VBD sat) (. .)))"]
  report = evalb.evaluate(gold, test)
  t = report.all
  # The last pair is a words-unmatch error and is left out.
  # matched 1 + 4 + 3 = 8, gold 3 + 5 + 4 = 12, test 3 + 5 + 3 = 11.
  assert (t.sentences, t.error_sentences, t.valid_sentences) == (4, 1, 3)
  assert (t.matched, t.gold, t.test) == (8, 12, 11)
  assert t.recall == pytest.approx(100 * 8 / 12)
  assert t.precision == pytest.approx(100 * 8 / 11)
  r, p = 8 / 12, 8 / 11
  assert t.f1 == pytest.approx(100 * 2 * p * r / (p + r))  # 69.565...
  assert t.f1 == pytest.approx(100 * 16 / 23)  # = 2M / (G + T)
  assert t.complete_match == 0  # no valid pair matches completely
  assert t.words == 3 + 4 + 2 and t.correct_tags == 2 + 4 + 2
  assert report.errors() == [(4, "words unmatch (cat|dog)")]


def test_length_cutoff_groups():
  # Lengths: CAT 4 (punctuation counts), DOGS 2.
  params = evalb.EvalbParams(cutoff_len=3)
  report = evalb.evaluate([CAT, DOGS_GOLD], [CAT_BAD, DOGS_TEST], params)
  assert (report.short.sentences, report.short.matched,
          report.short.gold) == (1, 3, 4)
  assert report.all.sentences == 2


def test_perfect_and_empty_scores():
  report = evalb.evaluate([CAT, GAVE_GOLD], [CAT, GAVE_GOLD])
  assert report.all.f1 == pytest.approx(100.0)
  assert report.all.complete_match == 2
  empty = evalb.evaluate([], [])
  assert empty.all.f1 == 0.0 and not math.isnan(empty.all.f1)


def test_bad_input_raises():
  with pytest.raises(ValueError, match="line 2 has no partner"):
    evalb.evaluate([CAT, CAT], [CAT])
  with pytest.raises(ValueError, match="max_errors=0"):
    evalb.evaluate([CAT], ["(S (NN dog))"], max_errors=0)


# ---- CLI ---------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _parsed_flags():
  # pytest does not run absl's flag parsing; the CLI reads flag values.
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


def _run_cli(capsys, **flag_values):
  with flagsaver.flagsaver(**flag_values):
    parse_eval.main(["t2t_keras_parse_eval"])
  return capsys.readouterr()


def test_cli_prints_scores_and_counts(tmp_path, capsys):
  gold, test = tmp_path / "gold", tmp_path / "test"
  gold.write_text("\n".join([CAT, GAVE_GOLD, DOGS_GOLD]) + "\n")
  test.write_text("\n".join([CAT_BAD, GAVE_TEST, DOGS_TEST]) + "\n")
  out = _run_cli(capsys, gold=str(gold), test=str(test)).out
  # 8 matched of 12 gold, 11 test: P 72.73, R 66.67, F1 69.57.
  assert "P = 72.73  R = 66.67  F1 = 69.57" in out
  assert "matched 8, gold 12, test 11" in out
  assert "Bracketing FMeasure       =  69.57" in out


def test_cli_linearized_test_is_repaired_over_gold_words(tmp_path, capsys):
  gold, test = tmp_path / "gold", tmp_path / "decodes"
  out_trees = tmp_path / "trees"
  gold.write_text(CAT + "\n" + DOGS_GOLD + "\n")
  # Line 1: a label-mismatched closing (repairs to the gold tree);
  # line 2: a missing POS slot for "bark" (attached as XX under S).
  test.write_text("S NP DT NN /VP VP VBD /VP . /S\nS NP NNS /NP /S\n")
  out = _run_cli(capsys, gold=str(gold), test=str(test), linearized_test=True,
                 write_test_trees=str(out_trees)).out
  assert out_trees.read_text().splitlines() == [
      CAT, "(TOP (S (NP (NNS dogs)) (XX bark)))"]
  # Line 1: 3 of 3. Line 2: gold S NP NP VP, test S(0,2) NP(0,1): 2 matched.
  assert "matched 5, gold 7, test 5" in out


def test_cli_line_count_mismatch_names_line(tmp_path):
  gold, test = tmp_path / "gold", tmp_path / "test"
  gold.write_text(CAT + "\n" + CAT + "\n")
  test.write_text(CAT + "\n")
  with flagsaver.flagsaver(gold=str(gold), test=str(test)):
    with pytest.raises(app.UsageError, match=r"has 2 lines .* has 1; line 2"):
      parse_eval.main(["t2t_keras_parse_eval"])


def test_cli_reports_error_sentences(tmp_path, capsys):
  gold, test = tmp_path / "gold", tmp_path / "test"
  gold.write_text(CAT + "\n" + CAT + "\n")
  test.write_text(CAT + "\n(TOP (S (NN The) (NN dog) (VBD sat) (. .)))\n")
  captured = _run_cli(capsys, gold=str(gold), test=str(test))
  assert "line 2: words unmatch (cat|dog)" in captured.err
  assert "Number of Error sentence  =      1" in captured.out


# ---- closed-form checks on the sample's treebank-format trees ---------------
SAMPLE_DIR = pathlib.Path(__file__).resolve().parent / "data" / "ptb_sample"
# The dev files' brackets EVALB counts (COLLINS.prm), by hand, tree by tree:
# wsj_0180: 9 + 10 + 8, wsj_0181: 8 + 7 (all non-terminals but TOP; none
# covers punctuation only; the SBAR, S and NPs holding only -NONE- are gone).
SAMPLE_DEV_TREES, SAMPLE_DEV_BRACKETS = 5, 42
PUNCT = {",", ":", "``", "''", "."}


def _countable(node):
  """A non-terminal EVALB counts: it covers a word with a non-punct tag."""
  return any(isinstance(k, trees.Tree) and k.is_preterminal() and
             k.label not in PUNCT for k in _subtrees(node))


def _subtrees(node):
  stack, out = [node], []
  while stack:
    n = stack.pop()
    out.append(n)
    if not n.is_preterminal():
      stack.extend(n.children)
  return out


def test_removing_one_bracket_per_tree_on_sample_dev_trees():
  rng = random.Random(0)
  gold_lines, test_lines, removed, gold_count = [], [], 0, 0
  dev_files = sorted(SAMPLE_DIR.glob("wsj_*.mrg"))
  dev_files = [p for p in dev_files if int(p.stem[4:]) in wp.SAMPLE_FILES["dev"]]
  assert [p.name for p in dev_files] == ["wsj_0180.mrg", "wsj_0181.mrg"]
  for path in dev_files:
    for tree in trees.read_mrg_file(str(path)):
      clean = trees.clean_tree(tree)
      gold_lines.append(trees.tree_to_string(clean))
      inner = [t for t in _subtrees(clean)
               if t is not clean and not t.is_preterminal()]
      gold_count += sum(map(_countable, inner))
      # Splice one countable constituent out: its children join its parent.
      victim = rng.choice([t for t in inner if _countable(t)])
      for parent in _subtrees(clean):
        ids = [id(c) for c in parent.children]
        if not parent.is_preterminal() and id(victim) in ids:
          i = ids.index(id(victim))
          parent.children[i:i + 1] = victim.children
          break
      removed += 1
      test_lines.append(trees.tree_to_string(clean))
  t = evalb.evaluate(gold_lines, test_lines).all
  assert t.valid_sentences == len(gold_lines) == removed == SAMPLE_DEV_TREES
  assert gold_count == SAMPLE_DEV_BRACKETS
  # Every countable gold bracket is counted; exactly one per tree is gone.
  assert (t.gold, t.test, t.matched) == (gold_count, gold_count - removed,
                                         gold_count - removed)
  assert t.precision == pytest.approx(100.0)
  assert t.tagging_accuracy == pytest.approx(100.0)
  same = evalb.evaluate(gold_lines, gold_lines).all
  assert same.f1 == pytest.approx(100.0) and same.complete_match == SAMPLE_DEV_TREES
  # 48 words, of which 11 are punctuation EVALB deletes (2 + 3 + 4 + 1 + 1 of , . : `` '').
  assert (same.gold, same.words) == (SAMPLE_DEV_BRACKETS, 48 - 11)


GOLD_PUNCT = dataclasses.replace(evalb.COLLINS, gold_punctuation_tags=True)


@pytest.mark.parametrize("gold,test,raw_message,want", [
    # A full stop tagged NN: EVALB keeps it as a word of the test tree only.
    ("(S (NP (NN dogs)) (VP (VBP bark)) (. .))",
     "(S (NP (NN dogs)) (VP (VBP bark) (NN .)))", "length unmatch (2|3)",
     (3, 3, 3, 2)),
    # A word tagged as a comma: EVALB drops it from the test tree only.
    ("(S (NP (NN dogs)) (VP (VBP bark)))",
     "(S (NP (, dogs)) (VP (VBP bark)))", "length unmatch (2|1)",
     (3, 3, 3, 2)),
    # A real tagging error (NN for VBP) is left alone: tags 1 of 2 right.
    ("(S (NP (NN dogs)) (VP (VBP bark)) (. .))",
     "(S (NP (NN dogs) (NN bark)) (. .))", None, (1, 3, 2, 1)),
])
def test_gold_punctuation_tags(gold, test, raw_message, want):
  raw = evalb.score_sentence(gold, test)
  if raw_message:
    assert (raw.status, raw.message) == (1, raw_message)
  fixed = evalb.score_sentence(gold, test, GOLD_PUNCT)
  assert fixed.status == 0
  assert (fixed.matched, fixed.gold, fixed.test, fixed.correct_tags) == want


def test_gold_punctuation_tags_need_the_same_words():
  gold = "(S (NP (NN dogs)) (. .))"
  test = "(S (NP (NN cats)) (NN .))"
  assert evalb.with_gold_punctuation_tags(gold, test) == test
  assert evalb.score_sentence(gold, test, GOLD_PUNCT).status == 1
