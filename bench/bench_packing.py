"""Packed examples (T2T's pack_dataset) against unpacked batches: tokens per step and loss.

On the default problem's train split (translate_ende_ding_bible8k: `make demo` writes
work/data, or `t2t_keras_datagen --problem=translate_ende_ding_bible8k
--data_dir=work/data --tmp_dir=work/tmp`), at the same batch_size in tokens:

1. Tokens per step: the non-padding tokens (inputs + targets) of `--batches`
   training batches, unpacked (T2T's length buckets, each batch padded to its
   longest example) and packed (rows of max_length tokens, `batch_size //
   max_length` rows), for the training runs' batching below, the demo's (2,048
   tokens, max_length 64) and transformer_base's (4,096 tokens, max_length 256).
2. The loss: transformer_tiny trained `--steps` steps each way from the same
   initial weights and seed: the mean training loss of each `--every` steps,
   and at the end the loss on the dev split (read unpacked, the same batches
   for both). Packed steps see more tokens, so their loss falls faster per step.
   Speed is timed over the last half of the steps: the unpacked run compiles
   the step's XLA parts once per bucket shape, mostly in the first steps.

Run:
  .venv/bin/python bench/bench_packing.py [--data_dir=work/data] [--steps=300]
"""

import argparse
import os
import sys
import time
from typing import Dict, List

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

from data_gen import registry  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras import perf  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.hparams import create_hparams  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.rundir.settings import ModelSpec  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.training import (inputs,  # noqa: E402  pylint: disable=g-import-not-at-top
                                trainer as trainer_lib)

PROBLEM = "translate_ende_ding_bible8k"


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--data_dir", default="work/data")
  p.add_argument("--hparams_set", default="transformer_tiny")
  p.add_argument("--hparams", default="batch_size=1024,max_length=64,"
                 "learning_rate_warmup_steps=100",
                 help="T2T-style overrides of both runs (packing is added to one)")
  p.add_argument("--batches", type=int, default=300, help="batches counted for tokens/step")
  p.add_argument("--steps", type=int, default=300, help="train steps of each run")
  p.add_argument("--every", type=int, default=50, help="steps per printed loss")
  args = p.parse_args(argv)
  harness.require_positive(args, ("batches", "steps", "every"))
  if not os.path.isdir(args.data_dir):
    raise ValueError(f"--data_dir {args.data_dir} does not exist: run `make demo`, or "
                     f"t2t_keras_datagen --problem={PROBLEM} --data_dir={args.data_dir}.")
  return args


def tokens_per_step(pattern: str, hp, batches: int) -> Dict[str, float]:
  """Mean non-padding tokens and token slots per training batch (inputs + targets)."""
  tokens = slots = rows = 0
  it = iter(inputs.make_dataset(pattern, hp, "train", seed=1))
  for _ in range(batches):
    b = next(it)
    for key in ("inputs", "targets"):
      v = b[key].numpy()
      tokens += int(np.count_nonzero(v))
      slots += v.size
    rows += b["targets"].shape[0]
  return {"tokens": tokens / batches, "slots": slots / batches, "rows": rows / batches}


def print_tokens(pattern: str, hp, batches: int, what: str) -> None:
  print(f"\n{what}: batch_size={hp.batch_size}, max_length={hp.max_length}, "
        f"{batches} training batches")
  harness.print_table_header("batches      rows/step  token slots/step  non-pad tokens/step  "
                             "non-pad share")
  figures = {}
  for packed in (False, True):
    f = tokens_per_step(pattern, hp.replace(pack_dataset=packed), batches)
    figures[packed] = f
    print(f"{'packed' if packed else 'unpacked':12s} {f['rows']:9.1f}  {f['slots']:16.0f}  "
          f"{f['tokens']:19.0f}  {f['tokens'] / f['slots']:13.1%}", flush=True)
  print(f"packed / unpacked non-pad tokens per step: "
        f"{figures[True]['tokens'] / figures[False]['tokens']:.2f}x")


def train(problem, data_dir: str, hp, steps: int, every: int) -> Dict[str, object]:
  """`steps` updates from seed 0; the mean loss of each `every` steps and the dev loss."""
  tf.keras.utils.set_random_seed(0)
  encoders = problem.feature_encoders(data_dir)
  spec = ModelSpec(encoders["inputs"].vocab_size, encoders["targets"].vocab_size,
                   problem.target_space_id)
  strategy = trainer_lib.create_strategy("one_device")
  trainer = trainer_lib.Trainer(hp, spec, strategy, train_steps=steps)
  pad_to_bucket = perf.step_compiles_per_shape(False)  # as the trainer's pipeline
  ds = inputs.make_dataset(problem.filepattern(data_dir, "train"), hp, "train", seed=1,
                           deterministic=True, pad_to_bucket=pad_to_bucket)
  iterator = iter(strategy.distribute_datasets_from_function(lambda ctx: ds))
  losses, tokens, timed_tokens, start = [], 0.0, 0.0, None
  for step in range(steps):
    if step == steps // 2:  # unpacked, most bucket shapes have compiled by then
      start = time.perf_counter()
    result = trainer.train_step(iterator)
    losses.append(result["loss"])
    tokens += result["tokens"]
    timed_tokens += result["tokens"] if start is not None else 0.0
    if step == 0:
      harness.after_first_step()
  seconds = time.perf_counter() - start
  dev = inputs.make_dataset(problem.filepattern(data_dir, "dev"), hp, "eval",
                            pad_to_bucket=pad_to_bucket)
  dev_loss = trainer.evaluate(strategy.experimental_distribute_dataset(dev))["loss"]
  curve = [float(np.mean(losses[i:i + every])) for i in range(0, steps, every)]
  return {"curve": curve, "dev": dev_loss, "tokens": tokens, "seconds": seconds,
          "timed_tokens": timed_tokens, "timed_steps": steps - steps // 2}


def main(argv: List[str]) -> None:
  args = harness.parse_or_exit(parse_args, argv)
  harness.print_header()
  problem = registry.problem(PROBLEM, args.data_dir)
  problem.check_data_dir(args.data_dir)
  pattern = problem.filepattern(args.data_dir, "train")
  hp = create_hparams(args.hparams_set, args.hparams)
  print_tokens(pattern, hp, args.batches, f"{PROBLEM}, {args.hparams_set} + {args.hparams}")
  for overrides, what in (("batch_size=2048,max_length=64", "the demo's batching"),
                          ("", "transformer_base's batching")):
    print_tokens(pattern, create_hparams("transformer_base", overrides), args.batches,
                 f"{PROBLEM}, {what}")

  print(f"\nTraining {args.hparams_set} + {args.hparams}, {args.steps} steps each way, "
        "same initial weights and seed")
  runs = {packed: train(problem, args.data_dir, hp.replace(pack_dataset=packed), args.steps,
                        args.every) for packed in (False, True)}
  harness.print_table_header("steps        unpacked loss  packed loss")
  for i, (a, b) in enumerate(zip(runs[False]["curve"], runs[True]["curve"])):
    last = min((i + 1) * args.every, args.steps)
    print(f"{i * args.every + 1:4d}-{last:<6d}  {a:13.3f}  {b:11.3f}")
  print(f"dev loss     {runs[False]['dev']:13.3f}  {runs[True]['dev']:11.3f}")
  for packed, run in runs.items():
    print(f"{'packed' if packed else 'unpacked'}: {run['tokens'] / args.steps:.0f} non-pad "
          f"tokens/step; over the last {run['timed_steps']} steps "
          f"{run['timed_tokens'] / run['seconds']:.0f} tokens/s, "
          f"{run['seconds'] / run['timed_steps'] * 1e3:.0f} ms/step")


if __name__ == "__main__":
  main(sys.argv[1:])
