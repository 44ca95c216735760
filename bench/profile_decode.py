"""Where decoding's time goes: exclusive op time by op type, from TensorFlow's profiler.

Decodes `bench_decode.py`'s worst case (transformer_base dimensions, random weights,
vocabulary 32,768, 32 inputs of 24 tokens, beam 4, alpha 0.6, +50) once to trace,
once timed, then once under `tf.profiler` and prints each op type's exclusive time
(an event's time minus the events nested in it on the same thread), largest first.

Run:
  .venv/bin/python bench/profile_decode.py --dtype=bfloat16 --compile=graph
  .venv/bin/python bench/profile_decode.py --dtype=float32 --compile=xla --top=15
"""

import argparse
import collections
import glob
import os
import sys
import tempfile
import time
from typing import Dict, List

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

# The worst case comes from bench_decode.
import bench_decode  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top
from tensorflow.tsl.profiler.protobuf import \
  xplane_pb2  # noqa: E402  pylint: disable=g-import-not-at-top

from t2t_keras import hparams as hparams_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.decoding import seq2seq  # noqa: E402  pylint: disable=g-import-not-at-top


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
  p.add_argument("--compile", default="graph", choices=("graph", "xla"))
  p.add_argument("--hparams_set", default="transformer_base")
  p.add_argument("--vocab_size", type=int, default=32768)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--worst_length", type=int, default=24, help="input tokens, EOS included")
  p.add_argument("--top", type=int, default=25, help="op types printed")
  return p.parse_args(argv)


def exclusive_times(xspace: xplane_pb2.XSpace) -> Dict[str, List[float]]:
  """{op type: [exclusive seconds, count]} over the host CPU plane's op threads."""
  totals = collections.defaultdict(lambda: [0.0, 0])
  for plane in xspace.planes:
    if plane.name != "/host:CPU":
      continue
    for line in plane.lines:
      if "TFE" in line.name or "python" in line.name.lower():
        continue  # eager/Python activity, not ops
      events = sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps))
      stack = []  # (end_ps, op type) of the enclosing events
      for ev in events:
        name = plane.event_metadata[ev.metadata_id].name
        op_type = name.rsplit(":", 1)[-1]
        while stack and stack[-1][0] <= ev.offset_ps:
          stack.pop()
        seconds = ev.duration_ps / 1e12
        if stack:
          totals[stack[-1][1]][0] -= seconds
        totals[op_type][0] += seconds
        totals[op_type][1] += 1
        stack.append((ev.offset_ps + ev.duration_ps, op_type))
  return totals


def main(argv: List[str]) -> None:
  args = parse_args(argv)
  model, (inputs,) = bench_decode.worst_case(args, args.dtype)
  inputs = tf.constant(inputs)
  fn = seq2seq.make_decode_fn(
      model, hparams_lib.DecodeHParams(beam_size=4, alpha=0.6, extra_length=50),
      use_cache=True, jit_compile=args.compile == "xla")
  fn(inputs)[0].numpy()  # trace / compile
  start = time.perf_counter()
  fn(inputs)[0].numpy()
  seconds = time.perf_counter() - start
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    fn(inputs)[0].numpy()
    tf.profiler.experimental.stop()
    path = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0]
    xspace = xplane_pb2.XSpace()
    with open(path, "rb") as f:
      xspace.ParseFromString(f.read())
  totals = exclusive_times(xspace)
  total = sum(t for t, _ in totals.values())
  harness.print_header(f"{args.hparams_set} {args.dtype} {args.compile}: "
                       f"{args.batch / seconds:.2f} sentences/s unprofiled; exclusive op time "
                       f"under the profiler {total:.2f} s")
  for op_type, (t, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:args.top]:
    print(f"{t:8.3f} s {100 * t / total:5.1f}%  n={count:6d}  {op_type}")


if __name__ == "__main__":
  main(sys.argv[1:])
