"""Constituency trees: parsing, cleaning, T2T's linearization and its inverse.

No TensorFlow: `t2t_keras/scoring/evalb.py` (scoring) and `data_gen/wsj_parsing.py`
(the parsing problems) both use this module.

Trees are read in Penn Treebank bracket form, cleaned the way parsers are
evaluated (no `-NONE-` traces, no function tags or indices, no outer bracket)
and linearized as T2T's `words_and_tags_from_wsj_tree` did (Vinyals et al.,
arXiv:1412.7449): an opening `(X` emits `X` (POS tags included), the closing of
a non-terminal emits `/X`, the closing of a POS tag emits nothing.

    (TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))
    inputs:  The cat sat .
    targets: S NP DT NN /NP VP VBD /VP . /S

`delinearize` turns a (possibly ill-formed) decoded target sequence plus the
input words back into a valid tree over exactly those words.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence, Union

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


def tokenize(text: str) -> list[str]:
  """Bracket text as tokens: `(`, `)` and atoms (labels and words)."""
  return _TOKEN_RE.findall(text)


def parse_trees(text: str, source: str = "<string>") -> list[Tree]:
  """Parses every bracketed tree in `text` (e.g. a whole `.mrg` file)."""
  return _parse_tokens(tokenize(text), source)


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
