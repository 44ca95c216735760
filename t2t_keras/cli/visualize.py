r"""t2t_keras_visualize: attention heatmaps of one sentence and training curves, as PNG.

  t2t_keras_visualize --output_dir=$TRAIN --data_dir=$DATA \
      --sentence="The house is small." --kind=all --layer=5 --all_heads --curves

Without --target the sentence is translated greedily first (up to input length
+ 50 tokens). Pictures go to --plot_dir (default $TRAIN/plots); the path of each
PNG written is printed.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from data_gen import registry
from t2t_keras.cli import common_flags, file_checks
from t2t_keras.rundir.files import RunDir

FLAGS = flags.FLAGS

common_flags.define_once("string", "output_dir", None, "Training run directory (hparams.json, run.json, "
                    "checkpoints, TensorBoard logs).")
common_flags.define_once("string", "data_dir", None, "The problem's data directory (its vocabulary).")
common_flags.define_once("string", "t2t_usr_dir", None, "A directory of modules registering user problems.")
common_flags.define_once("string", "checkpoint_path", None, "Checkpoint to load (default: the latest in "
                    "--output_dir).")
flags.DEFINE_string("sentence", None, "Source sentence whose attention is drawn.")
flags.DEFINE_string("target", None, "Target sentence (default: the greedy translation).")
flags.DEFINE_enum("kind", "all", ["encoder", "decoder", "encdec", "all"],
                  "Which attention to draw.")
flags.DEFINE_integer("layer", None, "Layer to draw (default: every layer).")
flags.DEFINE_integer("head", None, "Head to draw (default: a grid of all heads).")
flags.DEFINE_bool("all_heads", False, "Draw a grid of all heads of each layer.")
flags.DEFINE_string("plot_dir", None, "Where PNGs are written (default: output_dir/plots).")
flags.DEFINE_bool("curves", False, "Also plot loss and BLEU over steps from the TensorBoard "
                  "logs of --output_dir.")

EXTRA_DECODE_LENGTH = 50  # T2T's decode_hparams.extra_length.


def _open_run(output_dir: str, checkpoint_path, data_dir: str):
  """The run (`open_run`) with the weights of `checkpoint_path` (default: the newest
  loadable), its vocabulary checked against `data_dir`'s."""
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras import checkpoints, trained_run
  try:
    return trained_run.open_run(output_dir, checkpoint_path, data_dir,
                                log=lambda line: print(line, file=sys.stderr, flush=True))
  except checkpoints.NonFiniteWeightsError:
    raise  # one line naming the variable (run_cli)
  except checkpoints.CheckpointError as e:
    if checkpoint_path:
      raise app.UsageError(f"--checkpoint_path={checkpoint_path} is not a checkpoint ({e}); "
                           "give a prefix such as output_dir/ckpt-1000.") from None
    raise app.UsageError(str(e)) from None


def _attention_pictures(hparams, problem_name: str, plot_dir: str) -> list:
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.decoding import visualize

  kinds = visualize.KINDS if FLAGS.kind == "all" else (FLAGS.kind,)
  head = None if FLAGS.all_heads else FLAGS.head
  num_layers = {"encoder": hparams.encoder_layers, "decoder": hparams.decoder_layers,
                "encdec": hparams.decoder_layers}
  try:  # Before the slow model load.
    visualize.check_selection(kinds, FLAGS.layer, head, num_layers, hparams.num_heads)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  registry.import_usr_dir(FLAGS.t2t_usr_dir)
  registry.problem(problem_name, FLAGS.data_dir)  # a problem not registered: one line
  run = _open_run(FLAGS.output_dir, FLAGS.checkpoint_path, FLAGS.data_dir)
  model, encoders = run.model, run.encoders
  input_ids = encoders["inputs"].encode(FLAGS.sentence) + [visualize.EOS_ID]
  if FLAGS.target is not None:
    target_ids = encoders["targets"].encode(FLAGS.target) + [visualize.EOS_ID]
  else:
    target_ids = visualize.greedy_decode(model, input_ids, EXTRA_DECODE_LENGTH)
    print(f"Greedy translation: {encoders['targets'].decode(target_ids)}", flush=True)
  maps = visualize.attention_maps(model, input_ids, target_ids)
  return visualize.write_attention_plots(
      maps, encoders["inputs"].decode_list(input_ids),
      encoders["targets"].decode_list(target_ids), plot_dir, kinds, FLAGS.layer, head)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  common_flags.resolve_path_flags("output_dir", "data_dir", "checkpoint_path")
  if not FLAGS.output_dir:
    raise app.UsageError("--output_dir is required.")
  if FLAGS.sentence is None and not FLAGS.curves:
    raise app.UsageError("Nothing to draw: give --sentence (attention) and/or --curves.")
  if FLAGS.sentence is not None and not FLAGS.data_dir:
    raise app.UsageError("--sentence needs --data_dir (the problem's vocabulary).")
  if FLAGS.all_heads and FLAGS.head is not None:
    raise app.UsageError("Give --head or --all_heads, not both.")
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.decoding import visualize
  from t2t_keras.rundir import settings

  try:  # before the slow model building
    visualize.check_matplotlib()
  except ImportError as e:
    raise app.UsageError(str(e)) from None
  plot_dir = FLAGS.plot_dir or RunDir(FLAGS.output_dir).plots_dir
  file_checks.check_output_dir("plot_dir" if FLAGS.plot_dir else "output_dir", plot_dir)
  if FLAGS.sentence is not None:
    try:
      hparams, problem_name, spec = settings.load_run_files(FLAGS.output_dir)
    except FileNotFoundError as e:
      raise app.UsageError(str(e)) from e
    if not spec.has_inputs:
      raise app.UsageError(f"--sentence: {FLAGS.output_dir} is a language model ("
                           f"{problem_name}: no source sentence to attend to); --curves draws "
                           "its training curves.")
    for path in _attention_pictures(hparams, problem_name, plot_dir):
      print(path, flush=True)
  if FLAGS.curves:
    try:
      print(visualize.plot_training_curves(
          FLAGS.output_dir, os.path.join(plot_dir, "training_curves.png")), flush=True)
    except ValueError as e:
      raise app.UsageError(str(e)) from e


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
