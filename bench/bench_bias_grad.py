"""The bias gradient in bfloat16: TensorFlow's `BiasAddGrad` against `dense.bias_gradient`.

For each shape of transformer_base's feed-forward block (`[rows, filter_size]`
and `[rows, hidden]`), prints the error of each bias gradient against the
float64 column sum of the same bfloat16 gradient (largest error over the
largest sum; bfloat16's own rounding is 2^-8 = 0.0039), and their times
(median of alternating rounds, `bench_layer_norm.time_pair`), under the CPU model.

Run:
  .venv/bin/python bench/bench_bias_grad.py
  .venv/bin/python bench/bench_bias_grad.py --rows=2048 --units=2048,512 --repeats=15
"""

import argparse
import os
import sys
from typing import List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from t2t_keras.perf import process  # noqa: E402  pylint: disable=g-import-not-at-top

process.configure_process()  # before TensorFlow loads; bench_layer_norm prints what it did

import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

import bench_layer_norm  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.layers import dense  # noqa: E402  pylint: disable=g-import-not-at-top


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--rows", type=int, default=2048, help="tokens (64 x 32 in training)")
  p.add_argument("--units", default="2048,512", help="comma list: bias sizes")
  p.add_argument("--calls", type=int, default=20, help="calls per timed round")
  p.add_argument("--repeats", type=int, default=9, help="alternating rounds (median taken)")
  args = p.parse_args(argv)
  args.units = [int(u) for u in args.units.split(",")]
  if any(u <= 0 for u in args.units):
    p.error(f"--units must be positive, got {args.units}")
  return bench_layer_norm.require_positive(args, ("rows", "calls", "repeats"))


def main(argv: List[str]) -> None:
  args = parse_args(argv)
  bench_layer_norm.print_preamble(
      f"bfloat16 [{args.rows}, units]", args.calls, args.repeats,
      f"{'units':>6} {'BiasAddGrad err':>16} {'ours err':>9} {'BiasAddGrad ms':>15} "
      f"{'ours ms':>8} {'speed-up':>9}", what="the bias gradient alone")
  grads = {"tensorflow": lambda dy: tf.raw_ops.BiasAddGrad(out_backprop=dy),
           "ours": dense.bias_gradient}
  for units in args.units:
    # A positive mean: column sums grow with the rows, as a bfloat16 accumulator fails.
    dy = tf.cast(tf.random.stateless_normal([args.rows, units], [1, 2]) + 0.5, tf.bfloat16)
    exact = tf.cast(dy, tf.float64).numpy().sum(0)
    err = {k: float(np.abs(tf.cast(f(dy), tf.float64).numpy() - exact).max() /
                    np.abs(exact).max()) for k, f in grads.items()}
    steps = {}
    for name, grad in grads.items():
      fn = tf.function(grad)
      steps[name] = lambda fn=fn: fn(dy)[0]
    ms = bench_layer_norm.time_pair(steps, args.calls, args.repeats)
    print(f"{units:6d} {err['tensorflow']:16.4f} {err['ours']:9.4f} {ms['tensorflow']:15.3f} "
          f"{ms['ours']:8.3f} {ms['tensorflow'] / ms['ours']:8.2f}x", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
