"""Corpus BLEU through sacrebleu, with T2T's `t2t-bleu` conventions.

T2T's `t2t-bleu` scored detokenized text with mteval-v14's "international"
tokenization, which its maintainers equate with sacrebleu's `-tok intl`
(issue #569); `intl` is therefore the default here. Scores are on sacrebleu's
0-100 scale, with sacrebleu's signature string (e.g.
`nrefs:1|case:mixed|eff:no|tok:intl|smooth:exp|version:2.6.0`) so that a
number can always be traced to its settings.
"""

from __future__ import annotations

from typing import Sequence

from sacrebleu.metrics import BLEU

TOKENIZERS = ("13a", "intl")
BLEU_VARIANTS = ("cased", "uncased", "both")


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
  if isinstance(hypotheses, str) or isinstance(references, str):
    raise ValueError("hypotheses and references must be sequences of "
                     "strings (one per segment), not a single string")
  if len(hypotheses) != len(references):
    raise ValueError(f"got {len(hypotheses)} hypotheses but "
                     f"{len(references)} references; they must be aligned")
  metric = BLEU(tokenize=tokenize, lowercase=lowercase)
  result = metric.corpus_score(list(hypotheses), [list(references)])
  return result.score, str(metric.get_signature())


def read_aligned_files(translation_path: str,
                       reference_path: str) -> tuple[list[str], list[str]]:
  """Lines of both files, checked to be equally many.

  Raises:
    ValueError: the files have different line counts (both are named).
  """
  hyps, refs = _read_lines(translation_path), _read_lines(reference_path)
  if len(hyps) != len(refs):
    raise ValueError(
        f"translation file {translation_path} has {len(hyps)} lines but "
        f"reference file {reference_path} has {len(refs)}; they must be "
        "line-aligned (one segment per line).")
  return hyps, refs


def file_bleu(translation_path: str, reference_path: str,
              tokenize: str = "intl",
              lowercase: bool = False) -> tuple[float, str]:
  """`corpus_bleu` of a translation file against a reference file."""
  hyps, refs = read_aligned_files(translation_path, reference_path)
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


def _read_lines(path: str) -> list[str]:
  with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # a final newline does not start another segment
  return lines
