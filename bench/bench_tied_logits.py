"""The tied logits' forward + backward at training's shape: TensorFlow's gradient against ours.

Times, for float32 and bfloat16, one forward and backward pass of
`logits = x·tableᵀ` (`[rows, hidden]` x `[vocab, hidden]`, the shared softmax of
transformer_base) through `tf.matmul(x, table, transpose_b=True)`, whose table
gradient TensorFlow computes as dyᵀ·x, and through
`t2t_keras.layers.embedding.tied_logits_matmul`, which in float32 at depths up to
512 computes it as (xᵀ·dy)ᵀ. The two run alternately (`bench_layer_norm.time_pair`); the medians and
their ratio are printed under the CPU model.

Run:
  .venv/bin/python bench/bench_tied_logits.py
  .venv/bin/python bench/bench_tied_logits.py --rows=2048 --hidden=512 --vocab=32768 --repeats=15
"""

import argparse
import os
import sys
from typing import Callable, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from t2t_keras.perf import process  # noqa: E402  pylint: disable=g-import-not-at-top

process.configure_process()  # before TensorFlow loads; bench_layer_norm prints what it did

import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

import bench_layer_norm  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.layers import embedding  # noqa: E402  pylint: disable=g-import-not-at-top


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--rows", type=int, default=2048, help="target tokens (64 x 32 in training)")
  p.add_argument("--hidden", type=int, default=512)
  p.add_argument("--vocab", type=int, default=32768)
  p.add_argument("--calls", type=int, default=3, help="calls per timed round")
  p.add_argument("--repeats", type=int, default=9, help="alternating rounds (median taken)")
  return bench_layer_norm.require_positive(p.parse_args(argv),
                                          ("rows", "hidden", "vocab", "calls", "repeats"))


def make_step(matmul: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], x: tf.Tensor,
              table: tf.Tensor, dy: tf.Tensor) -> Callable[[], tf.Tensor]:
  """A tf.function: forward and both gradients; returns one scalar."""

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      tape.watch([x, table])
      logits = matmul(x, table)
    dx, dtable = tape.gradient(logits, [x, table], output_gradients=dy)
    return tf.cast(dx[0, 0] + dtable[0, 0], tf.float32)

  return step


def main(argv: List[str]) -> None:
  args = parse_args(argv)
  bench_layer_norm.print_preamble(
      f"{args.rows} x {args.hidden} x {args.vocab}", args.calls, args.repeats,
      f"{'dtype':10} {'TensorFlow ms':>14} {'ours ms':>9} {'speed-up':>9}")
  plain = lambda x, table: tf.matmul(x, table, transpose_b=True)
  for dtype in (tf.float32, tf.bfloat16):
    x = tf.cast(tf.random.stateless_normal([args.rows, args.hidden], [1, 2]), dtype)
    table = tf.cast(tf.random.stateless_normal([args.vocab, args.hidden], [3, 4]), dtype)
    dy = tf.cast(tf.random.stateless_normal([args.rows, args.vocab], [5, 6]), dtype)
    steps = {"tensorflow": make_step(plain, x, table, dy),
             "ours": make_step(embedding.tied_logits_matmul, x, table, dy)}
    ms = bench_layer_norm.time_pair(steps, args.calls, args.repeats)
    print(f"{dtype.name:10} {ms['tensorflow']:14.1f} {ms['ours']:9.1f} "
          f"{ms['tensorflow'] / ms['ours']:8.2f}x", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
