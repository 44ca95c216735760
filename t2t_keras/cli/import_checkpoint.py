r"""t2t_keras_import_checkpoint: a run T2T wrote -> a t2t-keras run directory.

  t2t_keras_import_checkpoint --t2t_output_dir=$T2T_TRAIN --output_dir=$NEW_RUN
  t2t_keras_decoder --output_dir=$NEW_RUN --data_dir=$NEW_RUN \
      --decode_from_file=newstest2014.en --decode_to_file=out.de
  t2t_keras_exporter --output_dir=$NEW_RUN --data_dir=$NEW_RUN

Reads T2T's hparams.json, flags.txt (problem, hparams_set; the flags below
override them) and the latest checkpoint (or --checkpoint_path); writes
hparams.json, run.json, the vocabulary, `ckpt-<T2T step>` (the weights and
T2T's Adam moments) and `trainer_flags.txt` (for `t2t_keras_trainer
--flagfile=$NEW_RUN/trainer_flags.txt --data_dir=$DATA --train_steps=N` to
fine-tune from T2T's step, taking the updates T2T would take resuming).

A T2T language model (a problem without inputs, e.g. languagemodel_lm1b32k)
imports as a t2t-keras language model (run.json `has_inputs` false); a T2T
problem not registered here becomes `languagemodel_from_files` with T2T's
subword vocabulary (found as vocab.<problem>.<N>.subwords, or --vocab_file).
"""

from __future__ import annotations

import sys

from absl import app, flags

from t2t_keras.cli import common_flags

FLAGS = flags.FLAGS
_define = common_flags.define_once  # several commands may be imported in one process (tests)


_define("string", "t2t_output_dir", None, "T2T's --output_dir: hparams.json, flags.txt, "
        "model.ckpt-<step>.")
_define("string", "checkpoint_path", None, "A T2T checkpoint prefix (default: the latest).")
_define("string", "problem", None, "Default: --problem in T2T's flags.txt.")
_define("string", "hparams_set", None, "Default: T2T's flags.txt. Used when there is no "
        "hparams.json, and as the base of the trainer's --hparams.")
_define("string", "hparams", "", "Overrides applied after T2T's hparams.json.")
_define("string", "data_dir", None, "Where the vocabulary is (default: --t2t_output_dir, "
        "then T2T's --data_dir).")
_define("string", "output_dir", None, "The new t2t-keras run directory (must not exist).")
_define("list", "ignore_t2t_hparams", [], "T2T hparams to drop although t2t-keras does not "
        "implement their value (you accept the difference).")
_define("integer", "target_space_id", None, "Row of T2T's target_space_embedding (default: "
        "the problem's, or the one row T2T's Adam slots show it trained).")
_define("boolean", "reset_optimizer", False, "Import the weights only: Adam starts fresh "
        "(zero moments, bias correction from the import) instead of continuing T2T's.")
_define("string", "vocab_file", None, "A T2T language model whose problem is not registered "
        "here: T2T's subword vocabulary file (default: vocab.<problem>.<N>.subwords in "
        "--data_dir, --t2t_output_dir or T2T's --data_dir).")


def main(argv):
  del argv
  common_flags.resolve_path_flags("t2t_output_dir", "output_dir", "data_dir", "checkpoint_path",
                                  "vocab_file")
  for name in ("t2t_output_dir", "output_dir"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.t2t_import import importer
  try:
    result = importer.import_t2t_run(
        FLAGS.t2t_output_dir, FLAGS.output_dir, checkpoint_path=FLAGS.checkpoint_path,
        problem_name=FLAGS.problem, hparams_set=FLAGS.hparams_set,
        hparams_overrides=FLAGS.hparams, data_dir=FLAGS.data_dir,
        ignore_hparams=FLAGS.ignore_t2t_hparams, target_space_id=FLAGS.target_space_id,
        reset_optimizer=FLAGS.reset_optimizer, vocab_file=FLAGS.vocab_file,
        log=lambda line: print(line, file=sys.stderr, flush=True))
  except (ValueError, FileNotFoundError) as e:  # a damaged checkpoint or vocabulary too
    raise app.UsageError(str(e)) from None
  out = result["output_dir"]
  if result["has_inputs"]:
    print(f"Decode:    t2t_keras_decoder --output_dir={out} --data_dir={out} "
          "--decode_from_file=...", flush=True)
    print(f"Export:    t2t_keras_exporter --output_dir={out} --data_dir={out}", flush=True)
  else:
    print(f"Score, sample: a language model, as docs/language_models.md says (its "
          f"vocabulary is in the run: --data_dir={out})", flush=True)
  print(f"Fine-tune: t2t_keras_trainer --flagfile={out}/trainer_flags.txt --data_dir=DATA "
        f"--train_steps=<more than {result['global_step']}>", flush=True)


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
