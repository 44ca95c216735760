"""How much faster bfloat16 beam search can be than float32 on this CPU: a bound.

bfloat16 changes the speed of the matmuls; beam search's log-softmax over the
vocabulary, its top-k, gathers and length penalty stay float32 (as T2T's). So a
bfloat16 decode can gain at most what its matmuls gain. Each round this times, in
one process:

* the worst-case decode (`bench_decode.py`'s: random weights, `--batch` inputs of
  `--worst_length` tokens, beam search to input length + `--extra_length`) in
  float32 under XLA and without, and in mixed bfloat16 without XLA (the bfloat16
  decoder's path; XLA's CPU bfloat16 dots are slower than its float32 ones);
* the same decode's matmuls alone, in one tf.function per dtype and kernel (XLA's
  or TensorFlow's/oneDNN's): once per batch the encoder's and the encoder-decoder
  keys' and values', then a loop over the steps of every matmul of a decoding step
  (each decoder layer's projections, self-attention over the fixed-size buffer
  that the XLA path attends to, encoder-decoder attention, feed-forward; the tied
  logits). Their FLOPs equal `t2t_keras.perf.flops.decode_flops`, and the output says so.

From these, with T32 the faster float32 decode, M32 its matmuls' time and M16 the
faster of the bfloat16 matmul sets:

  bound = T32 / (T32 - M32 + M16)

is the speed-up of a bfloat16 decode whose matmuls all ran at the standalone
bfloat16 speed and whose other work cost what it costs float32's best path. It
also prints how little time the non-matmul work would have to take for a given
target (`--target`, 1.5x) and the measured bfloat16 decode's
speed-up. Rounds alternate the timings, so the machine's drift falls into the
per-round figures; the medians over rounds are printed last.

Run:
  .venv/bin/python bench/bench_decode_bound.py
  .venv/bin/python bench/bench_decode_bound.py --hparams_set=transformer_tiny \\
      --vocab_size=8192 --worst_length=30 --rounds=7
"""

import argparse
import statistics
import sys
from typing import Callable, Dict, List

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

import bench_decode  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

from t2t_keras import hparams as hparams_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.decoding import seq2seq  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.hparams import HParams  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.perf import flops as flops_lib  # noqa: E402  pylint: disable=g-import-not-at-top

# (label, dtype, jit_compile) of the matmul sets; the decodes below use the same labels.
KERNELS = (("float32 xla", tf.float32, True), ("float32 graph", tf.float32, False),
           ("bfloat16 graph", tf.bfloat16, False), ("bfloat16 xla", tf.bfloat16, True))
# (label, dtype, jit_compile) of the cached beam-search decodes.
DECODES = (("float32 xla", "float32", True), ("float32 graph", "float32", False),
           ("bfloat16 graph", "bfloat16", False))


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--hparams_set", default="transformer_base")
  p.add_argument("--vocab_size", type=int, default=32768)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--beam_size", type=int, default=4)
  p.add_argument("--alpha", type=float, default=0.6)
  p.add_argument("--worst_length", type=int, default=24, help="input tokens, EOS included")
  p.add_argument("--extra_length", type=int, default=50)
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument("--calls", type=int, default=1,
                 help="calls of each decode and matmul set timed per round (more for small models)")
  p.add_argument("--target", type=float, default=1.5, help="bfloat16 / float32 speed-up asked")
  args = p.parse_args(argv)
  harness.require_positive(args, ("vocab_size", "batch", "beam_size", "worst_length",
                                  "rounds", "calls", "target"))
  if args.extra_length < 0:
    raise ValueError(f"--extra_length must be >= 0, got {args.extra_length}.")
  return args


def _weights(shapes: Dict[str, List[int]], dtype: tf.DType, seed: int) -> Dict[str, tf.Tensor]:
  g = tf.random.Generator.from_seed(seed)
  return {name: tf.cast(g.normal(shape) * 0.02, dtype) for name, shape in shapes.items()}


def matmul_fns(hp: HParams, vocab_size: int, batch: int, beam: int, input_length: int,
               steps: int, dtype: tf.DType, jit_compile: bool
               ) -> Dict[str, Callable[[], tf.Tensor]]:
  """tf.functions of a decode's matmuls, each returning a float32 scalar that depends
  on every matmul, so that none can be pruned:

  * "step": one decoding step's; "batch": the once-per-batch ones (to count FLOPs);
  * "decode": the once-per-batch ones, then `steps` steps in a loop (to time: one
    call, as one decode is, so per-call overhead does not count `steps` times).

  Shapes follow `decoding.decode_ids` under XLA: `batch * beam` rows a step; each
  item's beams attend to its shared self-attention buffer of `steps * beam`
  positions and to the `input_length` encoder positions.
  """
  d, f, kc, vc, heads = (hp.hidden_size, hp.filter_size, hp.key_channels,
                         hp.value_channels, hp.num_heads)
  rows, buffer = batch * beam, steps * beam
  dk, dv = kc // heads, vc // heads
  shapes = {"x": [rows, d], "emb": [vocab_size, d], "src": [batch * input_length, d],
            "self_k": [batch * heads, buffer, dk], "self_v": [batch * heads, buffer, dv],
            "encdec_k": [batch * heads, input_length, dk],
            "encdec_v": [batch * heads, input_length, dv]}
  for layer in range(max(hp.decoder_layers, hp.encoder_layers)):
    shapes.update({f"q{layer}": [d, kc], f"k{layer}": [d, kc], f"v{layer}": [d, vc],
                   f"o{layer}": [vc, d], f"eq{layer}": [d, kc], f"eo{layer}": [vc, d],
                   f"ek{layer}": [d, kc], f"ev{layer}": [d, vc],
                   f"f1_{layer}": [d, f], f"f2_{layer}": [f, d]})
  w = _weights(shapes, dtype, seed=1)

  def attend(q, keys, values, queries):
    # q `[rows, kc]` -> `[batch * heads, queries, dk]`, against `[batch * heads, n, d_]`.
    q = tf.reshape(q, [batch * heads, queries, dk])
    return tf.reshape(tf.matmul(tf.matmul(q, keys, transpose_b=True), values),
                      [-1, heads * dv])

  def step(x):
    """`[rows, d]` -> (next step's `[rows, d]`, float32 scalar of every matmul)."""
    written = tf.zeros([], dtype)
    for layer in range(hp.decoder_layers):
      q, k, v = (tf.matmul(x, w[f"{n}{layer}"]) for n in ("q", "k", "v"))
      written += k[0, 0] + v[0, 0]  # what the decoder writes into its buffer
      x = tf.matmul(attend(q, w["self_k"], w["self_v"], beam), w[f"o{layer}"])
      eq = tf.matmul(x, w[f"eq{layer}"])
      x = tf.matmul(attend(eq, w["encdec_k"], w["encdec_v"], beam), w[f"eo{layer}"])
      x = tf.matmul(tf.matmul(x, w[f"f1_{layer}"]), w[f"f2_{layer}"])
    logits = tf.matmul(x, w["emb"], transpose_b=True)
    # The next input depends on this step's logits, as the next token does.
    return w["x"] + logits[:, :1] * 1e-3, tf.cast(logits[0, 0] + written, tf.float32)

  def once_per_batch():
    x = w["src"]
    for layer in range(hp.encoder_layers):
      q, k, v = (tf.matmul(x, w[f"{n}{layer}"]) for n in ("q", "k", "v"))
      keys = tf.reshape(k, [batch * heads, input_length, dk])
      values = tf.reshape(v, [batch * heads, input_length, dv])
      x = tf.matmul(attend(q, keys, values, input_length), w[f"o{layer}"])
      x = tf.matmul(tf.matmul(x, w[f"f1_{layer}"]), w[f"f2_{layer}"])
    total = tf.cast(x[0, 0], tf.float32)
    for layer in range(hp.decoder_layers):  # encoder-decoder keys and values
      total += tf.cast(tf.matmul(x, w[f"ek{layer}"])[0, 0] +
                       tf.matmul(x, w[f"ev{layer}"])[0, 0], tf.float32)
    return total

  def decode():
    total, x = once_per_batch(), w["x"]
    for _ in tf.range(steps):
      x, value = step(x)
      total += value
    return total

  return {"step": tf.function(lambda: step(w["x"])[1]),
          "batch": tf.function(once_per_batch),
          "decode": tf.function(decode, jit_compile=jit_compile)}


def graph_matmul_flops(fn: Callable[[], tf.Tensor]) -> float:
  """2 * m * n * k summed over the MatMul / BatchMatMul ops of `fn`'s graph."""
  graph = fn.get_concrete_function().graph
  total = 0.0
  for op in graph.get_operations():
    if op.type not in ("MatMul", "BatchMatMulV2", "BatchMatMulV3"):
      continue
    a, out = op.inputs[0].shape.as_list(), op.outputs[0].shape.as_list()
    transposed = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
    depth = a[-2] if transposed else a[-1]
    batch = 1
    for n in out[:-2]:
      batch *= n
    total += 2.0 * batch * out[-2] * out[-1] * depth
  return total


def bound(t32: float, m32: float, m16: float) -> float:
  """Speed-up over `t32` if its matmul time `m32` became `m16`, the rest unchanged."""
  return t32 / (t32 - m32 + m16)


def nonmatmul_budget(t32: float, m16: float, target: float) -> float:
  """Time the non-matmul work may take for a decode with matmul time `m16` to be
  `target` times faster than `t32` (negative: the matmuls alone are too slow)."""
  return t32 / target - m16


def main(argv: List[str]) -> None:
  args = parse_args(argv)
  harness.print_header()
  hp = hparams_lib.create_hparams(args.hparams_set)
  steps = args.worst_length + args.extra_length
  flops = flops_lib.decode_flops(hp, args.vocab_size, args.batch, args.worst_length, steps,
                                 args.beam_size)
  dec_args = bench_decode.parse_args([
      f"--batch={args.batch}", f"--beam_size={args.beam_size}", f"--alpha={args.alpha}",
      f"--worst_length={args.worst_length}", f"--extra_length={args.extra_length}",
      f"--vocab_size={args.vocab_size}", f"--hparams_set={args.hparams_set}", "--repeats=1"])

  sets = {label: matmul_fns(hp, args.vocab_size, args.batch, args.beam_size,
                            args.worst_length, steps, dtype, jit)
          for label, dtype, jit in KERNELS}
  set_flops = (steps * graph_matmul_flops(sets["float32 xla"]["step"]) +
               graph_matmul_flops(sets["float32 xla"]["batch"]))
  print(f"{args.hparams_set}, vocabulary {args.vocab_size}, {args.batch} inputs of "
        f"{args.worst_length} tokens, beam {args.beam_size}, {steps} steps: "
        f"{flops / 1e9:.1f} GFLOP of matmuls a batch (t2t_keras.perf.flops.decode_flops; "
        f"the matmul sets below: {set_flops / 1e9:.1f})")

  decoders = {}
  decode_hp = hparams_lib.DecodeHParams(beam_size=args.beam_size, alpha=args.alpha,
                                        extra_length=args.extra_length)
  for label, dtype, jit_compile in DECODES:
    model, batches = bench_decode.worst_case(dec_args, dtype)
    fn = seq2seq.make_decode_fn(model, decode_hp, use_cache=True, jit_compile=jit_compile)
    inputs = tf.constant(batches[0])
    decoders[label] = (lambda fn=fn, inputs=inputs: fn(inputs)[1])
    decoders[label]().numpy()  # trace and compile
  bench_decode.set_dtype("float32")
  for fns in sets.values():
    fns["decode"]().numpy()

  header = (f"{'round':>5} {'T32 s':>7} {'(mode)':>14} {'M32 s':>7} {'share':>6} "
            f"{'M16 s':>7} {'bound':>6} {'budget s':>9} {'now s':>7} {'bf16 decode':>11} "
            f"{'bf16 rest':>9}")
  print("per batch: T32 the faster float32 decode, M32 its matmuls, M16 the faster "
        "bfloat16 matmuls;\nbound = T32 / (T32 - M32 + M16); budget = the non-matmul "
        f"time allowed for {args.target}x; now = T32 - M32, float32's;\n'bf16 decode' = "
        "T32 / the measured mixed-bfloat16 decode without XLA; 'bf16 rest' = that decode's\n"
        "time minus its own kernel's bfloat16 matmuls (its non-matmul work)")
  harness.print_table_header(header)
  rows = []
  for r in range(args.rounds):
    order = [label for label, _, _ in DECODES]
    if r % 2:
      order.reverse()
    decode_s = {label: harness.time_calls(decoders[label], args.calls) for label in order}
    labels = [label for label, _, _ in KERNELS]
    matmul_s = {label: harness.time_calls(sets[label]["decode"], args.calls)
                for label in (labels if r % 2 == 0 else labels[::-1])}
    f32_mode = min(("float32 xla", "float32 graph"), key=lambda m: decode_s[m])
    t32, m32 = decode_s[f32_mode], matmul_s[f32_mode]
    m16 = min(matmul_s["bfloat16 graph"], matmul_s["bfloat16 xla"])
    row = dict(t32=t32, m32=m32, share=m32 / t32, m16=m16, bound=bound(t32, m32, m16),
               budget=nonmatmul_budget(t32, m16, args.target), now=t32 - m32,
               measured=t32 / decode_s["bfloat16 graph"],
               bf16_rest=decode_s["bfloat16 graph"] - matmul_s["bfloat16 graph"])
    rows.append(row)
    print(f"{r + 1:5d} {t32:7.3f} {f32_mode:>14} {m32:7.3f} {row['share']:6.0%} {m16:7.3f} "
          f"{row['bound']:5.2f}x {row['budget']:9.3f} {row['now']:7.3f} "
          f"{row['measured']:10.2f}x {row['bf16_rest']:9.3f}", flush=True)
  med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
  print(f"{'med':>5} {med['t32']:7.3f} {'':>14} {med['m32']:7.3f} {med['share']:6.0%} "
        f"{med['m16']:7.3f} {med['bound']:5.2f}x {med['budget']:9.3f} {med['now']:7.3f} "
        f"{med['measured']:10.2f}x {med['bf16_rest']:9.3f}")
  verdict = "within reach" if med["bound"] >= args.target else "out of reach"
  print(f"bfloat16 decoding at {args.target}x float32's best is {verdict} on this CPU by "
        f"this bound (median {med['bound']:.2f}x): the matmul speed-up alone gives "
        f"T32 / M16 = {med['t32'] / med['m16']:.2f}x if nothing else took time.")


if __name__ == "__main__":
  main(sys.argv[1:])
