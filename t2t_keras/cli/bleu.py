"""t2t_keras_bleu: corpus BLEU of a translation file against a reference.

  t2t_keras_bleu --translation=newstest2014.de.decoded \
      --reference=newstest2014.de --bleu_variant=both --tokenize=intl

Prints `BLEU_cased` / `BLEU_uncased` on sacrebleu's 0-100 scale (as T2T's
t2t-bleu printed them) followed by sacrebleu's signature.
"""

from __future__ import annotations

from absl import app
from absl import flags

from t2t_keras import bleu

FLAGS = flags.FLAGS
flags.DEFINE_string("translation", None, "Detokenized system output, one "
                    "segment per line.")
flags.DEFINE_string("reference", None, "Detokenized reference, one segment "
                    "per line, aligned with --translation.")
flags.DEFINE_enum("bleu_variant", "both", list(bleu.BLEU_VARIANTS),
                  "Report cased BLEU, uncased BLEU or both.")
flags.DEFINE_enum("tokenize", "intl", list(bleu.TOKENIZERS),
                  "sacrebleu tokenizer; intl is what T2T's t2t-bleu used.")


def bleu_lines(translation: str, reference: str, variant: str,
               tokenize: str) -> list[str]:
  """The lines `main` prints: `BLEU_<case> = <score>` and its signature."""
  if variant not in bleu.BLEU_VARIANTS:
    raise ValueError(f"bleu_variant must be one of {bleu.BLEU_VARIANTS}, "
                     f"got {variant!r}")
  hyps, refs = bleu.read_aligned_files(translation, reference)
  cases = {"cased": [False], "uncased": [True], "both": [False, True]}
  out = []
  for lowercase in cases[variant]:
    score, signature = bleu.corpus_bleu(hyps, refs, tokenize=tokenize,
                                        lowercase=lowercase)
    name = "BLEU_uncased" if lowercase else "BLEU_cased"
    out.append(f"{name} = {score:6.2f}  ({signature})")
  return out


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not FLAGS.translation or not FLAGS.reference:
    raise app.UsageError("Both --translation and --reference are required.")
  for line in bleu_lines(FLAGS.translation, FLAGS.reference,
                         FLAGS.bleu_variant, FLAGS.tokenize):
    print(line)


def run() -> None:
  """Console-script entry point."""
  app.run(main)


if __name__ == "__main__":
  app.run(main)
