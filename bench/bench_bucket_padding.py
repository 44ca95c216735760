"""What padding batches to their bucket's length costs, and the batch shapes it saves.

A train step holding XLA (the fused layer norm and cross-entropy of `t2t_keras.perf`,
or `--jit_compile`) compiles once per batch shape on each device. T2T pads a batch
to its longest example, so the shapes are as many as the (batch, length) pairs
met; the trainer pads to the bucket's upper length instead
(`inputs.make_dataset(pad_to_bucket=True)`), at most one shape per bucket. This
prints, for one epoch of each corpus, both ways: the batches, the distinct
shapes (of a repeating training pipeline, as the trainer reads it, over one
epoch's batches), and the padding: the share of the batch slots that hold no
token.

Corpora: the default problem's train split (when `--data_dir` holds it, e.g.
after `make demo`, with the demo's batching: 2,048 tokens, max_length 64) and a
WMT-like length distribution with transformer_base batching (4,096 tokens,
max_length 256): synthetic shards of log-normal lengths, median 22 and mean ≈27
subwords, targets ×1.1 (`bench_input_pipeline.write_synthetic`).

Run:
  .venv/bin/python bench/bench_bucket_padding.py [--data_dir=work/data]
"""

import argparse
import collections
import glob
import os
import tempfile
import time

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

from bench_input_pipeline import write_synthetic  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top

from t2t_keras import hparams as hparams_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.training import inputs  # noqa: E402  pylint: disable=g-import-not-at-top

DEFAULT_PROBLEM = "translate_ende_ding_bible8k"


def epoch_figures(pattern: str, hp, pad_to_bucket: bool):
  """(batches, distinct shapes, token slots, non-pad tokens) of one training epoch."""
  batches = slots = tokens = 0
  for b in inputs.make_dataset(pattern, hp, "train", seed=1, repeat=False,
                               pad_to_bucket=pad_to_bucket):
    for v in (b["inputs"].numpy(), b["targets"].numpy()):
      slots += v.size
      tokens += int(np.count_nonzero(v))
    batches += 1
  # The trainer's pipeline repeats: no partial batch at an epoch's end.
  shapes = collections.Counter()
  it = iter(inputs.make_dataset(pattern, hp, "train", seed=1, pad_to_bucket=pad_to_bucket))
  for _ in range(batches):
    b = next(it)
    shapes[(tuple(b["inputs"].shape), tuple(b["targets"].shape))] += 1
  return batches, len(shapes), slots, tokens


def report(name: str, pattern: str, hp) -> None:
  buckets = len(inputs.bucket_boundaries(hp.max_length, hp.min_length_bucket,
                                         hp.length_bucket_step)) + 1
  print(f"\n{name}: batch_size={hp.batch_size}, max_length={hp.max_length}, "
        f"{buckets} buckets")
  print("  padding to        batches  shapes  padding share  slots vs longest")
  base = None
  for pad_to_bucket in (False, True):
    t = time.perf_counter()
    batches, shapes, slots, tokens = epoch_figures(pattern, hp, pad_to_bucket)
    base = base or slots
    print(f"  {'bucket length' if pad_to_bucket else 'longest (T2T)':16s} {batches:8d} "
          f"{shapes:7d}  {1 - tokens / slots:13.3%}  {slots / base - 1:+15.2%}"
          f"   ({time.perf_counter() - t:.0f} s)")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data_dir", default="work/data")
  parser.add_argument("--num_examples", type=int, default=100000,
                      help="examples of the WMT-like corpus")
  args = parser.parse_args()
  harness.print_header()

  pattern = os.path.join(args.data_dir, DEFAULT_PROBLEM + "-train-*")
  if glob.glob(pattern):
    hp = hparams_lib.create_hparams("transformer_tiny", "batch_size=2048,max_length=64")
    report(f"default corpus ({DEFAULT_PROBLEM}, the demo's batching)", pattern, hp)
  else:
    print(f"no {pattern}: run `make demo` (or t2t_keras_datagen) for the default corpus")
  with tempfile.TemporaryDirectory() as tmp:
    pattern = write_synthetic(tmp, args.num_examples, 32768)
    report(f"WMT-like lengths ({args.num_examples} synthetic pairs, transformer_base)",
           pattern, hparams_lib.create_hparams("transformer_base"))


if __name__ == "__main__":
  main()
