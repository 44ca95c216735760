"""Corpus BLEU: sacrebleu with T2T's `t2t-bleu` conventions, and the paper's.

T2T's `t2t-bleu` scored detokenized text with mteval-v14's "international"
tokenization, which its maintainers equate with sacrebleu's `-tok intl`
(tensorflow/tensor2tensor#569); `intl` is therefore the default here. Scores are on sacrebleu's
0-100 scale, with sacrebleu's signature string (e.g.
`nrefs:1|case:mixed|eff:no|tok:intl|smooth:exp|version:2.6.0`) so that a
number can always be traced to its settings.

The paper's 27.3 / 28.4 are *tokenized* BLEU, computed as T2T's
`utils/get_ende_bleu.sh` did: Moses `replace-unicode-punctuation.perl`, Moses
`tokenizer.perl -l de` (default options, so XML escaping on), compounds put in
"ATAT" form (`rich-text` -> `rich ##AT##-##AT## text`), then Moses
`multi-bleu.perl`. `paper_bleu` is that pipeline in Python (sacremoses for the
two Moses scripts); it is not comparable with the sacrebleu numbers above.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import re
from typing import Sequence

from sacrebleu.metrics import BLEU
import sacremoses
from sacremoses.corpus import NonbreakingPrefixes

from data_gen import file_io

TOKENIZERS = ("13a", "intl")
# cased/uncased/both: sacrebleu as T2T's t2t-bleu; paper: get_ende_bleu.sh's
# tokenized BLEU; all: the three numbers.
BLEU_VARIANTS = ("cased", "uncased", "both", "paper", "all")
# Languages Moses' tokenizer has non-breaking-prefix lists for.
PAPER_LANGUAGES = tuple(sorted(set(NonbreakingPrefixes().available_langs.values())))
MAX_ORDER = 4


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str],
                tokenize: str = "intl",
                lowercase: bool = False) -> tuple[float, str]:
  """Corpus BLEU of hypotheses against one reference each.

  Args:
    hypotheses: detokenized system outputs, one string per segment.
    references: detokenized references, aligned with `hypotheses`.
    tokenize: "intl" (T2T's t2t-bleu) or "13a" (WMT's mteval default).
    lowercase: True for uncased BLEU.

  Returns:
    (score on the 0-100 scale, sacrebleu signature string).

  Raises:
    ValueError: unknown `tokenize`, or different numbers of segments.
  """
  if tokenize not in TOKENIZERS:
    raise ValueError(f"tokenize must be one of {TOKENIZERS}, got {tokenize!r}")
  _check_aligned(hypotheses, references)
  metric = BLEU(tokenize=tokenize, lowercase=lowercase)
  result = metric.corpus_score(list(hypotheses), [list(references)])
  return result.score, str(metric.get_signature())


def file_bleu(translation_path: str, reference_path: str,
              tokenize: str = "intl",
              lowercase: bool = False) -> tuple[float, str]:
  """`corpus_bleu` of a translation file against a reference file."""
  hyps, refs = file_io.read_aligned_lines(translation_path, reference_path,
                                          ("translation file", "reference file"))
  return corpus_bleu(hyps, refs, tokenize=tokenize, lowercase=lowercase)


def bleu_wrapper(ref_filename: str, hyp_filename: str,
                 case_sensitive: bool = False,
                 tokenize: str = "intl") -> float:
  """T2T's `bleu_hook.bleu_wrapper`: BLEU as a FRACTION in [0, 1].

  Kept for T2T users; T2T's `t2t-bleu` printed 100 times this value. Prefer
  `file_bleu`, which returns the 0-100 score and the signature.
  """
  score, _ = file_bleu(hyp_filename, ref_filename, tokenize=tokenize,
                       lowercase=not case_sensitive)
  return score / 100.0


# ---- the paper's tokenized BLEU (T2T utils/get_ende_bleu.sh) -----------------

# perl's `s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g` as get_ende_bleu.sh ran it: on
# raw UTF-8 bytes (no `-CS`, no `use utf8`), where `\S` is one non-ASCII-
# whitespace byte. A global substitution resumes after the consumed right-hand
# character, so "1-2-3" -> "1 ##AT##-##AT## 2-3"; but a multi-byte character
# only has its first byte consumed, so "a-ü-b" gets both hyphens split. A
# bytes pattern reproduces both (Python's bytes `\S` is also ASCII-only).
_ATAT_RE = re.compile(rb"(\S)-(\S)")
_ASCII_WHITESPACE = " \t\n\r\f\v"
# Double quotes that T2T's hand-"tweaked" newstest2014 reference had turned
# into `"` (tensorflow/tensor2tensor#317); replace-unicode-punctuation.perl leaves `„` alone.
_UNICODE_DOUBLE_QUOTES = "\u201e\u201c\u201d\u201f\u00ab\u00bb"


def split_compounds(text: str) -> str:
  """ATAT compound splitting of one tokenized line, byte-exact with T2T's perl."""
  return _ATAT_RE.sub(rb"\1 ##AT##-##AT## \2", text.encode("utf-8")).decode("utf-8")


def replace_unicode_punctuation(text: str) -> str:
  """Moses `replace-unicode-punctuation.perl` (sacremoses' table).

  The perl script maps the full-width one "１" to a double quote (a typo in
  the script, kept in every Moses release); sacremoses maps it to "1". The
  perl behaviour is reproduced so the pipeline matches get_ende_bleu.sh.
  """
  return _punct_normalizer().replace_unicode_punct(text.replace("\uff11", '"'))


def moses_tokenize(text: str, language: str = "de") -> str:
  """Moses `tokenizer.perl -l <language>` with its defaults (escaping on).

  `&` becomes `&amp;`, `"` `&quot;`, `'` `&apos;`, `<` `&lt;`, `>` `&gt;`,
  `|` `&#124;`, `[` `&#91;`, `]` `&#93;`, as tokenizer.perl does without
  `-no-escape` (get_ende_bleu.sh passes only `-l de`). No aggressive hyphen
  splitting (`-a` is not passed either). Tokens are joined by single spaces.
  """
  return " ".join(_moses_tokenizer(_check_language(language)).tokenize(
      text, aggressive_dash_splits=False, escape=True))


def paper_tokenize(text: str, language: str = "de") -> str:
  """One line through get_ende_bleu.sh: unicode punctuation, tokenizer, ATAT."""
  return split_compounds(moses_tokenize(replace_unicode_punctuation(text), language))


@dataclasses.dataclass(frozen=True)
class MultiBleu:
  """What `multi-bleu.perl` prints; `score` and `precisions` on 0-100."""
  score: float
  precisions: tuple[float, ...]
  brevity_penalty: float
  hyp_len: int
  ref_len: int

  @property
  def ratio(self) -> float:
    return self.hyp_len / self.ref_len if self.ref_len else 0.0

  def summary(self) -> str:
    """multi-bleu.perl's output line, e.g. `BLEU = 27.30, 58.1/33.4/... (BP=...)`."""
    precisions = "/".join(f"{p:.1f}" for p in self.precisions)
    return (f"BLEU = {self.score:.2f}, {precisions} (BP={self.brevity_penalty:.3f}, "
            f"ratio={self.ratio:.3f}, hyp_len={self.hyp_len}, ref_len={self.ref_len})")


def multi_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> MultiBleu:
  """Corpus BLEU of tokenized lines with `multi-bleu.perl`'s conventions.

  Tokens are split on ASCII whitespace; n-grams up to 4 with counts clipped by
  the reference's, summed over the corpus; case-sensitive; no smoothing, so a
  corpus without a single matching n-gram of some order scores 0 (the perl
  script takes log(0) as -9999999999). Brevity penalty exp(1 - r/c) when the
  hypotheses are shorter (c < r). An empty corpus side scores 0 (the perl
  script prints 0 for an empty reference and divides by zero for an empty
  hypothesis).

  Raises:
    ValueError: a single string, or different numbers of lines.
  """
  _check_aligned(hypotheses, references)
  matches, totals = [0] * MAX_ORDER, [0] * MAX_ORDER
  hyp_len = ref_len = 0
  for hyp_line, ref_line in zip(hypotheses, references):
    hyp, ref = _perl_split(hyp_line), _perl_split(ref_line)
    hyp_len, ref_len = hyp_len + len(hyp), ref_len + len(ref)
    for n in range(1, MAX_ORDER + 1):
      hyp_ngrams = _ngram_counts(hyp, n)
      ref_ngrams = _ngram_counts(ref, n)
      totals[n - 1] += max(len(hyp) - n + 1, 0)
      matches[n - 1] += sum(min(count, ref_ngrams[g]) for g, count in hyp_ngrams.items())
  precisions = tuple(m / t if t else 0.0 for m, t in zip(matches, totals))
  if not hyp_len or not ref_len:
    return MultiBleu(0.0, tuple(100 * p for p in precisions), 0.0, hyp_len, ref_len)
  brevity_penalty = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
  if min(precisions) == 0.0:
    score = 0.0
  else:
    score = brevity_penalty * math.exp(sum(math.log(p) for p in precisions) / MAX_ORDER)
  return MultiBleu(100 * score, tuple(100 * p for p in precisions), brevity_penalty,
                   hyp_len, ref_len)


def paper_bleu(hypotheses: Sequence[str], references: Sequence[str],
               language: str = "de",
               ascii_reference_quotes: bool = False) -> MultiBleu:
  """The paper's tokenized BLEU of detokenized hypotheses and references.

  Both sides go through `paper_tokenize` (T2T tokenized only the hypotheses:
  its newstest reference was distributed pre-tokenized), then `multi_bleu`.

  Args:
    hypotheses: detokenized system outputs, one string per segment.
    references: detokenized references, aligned with `hypotheses`.
    language: Moses tokenizer language, the target language ("de" for en-de).
    ascii_reference_quotes: first turn the reference's unicode double quotes
      (`„“”‟«»`) into `"`, approximating the hand-edited newstest2014
      reference behind T2T's own get_ende_bleu.sh figures (tensorflow/tensor2tensor#317).

  Raises:
    ValueError: unknown `language`, a single string, or different numbers of
      segments.
  """
  _check_language(language)
  _check_aligned(hypotheses, references)
  if ascii_reference_quotes:
    table = str.maketrans({q: '"' for q in _UNICODE_DOUBLE_QUOTES})
    references = [r.translate(table) for r in references]
  return multi_bleu([paper_tokenize(h, language) for h in hypotheses],
                    [paper_tokenize(r, language) for r in references])


def paper_signature(language: str = "de", ascii_reference_quotes: bool = False) -> str:
  """Settings of `paper_bleu`, in the spirit of sacrebleu's signature."""
  quotes = "|ref-quotes:ascii" if ascii_reference_quotes else ""
  return (f"get_ende_bleu.sh|lang:{language}|replace-unicode-punct|moses-tok:escape"
          f"|compounds:atat|multi-bleu|case:mixed{quotes}"
          f"|sacremoses:{sacremoses.__version__}")


def _perl_split(line: str) -> list[str]:
  """perl's `split` on a byte string: ASCII whitespace only, no empty fields."""
  return [t for t in re.split(f"[{_ASCII_WHITESPACE}]+", line) if t]


def _ngram_counts(tokens: list[str], n: int) -> collections.Counter:
  return collections.Counter(zip(*(tokens[i:] for i in range(n))))


def _check_language(language: str) -> str:
  if language not in PAPER_LANGUAGES:
    raise ValueError(f"language must be a Moses tokenizer language, one of "
                     f"{', '.join(PAPER_LANGUAGES)}; got {language!r}")
  return language


def _check_aligned(hypotheses: Sequence[str], references: Sequence[str]) -> None:
  if isinstance(hypotheses, str) or isinstance(references, str):
    raise ValueError("hypotheses and references must be sequences of "
                     "strings (one per segment), not a single string")
  if len(hypotheses) != len(references):
    raise ValueError(f"got {len(hypotheses)} hypotheses but "
                     f"{len(references)} references; they must be aligned")


class _MosesTokenizer(sacremoses.MosesTokenizer):
  """sacremoses' tokenizer with its two character-class tests on frozen sets.

  sacremoses 0.2.0 rebuilds a set of ~11k alphabetic characters at each call
  (several per line); same answers, 3000 lines scored in 5 s instead of 29 s.
  """
  _ALPHA = frozenset(sacremoses.MosesTokenizer.IsAlpha)
  _LOWER = frozenset(sacremoses.MosesTokenizer.IsLower)

  def isanyalpha(self, text: str) -> bool:
    return not self._ALPHA.isdisjoint(text)

  def islower(self, text: str) -> bool:
    return self._LOWER.issuperset(text)


@functools.lru_cache(maxsize=None)
def _moses_tokenizer(language: str) -> sacremoses.MosesTokenizer:
  return _MosesTokenizer(lang=language)


@functools.lru_cache(maxsize=1)
def _punct_normalizer() -> sacremoses.MosesPunctNormalizer:
  return sacremoses.MosesPunctNormalizer()


def paper_language(target_lang: str) -> str | None:
  """`target_lang` if the Moses tokenizer knows it (e.g. "de"), else None."""
  return target_lang if target_lang in PAPER_LANGUAGES else None


def paper_not_computed(target_lang: str) -> str:
  """The one line said instead of the paper's BLEU when `paper_language` is None."""
  return (f"tokenized BLEU (as in the paper): not computed, the problem's target language "
          f"{target_lang!r} is not one Moses tokenizes (e.g. de; translate_from_files records "
          f"datagen's --target_lang); t2t_keras_bleu --bleu_variant=paper --language=LANG "
          f"scores a file")
