"""Matmul speed per dtype and kernel at the shapes that decide decoding and training.

Whether bfloat16 pays, and whether XLA pays, is decided by the matmuls: TensorFlow's
oneDNN kernels use the CPU's native bfloat16 (AVX-512 BF16, AMX) where XLA's CPU dots
may not. This prints, for float32 and bfloat16, TensorFlow's kernel (oneDNN where
t2t_keras.perf.process turns it on) and XLA's, the milliseconds and GFLOP/s of:

* a large square matmul (the peak);
* decoding's shapes: 128 rows (32 sentences x beam 4) against the 512x512
  projections, the 512x2048 / 2048x512 feed-forward and the 512x32,768 logits
  (the embedding, transposed, as the shared softmax weights are);
* 2,048 rows (training's 64 x 32 tokens) against the same weights;
* three 128x512x512 projections (query, key, value) against one 128x512x1536.

Each figure is the median of `--repeats` timed rounds of `--calls` calls, after a
warm-up; the bfloat16 / float32 column compares the same kernel. The CPU model and
its bfloat16 capability head the output.

Run:
  .venv/bin/python bench/bench_matmul.py
  .venv/bin/python bench/bench_matmul.py --calls=50 --repeats=7
"""

import argparse
import sys
from typing import List, Tuple

import harness

harness.configure_process()

import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top


# (label, rows, depth, columns, transpose_b)
SHAPES: Tuple[Tuple[str, int, int, int, bool], ...] = (
    ("peak 2048^3", 2048, 2048, 2048, False),
    ("decode projection 128x512x512", 128, 512, 512, False),
    ("decode ffn in 128x512x2048", 128, 512, 2048, False),
    ("decode ffn out 128x2048x512", 128, 2048, 512, False),
    ("decode logits 128x512x32768 (E^T)", 128, 512, 32768, True),
    ("train projection 2048x512x512", 2048, 512, 512, False),
    ("train logits 2048x512x32768 (E^T)", 2048, 512, 32768, True),
)


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--calls", type=int, default=20, help="calls per timed round")
  p.add_argument("--repeats", type=int, default=5, help="timed rounds (median taken)")
  args = p.parse_args(argv)
  if args.calls < 1 or args.repeats < 1:
    raise ValueError("--calls and --repeats must be >= 1.")
  return args


def _probe(x, w, transpose_b):
  # One scalar out, so that the output copy is not timed; the matmul cannot be skipped.
  y = tf.matmul(x, w, transpose_b=transpose_b)
  return tf.cast(y[0, 0], tf.float32)


def matmul_ms(rows: int, depth: int, cols: int, transpose_b: bool, dtype: tf.DType,
              jit: bool, args) -> float:
  x = tf.cast(tf.random.stateless_normal([rows, depth], [1, 2]), dtype)
  w_shape = [cols, depth] if transpose_b else [depth, cols]
  w = tf.cast(tf.random.stateless_normal(w_shape, [3, 4]) / depth ** 0.5, dtype)
  fn = tf.function(lambda: _probe(x, w, transpose_b), jit_compile=jit)
  return harness.time_ms(fn, args.calls, args.repeats)


def qkv_ms(dtype: tf.DType, fused: bool, args) -> float:
  """Three 128x512x512 projections, as separate matmuls or one 128x512x1536."""
  x = tf.cast(tf.random.stateless_normal([128, 512], [1, 2]), dtype)
  ws = [tf.cast(tf.random.stateless_normal([512, 512], [3, i]) / 512 ** 0.5, dtype)
        for i in range(3)]
  w_cat = tf.concat(ws, axis=1)
  if fused:
    fn = tf.function(lambda: _probe(x, w_cat, False))
  else:
    fn = tf.function(lambda: tf.add_n([_probe(x, w, False) for w in ws]))
  return harness.time_ms(fn, args.calls, args.repeats)


def main(argv: List[str]) -> None:
  args = parse_args(argv)
  harness.print_header(f"median of {args.repeats} rounds of {args.calls} calls")
  header = (f"{'shape':38} {'kernel':7} {'f32 ms':>8} {'GFLOP/s':>8} {'bf16 ms':>8} "
            f"{'GFLOP/s':>8} {'bf16/f32':>8}")
  harness.print_table_header(header)
  for label, rows, depth, cols, transpose_b in SHAPES:
    flop = 2.0 * rows * depth * cols
    for jit in (False, True):
      f32 = matmul_ms(rows, depth, cols, transpose_b, tf.float32, jit, args)
      bf16 = matmul_ms(rows, depth, cols, transpose_b, tf.bfloat16, jit, args)
      print(f"{label:38} {'XLA' if jit else 'TF':7} {f32:8.3f} {flop / f32 / 1e6:8.1f} "
            f"{bf16:8.3f} {flop / bf16 / 1e6:8.1f} {f32 / bf16:7.2f}x", flush=True)
  for fused in (False, True):
    f32 = qkv_ms(tf.float32, fused, args)
    bf16 = qkv_ms(tf.bfloat16, fused, args)
    label = "q,k,v one 128x512x1536" if fused else "q,k,v three 128x512x512"
    flop = 2.0 * 128 * 512 * 1536
    print(f"{label:38} {'TF':7} {f32:8.3f} {flop / f32 / 1e6:8.1f} {bf16:8.3f} "
          f"{flop / bf16 / 1e6:8.1f} {f32 / bf16:7.2f}x", flush=True)
  print("'TF' is TensorFlow's kernel (oneDNN when on), 'XLA' a jit-compiled tf.function; "
        "bf16/f32 > 1 means bfloat16 is faster.")


if __name__ == "__main__":
  main(sys.argv[1:])
