"""t2t_keras_parse_eval: EVALB (COLLINS.prm) scores of parses against gold.

  t2t_keras_parse_eval --gold=wsj23.gold.trees --test=wsj23.parsed.trees

Both files hold one bracketed tree per line, in the same order. With
`--linearized_test` the test file holds decoder outputs of a parsing problem
(`S NP DT NN /NP ...`); each is de-linearized (and repaired) over the words of
its gold tree first, and `--write_test_trees` can save those trees.
"""

from __future__ import annotations

import sys

from absl import app, flags

from data_gen import file_io
from t2t_keras.cli import common_flags, file_checks
from t2t_keras.scoring import evalb

FLAGS = flags.FLAGS
flags.DEFINE_string("gold", None, "Gold trees, one per line.")
flags.DEFINE_string("test", None, "Test trees (or decodes), one per line.")
flags.DEFINE_bool("linearized_test", False,
                  "Test lines are linearized trees from the decoder; "
                  "de-linearize them over the gold words before scoring.")
flags.DEFINE_string("write_test_trees", None,
                    "With --linearized_test: write the de-linearized test "
                    "trees here, one per line.")
flags.DEFINE_integer("max_errors", 10,
                     "Stop with an error after this many error sentences "
                     "(EVALB's -e); -1 never stops.")
flags.DEFINE_bool("gold_punctuation_tags", False,
                  "Not EVALB: where gold and test disagree on whether a word is "
                  "punctuation, use the gold tag (Collins' pre-EVALB script), so a "
                  "punctuation tagging error is not a whole error sentence.")
flags.DEFINE_integer("cutoff_len", 40,
                     "Also report sentences of at most this many words.")


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not FLAGS.gold or not FLAGS.test:
    raise app.UsageError("Both --gold and --test are required.")
  for flag in ("gold", "test"):
    file_checks.check_input_file(flag, getattr(FLAGS, flag), "a file of trees, one per line")
  if FLAGS.write_test_trees:
    common_flags.check_output_file("write_test_trees", FLAGS.write_test_trees)
  try:
    gold, test = file_io.read_aligned_lines(FLAGS.gold, FLAGS.test, ("--gold", "--test"))
  except ValueError as e:  # line counts differ, or invalid UTF-8
    raise app.UsageError(str(e)) from None
  if FLAGS.linearized_test:
    test = evalb.delinearize_lines(gold, test)
    if FLAGS.write_test_trees:
      file_io.write_lines(FLAGS.write_test_trees, test)
  params = evalb.EvalbParams(cutoff_len=FLAGS.cutoff_len,
                             gold_punctuation_tags=FLAGS.gold_punctuation_tags)
  max_errors = None if FLAGS.max_errors < 0 else FLAGS.max_errors
  report = evalb.evaluate(gold, test, params, max_errors=max_errors)
  for line, message in report.errors():
    print(f"line {line}: {message}", file=sys.stderr)
  print(evalb.format_report(report))
  print(evalb.summary_line(report))


def run() -> None:
  """Console-script entry point."""
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
