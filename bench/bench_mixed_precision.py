"""Loss curves of float32 vs mixed bfloat16 training on the default problem.

Trains transformer_tiny twice from the same initial weights on the same
(deterministic) batches of translate_ende_ding_bible8k, once per precision, and
prints the two training-loss curves side by side, their largest relative gap
after warm-up, and the step times.

  .venv/bin/python bench/bench_mixed_precision.py --data_dir=work/data --steps=300
"""

import argparse
import time

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from data_gen import registry  # noqa: E402
from t2t_keras.hparams import create_hparams  # noqa: E402
from t2t_keras.perf import precision
from t2t_keras.rundir import settings
from t2t_keras.training import inputs, trainer as trainer_lib  # noqa: E402


def train_curve(mode, hp, spec, pattern, steps, weights, every):
  precision.set_mixed_precision(mode)
  try:
    trainer = trainer_lib.Trainer(hp, spec, trainer_lib.create_strategy("one_device"), steps)
    trainer.model.set_weights(weights)
    ds = inputs.make_dataset(pattern, hp, "train", seed=1, deterministic=True)
    it = iter(trainer.strategy.distribute_datasets_from_function(lambda ctx: ds))
    curve, start = [], time.time()
    for step in range(1, steps + 1):
      loss = trainer.train_step(it)["loss"]
      if step == 1:
        harness.after_first_step()
      if step % every == 0:
        curve.append((step, loss))
    return curve, (time.time() - start) / steps
  finally:
    precision.set_mixed_precision("none")


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--data_dir", required=True)
  parser.add_argument("--problem", default="translate_ende_ding_bible8k")
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--every", type=int, default=25)
  parser.add_argument("--hparams", default="batch_size=2048,max_length=64,"
                      "learning_rate_warmup_steps=200")
  args = parser.parse_args()
  problem = registry.problem(args.problem, args.data_dir)
  enc = problem.feature_encoders(args.data_dir)
  spec = settings.ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size,
                            problem.target_space_id)
  hp = create_hparams("transformer_tiny", args.hparams)
  keras.utils.set_random_seed(0)
  init = trainer_lib.Trainer(hp, spec, trainer_lib.create_strategy("one_device")).model.get_weights()
  pattern = problem.filepattern(args.data_dir, "train")
  curves = {}
  for mode in ("none", "bfloat16"):
    keras.utils.set_random_seed(1)  # same dropout seeds
    curves[mode] = train_curve(mode, hp, spec, pattern, args.steps, init, args.every)
  harness.print_header()
  print(f"transformer_tiny ({args.hparams}) on {args.problem}, {args.steps} steps")
  print(f"{'step':>6} {'float32':>10} {'bfloat16':>10} {'rel. gap':>9}")
  gaps = []
  for (step, a), (_, b) in zip(curves["none"][0], curves["bfloat16"][0]):
    gap = abs(b - a) / a
    if step > args.steps // 4:
      gaps.append(gap)
    print(f"{step:>6} {a:>10.4f} {b:>10.4f} {gap:>8.1%}")
  print(f"max relative gap after step {args.steps // 4}: {max(gaps):.1%}; "
        f"s/step float32 {curves['none'][1]:.3f}, bfloat16 {curves['bfloat16'][1]:.3f}")


if __name__ == "__main__":
  main()
