"""Training throughput and model-FLOP utilization (MFU) of the real train step.

Times `Trainer.train_step` for transformer_base dimensions (vocabulary 32,768,
batches of 64 sentences x 32 tokens on each side, dropout as in training, label
smoothing 0.1) in float32 and in mixed bfloat16, each with and without XLA
(`jit_compile`). In the same run, interleaved with the model steps, it measures
this machine's matmul peak for each dtype (a tf.function of large square
matmuls; the best of TensorFlow's and XLA's kernels). The machine is shared and
noisy, so every figure is a median over repeats and only ratios measured
side by side are compared.

Tokens/s counts source + target tokens (all non-padding here). Model FLOPs are
`t2t_keras.perf.flops.training_flops` (matmul FLOPs of forward + backward).

Run:
  .venv/bin/python bench/bench_train.py                      # ~5 minutes
  .venv/bin/python bench/bench_train.py --steps=3 --repeats=5
  .venv/bin/python bench/bench_train.py --configs=float32:xla --repeats=2
"""

import argparse
import json
import statistics
import sys
import time
from typing import Dict, List

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

import keras  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

from t2t_keras import hparams as hparams_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.perf import (flops as flops_lib,  # noqa: E402  pylint: disable=g-import-not-at-top
                            precision)
from t2t_keras.rundir import settings  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.training import \
  trainer as trainer_lib  # noqa: E402  pylint: disable=g-import-not-at-top

CONFIGS = ("float32:eager", "float32:xla", "bfloat16:eager", "bfloat16:xla")


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--hparams_set", default="transformer_base")
  p.add_argument("--hparams", default="", help="T2T-style overrides, e.g. 'num_hidden_layers=2'.")
  p.add_argument("--vocab_size", type=int, default=32768)
  p.add_argument("--batch", type=int, default=64, help="sentences per batch")
  p.add_argument("--length", type=int, default=32, help="tokens per sentence, each side")
  p.add_argument("--steps", type=int, default=2, help="timed train steps per repeat")
  p.add_argument("--repeats", type=int, default=3, help="interleaved repeats (median taken)")
  p.add_argument("--warmup", type=int, default=2, help="untimed steps after tracing")
  p.add_argument("--peak_size", type=int, default=2048, help="n of the n*n*n peak matmuls")
  p.add_argument("--configs", default=",".join(CONFIGS),
                 help="comma list of dtype:mode, dtype float32|bfloat16, mode eager|xla "
                      "('eager' means a tf.function without XLA)")
  p.add_argument("--intra_op_threads", type=int, default=0, help="0: TensorFlow's default")
  p.add_argument("--inter_op_threads", type=int, default=0, help="0: TensorFlow's default")
  p.add_argument("--result_json", default="",
                 help="also write the rows here (bench_vs_model_garden.py reads them)")
  args = p.parse_args(argv)
  harness.require_positive(args, ("steps", "repeats", "batch", "length", "peak_size"))
  if args.warmup < 0:
    raise ValueError(f"--warmup must be >= 0, got {args.warmup}.")
  args.configs = harness.choices("configs", args.configs, CONFIGS)
  return args


# -- Model steps ------------------------------------------------------------------

def synthetic_batch(batch: int, length: int, vocab: int, seed: int = 0) -> Dict[str, tf.Tensor]:
  """Full-length sentences (no padding): ids in [2, vocab) ending in EOS=1."""
  rng = np.random.default_rng(seed)
  feats = {}
  for key in ("inputs", "targets"):
    ids = rng.integers(2, vocab, size=(batch, length)).astype(np.int32)
    ids[:, -1] = 1
    feats[key] = tf.constant(ids)
  return feats


def make_trainer_probe(args, dtype: str, xla: bool):
  """Builds a Trainer under `dtype`'s policy; returns (seconds_per_step probe, step FLOPs)."""
  precision.set_mixed_precision("none" if dtype == "float32" else "bfloat16")
  try:
    hp = hparams_lib.create_hparams(args.hparams_set, args.hparams)
    spec = settings.ModelSpec(args.vocab_size, args.vocab_size)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    trainer = trainer_lib.Trainer(hp, spec, strategy, jit_compile=xla)
  finally:
    precision.set_mixed_precision("none")
  batch = synthetic_batch(args.batch, args.length, args.vocab_size)
  dataset = tf.data.Dataset.from_tensors(batch).repeat()
  iterator = iter(strategy.experimental_distribute_dataset(dataset))
  trainer.train_step(iterator)  # trace + compile
  harness.after_first_step()
  for _ in range(args.warmup):
    trainer.train_step(iterator)
  step_flops = flops_lib.training_flops(hp, args.vocab_size, args.batch, args.length,
                                        args.length)

  def probe() -> float:
    start = time.perf_counter()
    for _ in range(args.steps):
      out = trainer.train_step(iterator)  # returns Python floats: the step has finished
    if not np.isfinite(out["loss"]):
      raise RuntimeError(f"non-finite loss {out['loss']} in {dtype} xla={xla}")
    return (time.perf_counter() - start) / args.steps

  return probe, step_flops


def run(args) -> List[Dict[str, float]]:
  if args.intra_op_threads:
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
  if args.inter_op_threads:
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
  dtypes = sorted({c.split(":")[0] for c in args.configs})
  peaks = {d: harness.make_peak_probe(tf.as_dtype(d), args.peak_size) for d in dtypes}
  models = {}
  for config in args.configs:
    dtype, mode = config.split(":")
    t0 = time.perf_counter()
    models[config] = make_trainer_probe(args, dtype, mode == "xla")
    print(f"built + compiled {config} in {time.perf_counter() - t0:.1f}s", flush=True)
  step_times = {c: [] for c in args.configs}
  peak_samples = {c: [] for c in args.configs}
  for r in range(args.repeats):
    for config in args.configs:  # interleaved: each step time has a peak measured beside it
      peak_samples[config].append(peaks[config.split(":")[0]]())
      step_times[config].append(models[config][0]())
      peak_samples[config].append(peaks[config.split(":")[0]]())
    print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
        f"{c} {step_times[c][-1]:.2f}s/step" for c in args.configs), flush=True)
  rows = []
  tokens = 2 * args.batch * args.length
  for config in args.configs:
    dtype, mode = config.split(":")
    step = statistics.median(step_times[config])
    peak = statistics.median(peak_samples[config])
    model_flops = models[config][1] / step
    rows.append(dict(dtype=dtype, xla=mode == "xla", step_s=step, tokens_s=tokens / step,
                     model_tflops=model_flops / 1e12, peak_tflops=peak / 1e12,
                     mfu=100.0 * model_flops / peak))
  return rows


def print_table(args, rows: List[Dict[str, float]]) -> None:
  print(f"\n{args.hparams_set} {args.hparams or ''} vocab={args.vocab_size} "
        f"batch={args.batch}x{args.length}+{args.length} tokens, steps={args.steps} "
        f"repeats={args.repeats}, threads intra={tf.config.threading.get_intra_op_parallelism_threads()} "
        f"inter={tf.config.threading.get_inter_op_parallelism_threads()} (0 = default)")
  header = (f"{'dtype':<9} {'XLA':<4} {'s/step':>7} {'tokens/s':>9} {'model TFLOP/s':>14} "
            f"{'peak TFLOP/s':>13} {'MFU %':>6}")
  harness.print_table_header(header)
  for r in rows:
    print(f"{r['dtype']:<9} {'yes' if r['xla'] else 'no':<4} {r['step_s']:>7.2f} "
          f"{r['tokens_s']:>9.0f} {r['model_tflops']:>14.4f} {r['peak_tflops']:>13.4f} "
          f"{r['mfu']:>6.1f}")
  targets = {"float32": 60.0, "bfloat16": 45.0}
  for r in rows:
    ok = "meets" if r["mfu"] >= targets[r["dtype"]] else "misses"
    print(f"{r['dtype']} xla={'yes' if r['xla'] else 'no'}: MFU {r['mfu']:.1f}% {ok} the "
          f"{targets[r['dtype']]:.0f}% target")


def main(argv: List[str]) -> None:
  args = parse_args(argv)
  keras.utils.set_random_seed(0)
  harness.print_header()
  rows = run(args)
  print_table(args, rows)
  if args.result_json:
    with open(args.result_json, "w", encoding="utf-8") as f:
      json.dump(rows, f)


if __name__ == "__main__":
  main(sys.argv[1:])
