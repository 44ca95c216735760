"""Tests for data_gen/trees.py: parsing, cleaning, linearization, repair."""

import pathlib
import re
import subprocess
import sys

from hypothesis import given, settings, strategies as st
import pytest

from data_gen import trees
from tests.support.ptb_sample import (CAT, SAMPLE_COUNTS, SAMPLE_DIR, SAMPLE_TREES,
                                      count_trees_by_text)

REPO = pathlib.Path(__file__).resolve().parents[1]


def t2t_scan(one_line_tree):
  """T2T's token-scan linearization (reference §7), written independently.

  Reads a one-line `(TOP ...)` tree token by token: `(X` emits X, every `)`
  after the first of a run closes a non-terminal and emits `/X`; TOP and
  /TOP are stripped.
  """
  stack, tags, words = [], [], []
  for tok in one_line_tree.split():
    if tok.startswith("("):
      tags.append(tok[1:])
      stack.append(tok[1:])
    else:
      word = tok.rstrip(")")
      closes = len(tok) - len(word)
      stack.pop()  # the POS tag closes silently
      for _ in range(closes - 1):
        tags.append("/" + stack.pop())
      words.append(word)
  return words, tags[1:-1]


# ---- linearization --------------------------------------------------------
def test_reference_example():
  assert trees.words_and_tags_from_wsj_tree(CAT) == (
      "The cat sat .", "S NP DT NN /NP VP VBD /VP . /S")


def test_clean_tree_drops_traces_function_tags_and_outer_bracket():
  raw = ("( (S (NP-SBJ-1 (-NONE- *T*-1)) (NP-SBJ=2 (NNP John)) "
         "(VP (VBD said) (SBAR (-NONE- 0) (S (NP-SBJ (-NONE- *T*-2)) "
         "(VP (VBZ is) (ADVP-TMP=3 (RB now)))))) "
         "(PRN (-LRB- -LRB-) (NN note) (-RRB- -RRB-)) (. .)) )")
  # Hand-cleaned: traces and the constituents left empty by them go,
  # NP-SBJ=2 -> NP, ADVP-TMP=3 -> ADVP, -LRB-/-RRB- stay, outer ( ) -> TOP.
  want = ("(TOP (S (NP (NNP John)) (VP (VBD said) (SBAR (S (VP (VBZ is) "
          "(ADVP (RB now)))))) (PRN (-LRB- -LRB-) (NN note) (-RRB- -RRB-)) "
          "(. .)))")
  assert trees.tree_to_string(trees.clean_tree(trees.parse_tree(raw))) == want
  words, tags = trees.linearize(trees.clean_tree(trees.parse_tree(raw)))
  assert words == "John said is now -LRB- note -RRB- .".split()
  assert tags == ("S NP NNP /NP VP VBD SBAR S VP VBZ ADVP RB /ADVP /VP /S "
                  "/SBAR /VP PRN -LRB- NN -RRB- /PRN . /S").split()


@pytest.mark.parametrize("label,want", [
    ("NP-SBJ-1", "NP"), ("PP-LOC=2", "PP"), ("NP=3", "NP"), ("S", "S"),
    ("-LRB-", "-LRB-"), ("-NONE-", "-NONE-"), ("PRP$", "PRP$"),
    ("ADVP|PRT", "ADVP|PRT")])
def test_strip_function_tags(label, want):
  assert trees.strip_function_tags(label) == want


def test_parse_errors_are_clear():
  with pytest.raises(ValueError, match="left open"):
    trees.parse_tree("(S (NP (DT a))")
  with pytest.raises(ValueError, match="closes nothing"):
    trees.parse_tree("(S (DT a)))")
  with pytest.raises(ValueError, match="more than one element"):
    trees.parse_tree("(S (DT a b))")
  with pytest.raises(ValueError, match="Expected one tree"):
    trees.parse_tree("(A (B c)) (A (B c))")


def _sample_files():
  return sorted(SAMPLE_DIR.glob("wsj_*.mrg"))


def test_sample_has_the_treebank_features_the_tests_rely_on():
  """The hand-written sample keeps the `.mrg` features real treebank files have."""
  files = _sample_files()
  assert [int(p.stem[4:]) for p in files] == sorted(SAMPLE_COUNTS)
  text = "".join(p.read_text(encoding="utf-8") for p in files)
  for feature in ["\n( (S \n    (", "(NP-SBJ ", "(NP-SBJ-1 ", "(PP-CLR ", "(NP-TMP ",
                  "(S-TPC-1 ", "(NP=2 ", "(ADVP|PRT ", "(-NONE- *T*-1)", "(-NONE- *-2)",
                  "(-NONE- 0)", "(-NONE- *U*)", "(-NONE- *)", "(-NONE- *EXP*-1)",
                  "(, ,)", "(. .)", "(. ?)", "(: :)", "(`` ``)", "('' '')",
                  "(-LRB- -LRB-)", "(-RRB- -RRB-)", "($ $)"]:
    assert feature in text, feature
  # A constituent holding nothing but empty elements: cleaning removes it whole.
  assert "(SBAR (-NONE- 0) \n        (S (-NONE- *T*-1) ))" in text


def test_cleaning_a_sample_tree_by_hand():
  # wsj_0180's first tree: S-TPC-1 -> S, NP-SBJ -> NP, ADVP-MNR -> ADVP, PP-TMP -> PP;
  # (SBAR (-NONE- 0) (S (-NONE- *T*-1))) holds no word and goes whole.
  tree = trees.read_mrg_file(str(SAMPLE_DIR / "wsj_0180.mrg"))[0]
  assert trees.tree_to_string(trees.clean_tree(tree)) == (
      "(TOP (S (S (NP (NNS Prices)) (VP (VBD fell) (ADVP (RB sharply)) (PP (IN on) "
      "(NP (NNP Friday))))) (, ,) (NP (NNS traders)) (VP (VBD said)) (. .)))")


def test_round_trip_is_identity_on_every_sample_tree():
  count, words_by_regex, words_seen = 0, 0, 0
  labels = set()
  for path in _sample_files():
    text = path.read_text(encoding="utf-8")
    file_trees = trees.parse_trees(text)
    assert len(file_trees) == count_trees_by_text(path)
    # Independent word count: every `(TAG word)` whose tag is not -NONE-.
    file_words = sum(1 for tag, _ in re.findall(r"\(([^\s()]+) ([^\s()]+)\)", text)
                     if tag != "-NONE-")
    assert (len(file_trees), file_words) == SAMPLE_COUNTS[int(path.stem[4:])], path
    words_by_regex += file_words
    for tree in file_trees:
      count += 1
      clean = trees.clean_tree(tree)
      line = trees.tree_to_string(clean)
      words, tags = trees.linearize(clean)
      words_seen += len(words)
      assert (words, tags) == t2t_scan(line), line
      assert "-NONE-" not in tags
      labels.update(t for t in tags if not t.startswith("/"))
      rebuilt = trees.delinearize(" ".join(tags), " ".join(words))
      assert trees.tree_to_string(rebuilt) == line
  assert count == SAMPLE_TREES
  assert words_seen == words_by_regex == 189
  # Cleaned labels are plain PTB labels (ADVP|PRT is the treebank's own
  # ambiguity label) with no function tags or indices left.
  assert labels <= trees.PTB_POS_TAGS | trees.PTB_PHRASE_LABELS | {"ADVP|PRT"}
  assert not any(re.search(r"\w[-=]\w", t) for t in labels)


# ---- de-linearization repairs --------------------------------------------
@pytest.mark.parametrize("targets,words,want", [
    # Well formed.
    ("S NP DT NN /NP VP VBD /VP . /S", "The cat sat .", CAT),
    # Unbalanced: closings missing at the end are added.
    ("S NP DT NN /NP VP VBD", "The cat sat",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat))))"),
    # Closing label mismatch: /VP with no open VP closes the open NP.
    ("S NP DT NN /VP VP VBD /VP . /S", "The cat sat .", CAT),
    # /S closes the NP opened inside S as well.
    ("S NP DT NN /S", "The cat", "(TOP (S (NP (DT The) (NN cat))))"),
    # Closings with nothing open are dropped.
    ("/S S NP DT NN /NP VP VBD /VP . /S /S /NP", "The cat sat .", CAT),
    # Too few POS slots: the last word joins the top constituent as XX.
    ("S NP DT NN /NP VP VBD /VP /S", "The cat sat .",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (XX .)))"),
    # Too many POS slots: slots after the last word are dropped.
    ("S NP DT NN /NP VP VBD NN /VP . /S", "The cat sat .",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (NN .))))"),
    # Constituents without words are removed.
    ("S NP /NP VP VBD /VP ADJP /ADJP /S", "ran", "(TOP (S (VP (VBD ran))))"),
    # Empty or closing-only output still covers the words.
    ("", "Hello world", "(TOP (XX Hello) (XX world))"),
    ("/S /NP", "a", "(TOP (XX a))"),
    # Several top-level constituents stay under TOP.
    ("NP DT /NP VP VBD /VP", "The sat",
     "(TOP (NP (DT The)) (VP (VBD sat)))"),
    # Unknown labels: FOO has a closing so it opens; BAR has none: a POS slot.
    ("S FOO DT /FOO BAR /S", "the x",
     "(TOP (S (FOO (DT the)) (BAR x)))"),
    # No words at all.
    ("S NP DT /NP /S", "", "(TOP)"),
])
def test_delinearize_repairs(targets, words, want):
  assert trees.tree_to_string(trees.delinearize(targets, words)) == want


def test_delinearize_default_tag_and_token_lists():
  tree = trees.delinearize(["S", "NP", "DT", "/NP", "/S"], ["a", "b"],
                        default_tag="NN")
  assert trees.tree_to_string(tree) == "(TOP (S (NP (DT a)) (NN b)))"


def test_delinearize_deep_nesting():
  # Decodes can nest as deep as they are long; no recursion limit applies.
  tree = trees.delinearize("NP " * 3000 + "NN", "a")
  assert tree.leaves() == ["a"]
  assert trees.linearize(tree)[1] == ["NP"] * 3000 + ["NN"] + ["/NP"] * 3000


_TOKENS = ["S", "NP", "VP", "PP", "/S", "/NP", "/VP", "/PP", "DT", "NN",
           "VBD", ".", "FOO", "/FOO", "BAR", "/"]


def _check_valid(tree, words):
  """Every node has words, POS nodes exactly one, leaves are the words."""
  assert tree.label == "TOP"
  stack = list(tree.children)
  while stack:
    node = stack.pop()
    assert isinstance(node, trees.Tree) and node.children
    if not node.is_preterminal():
      assert all(isinstance(c, trees.Tree) for c in node.children)
      stack.extend(node.children)
  assert tree.leaves() == words


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=40),
       st.lists(st.sampled_from(["a", "b", "(", "c"]), max_size=12))
def test_delinearize_always_gives_a_valid_tree(tokens, words):
  words = [w.replace("(", "-LRB-") for w in words]
  tree = trees.delinearize(tokens, words)
  _check_valid(tree, words)
  line = trees.tree_to_string(tree)
  if words:
    assert trees.tree_to_string(trees.parse_tree(line)) == line
  # A repaired tree is a fixed point: linearize -> delinearize keeps it.
  again_words, again_tags = trees.linearize(tree)
  assert again_words == words
  assert trees.tree_to_string(trees.delinearize(again_tags, again_words)) == line


# ---- the module itself --------------------------------------------------------
def test_tokenize():
  assert trees.tokenize("(S (NP-SBJ (DT a))(VP  (VBZ is) ))") == [
      "(", "S", "(", "NP-SBJ", "(", "DT", "a", ")", ")", "(", "VP", "(", "VBZ", "is", ")",
      ")", ")"]
  assert trees.tokenize("") == []


def test_importing_trees_and_evalb_does_not_import_tensorflow():
  """Scoring parses must not pay TensorFlow's start-up (seconds per run)."""
  code = ("import sys; import data_gen.trees, t2t_keras.scoring.evalb, t2t_keras.cli.parse_eval; "
          "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
  assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0
