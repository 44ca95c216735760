r"""t2t_keras_trainer: train the Transformer (T2T's t2t-trainer and flags, on TF2 tf.distribute).

  t2t_keras_trainer --problem=translate_ende_wmt32k --hparams_set=transformer_big \
      --data_dir=$DATA --output_dir=$TRAIN --worker_gpu=8
  t2t_keras_trainer --flagfile=flags/wmt14_ende_base.flags --data_dir=$DATA --output_dir=$TRAIN

A flagfile of flags/ also serves t2t_keras_decoder and t2t_keras_exporter. Running
the same command again resumes from the last checkpoint in --output_dir; so does
--output_dir alone (with --train_steps): --problem, --hparams_set, --hparams and
--data_dir default to those the run recorded, and a given one that differs is refused.

  t2t_keras_trainer --output_dir=$TRAIN --train_steps=300000
"""

from __future__ import annotations

import os
import signal
import sys

from absl import app, flags

from t2t_keras.cli import common_flags, file_checks
from t2t_keras.perf import process
from t2t_keras.rundir.files import RunDir
from t2t_keras.training import stopping

FLAGS = flags.FLAGS

# Every experiment flag but the decoder's --checkpoint_path and --decode_to_file.
common_flags.define_experiment_flags([name for name in common_flags.EXPERIMENT_FLAGS
                                      if name not in ("checkpoint_path", "decode_to_file")])

flags.DEFINE_integer("log_every_steps", 100, "Progress line every N steps (or 30 s).")
flags.DEFINE_string("warm_start_from", None,
                    "Start a new run from these weights (T2T's flag): a run directory, a "
                    "checkpoint prefix, or a T2T checkpoint (its output_dir or model.ckpt-N). "
                    "Step 0 and a fresh optimizer; ignored once --output_dir has checkpoints.")
flags.DEFINE_enum("warm_start_vocab", None, ["check", "map"],
                  "check (default): --warm_start_from must have the vocabulary of --data_dir; "
                  "map: copy the rows of the tokens both vocabularies hold, new tokens "
                  "initialized as T2T's embeddings.")


def main(argv):
  del argv
  # From here on SIGTERM and Ctrl-C stop the command at any stage (stopping.py).
  with stopping.StopSignals() as signals:
    _check_and_train(signals)


def _check_and_train(signals: stopping.StopSignals):
  """Checks the flags and input files, then trains (`training.runner.train`)."""
  common_flags.resolve_path_flags("data_dir", "output_dir", "warm_start_from")
  # Resuming, --problem, --hparams_set and --data_dir default to the run's (runner
  # checks them; a gfile URL is checked there too).
  resuming = FLAGS.output_dir and ("://" in FLAGS.output_dir or os.path.exists(
      RunDir(FLAGS.output_dir).hparams_file))
  for name in ("output_dir",) if resuming else ("problem", "data_dir", "output_dir",
                                                "hparams_set"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  if FLAGS.model != "transformer":
    raise app.UsageError(f"--model={FLAGS.model}: only 'transformer' is implemented.")
  if FLAGS.decode_from_file:  # BLEU in evaluation: its files are checked now, not at step N
    _check_bleu_files()
  from t2t_keras.training import runner  # TensorFlow: not for --help
  summary = {}
  runner.train(
      FLAGS.problem, FLAGS.hparams_set, FLAGS.data_dir, FLAGS.output_dir, FLAGS.hparams,
      train_steps=FLAGS.train_steps, train_seconds=FLAGS.train_seconds,
      strategy=FLAGS.distribution_strategy, worker_gpu=FLAGS.worker_gpu,
      schedule=FLAGS.schedule, eval_steps=FLAGS.eval_steps,
      local_eval_frequency=FLAGS.local_eval_frequency,
      keep_checkpoint_max=FLAGS.keep_checkpoint_max, random_seed=FLAGS.random_seed,
      log_every_steps=FLAGS.log_every_steps, start_over=FLAGS.start_over,
      jit_compile=FLAGS.jit_compile,
      mixed_precision=FLAGS.mixed_precision if FLAGS["mixed_precision"].present else None,
      allow_tf32=FLAGS.allow_tf32,
      decode_hparams=FLAGS.decode_hparams, eval_bleu=FLAGS.eval_bleu,
      eval_bleu_max_lines=FLAGS.eval_bleu_max_lines, decode_from_file=FLAGS.decode_from_file,
      decode_reference=FLAGS.decode_reference, t2t_usr_dir=FLAGS.t2t_usr_dir,
      warm_start_from=FLAGS.warm_start_from, warm_start_vocab=FLAGS.warm_start_vocab,
      eval_early_stopping_steps=FLAGS.eval_early_stopping_steps,
      eval_early_stopping_metric=FLAGS.eval_early_stopping_metric,
      eval_early_stopping_metric_delta=FLAGS.eval_early_stopping_metric_delta,
      # unset: as the metric says (T2T's default True would minimize BLEU)
      eval_early_stopping_metric_minimize=(FLAGS.eval_early_stopping_metric_minimize if
                                           FLAGS["eval_early_stopping_metric_minimize"].present
                                           else None),
      keep_best_checkpoints=FLAGS.keep_best_checkpoints,
      stop_signals=signals,
      # after tf.data's malloc setting, made in the first step
      after_first_step=process.keep_freed_memory, summary=summary)
  if summary.get("stop_reason") == "signal":
    who = signals.name or "a signal to another worker"
    print(f"Stopped by {who} at step {summary['step']} with a checkpoint saved; run the same "
          "command to resume.", flush=True)
    # 128 + the signal, as if killed by it: `trainer && decoder` does not go on.
    sys.exit(128 + (signals.signum or signal.SIGTERM))


def _check_bleu_files():
  """--decode_from_file and --decode_reference exist and pair up line by line."""
  if not FLAGS.decode_reference:
    raise app.UsageError("--decode_from_file needs --decode_reference for BLEU in evaluation.")
  sources = file_checks.read_input_lines("decode_from_file", FLAGS.decode_from_file,
                                         "a text file of source sentences, one per line")
  references = file_checks.read_input_lines(
      "decode_reference", FLAGS.decode_reference,
      "a text file of reference translations, one per source line")
  if len(sources) != len(references):
    raise app.UsageError(
        f"--decode_reference={FLAGS.decode_reference} has {len(references)} lines but "
        f"--decode_from_file={FLAGS.decode_from_file} has {len(sources)}; give one reference "
        "line per source line, in the same order.")


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
