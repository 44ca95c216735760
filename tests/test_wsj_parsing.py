"""Tests for data_gen/wsj_parsing.py: cleaning, linearization, repair, problems."""

import os
import pathlib
import re
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_gen import registry
from data_gen import wsj_parsing as wp

REPO = pathlib.Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO.parent / "shared" / "data" / "ptb_wsj_sample"
needs_sample = pytest.mark.skipif(not SAMPLE_DIR.is_dir(),
                                  reason=f"WSJ sample not at {SAMPLE_DIR}")

CAT = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))"


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
  assert wp.words_and_tags_from_wsj_tree(CAT) == (
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
  assert wp.tree_to_string(wp.clean_tree(wp.parse_tree(raw))) == want
  words, tags = wp.linearize(wp.clean_tree(wp.parse_tree(raw)))
  assert words == "John said is now -LRB- note -RRB- .".split()
  assert tags == ("S NP NNP /NP VP VBD SBAR S VP VBZ ADVP RB /ADVP /VP /S "
                  "/SBAR /VP PRN -LRB- NN -RRB- /PRN . /S").split()


@pytest.mark.parametrize("label,want", [
    ("NP-SBJ-1", "NP"), ("PP-LOC=2", "PP"), ("NP=3", "NP"), ("S", "S"),
    ("-LRB-", "-LRB-"), ("-NONE-", "-NONE-"), ("PRP$", "PRP$"),
    ("ADVP|PRT", "ADVP|PRT")])
def test_strip_function_tags(label, want):
  assert wp.strip_function_tags(label) == want


def test_parse_errors_are_clear():
  with pytest.raises(ValueError, match="left open"):
    wp.parse_tree("(S (NP (DT a))")
  with pytest.raises(ValueError, match="closes nothing"):
    wp.parse_tree("(S (DT a)))")
  with pytest.raises(ValueError, match="more than one element"):
    wp.parse_tree("(S (DT a b))")
  with pytest.raises(ValueError, match="Expected one tree"):
    wp.parse_tree("(A (B c)) (A (B c))")


def _count_trees_by_text(path):
  # Every sample tree starts with "(" in column 0 and nothing else does.
  with open(path, encoding="utf-8") as f:
    return sum(1 for line in f if line.startswith("("))


def _sample_files():
  return sorted(SAMPLE_DIR.glob("wsj_*.mrg"))


@needs_sample
def test_round_trip_is_identity_on_every_sample_tree():
  count, words_by_regex, words_seen = 0, 0, 0
  labels = set()
  for path in _sample_files():
    text = path.read_text(encoding="utf-8")
    trees = wp.parse_trees(text)
    assert len(trees) == _count_trees_by_text(path)
    # Independent word count: every `(TAG word)` whose tag is not -NONE-.
    words_by_regex += sum(1 for tag, _ in re.findall(r"\(([^\s()]+) ([^\s()]+)\)",
                                                     text) if tag != "-NONE-")
    for tree in trees:
      count += 1
      clean = wp.clean_tree(tree)
      line = wp.tree_to_string(clean)
      words, tags = wp.linearize(clean)
      words_seen += len(words)
      assert (words, tags) == t2t_scan(line), line
      assert "-NONE-" not in tags
      labels.update(t for t in tags if not t.startswith("/"))
      rebuilt = wp.delinearize(" ".join(tags), " ".join(words))
      assert wp.tree_to_string(rebuilt) == line
  assert count == 3914
  assert words_seen == words_by_regex
  # Cleaned labels are plain PTB labels (ADVP|PRT is the treebank's own
  # ambiguity label) with no function tags or indices left.
  assert labels <= wp.PTB_POS_TAGS | wp.PTB_PHRASE_LABELS | {"ADVP|PRT"}
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
  assert wp.tree_to_string(wp.delinearize(targets, words)) == want


def test_delinearize_default_tag_and_token_lists():
  tree = wp.delinearize(["S", "NP", "DT", "/NP", "/S"], ["a", "b"],
                        default_tag="NN")
  assert wp.tree_to_string(tree) == "(TOP (S (NP (DT a)) (NN b)))"


def test_delinearize_deep_nesting():
  # Decodes can nest as deep as they are long; no recursion limit applies.
  tree = wp.delinearize("NP " * 3000 + "NN", "a")
  assert tree.leaves() == ["a"]
  assert wp.linearize(tree)[1] == ["NP"] * 3000 + ["NN"] + ["/NP"] * 3000


_TOKENS = ["S", "NP", "VP", "PP", "/S", "/NP", "/VP", "/PP", "DT", "NN",
           "VBD", ".", "FOO", "/FOO", "BAR", "/"]


def _check_valid(tree, words):
  """Every node has words, POS nodes exactly one, leaves are the words."""
  assert tree.label == "TOP"
  stack = list(tree.children)
  while stack:
    node = stack.pop()
    assert isinstance(node, wp.Tree) and node.children
    if not node.is_preterminal():
      assert all(isinstance(c, wp.Tree) for c in node.children)
      stack.extend(node.children)
  assert tree.leaves() == words


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=40),
       st.lists(st.sampled_from(["a", "b", "(", "c"]), max_size=12))
def test_delinearize_always_gives_a_valid_tree(tokens, words):
  words = [w.replace("(", "-LRB-") for w in words]
  tree = wp.delinearize(tokens, words)
  _check_valid(tree, words)
  line = wp.tree_to_string(tree)
  if words:
    assert wp.tree_to_string(wp.parse_tree(line)) == line
  # A repaired tree is a fixed point: linearize -> delinearize keeps it.
  again_words, again_tags = wp.linearize(tree)
  assert again_words == words
  assert wp.tree_to_string(wp.delinearize(again_tags, again_words)) == line


# ---- splits and problems --------------------------------------------------
def test_problems_are_registered():
  names = registry.list_problems()
  for name in ("parsing_english_ptb8k", "parsing_english_ptb16k",
               "parsing_english_ptb_sample"):
    assert name in names
  p8, p16 = (registry.problem("parsing_english_ptb8k"),
             registry.problem("parsing_english_ptb16k"))
  assert p8.share_vocab and p8.approx_vocab_size == 2**13
  assert not p16.share_vocab
  assert p16.approx_vocab_sizes == {"inputs": 2**9, "targets": 2**14}
  assert len(set(p16.vocab_filenames.values())) == 2
  assert (p8.input_space_id, p8.target_space_id) == (3, 15)


@needs_sample
def test_sample_split_sizes_by_file():
  want = {}
  for split, numbers in wp.SAMPLE_FILES.items():
    want[split] = sum(_count_trees_by_text(SAMPLE_DIR / f"wsj_{n:04d}.mrg")
                      for n in numbers)
  assert sum(want.values()) == 3914
  problem = registry.problem("parsing_english_ptb_sample")
  for split in ("train", "dev", "test"):
    samples = list(problem.generate_samples(None, str(SAMPLE_DIR), split))
    assert len(samples) == want[split]
    for s in samples[:50]:
      assert len(s["inputs"].split()) == sum(
          1 for t in s["targets"].split()
          if t in wp.PTB_POS_TAGS)


@needs_sample
def test_full_wsj_layout_split_by_section(tmp_path):
  src = SAMPLE_DIR / "wsj_0001.mrg"
  layout = {"parsed/mrg/wsj/02/wsj_0201.mrg": "train",
            "parsed/mrg/wsj/21/wsj_2199.mrg": "train",
            "wsj_0500.mrg": "train",           # flat layout works too
            "parsed/mrg/wsj/22/WSJ_2200.MRG": "dev",
            "parsed/mrg/wsj/23/wsj_2301.mrg": "test",
            "parsed/mrg/wsj/00/wsj_0001.mrg": None,   # sections 00, 01, 24
            "parsed/mrg/wsj/01/wsj_0100.mrg": None,   # are in no split
            "parsed/mrg/wsj/24/wsj_2400.mrg": None,
            "parsed/mrg/wsj/23/README": None}
  for rel in layout:
    (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, tmp_path / rel)
  for split in ("train", "dev", "test"):
    got = [os.path.relpath(p, tmp_path)
           for p in wp.split_files(str(tmp_path), split)]
    assert sorted(got) == sorted(r for r, s in layout.items() if s == split)
  problem = registry.problem("parsing_english_ptb16k")
  n_trees = _count_trees_by_text(src)
  assert len(list(problem.generate_samples(None, str(tmp_path), "train"))) \
      == 3 * n_trees


def test_split_errors(tmp_path):
  with pytest.raises(ValueError, match="not a directory"):
    wp.split_files(str(tmp_path / "missing"), "train")
  with pytest.raises(ValueError, match="no dev files found"):
    wp.split_files(str(tmp_path), "dev")
  with pytest.raises(ValueError, match="split must be"):
    wp.split_files(str(tmp_path), "valid")
  for sub in ("a", "b"):
    (tmp_path / sub).mkdir()
    (tmp_path / sub / "wsj_2300.mrg").write_text(CAT)
  with pytest.raises(ValueError, match="two copies of wsj_2300.mrg"):
    wp.split_files(str(tmp_path), "test")


@needs_sample
def test_gold_trees_file_matches_cleaned_trees(tmp_path):
  problem = registry.problem("parsing_english_ptb_sample")
  samples = list(problem.generate_samples(None, str(SAMPLE_DIR), "dev"))
  for side in ("inputs", "targets"):
    path = problem.text_file(str(tmp_path), "dev", side)
    with open(path, "w", encoding="utf-8") as f:
      f.writelines(s[side] + "\n" for s in samples)
  assert problem.write_gold_trees(str(tmp_path), "dev") == len(samples)
  want = [wp.tree_to_string(wp.clean_tree(t))
          for n in wp.SAMPLE_FILES["dev"]
          for t in wp.read_mrg_file(str(SAMPLE_DIR / f"wsj_{n:04d}.mrg"))]
  gold = pathlib.Path(problem.gold_trees_file(str(tmp_path), "dev"))
  assert gold.name == "parsing_english_ptb_sample.dev.trees"
  assert gold.read_text(encoding="utf-8").splitlines() == want


# ---- flagfile -----------------------------------------------------------------
def test_wsj_parsing_flagfile():
  from absl import flags  # pylint: disable=g-import-not-at-top
  from t2t_keras import hparams as hparams_lib  # pylint: disable=g-import-not-at-top
  fv = flags.FlagValues()
  for name in ("problem", "hparams_set", "hparams", "decode_hparams"):
    flags.DEFINE_string(name, None, "", flag_values=fv)
  path = REPO / "flags" / "wsj_parsing.flags"
  fv(["prog", f"--flagfile={path}"])  # unknown flags in the file would raise
  assert fv.problem == "parsing_english_ptb16k"
  assert fv.problem in registry.list_problems()
  hp = hparams_lib.create_hparams(fv.hparams_set, fv.hparams)
  # Paper §6.3: 4 layers, d_model 1024; the rest is transformer_parsing_base.
  assert (hp.num_hidden_layers, hp.hidden_size) == (4, 1024)
  assert (hp.filter_size, hp.num_heads, hp.max_length) == (2048, 8, 512)
  dhp = hparams_lib.create_decode_hparams(fv.decode_hparams)
  assert (dhp.beam_size, dhp.alpha, dhp.extra_length) == (21, 0.3, 300)


def test_gold_trees_are_written_before_the_manifest_and_listed_in_it(tmp_path, monkeypatch):
  """A datagen stopped while writing gold trees leaves no manifest; a complete one lists them."""
  trees = [CAT, "(TOP (S (NP (PRP It)) (VP (VBZ rains)) (. .)))",
           "(TOP (S (NP (DT A) (NN dog)) (VP (VBD ran) (ADVP (RB away))) (. .)))"]
  tmp_dir, data_dir = tmp_path / "tmp", tmp_path / "data"
  tmp_dir.mkdir()
  for n in (200, 2200, 2300):  # sections 02 (train), 22 (dev), 23 (test)
    (tmp_dir / f"wsj_{n:04d}.mrg").write_text("\n".join(trees) + "\n")
  problem = registry.problem("parsing_english_ptb8k")

  def killed(self, data_dir, split):
    raise KeyboardInterrupt
  monkeypatch.setattr(wp.ParsingEnglishPtb, "write_gold_trees", killed)
  with pytest.raises(KeyboardInterrupt):
    problem.generate_data(str(data_dir), str(tmp_dir), num_shards=1)
  with pytest.raises(ValueError, match="manifest"):
    problem.check_data_dir(str(data_dir))
  monkeypatch.undo()

  problem.generate_data(str(data_dir), str(tmp_dir), num_shards=1)
  manifest = problem.check_data_dir(str(data_dir))
  for split in ("dev", "test"):
    gold = os.path.basename(problem.gold_trees_file(str(data_dir), split))
    assert gold in [e["file"] for e in manifest["splits"][split]["text_files"]]
  os.remove(problem.gold_trees_file(str(data_dir), "test"))
  with pytest.raises(ValueError, match="missing parsing_english_ptb8k.test.trees"):
    problem.check_data_dir(str(data_dir))
