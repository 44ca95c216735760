"""Labeled bracket scoring with EVALB's COLLINS.prm conventions.

A pure-Python port of the scoring rules of Sekine & Collins' EVALB run with
COLLINS.prm, the standard for WSJ constituency parsing (paper §6.3):

* a preterminal whose tag is in `delete_labels` (`,` `:` `` `` `` `''` `.`
  `-NONE-`) is removed together with its word, so word positions skip it;
* preterminals are never brackets; every other bracket is `(start, end,
  label)` over the remaining word positions, its label cut at the first `-`
  or `=` (function tags, indices);
* brackets with no remaining words, or whose label is in `delete_labels`
  (`TOP`; here also `ROOT` and the unlabeled outer bracket `( (S ...) )`,
  which COLLINS.prm leaves in) are not counted;
* `ADVP` and `PRT` are equivalent labels;
* gold and test brackets are matched as multisets (a unary chain
  `(NP (NP ...))` gives two brackets that each need a partner);
* a sentence whose test tree has no words is skipped, one whose words differ
  from the gold words (count or spelling) is an error; both are left out of
  the totals, as EVALB does;
* corpus scores sum matched / gold / test brackets over valid sentences.

Scores are percentages (0-100), as EVALB prints them.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Optional, Sequence

from data_gen import trees


@dataclasses.dataclass(frozen=True)
class EvalbParams:
  """The COLLINS.prm settings (plus ROOT and the unlabeled root deleted)."""
  delete_labels: frozenset = frozenset(
      ["TOP", "ROOT", "", "-NONE-", ",", ":", "``", "''", "."])
  delete_labels_for_length: frozenset = frozenset(["-NONE-"])
  equivalent_labels: tuple = (("ADVP", "PRT"),)
  labeled: bool = True
  cutoff_len: int = 40
  # Not EVALB: before scoring, a test tag that disagrees with the gold tag on
  # whether a word is punctuation (a `delete_labels` tag) is set to the gold
  # tag, as Collins' pre-EVALB script did. EVALB deletes punctuation by each
  # tree's own tags, so one such tagging error makes the sentence an error.
  gold_punctuation_tags: bool = False

  def canonical(self, label: str) -> str:
    for a, b in self.equivalent_labels:
      if label == b:
        return a
    return label


COLLINS = EvalbParams()


@dataclasses.dataclass
class SentenceScore:
  """Result for one gold/test pair. `status`: 0 valid, 1 error, 2 skip."""
  status: int
  length: int  # gold words not in delete_labels_for_length (cut-off length)
  matched: int = 0
  gold: int = 0
  test: int = 0
  crossing: int = 0
  words: int = 0
  correct_tags: int = 0
  message: str = ""


@dataclasses.dataclass
class Totals:
  """Corpus-level sums over sentences, EVALB's summary block."""
  sentences: int = 0
  error_sentences: int = 0
  skip_sentences: int = 0
  matched: int = 0
  gold: int = 0
  test: int = 0
  complete_match: int = 0
  crossing: int = 0
  no_crossing: int = 0
  two_or_less_crossing: int = 0
  words: int = 0
  correct_tags: int = 0

  def add(self, s: SentenceScore) -> None:
    self.sentences += 1
    if s.status == 1:
      self.error_sentences += 1
      return
    if s.status == 2:
      self.skip_sentences += 1
      return
    self.matched += s.matched
    self.gold += s.gold
    self.test += s.test
    self.complete_match += int(s.gold == s.test == s.matched)
    self.crossing += s.crossing
    self.no_crossing += int(s.crossing == 0)
    self.two_or_less_crossing += int(s.crossing <= 2)
    self.words += s.words
    self.correct_tags += s.correct_tags

  @property
  def valid_sentences(self) -> int:
    return self.sentences - self.error_sentences - self.skip_sentences

  @property
  def recall(self) -> float:
    return 100.0 * self.matched / self.gold if self.gold else 0.0

  @property
  def precision(self) -> float:
    return 100.0 * self.matched / self.test if self.test else 0.0

  @property
  def f1(self) -> float:
    p, r = self.precision, self.recall
    return 2 * p * r / (p + r) if p + r else 0.0

  @property
  def tagging_accuracy(self) -> float:
    return 100.0 * self.correct_tags / self.words if self.words else 0.0


@dataclasses.dataclass
class Report:
  """`all` sentences and those of gold length <= `cutoff_len`."""
  all: Totals
  short: Totals
  cutoff_len: int
  sentences: list  # SentenceScore per line

  def errors(self) -> list[tuple[int, str]]:
    """(1-based line, message) of every error or skipped sentence."""
    return [(i + 1, s.message) for i, s in enumerate(self.sentences)
            if s.status != 0]


def read_brackets(line: str, params: EvalbParams = COLLINS):
  """Terminals and brackets of one tree line, before label massaging.

  Returns:
    (terminals, brackets, length): terminals `[(word, tag)]` without deleted
    preterminals; brackets `[(start, end, raw_label)]` with `end` exclusive;
    length = words whose tag is not in `delete_labels_for_length`.

  Raises:
    ValueError: unbalanced brackets or a bracket with more than one word.
  """
  tokens = trees.tokenize(line)
  terminals, brackets, stack, length = [], [], [], 0
  i, n = 0, len(tokens)
  while i < n:
    tok = tokens[i]
    if tok == "(":
      label, j = "", i + 1
      if j < n and tokens[j] not in ("(", ")"):
        label, j = tokens[j], j + 1
      if j < n and tokens[j] not in ("(", ")"):  # `(TAG word)`: a terminal
        if j + 1 >= n or tokens[j + 1] != ")":
          raise ValueError(f"more than one element in bracket ({label} ...)")
        length += label not in params.delete_labels_for_length
        if label not in params.delete_labels:
          terminals.append((tokens[j], label))
        i = j + 2
        continue
      stack.append((len(terminals), label))
      i = j
    elif tok == ")":
      if not stack:
        raise ValueError("bracketing is unbalanced (too many ')')")
      start, label = stack.pop()
      brackets.append((start, len(terminals), label))
      i += 1
    else:
      raise ValueError(f"word {tok!r} outside a preterminal bracket")
  if stack:
    raise ValueError(f"bracketing is unbalanced ({len(stack)} open '(')")
  return terminals, brackets, length


def _massage(brackets, params: EvalbParams) -> collections.Counter:
  """Multiset of countable brackets: non-empty, label trimmed, not deleted."""
  out = collections.Counter()
  for start, end, label in brackets:
    if start == end:
      continue
    label = re.split(r"[-=]", label, maxsplit=1)[0]
    if label in params.delete_labels:
      continue
    out[(start, end, params.canonical(label) if params.labeled else "")] += 1
  return out


def _crossing(gold: collections.Counter, test: collections.Counter) -> int:
  """Test brackets that cross at least one gold bracket."""
  spans = [(s, e) for (s, e, _) in gold]
  count = 0
  for (ts, te, _), k in test.items():
    if any((gs < ts < ge < te) or (ts < gs < te < ge) for gs, ge in spans):
      count += k
  return count


def _preterminals(tokens: Sequence[str]) -> list[tuple[int, str, str]]:
  """`(index of the tag token, tag, word)` of each `(TAG word)` in `tokens`."""
  return [(i + 1, tokens[i + 1], tokens[i + 2]) for i in range(len(tokens) - 3)
          if tokens[i] == "(" and tokens[i + 3] == ")" and
          "(" not in tokens[i + 1:i + 3] and ")" not in tokens[i + 1:i + 3]]


def with_gold_punctuation_tags(gold_line: str, test_line: str,
                               params: EvalbParams = COLLINS) -> str:
  """`test_line` with gold tags wherever gold and test disagree on punctuation.

  Punctuation is a tag in `params.delete_labels`. Only when both trees have the
  same words; otherwise `test_line` is returned unchanged (EVALB reports it).
  """
  gold_tokens, test_tokens = trees.tokenize(gold_line), trees.tokenize(test_line)
  gold, test = _preterminals(gold_tokens), _preterminals(test_tokens)
  if [w for _, _, w in gold] != [w for _, _, w in test]:
    return test_line
  punct = params.delete_labels
  for (_, gold_tag, _), (i, test_tag, _) in zip(gold, test):
    if gold_tag != test_tag and (gold_tag in punct or test_tag in punct):
      test_tokens[i] = gold_tag
  return " ".join(test_tokens).replace("( ", "(").replace(" )", ")")


def score_sentence(gold_line: str, test_line: str,
                   params: EvalbParams = COLLINS) -> SentenceScore:
  """EVALB's per-sentence result for one gold and one test tree."""
  if params.gold_punctuation_tags:
    test_line = with_gold_punctuation_tags(gold_line, test_line, params)
  try:
    gold_terms, gold_br, length = read_brackets(gold_line, params)
  except ValueError as e:
    return SentenceScore(1, 0, message=f"gold tree: {e}")
  try:
    test_terms, test_br, _ = read_brackets(test_line, params)
  except ValueError as e:
    return SentenceScore(1, length, message=f"test tree: {e}")
  if not test_terms:
    return SentenceScore(2, length, message="test tree has no words")
  if len(gold_terms) != len(test_terms):
    return SentenceScore(1, length, message=(
        f"length unmatch ({len(gold_terms)}|{len(test_terms)})"))
  for (gw, _), (tw, _) in zip(gold_terms, test_terms):
    if gw != tw:
      return SentenceScore(1, length, message=f"words unmatch ({gw}|{tw})")
  gold, test = _massage(gold_br, params), _massage(test_br, params)
  tags = sum(params.canonical(g) == params.canonical(t)
             for (_, g), (_, t) in zip(gold_terms, test_terms))
  return SentenceScore(
      0, length, matched=sum((gold & test).values()),
      gold=sum(gold.values()), test=sum(test.values()),
      crossing=_crossing(gold, test), words=len(gold_terms),
      correct_tags=tags)


def evaluate(gold_lines: Sequence[str], test_lines: Sequence[str],
             params: EvalbParams = COLLINS,
             max_errors: Optional[int] = None) -> Report:
  """Corpus-level EVALB over parallel lists of one-line trees.

  Args:
    gold_lines: gold trees, one per item.
    test_lines: test trees, same count.
    params: scoring conventions (COLLINS.prm by default).
    max_errors: raise once more than this many sentences are errors (EVALB's
      `-e`); None never raises.

  Returns:
    A `Report`.

  Raises:
    ValueError: different numbers of trees, or too many error sentences.
  """
  if len(gold_lines) != len(test_lines):
    raise ValueError(
        f"gold has {len(gold_lines)} trees but test has {len(test_lines)}; "
        f"line {min(len(gold_lines), len(test_lines)) + 1} has no partner. "
        "Give one tree per line in both, in the same order.")
  all_totals, short = Totals(), Totals()
  scores, errors = [], 0
  for i, (g, t) in enumerate(zip(gold_lines, test_lines)):
    s = score_sentence(g, t, params)
    scores.append(s)
    all_totals.add(s)
    if s.length <= params.cutoff_len:
      short.add(s)
    errors += s.status == 1
    if max_errors is not None and errors > max_errors:
      raise ValueError(f"more than max_errors={max_errors} error sentences; "
                       f"line {i + 1}: {s.message}")
  return Report(all_totals, short, params.cutoff_len, scores)


def delinearize_lines(gold_lines: Sequence[str], test_lines: Sequence[str]) -> list[str]:
  """Trees (one-line strings) of decoder outputs `test_lines` over gold words.

  Each line of a parsing problem's decode (`S NP DT NN /NP ...`) is
  de-linearized, and repaired, over the words of its gold tree, so every
  output is a valid tree with the gold words.
  """
  if len(gold_lines) != len(test_lines):
    raise ValueError(f"gold has {len(gold_lines)} trees but test has {len(test_lines)} "
                     "lines; give one per item, in the same order.")
  out = []
  for i, (g, t) in enumerate(zip(gold_lines, test_lines)):
    try:
      words = trees.clean_tree(trees.parse_tree(g)).leaves()
    except ValueError as e:
      raise ValueError(f"gold line {i + 1} is not a tree: {e}") from e
    out.append(trees.tree_to_string(trees.delinearize(t, words)))
  return out


def summary_line(report: Report) -> str:
  """One line: corpus precision, recall, F1 and counts."""
  t = report.all
  return (f"P = {t.precision:.2f}  R = {t.recall:.2f}  F1 = {t.f1:.2f}  "
          f"(matched {t.matched}, gold {t.gold}, test {t.test}; "
          f"{t.valid_sentences} valid of {t.sentences} sentences)")


def format_report(report: Report) -> str:
  """EVALB-style summary text for both length groups."""
  out = []
  for name, t in (("All", report.all),
                  (f"len<={report.cutoff_len}", report.short)):
    out += [
        f"-- {name} --",
        f"Number of sentence        = {t.sentences:6d}",
        f"Number of Error sentence  = {t.error_sentences:6d}",
        f"Number of Skip  sentence  = {t.skip_sentences:6d}",
        f"Number of Valid sentence  = {t.valid_sentences:6d}",
        f"Matched brackets          = {t.matched:6d}",
        f"Gold brackets             = {t.gold:6d}",
        f"Test brackets             = {t.test:6d}",
        f"Bracketing Recall         = {t.recall:6.2f}",
        f"Bracketing Precision      = {t.precision:6.2f}",
        f"Bracketing FMeasure       = {t.f1:6.2f}",
        f"Complete match            = "
        f"{_pct(t.complete_match, t.valid_sentences):6.2f}",
        f"Average crossing          = "
        f"{(t.crossing / t.valid_sentences if t.valid_sentences else 0):6.2f}",
        f"Tagging accuracy          = {t.tagging_accuracy:6.2f}",
        ""]
  return "\n".join(out)


def _pct(a: int, b: int) -> float:
  return 100.0 * a / b if b else 0.0
