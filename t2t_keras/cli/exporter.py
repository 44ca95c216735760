"""t2t_keras_exporter: a trained run -> SavedModel for TF Serving (T2T's t2t-exporter).

  t2t_keras_exporter --problem=translate_ende_wmt32k --data_dir=$DATA \
      --output_dir=$TRAIN --decode_hparams='beam_size=4,alpha=0.6'

writes `$TRAIN/export/<N>/` (a new version N each time); serve it with
  tensorflow_model_server --port=8500 --rest_api_port=8501 \
      --model_name=transformer --model_base_path=$TRAIN/export
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("problem", None, "Problem name (default: the one the run was trained on).")
flags.DEFINE_string("hparams_set", None, "Checked against the run's hparams.json if given.")
flags.DEFINE_string("hparams", "", "Overrides, checked against hparams.json if given.")
flags.DEFINE_string("data_dir", None, "Directory with the problem's vocabulary.")
flags.DEFINE_string("output_dir", None, "Training run directory (hparams.json, checkpoints).")
flags.DEFINE_string("checkpoint_path", None, "Checkpoint prefix (default: latest in output_dir).")
flags.DEFINE_string("decode_hparams", "",
                    "Baked into the graph, e.g. 'beam_size=4,alpha=0.6,return_beams=true'.")
flags.DEFINE_string("export_dir", None, "Model base path (default: <output_dir>/export).")
flags.DEFINE_string("t2t_usr_dir", None, "A directory of modules registering user problems.")


def main(argv):
  del argv
  for name in ("data_dir", "output_dir"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  from data_gen import registry
  from t2t_keras import experiment, export
  from t2t_keras.hparams import create_decode_hparams, create_hparams
  registry.import_usr_dir(FLAGS.t2t_usr_dir)
  decode_hp = create_decode_hparams(FLAGS.decode_hparams)
  model, hparams, problem_name, _, path = experiment.load_trained_model(
      FLAGS.output_dir, FLAGS.checkpoint_path)
  if FLAGS.hparams_set:
    wanted = create_hparams(FLAGS.hparams_set, FLAGS.hparams)
    if wanted != hparams:
      diff = sorted(k for k, v in wanted.to_dict().items() if hparams.to_dict()[k] != v)
      raise app.UsageError(f"--hparams_set/--hparams differ from {FLAGS.output_dir}/"
                           f"hparams.json in: {', '.join(diff)}. Omit them to use the run's.")
  if FLAGS.problem and FLAGS.problem != problem_name:
    raise app.UsageError(f"--problem={FLAGS.problem}, but {FLAGS.output_dir} was trained on "
                         f"{problem_name}.")
  problem = registry.problem(problem_name, FLAGS.data_dir)
  encoders = problem.feature_encoders(FLAGS.data_dir)
  vocab_files = {side: os.path.join(FLAGS.data_dir, problem.vocab_filenames[side])
                 for side in ("inputs", "targets")}
  export_dir = FLAGS.export_dir or os.path.join(FLAGS.output_dir, "export")
  print(f"Exporting {path} ({problem_name}) with {decode_hp} ...", file=sys.stderr, flush=True)
  target = export.export_saved_model(model, hparams, decode_hp, vocab_files, export_dir,
                                     encoders=encoders)
  print(f"Exported {target}", flush=True)


def run():
  app.run(main)


if __name__ == "__main__":
  run()
