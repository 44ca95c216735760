"""Layer norm forward + backward at training's shape: Keras' ops against the fused kernels.

Times, for float32 and mixed bfloat16, one forward and backward pass (the input's
and both weights' gradients) of a `[batch, length, depth]` activation through
Keras' `LayerNormalization` and through `t2t_keras.layers.layer_norm.LayerNorm`
with `training=True` (T2T's formula as one XLA kernel forward, its closed-form
gradient as one backward). The two run alternately, `--repeats` rounds of
`--calls` calls each; the medians and their ratio are printed under the CPU model.
A transformer_base train step runs 32 of these.

Run:
  .venv/bin/python bench/bench_layer_norm.py
  .venv/bin/python bench/bench_layer_norm.py --batch=64 --length=32 --depth=512 --repeats=15
"""

import argparse
import sys
from typing import Callable, List

import harness

harness.configure_process()

import keras  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

from t2t_keras.layers import layer_norm  # noqa: E402  pylint: disable=g-import-not-at-top


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--batch", type=int, default=64)
  p.add_argument("--length", type=int, default=32)
  p.add_argument("--depth", type=int, default=512)
  p.add_argument("--calls", type=int, default=20, help="calls per timed round")
  p.add_argument("--repeats", type=int, default=9, help="alternating rounds (median taken)")
  return harness.require_positive(p.parse_args(argv),
                                  ("batch", "length", "depth", "calls", "repeats"))


def make_step(norm: keras.layers.Layer, x: tf.Tensor, dy: tf.Tensor) -> Callable[[], tf.Tensor]:
  """A tf.function: forward and backward through `norm`; returns one scalar."""

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = norm(x, training=True)
    dx, dscale, dbias = tape.gradient(y, [x, norm.gamma, norm.beta], output_gradients=dy)
    return tf.cast(dx[0, 0, 0], tf.float32) + dscale[0] + dbias[0]

  return step


def main(argv: List[str]) -> None:
  args = parse_args(argv)
  harness.print_pair_header(f"[{args.batch}, {args.length}, {args.depth}]", args.calls,
                            args.repeats, f"{'dtype':16} {'Keras ms':>9} {'fused ms':>9} {'speed-up':>9}")
  shape = [args.batch, args.length, args.depth]
  for policy, dtype in (("float32", tf.float32), ("mixed_bfloat16", tf.bfloat16)):
    x = tf.cast(tf.random.stateless_normal(shape, [1, 2]), dtype)
    dy = tf.cast(tf.random.stateless_normal(shape, [3, 4]), dtype)
    norms = {"keras": keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy),
             "fused": layer_norm.LayerNorm(epsilon=1e-6, dtype=policy)}
    steps = {}
    for name, norm in norms.items():
      norm.build(shape)
      steps[name] = make_step(norm, x, dy)
    ms = harness.time_pair(steps, args.calls, args.repeats)
    print(f"{policy:16} {ms['keras']:9.3f} {ms['fused']:9.3f} "
          f"{ms['keras'] / ms['fused']:8.2f}x", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
