"""The main job (`make demo`): the whole pipeline on the offline default problem, in a time budget.

datagen -> train (flags/demo.flags) -> average checkpoints -> decode the test
split with beam search and score BLEU -> export a SavedModel and translate
through it -> attention and training-curve pictures -> a summary. Every stage
runs the project's own command (the ones the README shows) and is skipped when
its output already exists, so a second run reuses what is done.

The budget (--budget_minutes, `make demo DEMO_MINUTES=60`) counts from
--start_time (the Makefile passes the time `make` started, so that creating
the virtualenv counts). Training gets what the other stages leave: after data
generation the demo estimates the stages after training (demo_budget.py) and
passes the rest to `t2t_keras_trainer --train_seconds`. The training time a
budget gives is recorded in work/demo_training.json: a second run with the
same budget trains no more; a larger budget trains the difference.

  make demo DEMO_MINUTES=60
  python -m t2t_keras.cli.demo --work_dir=work --budget_minutes=20
  python -m t2t_keras.cli.demo --work_dir=work --vocab_type=sentencepiece  # in work/sentencepiece
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from typing import List

from absl import app, flags

from data_gen import file_io
from t2t_keras.cli import common_flags, demo_budget, quiet_logs
from t2t_keras.cli.demo_budget import Stage
from t2t_keras.hparams import create_decode_hparams, create_hparams
from t2t_keras.perf import cpu_info
from t2t_keras.rundir.files import RunDir

FLAGS = flags.FLAGS

flags.DEFINE_string("work_dir", "work", "Where data, runs, decodes, exports and plots go.")
flags.DEFINE_string("flagfile_path", "flags/demo.flags", "Experiment set-up of the demo.")
flags.DEFINE_float("budget_minutes", 20.0, "Total wall time of the demo, set-up included.")
flags.DEFINE_float("start_time", 0.0, "Unix time the budget counts from (0: now); the "
                   "Makefile passes the time make started.")
common_flags.define_once("integer", "num_last_checkpoints", 5,
                         "At most this many checkpoints are averaged before decoding.")
flags.DEFINE_float("average_fraction", 0.3, "Average the checkpoints of the last this "
                   "fraction of training steps (at least the last checkpoint).")
flags.DEFINE_integer("samples", 5, "Sample translations printed.")
common_flags.define_once("enum", "vocab_type", None, "The vocabulary datagen builds: subword "
                         "(T2T's, the default) or sentencepiece; a sentencepiece demo keeps "
                         "its data, run and outputs in <work_dir>/sentencepiece.",
                         enum_values=["subword", "sentencepiece"])

PROBLEM = "translate_ende_ding_bible8k"
SENTENCES = ["The house has only one entrance.", "In the beginning God created the heaven "
             "and the earth."]


def _stage(title: str) -> float:
  print(f"\n=== {title} ({time.strftime('%H:%M:%S')})", flush=True)
  return time.time()


def _run(*args: str, capture: bool = False) -> str:
  """Runs `python -m <args>`; returns its stdout when `capture` (also printed)."""
  print("$ " + " ".join(shlex.quote(a) for a in ["python", "-m", *args]), flush=True)
  start = time.time()
  cmd = [sys.executable, "-m", *args]
  with subprocess.Popen(cmd, text=True, stdout=subprocess.PIPE if capture else None) as proc:
    try:
      stdout, _ = proc.communicate()
    except KeyboardInterrupt:
      # Ctrl-C reached the command too: let it finish (the trainer saves a
      # checkpoint); a second Ctrl-C stops both at once.
      proc.wait()
      raise
  if proc.returncode:
    raise subprocess.CalledProcessError(proc.returncode, cmd)
  if capture:
    print(stdout, end="", flush=True)
  print(f"  ({time.time() - start:.0f} s)", flush=True)
  return stdout or ""


def _done(path: str) -> bool:
  if os.path.exists(path):
    print(f"  already done: {path}", flush=True)
    return True
  return False


def main(argv):
  del argv
  # TensorFlow and the models: loaded when the command runs, not for --help
  from data_gen import manifest  # imports TensorFlow: counted as set-up
  from t2t_keras.rundir import settings
  demo_start = time.time()
  start = FLAGS.start_time or demo_start
  budget_s = FLAGS.budget_minutes * 60
  base = os.path.abspath(FLAGS.work_dir)
  vocab_type = FLAGS.vocab_type or "subword"
  # Another vocabulary gets its own data dir and run (a run reads only the data of its
  # vocabulary); the downloaded corpora in <work_dir>/tmp are shared.
  work = base if vocab_type == "subword" else os.path.join(base, vocab_type)
  data, run = os.path.join(work, "data"), os.path.join(work, "train")
  flagfile = f"--flagfile={os.path.abspath(FLAGS.flagfile_path)}"
  stages: List[Stage] = []
  if FLAGS.start_time:
    stages.append(Stage("set-up (virtualenv, corpora)", demo_start - start))

  t = _stage(f"1/7 Data: Ding dictionary sentences + Bible, shared 8k {vocab_type} vocabulary")
  if not _done(manifest.manifest_path(data, PROBLEM)):  # datagen writes it last
    _run("t2t_keras.cli.datagen", f"--problem={PROBLEM}", f"--data_dir={data}",
         f"--tmp_dir={os.path.join(base, 'tmp')}", f"--vocab_type={vocab_type}",
         "--verbosity=-1")  # its progress lines only
  stages.append(Stage("data generation", time.time() - t))

  t = _stage(f"2/7 Training ({FLAGS.flagfile_path}; resumes from the last checkpoint)")
  note = _train(work, data, run, flagfile, budget_s, start)
  stages.append(Stage("training", time.time() - t, note))
  steps, stop_reason = settings.last_stop(run)

  t = _stage("3/7 Averaging the last checkpoints")
  averaged, averaged_steps = _average(run)
  latest = averaged_steps[0]
  stages.append(Stage("averaging", time.time() - t,
                      "steps " + ", ".join(map(str, averaged_steps))))

  hypotheses, bleu_lines = _decode_and_score(data, run, flagfile, averaged,
                                              os.path.join(work, "decode"), latest, stages)

  t = _stage("6/7 Exporting a SavedModel for TF Serving and translating through it")
  export_dir = os.path.join(work, "export")
  if not _exported_after(export_dir, averaged + ".index"):
    _run("t2t_keras.cli.exporter", flagfile, f"--data_dir={data}", f"--output_dir={run}",
         f"--checkpoint_path={averaged}", f"--export_dir={export_dir}")
  saved_model = _translate_with_saved_model(export_dir, SENTENCES)
  stages.append(Stage("export + SavedModel check", time.time() - t))

  t = _stage("7/7 Pictures: attention heatmaps and training curves")
  plots = os.path.join(work, "plots")
  _run("t2t_keras.cli.visualize", f"--output_dir={run}", f"--data_dir={data}",
       f"--checkpoint_path={averaged}", f"--sentence={SENTENCES[0]}", "--kind=all",
       "--all_heads", "--layer=0", "--curves", f"--plot_dir={plots}")
  stages.append(Stage("pictures", time.time() - t))

  source = os.path.join(data, f"{PROBLEM}.test.en")
  title = (f"Test BLEU ({_count_lines(source):,} sentences, the average of the checkpoints "
           f"of steps {', '.join(map(str, averaged_steps))})")
  print(demo_budget.format_summary(
      stages, budget_s, steps, stop_reason, bleu_lines,
      {"Translations": hypotheses, "Pictures": plots, "SavedModel": saved_model,
       "Training run": run}, bleu_title=title), flush=True)


def _decode_and_score(data: str, run: str, flagfile: str, averaged: str, decode_dir: str,
                      latest: int, stages: List[Stage]):
  """Stages 4 and 5: beam-search decoding of the test split, BLEU, samples.

  Returns:
    (the translations file, the BLEU lines printed).
  """
  t = _stage("4/7 Decoding the test split with beam search")
  source = os.path.join(data, f"{PROBLEM}.test.en")
  reference = os.path.join(data, f"{PROBLEM}.test.de")
  hypotheses = os.path.join(decode_dir, f"test.from-step-{latest}.de")
  reused = _done(hypotheses)
  if not reused:
    _run("t2t_keras.cli.decoder", flagfile, f"--data_dir={data}", f"--output_dir={run}",
         f"--checkpoint_path={averaged}", f"--decode_from_file={source}",
         f"--decode_to_file={hypotheses}")
  stages.append(Stage("test decoding", time.time() - t,
                      "reused" if reused else f"{_count_lines(source):,} sentences"))

  t = _stage("5/7 BLEU")
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.scoring import bleu
  variant = "all" if "all" in bleu.BLEU_VARIANTS else "both"  # "all" adds the paper's BLEU
  out = _run("t2t_keras.cli.bleu", f"--translation={hypotheses}", f"--reference={reference}",
             f"--bleu_variant={variant}", "--tokenize=intl", capture=True)
  _samples(source, reference, hypotheses, FLAGS.samples)
  stages.append(Stage("BLEU", time.time() - t))
  return hypotheses, [line for line in out.splitlines() if line.strip()]


# -- Training in the budget ------------------------------------------------------

def _train(work: str, data: str, run: str, flagfile: str, budget_s: float,
           start: float) -> str:
  """Trains for what the budget leaves (or what an earlier run left owed); a note."""
  from t2t_keras.rundir import settings  # imports TensorFlow (after quiet_logs is set up)
  estimates = demo_budget.after_training_estimates(
      _count_lines(os.path.join(data, f"{PROBLEM}.test.en")), *model_size(FLAGS.flagfile_path))
  elapsed = time.time() - start
  try:
    available = demo_budget.train_seconds(budget_s, elapsed, estimates)
    error = None
  except demo_budget.BudgetTooSmallError as e:
    available, error = 0.0, e
  ledger_path = os.path.join(work, "demo_training.json")
  ledger = _read_json(ledger_path) if _has_checkpoint(run) else {}
  same_budget = ledger.get("budget_minutes") == FLAGS.budget_minutes
  target = ledger["target_s"] if same_budget else available
  trained = ledger.get("trained_s", 0.0)
  seconds = demo_budget.seconds_to_train(target, trained, available)
  reserved = demo_budget.SAFETY_MARGIN * sum(estimates.values())
  print(f"Budget {budget_s / 60:g} min: {demo_budget.format_duration(elapsed)} spent, "
        f"{demo_budget.format_duration(reserved)} reserved for the other stages (their "
        f"estimates x{demo_budget.SAFETY_MARGIN:g}:\n  " +
        ", ".join(f"{k} {v:.0f} s" for k, v in estimates.items()) + ").", flush=True)
  if not seconds:
    if not _has_checkpoint(run):
      sys.exit(f"make demo: {error or 'no training time left in the budget.'}")
    print(f"  already done: {trained:.0f} s of training for a {target:.0f}-s target "
          f"(recorded in {ledger_path}).", flush=True)
    return "reused"
  bf16 = cpu_info.native_bfloat16()
  print(f"Training gets {seconds:.0f} s in {'mixed bfloat16' if bf16 else 'float32'}. CPU: "
        f"{cpu_info.describe()}.", flush=True)
  t = time.time()
  _run("t2t_keras.cli.trainer", flagfile, f"--data_dir={data}", f"--output_dir={run}",
       f"--train_seconds={seconds:.0f}", *(["--mixed_precision=bfloat16"] if bf16 else []))
  steps, reason = settings.last_stop(run)
  done = {"train_seconds": round(seconds), "train_steps": target - trained}.get(
      reason, time.time() - t)
  file_io.write_text(ledger_path, json.dumps(
      {"budget_minutes": FLAGS.budget_minutes, "target_s": target, "trained_s": trained + done},
      indent=2, sort_keys=True))
  return f"--train_seconds={seconds:.0f}" + (f", stopped at step {steps:,}" if steps else "")


def model_size(flagfile: str):
  """(hidden_size, num_hidden_layers, beam_size) that `flagfile` sets."""
  values = {}
  with open(flagfile, encoding="utf-8") as f:
    for line in f:
      name, _, value = line.strip().partition("=")
      values[name] = value
  hp = create_hparams(values["--hparams_set"], values.get("--hparams", ""))
  decode_hp = create_decode_hparams(values.get("--decode_hparams", ""))
  return hp.hidden_size, hp.num_hidden_layers, decode_hp.beam_size


def _has_checkpoint(run: str) -> bool:
  return os.path.exists(RunDir(run).checkpoint_state_file)


def _read_json(path: str) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


# -- After training --------------------------------------------------------------

def _average(run: str):
  """Averages the checkpoints of the last --average_fraction of training.

  Returns:
    (prefix of the averaged checkpoint, the steps averaged, newest first).
  """
  # TensorFlow and the models: loaded when the command runs, not for --help
  import tensorflow as tf
  state = tf.train.get_checkpoint_state(run)
  if not state or not state.model_checkpoint_path:
    raise app.UsageError(f"No checkpoint in {run} after training.")
  paths = {int(p.rsplit("-", 1)[1]): p for p in state.all_model_checkpoint_paths}
  chosen = demo_budget.checkpoints_to_average(sorted(paths), FLAGS.average_fraction,
                                              FLAGS.num_last_checkpoints)
  latest = chosen[0]
  averaged = RunDir(run).averaged_checkpoint(latest)
  print(f"  steps {', '.join(map(str, chosen))} (the last {FLAGS.average_fraction:.0%} of "
        f"training, at most {FLAGS.num_last_checkpoints})", flush=True)
  if not _done(averaged + ".index"):
    _run("t2t_keras.cli.avg_checkpoints", f"--output_dir={run}",
         "--checkpoints=" + ",".join(os.path.join(run, paths[s]) for s in chosen),
         f"--output_path={averaged}")
  return averaged, chosen


def _count_lines(path: str) -> int:
  return sum(1 for _ in file_io.iter_lines(path))


def _samples(source: str, reference: str, hypotheses: str, count: int) -> None:
  src, ref, hyp = (file_io.read_lines(p) for p in (source, reference, hypotheses))
  step = max(1, len(src) // max(count, 1))
  print("\nSample translations (source / reference / system):")
  for i in range(0, min(len(src), step * count), step):
    print(f"  EN  {src[i]}\n  REF {ref[i]}\n  SYS {hyp[i]}\n")


def _exported_after(export_dir: str, checkpoint_file: str) -> bool:
  if not os.path.isdir(export_dir):
    return False
  versions = [os.path.join(export_dir, v) for v in os.listdir(export_dir) if v.isdigit()]
  return any(os.path.getmtime(v) >= os.path.getmtime(checkpoint_file) for v in versions)


def _translate_with_saved_model(export_dir: str, sentences) -> str:
  """Translates `sentences` in a process that loads only the SavedModel; its path."""
  # A fresh process that imports only TensorFlow and TF Text, as TF Serving would;
  # its TensorFlow start-up lines are filtered here as the commands filter theirs.
  version = max(int(v) for v in os.listdir(export_dir) if v.isdigit())
  path = os.path.join(export_dir, str(version))
  code = ("import sys, tensorflow as tf, tensorflow_text\n"
          "m = tf.saved_model.load(sys.argv[1])\n"
          "out = m.signatures['serving_default'](inputs=tf.constant(sys.argv[2:]))\n"
          "for s, t in zip(sys.argv[2:], out['outputs'].numpy()):\n"
          "    print(f'  {s}\\n  -> {t.decode()}')\n")
  print(f"SavedModel {path}:", flush=True)
  quiet = quiet_logs.active()
  res = subprocess.run([sys.executable, "-c", code, path, *sentences], text=True,
                       stderr=subprocess.PIPE if quiet else None)
  if quiet and res.stderr:
    sys.stderr.write(quiet_logs.filter_noise(res.stderr))
  res.check_returncode()
  return path


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
