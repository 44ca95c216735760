"""The hand-written Penn Treebank sample (tests/data/ptb_sample) and a one-line tree."""

import pathlib

# Trees written for these tests in the Penn Treebank `.mrg` format (see its README).
SAMPLE_DIR = pathlib.Path(__file__).resolve().parents[1] / "data" / "ptb_sample"
# Counted by hand: {file number: (trees, words without -NONE- elements)}.
SAMPLE_COUNTS = {1: (3, 42), 2: (2, 27), 3: (7, 55), 180: (3, 30), 181: (2, 18),
                 190: (2, 17)}
SAMPLE_TREES = sum(t for t, _ in SAMPLE_COUNTS.values())  # 19

CAT = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))"


def count_trees_by_text(path):
  """The trees of a sample `.mrg` file, counted without parsing it."""
  # Every sample tree starts with "(" in column 0 and nothing else does.
  with open(path, encoding="utf-8") as f:
    return sum(1 for line in f if line.startswith("("))
