"""English constituency parsing on the WSJ Penn Treebank (paper §6.3).

Each tree of the Penn Treebank `.mrg` files becomes one example: inputs are its
words, targets its linearization (`data_gen/trees.py`, as T2T's
`words_and_tags_from_wsj_tree`):

    (TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))
    inputs:  The cat sat .
    targets: S NP DT NN /NP VP VBD /VP . /S

Problems: `parsing_english_ptb8k`, `parsing_english_ptb16k` (a user's licensed
WSJ copy: sections 02-21 train, 22 dev, 23 test) and
`parsing_english_ptb_sample` (the 3,914-tree NLTK sample: files wsj_0001-0179
train, wsj_0180-0189 dev, wsj_0190-0199 test).
"""

from __future__ import annotations

import os
import re
from typing import Iterable, Iterator

from data_gen import file_io
from data_gen import problem as problem_lib
from data_gen import trees
from data_gen.registry import register_problem

# ---- files and splits -----------------------------------------------------
_WSJ_FILE_RE = re.compile(r"^wsj_(\d{4})\.mrg$", re.IGNORECASE)
# Paper §6.3 / standard WSJ split by section (file number // 100).
WSJ_SECTIONS = {"train": range(2, 22), "dev": (22,), "test": (23,)}
# The NLTK sample (files 1-199) split by file number.
SAMPLE_FILES = {"train": range(1, 180), "dev": range(180, 190),
                "test": range(190, 200)}


def find_wsj_files(tmp_dir: str) -> dict[int, str]:
  """{file number: path} of every `wsj_NNNN.mrg` below `tmp_dir`.

  Raises:
    ValueError: `tmp_dir` is not a directory, or holds two copies of a file.
  """
  if not os.path.isdir(tmp_dir):
    raise ValueError(f"tmp_dir {tmp_dir!r} is not a directory; point "
                     "--tmp_dir at your Penn Treebank copy.")
  found = {}
  for dirpath, dirnames, filenames in os.walk(tmp_dir):
    dirnames.sort()
    for filename in sorted(filenames):
      match = _WSJ_FILE_RE.match(filename)
      if not match:
        continue
      number, path = int(match.group(1)), os.path.join(dirpath, filename)
      if number in found:
        raise ValueError(f"two copies of {filename} below {tmp_dir!r}: "
                         f"{found[number]} and {path}; point --tmp_dir at "
                         "one copy of the treebank.")
      found[number] = path
  return found


def split_files(tmp_dir: str, split: str, sample: bool = False) -> list[str]:
  """Paths of the `.mrg` files of `split`, in file order.

  Args:
    tmp_dir: directory holding the `wsj_NNNN.mrg` files (any layout).
    split: "train", "dev" or "test".
    sample: split the 199-file NLTK sample by file number instead of the
      full treebank by section.
  """
  if split not in WSJ_SECTIONS:
    raise ValueError(f"split must be 'train', 'dev' or 'test', got {split!r}")
  files = find_wsj_files(tmp_dir)
  if sample:
    paths = [files[n] for n in SAMPLE_FILES[split] if n in files]
    want = "wsj_0001.mrg ... wsj_0199.mrg (the NLTK WSJ sample)"
  else:
    paths = [p for n, p in sorted(files.items())
             if n // 100 in WSJ_SECTIONS[split]]
    want = ("wsj_NNNN.mrg files of sections 02-21/22/23, e.g. "
            "<tmp_dir>/parsed/mrg/wsj/23/wsj_2300.mrg")
  if not paths:
    raise ValueError(f"no {split} files found below tmp_dir {tmp_dir!r}; "
                     f"expected {want}.")
  return paths


def linearized_samples(paths: Iterable[str]) -> Iterator[dict]:
  """{"inputs": words, "targets": linearized tree} per tree of the files."""
  for path in paths:
    for tree in trees.read_mrg_file(path):
      words, tags = trees.linearize(trees.clean_tree(tree))
      if not words:
        raise ValueError(f"a tree in {path} has no words once traces are "
                         f"removed: {trees.tree_to_string(tree)}")
      yield {"inputs": " ".join(words), "targets": " ".join(tags)}


# ---- problems ---------------------------------------------------------------

class ParsingEnglishPtb(problem_lib.Text2TextProblem):
  """Base: words -> linearized tree, WSJ sections 02-21 / 22 / 23."""

  has_test_split = True
  sample = False
  input_space_id = problem_lib.SpaceID.EN_TOK   # T2T: 3
  target_space_id = problem_lib.SpaceID.PARSE_TOK  # T2T: 15
  source_lang, target_lang = "words", "linearized"
  scoring = "parsing"

  def generate_samples(self, data_dir, tmp_dir, split):
    del data_dir
    return linearized_samples(split_files(tmp_dir, split, self.sample))

  def gold_trees_file(self, data_dir: str, split: str) -> str:
    """`<data_dir>/<name>.<split>.trees`: gold trees for EVALB."""
    return os.path.join(data_dir, f"{self.name}.{split}.trees")

  def reference_file(self, data_dir: str, split: str) -> str:
    """Output is scored against the gold trees, not the linearized targets."""
    return self.gold_trees_file(data_dir, split)

  def split_text_files(self, data_dir: str, split: str) -> list:
    """Text files of a split plus, for dev/test, its gold trees (in the manifest)."""
    files = super().split_text_files(data_dir, split)
    return files + [self.gold_trees_file(data_dir, split)] if files else files

  def write_split_extras(self, data_dir: str, split: str) -> None:
    """The dev/test gold tree files, written before datagen's manifest."""
    self.write_gold_trees(data_dir, split)

  def write_gold_trees(self, data_dir: str, split: str) -> int:
    """Rebuilds gold trees from the split's text files (exact inverse)."""
    words = file_io.read_lines(self.text_file(data_dir, split, "inputs"), name="words file")
    tags = file_io.read_lines(self.text_file(data_dir, split, "targets"), name="targets file")
    if len(words) != len(tags):
      raise ValueError(f"{split} text files of {self.name} in {data_dir} "
                       f"differ in length ({len(words)} vs {len(tags)}); "
                       "delete them and rerun datagen.")
    return file_io.write_lines(
        self.gold_trees_file(data_dir, split),
        (trees.tree_to_string(trees.delinearize(t, w)) for w, t in zip(words, tags)))


@register_problem
class ParsingEnglishPtb8k(ParsingEnglishPtb):
  """T2T's shared ~8k subword vocab for words and tags."""
  approx_vocab_size = 2**13


@register_problem
class ParsingEnglishPtb16k(ParsingEnglishPtb):
  """T2T's separate vocabs: 2**9 for the words, 2**14 for the targets."""
  share_vocab = False

  @property
  def approx_vocab_sizes(self):
    return {"inputs": 2**9, "targets": 2**14}


@register_problem
class ParsingEnglishPtbSample(ParsingEnglishPtb8k):
  """The NLTK WSJ sample: wsj_0001-0179 / 0180-0189 / 0190-0199."""
  sample = True

  @property
  def dataset_splits(self):
    return [{"split": "train", "shards": 4}, {"split": "dev", "shards": 1},
            {"split": "test", "shards": 1}]
