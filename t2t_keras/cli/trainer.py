r"""t2t_keras_trainer: train the Transformer (T2T's t2t-trainer and flags, on TF2 tf.distribute).

  t2t_keras_trainer --problem=translate_ende_wmt32k --hparams_set=transformer_big \
      --data_dir=$DATA --output_dir=$TRAIN --worker_gpu=8
  t2t_keras_trainer --flagfile=flags/wmt14_ende_base.flags --data_dir=$DATA --output_dir=$TRAIN

A flagfile of flags/ also serves t2t_keras_decoder and t2t_keras_exporter. Running
the same command again resumes from the last checkpoint in --output_dir.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from absl import app, flags

FLAGS = flags.FLAGS

from t2t_keras import stopping  # noqa: E402
from t2t_keras.cli import common_flags  # noqa: E402
from t2t_keras.cli import file_checks  # noqa: E402

# Every experiment flag but the decoder's --checkpoint_path and --decode_to_file.
common_flags.define_experiment_flags([name for name in common_flags.EXPERIMENT_FLAGS
                                      if name not in ("checkpoint_path", "decode_to_file")])

flags.DEFINE_integer("log_every_steps", 100, "Progress line every N steps (or 30 s).")

_TRAINING_SCHEDULES = ("train", "train_and_evaluate", "continuous_train_and_eval")


def main(argv):
  del argv
  # From here on SIGTERM and Ctrl-C stop the command at any stage (stopping.py).
  with stopping.StopSignals() as signals:
    _check_and_train(signals)


def _check_and_train(signals: stopping.StopSignals):
  """Checks every flag and input before anything is written, then trains under the lock."""
  common_flags.resolve_path_flags("data_dir", "output_dir")
  for name in ("problem", "data_dir", "output_dir", "hparams_set"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  if FLAGS.model != "transformer":
    raise app.UsageError(f"--model={FLAGS.model}: only 'transformer' is implemented.")
  if FLAGS.decode_from_file:  # BLEU in evaluation: its files are checked now, not at step N
    _check_bleu_files()
  import keras

  from data_gen import registry
  from t2t_keras import experiment, precision, run_dir, training
  from t2t_keras.hparams import create_decode_hparams, create_hparams

  try:  # multi_worker_mirrored must come before any other TensorFlow op
    strategy = training.create_strategy(FLAGS.distribution_strategy, FLAGS.worker_gpu)
  except ValueError as e:  # more --worker_gpu than GPUs
    raise app.UsageError(str(e)) from None
  signals.install()  # again: multi_worker_mirrored replaces the SIGTERM handler with its own
  if FLAGS.random_seed is not None:
    keras.utils.set_random_seed(FLAGS.random_seed)
  try:  # Every setting is checked before anything is written to --output_dir.
    registry.import_usr_dir(FLAGS.t2t_usr_dir)
    hparams = create_hparams(FLAGS.hparams_set, FLAGS.hparams)  # checks the schedule too
    # hparams.activation_dtype may select the policy; set before any model is built.
    precision.set_mixed_precision(precision.mode_for(
        hparams.activation_dtype, FLAGS.mixed_precision, FLAGS["mixed_precision"].present))
    config = experiment.RunConfig(
        output_dir=FLAGS.output_dir, train_steps=FLAGS.train_steps, eval_steps=FLAGS.eval_steps,
        local_eval_frequency=FLAGS.local_eval_frequency,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, random_seed=FLAGS.random_seed,
        log_every_steps=FLAGS.log_every_steps, train_seconds=FLAGS.train_seconds,
        start_over=FLAGS.start_over)
    decode_hp = create_decode_hparams(FLAGS.decode_hparams)
    problem = registry.problem(FLAGS.problem, FLAGS.data_dir)
    problem.check_data_dir(FLAGS.data_dir)  # ValueError naming datagen if it did not finish
    encoders = problem.feature_encoders(FLAGS.data_dir)
    vocab = run_dir.check_vocab(FLAGS.output_dir, FLAGS.data_dir, print, problem, resuming=True)
    if FLAGS.eval_bleu and not FLAGS.decode_from_file:
      for side in ("inputs", "targets"):
        path = problem.text_file(FLAGS.data_dir, "dev", side)
        if not os.path.isfile(path):
          raise ValueError(f"--eval_bleu decodes the dev text of --data_dir={FLAGS.data_dir}, "
                           f"but {path} is missing; give --decode_from_file=FILE and "
                           "--decode_reference=FILE instead.")
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  with _run_dir_lock(strategy):  # before anything is written to --output_dir
    _train(strategy, hparams, config, decode_hp, problem, encoders, vocab, signals)


def _run_dir_lock(strategy):
  """--output_dir's lock (run_lock.py) when this process trains as the chief, else a no-op.

  Workers of a multi-worker job write only their tmp_worker_N; evaluation alone
  writes no checkpoint.
  """
  from t2t_keras import experiment, run_lock
  chief = experiment._is_chief(strategy)  # pylint: disable=protected-access
  if FLAGS.schedule not in _TRAINING_SCHEDULES or not chief:
    return contextlib.nullcontext()
  return run_lock.RunLock(FLAGS.output_dir, log=lambda line: print(line, flush=True))


def _train(strategy, hparams, config, decode_hp, problem, encoders, vocab, signals):
  """Builds the Trainer, saves or checks the run files and runs --schedule."""
  import keras
  import tensorflow as tf

  from t2t_keras import experiment, run_dir, t2t_import, training
  from t2t_keras.perf import process
  spec = run_dir.ModelSpec(encoders["inputs"].vocab_size, encoders["targets"].vocab_size,
                           problem.target_space_id)
  trainer = training.Trainer(hparams, spec, strategy, FLAGS.train_steps, FLAGS.jit_compile,
                             adam_step_offset=t2t_import.adam_step_offset(FLAGS.output_dir))
  eval_hook = _bleu_hook(trainer, problem, encoders, decode_hp)
  try:
    run_dir.save_or_check_run_files(FLAGS.output_dir, hparams, problem.name, spec, vocab)
  except ValueError as e:  # another run's hparams or problem in --output_dir
    raise app.UsageError(str(e)) from None
  train_pattern = problem.filepattern(FLAGS.data_dir, "train")
  eval_pattern = problem.filepattern(FLAGS.data_dir, "dev")
  if not tf.io.gfile.glob(eval_pattern):
    eval_pattern = None
  params = trainer.model.count_params()
  print(f"{FLAGS.problem} / {FLAGS.hparams_set}: {params:,} parameters, "
        f"{strategy.num_replicas_in_sync} replica(s), policy "
        f"{keras.mixed_precision.global_policy().name}.", flush=True)
  run = experiment.Experiment(trainer, config, train_pattern, eval_pattern,
                              log=lambda line: print(line, flush=True), eval_hook=eval_hook,
                              stop_signals=signals,
                              # after tf.data's malloc setting, made in the first step
                              after_first_step=process.keep_freed_memory)
  summary = run.run(FLAGS.schedule)
  if summary.get("stop_reason") == "signal":
    who = signals.name or "a signal to another worker"
    print(f"Stopped by {who} at step {trainer.step} with a checkpoint saved; run the same "
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


def _bleu_hook(trainer, problem, encoders, decode_hp):
  """BLEU on the dev source (or --decode_from_file) at each evaluation, as T2T's hook."""
  if not (FLAGS.eval_bleu or FLAGS.decode_from_file):
    return None
  source = FLAGS.decode_from_file or problem.text_file(FLAGS.data_dir, "dev", "inputs")
  reference = FLAGS.decode_reference or (None if FLAGS.decode_from_file else
                                         problem.text_file(FLAGS.data_dir, "dev", "targets"))
  if reference is None:
    raise app.UsageError("--decode_from_file needs --decode_reference for BLEU in evaluation.")
  from t2t_keras import bleu, decode_text
  return decode_text.make_bleu_hook(trainer.model, encoders, decode_hp,
                                    source, reference, max_lines=FLAGS.eval_bleu_max_lines,
                                    # the paper's tokenized BLEU too, where Moses knows the language
                                    paper_language=bleu.paper_language(problem.target_lang))


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
