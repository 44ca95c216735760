"""English constituency parsing on the WSJ Penn Treebank (paper §6.3).

Trees are read from Penn Treebank `.mrg` files, cleaned the way parsers are
evaluated (no `-NONE-` traces, no function tags or indices, no outer bracket)
and linearized as T2T's `words_and_tags_from_wsj_tree` did (Vinyals et al.,
arXiv:1412.7449): an opening `(X` emits `X` (POS tags included), the closing of
a non-terminal emits `/X`, the closing of a POS tag emits nothing.

    (TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))
    inputs:  The cat sat .
    targets: S NP DT NN /NP VP VBD /VP . /S

`delinearize` turns a (possibly ill-formed) decoded target sequence plus the
input words back into a valid tree over exactly those words.

Problems: `parsing_english_ptb8k`, `parsing_english_ptb16k` (a user's licensed
WSJ copy: sections 02-21 train, 22 dev, 23 test) and
`parsing_english_ptb_sample` (the 3,914-tree NLTK sample: files wsj_0001-0179
train, wsj_0180-0189 dev, wsj_0190-0199 test).
"""

from __future__ import annotations

import os
import re
from typing import Iterable, Iterator, Sequence, Union

from data_gen import generator_utils
from data_gen import problem as problem_lib
from data_gen.registry import register_problem

# The 45 Penn Treebank POS tags plus `-NONE-` (traces). Used by `delinearize`
# to tell a POS slot (consumes a word) from a non-terminal opening.
PTB_POS_TAGS = frozenset(
    "CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB "
    "RBR RBS RP SYM TO UH VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB # $ . , : "
    "`` '' -LRB- -RRB- -NONE-".split())

# The 26 Penn Treebank phrase labels (after function-tag stripping).
PTB_PHRASE_LABELS = frozenset(
    "ADJP ADVP CONJP FRAG INTJ LST NAC NP NX PP PRN PRT QP RRC S SBAR SBARQ "
    "SINV SQ UCP VP WHADJP WHADVP WHNP WHPP X".split())

ROOT_LABEL = "TOP"
_ROOT_LABELS = frozenset(["", "TOP", "ROOT"])
_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")
_CLOSE = object()  # marks a closing bracket on tree_to_string's stack


class Tree:
  """A constituency tree node: `label` and `children` (Trees or one word).

  A preterminal (POS node) has exactly one child, the word (a str).
  """

  __slots__ = ("label", "children")

  def __init__(self, label: str, children: list | None = None):
    self.label = label
    self.children = [] if children is None else children

  def is_preterminal(self) -> bool:
    return len(self.children) == 1 and isinstance(self.children[0], str)

  def leaves(self) -> list[str]:
    """Words under this node, left to right."""
    out, stack = [], [self]
    while stack:
      node = stack.pop()
      if isinstance(node, str):
        out.append(node)
      else:
        stack.extend(reversed(node.children))
    return out

  def __eq__(self, other) -> bool:
    return (isinstance(other, Tree) and
            tree_to_string(self) == tree_to_string(other))

  def __repr__(self) -> str:
    return tree_to_string(self)


def _parse_tokens(tokens: Sequence[str], source: str) -> list[Tree]:
  """Builds the trees of a token stream of `(`, `)` and atoms."""
  trees, stack, i, n = [], [], 0, len(tokens)
  while i < n:
    tok = tokens[i]
    if tok == "(":
      label = ""
      if i + 1 < n and tokens[i + 1] not in ("(", ")"):
        label = tokens[i + 1]
        i += 1
      stack.append(Tree(label))
    elif tok == ")":
      if not stack:
        raise ValueError(f"Unbalanced brackets in {source}: a ')' closes "
                         f"nothing (token {i}). Check the tree text.")
      node = stack.pop()
      if stack:
        stack[-1].children.append(node)
      else:
        trees.append(node)
    else:
      if not stack:
        raise ValueError(f"Word {tok!r} outside any bracket in {source}.")
      parent = stack[-1]
      if parent.children:
        raise ValueError(f"Bracket ({parent.label} ...) in {source} mixes a "
                         f"word {tok!r} with other children; a POS bracket "
                         "holds exactly one word.")
      parent.children.append(tok)
      if i + 1 < n and tokens[i + 1] != ")":
        raise ValueError(f"Bracket ({parent.label} {tok} ...) in {source} "
                         "holds more than one element after its word.")
    i += 1
  if stack:
    raise ValueError(f"Unbalanced brackets in {source}: {len(stack)} "
                     "bracket(s) left open at the end.")
  return trees


def parse_trees(text: str, source: str = "<string>") -> list[Tree]:
  """Parses every bracketed tree in `text` (e.g. a whole `.mrg` file)."""
  return _parse_tokens(_TOKEN_RE.findall(text), source)


def parse_tree(text: str) -> Tree:
  """Parses exactly one bracketed tree."""
  trees = parse_trees(text)
  if len(trees) != 1:
    raise ValueError(f"Expected one tree, found {len(trees)} in {text!r}.")
  return trees[0]


def read_mrg_file(path: str) -> list[Tree]:
  """All trees of one Penn Treebank `.mrg` file."""
  with open(path, encoding="utf-8", errors="replace") as f:
    return parse_trees(f.read(), source=path)


def tree_to_string(tree: Tree) -> str:
  """One-line bracketed form, `(TOP (S (NP (DT The) ...)))`."""
  parts, stack = [], [tree]
  while stack:
    node = stack.pop()
    if node is _CLOSE:
      parts.append(")")
    elif isinstance(node, str):
      parts.append(" " + node)
    else:
      parts.append((" (" if parts else "(") + node.label)
      stack.append(_CLOSE)
      stack.extend(reversed(node.children))
  return "".join(parts)


def strip_function_tags(label: str) -> str:
  """`NP-SBJ-1` -> `NP`, `PP-LOC=2` -> `PP`; `-LRB-`, `-NONE-` unchanged."""
  if label.startswith("-"):
    return label
  return re.split(r"[-=]", label, maxsplit=1)[0] or label


def _clean_node(node: Tree) -> Tree | None:
  """Cleans one subtree; None when nothing but traces is left under it."""
  if node.is_preterminal():
    if node.label == "-NONE-":
      return None
    return Tree(strip_function_tags(node.label), [node.children[0]])
  kids = [c for c in (_clean_node(k) for k in node.children if
                      isinstance(k, Tree)) if c is not None]
  if not kids:
    return None
  return Tree(strip_function_tags(node.label), kids)


def clean_tree(tree: Tree) -> Tree:
  """Drops traces, empty constituents and function tags; roots at `TOP`.

  The unlabeled outer bracket `( (S ...) )` (or `TOP`/`ROOT`) becomes the
  `TOP` root; a tree without one is wrapped in `TOP`. `TOP` is never
  linearized and EVALB ignores it.
  """
  is_outer = tree.label in _ROOT_LABELS and not tree.is_preterminal()
  tops = tree.children if is_outer else [tree]
  kids = [c for c in (_clean_node(t) for t in tops
                      if isinstance(t, Tree)) if c is not None]
  return Tree(ROOT_LABEL, kids)


def linearize(tree: Tree) -> tuple[list[str], list[str]]:
  """(words, target tokens) of a cleaned, TOP-rooted tree (TOP not emitted)."""
  words, tags = [], []
  stack = list(reversed(tree.children)) if tree.label == ROOT_LABEL else [tree]
  while stack:
    node = stack.pop()
    if isinstance(node, str):  # a pending "/X" closing
      tags.append(node)
    elif node.is_preterminal():
      tags.append(node.label)
      words.append(node.children[0])
    else:
      tags.append(node.label)
      stack.append("/" + node.label)
      stack.extend(reversed(node.children))
  return words, tags


def words_and_tags_from_wsj_tree(tree_string: str) -> tuple[str, str]:
  """T2T's name: (inputs, targets) strings of one bracketed WSJ tree."""
  words, tags = linearize(clean_tree(parse_tree(tree_string)))
  return " ".join(words), " ".join(tags)


def _split_tokens(seq: Union[str, Sequence[str]]) -> list[str]:
  return seq.split() if isinstance(seq, str) else list(seq)


def _drop_empty(root: Tree) -> None:
  """Removes word-less non-terminals below `root` (iterative: decodes nest
  as deep as they are long)."""
  order, stack = [], [root]
  while stack:
    node = stack.pop()
    if not node.is_preterminal():
      order.append(node)
      stack.extend(node.children)
  for node in reversed(order):  # children before their parents
    node.children = [c for c in node.children if c.children]


def delinearize(targets: Union[str, Sequence[str]],
                words: Union[str, Sequence[str]],
                default_tag: str = "XX",
                pos_tags: Iterable[str] = PTB_POS_TAGS) -> Tree:
  """Rebuilds a TOP-rooted tree over exactly `words` from a target sequence.

  Repairs ill-formed decodes so that the result is always a valid tree whose
  leaves are `words` in order:
  * a token in `pos_tags` is a POS slot and takes the next word; slots beyond
    the last word are dropped. A token neither in `pos_tags` nor a known
    phrase label opens a non-terminal iff `/X` occurs in the sequence.
  * `/X` closes the innermost open `X` (and everything opened inside it); a
    `/X` with no open `X` closes the innermost open constituent; a closing
    with nothing open is dropped. Constituents left open are closed.
  * words left over get `(default_tag word)` in the last top-level
    constituent; constituents without words are removed.

  Args:
    targets: the decoded linearized tree, a string or tokens.
    words: the input words, a string or tokens.
    default_tag: POS tag for words without a POS slot.
    pos_tags: labels that are POS tags.

  Returns:
    A `Tree` labeled `TOP`.
  """
  tokens, words = _split_tokens(targets), _split_tokens(words)
  pos_tags = frozenset(pos_tags)
  closings = {t[1:] for t in tokens if len(t) > 1 and t[0] == "/"}
  root = Tree(ROOT_LABEL)
  stack, next_word = [root], 0
  for tok in tokens:
    if len(tok) > 1 and tok[0] == "/":
      if len(stack) == 1:
        continue  # nothing open: a spurious closing
      depth = len(stack) - 1
      while depth > 0 and stack[depth].label != tok[1:]:
        depth -= 1
      # No open constituent with that label: treat it as a mislabeled
      # closing of the innermost one.
      del stack[depth if depth > 0 else len(stack) - 1:]
    elif tok in pos_tags or (tok not in PTB_PHRASE_LABELS and
                             tok not in closings):
      if next_word < len(words):
        stack[-1].children.append(Tree(tok, [words[next_word]]))
        next_word += 1
    else:
      node = Tree(tok)
      stack[-1].children.append(node)
      stack.append(node)
  if next_word < len(words):
    last = root.children[-1] if root.children else None
    host = last if last is not None and not last.is_preterminal() else root
    host.children.extend(Tree(default_tag, [w]) for w in words[next_word:])
  _drop_empty(root)
  return root


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
    for tree in read_mrg_file(path):
      words, tags = linearize(clean_tree(tree))
      if not words:
        raise ValueError(f"a tree in {path} has no words once traces are "
                         f"removed: {tree_to_string(tree)}")
      yield {"inputs": " ".join(words), "targets": " ".join(tags)}


# ---- problems ---------------------------------------------------------------

class ParsingEnglishPtb(problem_lib.Text2TextProblem):
  """Base: words -> linearized tree, WSJ sections 02-21 / 22 / 23."""

  has_test_split = True
  sample = False
  input_space_id = problem_lib.SpaceID.EN_TOK   # T2T: 3
  target_space_id = problem_lib.SpaceID.PARSE_TOK  # T2T: 15
  source_lang, target_lang = "words", "linearized"

  def generate_samples(self, data_dir, tmp_dir, split):
    del data_dir
    return linearized_samples(split_files(tmp_dir, split, self.sample))

  def gold_trees_file(self, data_dir: str, split: str) -> str:
    """`<data_dir>/<name>.<split>.trees`: gold trees for EVALB."""
    return os.path.join(data_dir, f"{self.name}.{split}.trees")

  def split_text_files(self, data_dir: str, split: str) -> list:
    """Text files of a split plus, for dev/test, its gold trees (in the manifest)."""
    files = super().split_text_files(data_dir, split)
    return files + [self.gold_trees_file(data_dir, split)] if files else files

  def write_split_extras(self, data_dir: str, split: str) -> None:
    """The dev/test gold tree files, written before datagen's manifest."""
    self.write_gold_trees(data_dir, split)

  def write_gold_trees(self, data_dir: str, split: str) -> int:
    """Rebuilds gold trees from the split's text files (exact inverse)."""
    words = [l for _, l in generator_utils.read_text_lines(
        self.text_file(data_dir, split, "inputs"), "words file")]
    tags = [l for _, l in generator_utils.read_text_lines(
        self.text_file(data_dir, split, "targets"), "targets file")]
    if len(words) != len(tags):
      raise ValueError(f"{split} text files of {self.name} in {data_dir} "
                       f"differ in length ({len(words)} vs {len(tags)}); "
                       "delete them and rerun datagen.")
    return generator_utils.write_text_atomic(
        self.gold_trees_file(data_dir, split),
        (tree_to_string(delinearize(t, w)) for w, t in zip(words, tags)))


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
