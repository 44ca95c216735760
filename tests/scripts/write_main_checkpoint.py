"""Writes tests/data/main_checkpoint: a training run written by main at a fixed commit.

Run once, with the commit to pin checked out first on PYTHONPATH, e.g.
  git worktree add /tmp/base <commit>
  PYTHONPATH=/tmp/base .venv/bin/python tests/scripts/write_main_checkpoint.py <commit>
It trains a small Transformer on the tiny word-for-word problem for a few steps
through `Experiment` (as t2t_keras_trainer does) and records, with that commit's
code, the logits and beam-search output for fixed inputs. tests/test_main_checkpoint.py
checks that today's code loads the run and reproduces them: the checkpoint's
variable names and the model's numerics did not change.
"""

import inspect
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "main_checkpoint")
OVERRIDES = ("num_hidden_layers=2,hidden_size=32,filter_size=64,num_heads=2,batch_size=256,"
             "learning_rate_warmup_steps=10,learning_rate_constant=0.5")
STEPS = 30


def main(commit: str) -> None:
  try:
    from tests.support.trained_fixture import train_tiny_run
  except ImportError:  # commits before tests/support/
    from tests.trained_fixture import train_tiny_run
  from t2t_keras.decoding import seq2seq
  from t2t_keras.hparams import DecodeHParams
  try:
    from t2t_keras.rundir.model_factory import load_trained_model
  except ImportError:  # commits before run_dir.py (b829728 wrote tests/data/main_checkpoint)
    from t2t_keras.training.schedules import load_trained_model
  root = tempfile.mkdtemp()
  run_dir, _ = train_tiny_run(root, steps=STEPS, overrides=OVERRIDES)
  if os.path.exists(OUT):
    shutil.rmtree(OUT)
  os.makedirs(OUT)
  shutil.copytree(run_dir, os.path.join(OUT, "run"),
                  ignore=shutil.ignore_patterns("events.*", "eval", "train", "*.tmp*"))
  model, hp, _, spec, path = load_trained_model(os.path.join(OUT, "run"))
  rng = np.random.default_rng(0)
  vocab = spec.target_vocab_size
  inputs = rng.integers(2, vocab, size=(3, 7)).astype(np.int32)
  inputs[:, -1] = 1
  inputs[1, 4:] = [1, 0, 0]
  targets = rng.integers(2, vocab, size=(3, 5)).astype(np.int32)
  targets[:, -1] = 1
  logits = model({"inputs": inputs, "targets": targets}, training=False).numpy()
  decode_hp = DecodeHParams(beam_size=2, alpha=0.6, extra_length=4)
  # Commits before the sampling settings moved to DecodeHParams also took the model hparams.
  takes_hparams = "hparams" in inspect.signature(seq2seq.make_decode_fn).parameters
  extra = (hp,) if takes_hparams else ()
  ids, scores = seq2seq.make_decode_fn(model, decode_hp, *extra)(tf.constant(inputs))
  np.savez(os.path.join(OUT, "expected.npz"), inputs=inputs, targets=targets, logits=logits,
           beam_ids=ids.numpy(), beam_scores=scores.numpy())
  variables = sorted(name for name, _ in tf.train.list_variables(path))
  with open(os.path.join(OUT, "written_by.json"), "w", encoding="utf-8") as f:
    json.dump({"commit": commit, "steps": STEPS, "overrides": OVERRIDES,
               "checkpoint": os.path.basename(path), "variables": variables}, f, indent=1)
  shutil.rmtree(root)


if __name__ == "__main__":
  main(sys.argv[1])
