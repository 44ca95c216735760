r"""t2t_keras_avg_checkpoints: average the last N checkpoints (T2T's avg_checkpoints.py).

  t2t_keras_avg_checkpoints --prefix=$TRAIN_DIR --num_last_checkpoints=20
  t2t_keras_avg_checkpoints --checkpoints=$TRAIN_DIR/ckpt-900,$TRAIN_DIR/ckpt-1000 \
      --output_path=$TRAIN_DIR/averaged/mine/averaged.ckpt

With --prefix the average is written in the run's averaged/ directory, as
averaged/from-step-<newest step averaged>/averaged.ckpt (the prefix to give
t2t_keras_decoder --checkpoint_path); with --checkpoints alone give --output_path.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from t2t_keras.cli import common_flags
from t2t_keras.rundir.files import RunDir

FLAGS = flags.FLAGS

flags.DEFINE_string("checkpoints", "", "Comma-separated checkpoint prefixes to average.")
flags.DEFINE_string("prefix", "", "Training --output_dir whose last checkpoints are averaged.")
common_flags.define_once("integer", "num_last_checkpoints", 0, "Average the last N checkpoints of --prefix.")
flags.DEFINE_string("output_path", None,
                    "Prefix of the averaged checkpoint. Default with --prefix: "
                    "<prefix>/averaged/from-step-<newest step averaged>/averaged.ckpt; "
                    "required with --checkpoints alone.")
common_flags.define_once("string", "output_dir", None,
                    "Run directory with hparams.json (default: --prefix, or the first "
                    "checkpoint's directory).")
common_flags.define_once("string", "data_dir", None,
                         "Optional: refuse unless this data_dir's vocabulary is the run's.")


def main(argv):
  del argv
  common_flags.resolve_path_flags("prefix", "output_dir", "output_path")
  if FLAGS.checkpoints and not FLAGS.prefix and not FLAGS.output_path:
    raise app.UsageError("--output_path is required with --checkpoints alone (its default, "
                         "the run's averaged/ directory, needs --prefix=<run directory>).")
  # TensorFlow and the models: loaded when the command runs, not for --help
  import tensorflow as tf

  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras import checkpoints
  from t2t_keras.rundir import averaging, model_factory, settings
  if FLAGS.checkpoints:
    paths = [p.strip() for p in FLAGS.checkpoints.split(",") if p.strip()]
  elif FLAGS.prefix and FLAGS.num_last_checkpoints:
    try:
      paths = averaging.last_checkpoints(FLAGS.prefix, FLAGS.num_last_checkpoints)
    except (ValueError, FileNotFoundError) as e:
      raise app.UsageError(str(e)) from None
  else:
    raise app.UsageError("Give --checkpoints, or --prefix with --num_last_checkpoints.")
  output_path = FLAGS.output_path or RunDir(FLAGS.prefix).averaged_checkpoint(
      max(checkpoints.checkpoint_step(p) for p in paths))  # the run's averaged/
  if tf.io.gfile.isdir(output_path):
    raise app.UsageError(f"--output_path={output_path} is a directory; give a "
                         "checkpoint prefix such as <dir>/averaged.ckpt.")
  directory = FLAGS.output_dir or FLAGS.prefix or os.path.dirname(paths[0])
  try:
    hparams, _, spec = settings.load_run_files(directory)
  except FileNotFoundError as e:
    raise app.UsageError(str(e)) from None
  if FLAGS.data_dir:  # before the model is built
    settings.check_vocab(directory, FLAGS.data_dir, lambda line: print(line, file=sys.stderr))
  model = model_factory.build_model(hparams, spec)
  print(f"Averaging {len(paths)} checkpoints: " + ", ".join(os.path.basename(p) for p in paths))
  written = averaging.average_checkpoints(
      model, paths, output_path,
      model_source=f"the model of {RunDir(directory).hparams_file}",
      log=lambda line: print(line, file=sys.stderr, flush=True))
  print(f"Averaged checkpoint written to {written}")


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
