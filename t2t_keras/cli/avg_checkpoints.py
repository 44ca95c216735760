r"""t2t_keras_avg_checkpoints: average the last N checkpoints (T2T's avg_checkpoints.py).

  t2t_keras_avg_checkpoints --prefix=$TRAIN_DIR --num_last_checkpoints=20 \
      --output_path=$TRAIN_DIR/averaged/averaged.ckpt
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

FLAGS = flags.FLAGS
from t2t_keras.cli import common_flags  # noqa: E402  (shared flags; define_once)
flags.DEFINE_string("checkpoints", "", "Comma-separated checkpoint prefixes to average.")
flags.DEFINE_string("prefix", "", "Training --output_dir whose last checkpoints are averaged.")
common_flags.define_once("integer", "num_last_checkpoints", 0, "Average the last N checkpoints of --prefix.")
flags.DEFINE_string("output_path", "/tmp/averaged.ckpt", "Prefix of the averaged checkpoint.")
common_flags.define_once("string", "output_dir", None,
                    "Run directory with hparams.json (default: --prefix, or the first "
                    "checkpoint's directory).")
common_flags.define_once("string", "data_dir", None,
                         "Optional: refuse unless this data_dir's vocabulary is the run's.")


def main(argv):
  del argv
  common_flags.resolve_path_flags("prefix", "output_dir", "output_path")
  import tensorflow as tf

  from t2t_keras import avg_checkpoints, run_dir
  if FLAGS.checkpoints:
    paths = [p.strip() for p in FLAGS.checkpoints.split(",") if p.strip()]
  elif FLAGS.prefix and FLAGS.num_last_checkpoints:
    try:
      paths = avg_checkpoints.last_checkpoints(FLAGS.prefix, FLAGS.num_last_checkpoints)
    except (ValueError, FileNotFoundError) as e:
      raise app.UsageError(str(e)) from None
  else:
    raise app.UsageError("Give --checkpoints, or --prefix with --num_last_checkpoints.")
  if tf.io.gfile.isdir(FLAGS.output_path):
    raise app.UsageError(f"--output_path={FLAGS.output_path} is a directory; give a "
                         "checkpoint prefix such as <dir>/averaged.ckpt.")
  directory = FLAGS.output_dir or FLAGS.prefix or os.path.dirname(paths[0])
  try:
    hparams, _, spec = run_dir.load_run_files(directory)
  except FileNotFoundError as e:
    raise app.UsageError(str(e)) from None
  if FLAGS.data_dir:  # before the model is built
    run_dir.check_vocab(directory, FLAGS.data_dir, lambda line: print(line, file=sys.stderr))
  model = run_dir.build_model(hparams, spec)
  print(f"Averaging {len(paths)} checkpoints: " + ", ".join(os.path.basename(p) for p in paths))
  written = avg_checkpoints.average_checkpoints(
      model, paths, FLAGS.output_path,
      model_source=f"the model of {os.path.join(directory, run_dir.HPARAMS_FILE)}",
      log=lambda line: print(line, file=sys.stderr, flush=True))
  print(f"Averaged checkpoint written to {written}")


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
