"""Throughput of the T2T batching input pipeline vs. a transformer_base train step.

Writes synthetic TFRecords with realistic sentence lengths (log-normal, mean
≈27 subwords, like WMT En-De) unless --filepattern points at real shards, then
times `inputs.make_dataset` in training mode with transformer_base batching
(batch_size 4096 tokens, max_length 256). If `t2t_keras.model` and
`t2t_keras.training.trainer` are importable it also times transformer_base training
steps on this machine and prints the ratio pipeline / model (target ≥ 10×).

Run:
  .venv/bin/python bench/bench_input_pipeline.py
  .venv/bin/python bench/bench_input_pipeline.py \
      --filepattern='/tmp/t2t_data_ende/translate_ende_ding_bible8k-train*'
"""

import argparse
import os
import tempfile
import time

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

from data_gen import generator_utils  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.training import inputs  # noqa: E402  pylint: disable=g-import-not-at-top


def write_synthetic(directory: str, num_examples: int, vocab_size: int, seed: int = 0) -> str:
  """Synthetic shards of realistic lengths; returns their filepattern."""
  rng = np.random.default_rng(seed)
  src = np.clip(rng.lognormal(3.1, 0.6, num_examples).astype(int), 1, 300)
  tgt = np.clip((src * rng.normal(1.1, 0.15, num_examples)).astype(int), 1, 300)
  ids = rng.integers(2, vocab_size, int(src.sum() + tgt.sum()))
  pos = 0
  examples = []
  for s, t in zip(src, tgt):
    examples.append({"inputs": ids[pos:pos + s].tolist() + [1],
                     "targets": ids[pos + s:pos + s + t].tolist() + [1]})
    pos += s + t
  paths = generator_utils.shard_filepaths(directory, "bench", "train", 10)
  generator_utils.generate_files(examples, paths)
  return os.path.join(directory, "bench-train*")


def time_pipeline(filepattern: str, hparams, num_batches: int, warmup: int = 20):
  """Returns (batches/s, real tokens/s, padded tokens/s) over `num_batches` batches."""
  ds = inputs.make_dataset(filepattern, hparams, "train", seed=1)
  it = iter(ds)
  for _ in range(warmup):
    next(it)
  real = padded = 0
  start = time.perf_counter()
  for _ in range(num_batches):
    b = next(it)
    x, y = b["inputs"], b["targets"]
    real += int(tf.math.count_nonzero(x)) + int(tf.math.count_nonzero(y))
    padded += int(tf.size(x)) + int(tf.size(y))
  seconds = time.perf_counter() - start
  return num_batches / seconds, real / seconds, padded / seconds


def time_model_step(filepattern: str, hparams, vocab_size: int, steps: int):
  """Seconds per transformer train step on this machine, or None if unavailable."""
  try:
    from t2t_keras.rundir import settings
    from t2t_keras.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    print("model step: t2t_keras.training.trainer not importable (%s); ratio pending" % e)
    return None
  strategy = trainer_lib.create_strategy("one_device")
  trainer = trainer_lib.Trainer(hparams, settings.ModelSpec(vocab_size, vocab_size, 8), strategy)
  ds = strategy.experimental_distribute_dataset(
      inputs.make_dataset(filepattern, hparams, "train", seed=2))
  it = iter(ds)
  trainer.train_step(it)  # trace + compile
  harness.after_first_step()
  start = time.perf_counter()
  for _ in range(steps):
    trainer.train_step(it)
  return (time.perf_counter() - start) / steps


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--filepattern", default=None, help="real shards (default: synthetic)")
  parser.add_argument("--num_examples", type=int, default=40000)
  parser.add_argument("--batches", type=int, default=300)
  parser.add_argument("--hparams_set", default="transformer_base")
  parser.add_argument("--vocab_size", type=int, default=8192)
  parser.add_argument("--model_steps", type=int, default=3, help="0 skips the model timing")
  args = parser.parse_args()
  harness.print_header()

  from t2t_keras import hparams as hparams_lib  # pylint: disable=g-import-not-at-top
  hp = hparams_lib.create_hparams(args.hparams_set)
  with tempfile.TemporaryDirectory() as tmp:
    pattern = args.filepattern
    if pattern is None:
      t = time.perf_counter()
      pattern = write_synthetic(tmp, args.num_examples, args.vocab_size)
      print("wrote %d synthetic examples in %.1fs" % (args.num_examples, time.perf_counter() - t))
    bps, real_tps, padded_tps = time_pipeline(pattern, hp, args.batches)
    print("pipeline (%s, batch_size=%d, max_length=%d): %.1f batches/s, %.0f tokens/s "
          "(inputs+targets, non-pad), %.0f padded tokens/s"
          % (args.hparams_set, hp.batch_size, hp.max_length, bps, real_tps, padded_tps))
    if args.model_steps <= 0:
      return
    step_seconds = time_model_step(pattern, hp, args.vocab_size, args.model_steps)
    if step_seconds is None:
      return
    print("model: %s train step %.2fs on this machine (%.2f steps/s)"
          % (args.hparams_set, step_seconds, 1 / step_seconds))
    print("ratio pipeline/model: %.0fx (target >= 10x)" % (bps * step_seconds))


if __name__ == "__main__":
  main()
