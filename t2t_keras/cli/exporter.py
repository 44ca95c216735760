r"""t2t_keras_exporter: a trained run -> SavedModel for TF Serving (T2T's t2t-exporter).

  t2t_keras_exporter --problem=translate_ende_wmt32k --data_dir=$DATA \
      --output_dir=$TRAIN --decode_hparams='beam_size=4,alpha=0.6'

writes `$TRAIN/export/<N>/` (a new version N each time); serve it with
  tensorflow_model_server --port=8500 --rest_api_port=8501 \
      --model_name=transformer --model_base_path=$TRAIN/export

Besides `serving_default`, a signature `beam_<K>` for each of
`--serving_beam_sizes` (default: the decode hparams' beam_size) takes alpha,
extra_length and n_best per request (docs/serving.md).

  t2t_keras_exporter --export_format=ctranslate2 --data_dir=$DATA --output_dir=$TRAIN

writes a CTranslate2 model directory `$TRAIN/export_ctranslate2` (replaced whole)
with the subword vocabularies beside it, for int8 / float32 CPU inference
without TensorFlow (`pip install -e '.[ct2]'`); decode through it with
t2t_keras_decoder --engine=ctranslate2. Decode hparams are not baked in: the
decoder reads them.

A language model's run (a problem without inputs) exports a SavedModel whose
`serving_default` takes prompts and returns their continuations and scores (the
decode hparams and --random_seed baked in, as t2t_keras_decoder continues them),
and whose `score` signature gives each text's log-probability and perplexity
(docs/language_models.md).
"""

from __future__ import annotations

import sys

from absl import app, flags

from t2t_keras.cli import common_flags, file_checks
from t2t_keras.hparams import create_decode_hparams
from t2t_keras.rundir.files import RunDir

FLAGS = flags.FLAGS

common_flags.define_experiment_flags(common_flags.TRAINED_RUN_FLAGS + ("decode_hparams",
                                                                      "random_seed"))

flags.DEFINE_enum("export_format", "saved_model", ["saved_model", "ctranslate2"],
                  "saved_model: a SavedModel version for TF Serving. ctranslate2: a "
                  "CTranslate2 model directory (needs the extra: pip install -e '.[ct2]').")
flags.DEFINE_list("serving_beam_sizes", [],
                  "saved_model: one signature beam_<K> (alpha, extra_length and n_best per "
                  "request) for each beam size K, e.g. 1,4 (default: the decode hparams' "
                  "beam_size). serving_default keeps the decode hparams.")
flags.DEFINE_string("export_dir", None,
                    "saved_model: the model base path (default: <output_dir>/export). "
                    "ctranslate2: the directory written (default: "
                    "<output_dir>/export_ctranslate2).")


def main(argv):
  del argv
  common_flags.resolve_path_flags("data_dir", "output_dir", "checkpoint_path")
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras import trained_run

  # decode_hparams are baked into the graph, e.g. 'beam_size=4,alpha=0.6,return_beams=true'.
  try:  # T2T's sampling settings may come in --hparams too (sampling_method=random).
    decode_hp = create_decode_hparams(FLAGS.decode_hparams, FLAGS.hparams)
  except ValueError as e:
    raise app.UsageError(f"--decode_hparams / --hparams: {e}") from None
  if decode_hp.return_alignments:
    raise app.UsageError("--decode_hparams=return_alignments: an export returns outputs and "
                         "scores only; t2t_keras_decoder writes alignments.")
  language_model = common_flags.is_language_model_run()
  if language_model and FLAGS.export_format != "saved_model":
    raise app.UsageError(f"--export_format={FLAGS.export_format}: {FLAGS.output_dir} is a "
                         "language model; the CTranslate2 converter maps the encoder-decoder "
                         "Transformer: export it with --export_format=saved_model.")
  if language_model and FLAGS.serving_beam_sizes:
    raise app.UsageError("--serving_beam_sizes: a language model's export has one decoding, "
                         "the decode hparams' (beam_size=K for beam search).")
  if FLAGS.export_format == "ctranslate2":
    _export_ctranslate2()
    return
  common_flags.check_decode_hparams(decode_hp)  # those the run's model must allow
  beam_sizes = _beam_sizes(FLAGS.serving_beam_sizes)
  export_dir = FLAGS.export_dir or RunDir(FLAGS.output_dir or "").export_dir
  try:
    trained_run.check_export_dir(export_dir)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  file_checks.check_output_dir("export_dir", export_dir)
  run = common_flags.load_trained_run()
  print(f"Exporting with {decode_hp} ...", file=sys.stderr, flush=True)
  if language_model:  # its sampling seed baked in: the decoder's --random_seed
    target = run.export_saved_model(export_dir, decode_hp, seed=FLAGS.random_seed or 0)
  else:
    target = run.export_saved_model(export_dir, decode_hp, beam_sizes=beam_sizes)
  print(f"Exported {target}", flush=True)


def _beam_sizes(values) -> list:
  """--serving_beam_sizes as integers >= 1, or a UsageError naming the bad one."""
  sizes = []
  for value in values:
    if not value.strip().isdigit() or int(value) < 1:
      raise app.UsageError(f"--serving_beam_sizes: {value!r} is not a beam size; give "
                           "integers >= 1 separated by commas, e.g. 1,4.")
    sizes.append(int(value))
  return sizes


def _export_ctranslate2():
  """The run as a CTranslate2 model directory (refused by name where it cannot map)."""
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.export import ctranslate2_decoder, ctranslate2_model
  if "," in (FLAGS.checkpoint_path or ""):
    raise app.UsageError(f"--checkpoint_path={FLAGS.checkpoint_path} is an ensemble; a "
                         "CTranslate2 model holds one: use --export_format=saved_model.")
  try:
    ctranslate2_decoder.import_ctranslate2()
  except ImportError as e:
    raise app.UsageError(f"--export_format=ctranslate2: {e}") from None
  export_dir = FLAGS.export_dir or ctranslate2_decoder.default_model_dir(FLAGS.output_dir or "")
  file_checks.check_output_dir("export_dir", export_dir)
  run = common_flags.load_trained_run()
  try:
    ctranslate2_model.check_convertible(run.hparams)
  except ctranslate2_model.NotConvertibleError as e:
    raise app.UsageError(f"{FLAGS.output_dir} cannot be exported to CTranslate2: {e}") from None
  try:
    target = run.export_ctranslate2(export_dir)
  except FileExistsError as e:
    raise app.UsageError(f"--export_dir: {e}") from None
  print(f"Exported {target} (CTranslate2; decode with t2t_keras_decoder --engine=ctranslate2 "
        f"--ctranslate2_model_dir={target})", flush=True)


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
