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
import os
import statistics
import sys
import time
from typing import Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from t2t_keras.perf import process  # noqa: E402  pylint: disable=g-import-not-at-top

PROCESS_SETUP = process.configure_process()

import keras  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

from t2t_keras import cpu_info  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.layers import layer_norm  # noqa: E402  pylint: disable=g-import-not-at-top


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--batch", type=int, default=64)
  p.add_argument("--length", type=int, default=32)
  p.add_argument("--depth", type=int, default=512)
  p.add_argument("--calls", type=int, default=20, help="calls per timed round")
  p.add_argument("--repeats", type=int, default=9, help="alternating rounds (median taken)")
  return require_positive(p.parse_args(argv), ("batch", "length", "depth", "calls", "repeats"))


def require_positive(args: argparse.Namespace, names) -> argparse.Namespace:
  """`args`, after checking that each flag in `names` is at least 1."""
  for name in names:
    if getattr(args, name) < 1:
      raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}.")
  return args


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


def time_pair(steps: Dict[str, Callable[[], tf.Tensor]], calls: int,
              repeats: int) -> Dict[str, float]:
  """Median ms per call of each step, the steps alternating round by round."""
  for step in steps.values():
    step().numpy()  # trace + compile
  rounds = {name: [] for name in steps}
  for r in range(repeats):
    order = list(steps) if r % 2 == 0 else list(steps)[::-1]
    for name in order:
      start = time.perf_counter()
      for _ in range(calls - 1):
        steps[name]()
      steps[name]().numpy()
      rounds[name].append((time.perf_counter() - start) / calls * 1e3)
  return {name: statistics.median(v) for name, v in rounds.items()}


def print_preamble(shape: str, calls: int, repeats: int, header: str,
                   what: str = "forward + backward") -> None:
  """The CPU, the process set-up and what is timed, then the table's header."""
  print(cpu_info.describe())
  print(f"process set-up (t2t_keras.perf.process): {PROCESS_SETUP}; TensorFlow "
        f"{tf.__version__}; {shape}, {what}, median of {repeats} alternating "
        f"rounds of {calls} calls")
  print(header)
  print("-" * len(header))


def main(argv: List[str]) -> None:
  args = parse_args(argv)
  print_preamble(f"[{args.batch}, {args.length}, {args.depth}]", args.calls, args.repeats,
                 f"{'dtype':16} {'Keras ms':>9} {'fused ms':>9} {'speed-up':>9}")
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
    ms = time_pair(steps, args.calls, args.repeats)
    print(f"{policy:16} {ms['keras']:9.3f} {ms['fused']:9.3f} "
          f"{ms['keras'] / ms['fused']:8.2f}x", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
