r"""t2t_keras_bleu: corpus BLEU of a translation file against a reference.

  t2t_keras_bleu --translation=newstest2014.de.decoded \
      --reference=newstest2014.de --bleu_variant=all --tokenize=intl

`cased`, `uncased`, `both` print `BLEU_cased` / `BLEU_uncased` on sacrebleu's
0-100 scale (as T2T's t2t-bleu printed them) followed by sacrebleu's
signature. `paper` prints the tokenized BLEU of T2T's get_ende_bleu.sh, the
kind of number in the paper's tables; `all` prints the three. Both files hold
detokenized text, one segment per line.
"""

from __future__ import annotations

from absl import app, flags

from data_gen import file_io
from t2t_keras.cli import common_flags, file_checks
from t2t_keras.scoring import bleu

FLAGS = flags.FLAGS
flags.DEFINE_string("translation", None, "Detokenized system output, one "
                    "segment per line.")
flags.DEFINE_string("reference", None, "Detokenized reference, one segment "
                    "per line, aligned with --translation. For the paper "
                    "variant it is tokenized here exactly like the "
                    "translation (T2T instead read a newstest file that was "
                    "distributed already tokenized).")
flags.DEFINE_enum("bleu_variant", "both", list(bleu.BLEU_VARIANTS),
                  "cased / uncased / both: sacreBLEU as T2T's t2t-bleu; "
                  "paper: tokenized BLEU as in the paper (T2T's "
                  "get_ende_bleu.sh: Moses tokenizer, compound splitting, "
                  "multi-bleu.perl); all: cased, uncased and paper.")
flags.DEFINE_enum("tokenize", "intl", list(bleu.TOKENIZERS),
                  "sacrebleu tokenizer; intl is what T2T's t2t-bleu used.")
flags.DEFINE_enum("language", "de", list(bleu.PAPER_LANGUAGES),
                  "Paper variant: Moses tokenizer language, the target "
                  "language (de for translate_ende_*).")
flags.DEFINE_bool("paper_ascii_reference_quotes", False,
                  "Paper variant: turn the reference's unicode double quotes "
                  "(including the German low quote) into '\"' first, "
                  "approximating the hand-edited newstest2014 reference "
                  "behind T2T's own figures (tensorflow/tensor2tensor#317).")

_SACREBLEU_CASES = {"cased": [False], "uncased": [True], "both": [False, True],
                    "paper": [], "all": [False, True]}


def bleu_lines(translation: str, reference: str, variant: str,
               tokenize: str, language: str = "de",
               ascii_reference_quotes: bool = False) -> list[str]:
  """The lines `main` prints: `BLEU_<case> = <score>` and its signature.

  The paper variant adds `tokenized BLEU (as in the paper) = <score>` with
  its settings, then multi-bleu.perl's own summary line indented.
  """
  hyps, refs = file_io.read_aligned_lines(translation, reference,
                                          ("translation file", "reference file"))
  return score_lines(hyps, refs, variant, tokenize, language, ascii_reference_quotes)


def score_lines(hyps: list[str], refs: list[str], variant: str, tokenize: str,
                language: str = "de", ascii_reference_quotes: bool = False) -> list[str]:
  """`bleu_lines` of segments already read."""
  if variant not in bleu.BLEU_VARIANTS:
    raise ValueError(f"bleu_variant must be one of {bleu.BLEU_VARIANTS}, "
                     f"got {variant!r}")
  out = []
  for lowercase in _SACREBLEU_CASES[variant]:
    score, signature = bleu.corpus_bleu(hyps, refs, tokenize=tokenize,
                                        lowercase=lowercase)
    name = "BLEU_uncased" if lowercase else "BLEU_cased"
    out.append(f"{name} = {score:6.2f}  ({signature})")
  if variant in ("paper", "all"):
    out.extend(paper_lines(hyps, refs, language, ascii_reference_quotes))
  return out


def paper_lines(hypotheses: list[str], references: list[str], language: str = "de",
                ascii_reference_quotes: bool = False) -> list[str]:
  """`tokenized BLEU (as in the paper) = ...` and multi-bleu.perl's summary."""
  result = bleu.paper_bleu(hypotheses, references, language=language,
                           ascii_reference_quotes=ascii_reference_quotes)
  signature = bleu.paper_signature(language, ascii_reference_quotes)
  return [f"tokenized BLEU (as in the paper) = {result.score:6.2f}  ({signature})",
          f"  multi-bleu.perl: {result.summary()}"]


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not FLAGS.translation or not FLAGS.reference:
    raise app.UsageError("Both --translation and --reference are required.")
  what = "detokenized text, one segment per line"
  for flag in ("translation", "reference"):  # before the slow Moses tokenizer loads
    file_checks.check_input_file(flag, getattr(FLAGS, flag), what)
  try:
    hyps, refs = file_io.read_aligned_lines(FLAGS.translation, FLAGS.reference,
                                            ("--translation", "--reference"))
  except ValueError as e:  # line counts differ, or invalid UTF-8
    raise app.UsageError(str(e)) from None
  for line in score_lines(hyps, refs, FLAGS.bleu_variant, FLAGS.tokenize, FLAGS.language,
                          FLAGS.paper_ascii_reference_quotes):
    print(line)


def run() -> None:
  """Console-script entry point."""
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
