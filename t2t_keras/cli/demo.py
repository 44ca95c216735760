"""The main job (`make demo`): the whole pipeline on the offline default problem.

datagen -> train (flags/demo.flags) -> average checkpoints -> decode the test
split with beam search and score BLEU -> export a SavedModel and translate
through it -> attention and training-curve pictures. Every stage runs the
project's own command (the ones the README shows) and is skipped when its
output already exists, so a second run reuses what is done.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
from t2t_keras.cli import common_flags  # noqa: E402  (shared flags; define_once)
flags.DEFINE_string("work_dir", "work", "Where data, runs, decodes, exports and plots go.")
flags.DEFINE_string("flagfile_path", "flags/demo.flags", "Experiment set-up of the demo.")
common_flags.define_once("integer", "num_last_checkpoints", 5, "Checkpoints averaged before decoding.")
flags.DEFINE_integer("samples", 5, "Sample translations printed.")

SENTENCES = ["The house has only one entrance.", "In the beginning God created the heaven "
             "and the earth."]


def _stage(title: str):
  print(f"\n=== {title} ({time.strftime('%H:%M:%S')})", flush=True)


def _run(*args: str) -> None:
  cmd = [sys.executable, "-m", *args]
  print("$ " + " ".join(shlex.quote(a) for a in ["python", "-m", *args]), flush=True)
  start = time.time()
  subprocess.run(cmd, check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  print(f"  ({time.time() - start:.0f} s)", flush=True)


def _done(path: str) -> bool:
  if os.path.exists(path):
    print(f"  already done: {path}", flush=True)
    return True
  return False


def main(argv):
  del argv
  start = time.time()
  work = os.path.abspath(FLAGS.work_dir)
  data, tmp = os.path.join(work, "data"), os.path.join(work, "tmp")
  run, decode_dir = os.path.join(work, "train"), os.path.join(work, "decode")
  averaged = os.path.join(run, "averaged", "averaged.ckpt")
  flagfile = f"--flagfile={os.path.abspath(FLAGS.flagfile_path)}"
  problem = "translate_ende_ding_bible8k"

  _stage("1/6 Data: Ding dictionary sentences + Bible, shared 8k subword vocabulary")
  if not _done(os.path.join(data, f"{problem}.test.de")):
    _run("t2t_keras.cli.datagen", f"--problem={problem}", f"--data_dir={data}",
         f"--tmp_dir={tmp}")

  _stage("2/6 Training (flags/demo.flags; resumes from the last checkpoint)")
  _run("t2t_keras.cli.trainer", flagfile, f"--data_dir={data}", f"--output_dir={run}")

  _stage(f"3/6 Averaging the last {FLAGS.num_last_checkpoints} checkpoints")
  latest = _latest_step(run)
  stamp = os.path.join(os.path.dirname(averaged), f"from-step-{latest}")
  if not _done(stamp):
    _run("t2t_keras.cli.avg_checkpoints", f"--prefix={run}",
         f"--num_last_checkpoints={FLAGS.num_last_checkpoints}", f"--output_path={averaged}")
    open(stamp, "w").close()

  _stage("4/6 Decoding the test split with beam search, BLEU (sacrebleu)")
  source = os.path.join(data, f"{problem}.test.en")
  reference = os.path.join(data, f"{problem}.test.de")
  hypotheses = os.path.join(decode_dir, f"test.from-step-{latest}.de")
  if not _done(hypotheses):
    _run("t2t_keras.cli.decoder", flagfile, f"--data_dir={data}", f"--output_dir={run}",
         f"--checkpoint_path={averaged}", f"--decode_from_file={source}",
         f"--decode_to_file={hypotheses}")
  _run("t2t_keras.cli.bleu", f"--translation={hypotheses}", f"--reference={reference}",
       "--bleu_variant=both", "--tokenize=intl")
  _samples(source, reference, hypotheses, FLAGS.samples)

  _stage("5/6 Exporting a SavedModel for TF Serving and translating through it")
  export_dir = os.path.join(work, "export")
  if not _exported_after(export_dir, stamp):
    _run("t2t_keras.cli.exporter", flagfile, f"--data_dir={data}", f"--output_dir={run}",
         f"--checkpoint_path={averaged}", f"--export_dir={export_dir}")
  _translate_with_saved_model(export_dir, SENTENCES)

  _stage("6/6 Pictures: attention heatmaps and training curves")
  plots = os.path.join(work, "plots")
  _run("t2t_keras.cli.visualize", f"--output_dir={run}", f"--data_dir={data}",
       f"--checkpoint_path={averaged}", f"--sentence={SENTENCES[0]}", "--kind=all",
       "--all_heads", "--layer=0", "--curves", f"--plot_dir={plots}")
  print(f"\nDone in {(time.time() - start) / 60:.1f} min. Pictures in {plots}.", flush=True)


def _latest_step(run: str) -> int:
  import tensorflow as tf
  path = tf.train.latest_checkpoint(run)
  if not path:
    raise app.UsageError(f"No checkpoint in {run} after training.")
  return int(path.rsplit("-", 1)[1])


def _samples(source: str, reference: str, hypotheses: str, count: int) -> None:
  def lines(path):
    with open(path, encoding="utf-8") as f:
      return f.read().splitlines()
  src, ref, hyp = lines(source), lines(reference), lines(hypotheses)
  step = max(1, len(src) // max(count, 1))
  print("\nSample translations (source / reference / system):")
  for i in range(0, min(len(src), step * count), step):
    print(f"  EN  {src[i]}\n  REF {ref[i]}\n  SYS {hyp[i]}\n")


def _exported_after(export_dir: str, stamp: str) -> bool:
  if not os.path.isdir(export_dir):
    return False
  versions = [os.path.join(export_dir, v) for v in os.listdir(export_dir) if v.isdigit()]
  return any(os.path.getmtime(v) >= os.path.getmtime(stamp) for v in versions)


def _translate_with_saved_model(export_dir: str, sentences) -> None:
  # A fresh process that imports only TensorFlow and TF Text, as TF Serving would.
  version = max(int(v) for v in os.listdir(export_dir) if v.isdigit())
  path = os.path.join(export_dir, str(version))
  code = ("import sys, tensorflow as tf, tensorflow_text\n"
          "m = tf.saved_model.load(sys.argv[1])\n"
          "out = m.signatures['serving_default'](inputs=tf.constant(sys.argv[2:]))\n"
          "for s, t in zip(sys.argv[2:], out['outputs'].numpy()):\n"
          "    print(f'  {s}\\n  -> {t.decode()}')\n")
  print(f"SavedModel {path}:", flush=True)
  subprocess.run([sys.executable, "-c", code, path, *sentences], check=True,
                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def run():
  app.run(main)


if __name__ == "__main__":
  run()
