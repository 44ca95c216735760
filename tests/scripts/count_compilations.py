"""XLA compilations of the trainer over one epoch of the tiny problem.

  python tests/scripts/count_compilations.py <repo> <root> <out.json> [longest]

Run as a script: XLA reads XLA_FLAGS once, at its first compilation, and each
compilation then dumps its module; counting the modules counts compilations.
Generates the tiny problem with sentences of 2-100 words under <root>, trains a
1-layer Transformer through `t2t_keras.train` (the trainer's code path: the
experiment's input pipeline and the default train step, whose fused layer norm
and cross-entropy are XLA functions) for one epoch's batches, and writes
{"buckets", "batches", "compilations": {module: count}, "shapes_longest",
"shapes_bucket"}: the distinct batch shapes of an epoch padded to the longest
example and to the bucket's length, counted on the data alone. With `longest`
the trainer's pipeline pads to the longest example, as T2T (and this project
before it padded to buckets), to see what the padding saves.

The batches are small (256 tokens, a few long sentences each), so that a batch's
longest example varies within its bucket as it does for a large model's batch on
one GPU of several.
"""

import collections
import json
import os
import re
import sys

repo, root, out = sys.argv[1:4]
longest = sys.argv[4:] == ["longest"]
dump = os.path.join(root, "xla_dump")
os.environ["XLA_FLAGS"] = f"--xla_dump_to={dump} --xla_dump_hlo_as_text"
sys.path.insert(0, repo)

import tensorflow as tf  # noqa: E402

from data_gen import registry  # noqa: E402
import t2t_keras  # noqa: E402
from t2t_keras import hparams as hparams_lib  # noqa: E402
from t2t_keras.training import inputs  # noqa: E402
from tests.support.tiny_problem import make_tiny_problem  # noqa: E402

HPARAMS = ("num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,batch_size=256,"
           "max_length=150")

data_dir = make_tiny_problem(root, train=1500, dev=16, max_words=100)
pattern = registry.problem("translate_from_files", data_dir).filepattern(data_dir, "train")
hp = hparams_lib.create_hparams("transformer_tiny", HPARAMS)


def shapes(pad_to_bucket, batches=None):
  ds = inputs.make_dataset(pattern, hp, "train", seed=1, repeat=batches is not None,
                           pad_to_bucket=pad_to_bucket)
  if batches is not None:
    ds = ds.take(batches)
  return [(tuple(b["inputs"].shape), tuple(b["targets"].shape)) for b in ds]


batches = len(shapes(False))
if longest:
  from t2t_keras import perf  # noqa: E402  pylint: disable=g-import-not-at-top
  perf.step_compiles_per_shape = lambda jit_compile: False
t2t_keras.train(problem="translate_from_files", hparams_set="transformer_tiny",
                hparams=HPARAMS, data_dir=data_dir, output_dir=os.path.join(root, "run"),
                train_steps=batches, strategy="one_device", random_seed=1,
                log=lambda line: None)
modules = collections.Counter(
    re.sub(r"^module_\d+\.", "", name[:-len(".before_optimizations.txt")])
    for name in os.listdir(dump) if name.endswith(".before_optimizations.txt"))
with open(out, "w", encoding="utf-8") as f:
  json.dump({"buckets": len(inputs.bucket_boundaries(hp.max_length)) + 1, "batches": batches,
             "compilations": dict(modules),
             "shapes_longest": len(set(shapes(False, batches))),
             "shapes_bucket": len(set(shapes(True, batches)))}, f)
