"""Decoding speed: sentences/s and output tokens/s, beam 4 and greedy.

Two cases:
* `worst`: transformer_base dimensions with random weights (no beam ever
  finishes early, so every sentence runs to its maximum length), vocabulary
  32,768, one batch of 32 inputs of 24 tokens (EOS included), beam 4, alpha 0.6,
  extra_length 50 (74 output tokens a sentence). With `--mg_sentences_per_s`
  (Model Garden's float32 figure for this case, measured on the same machine)
  the table shows the ratio to it; `bench_vs_model_garden.py` measures both
  in one sitting, which is the comparison to trust (figures drift between
  sittings and differ 2x between this project's CPUs).
* `test`: the test split of the default problem (translate_ende_ding_bible8k,
  `--data_dir`), the first `--max_lines` lines in batches of 32, longest first.
  With `--output_dir` the trained model of that run is used, otherwise
  transformer_small with random weights and the problem's vocabulary.

Modes are `search:cache:compile`: search beam|greedy, cache cached|uncached,
compile graph (tf.function) or xla (tf.function(jit_compile=True)). Each dtype
builds its own model (bfloat16 = Keras' "mixed_bfloat16" policy; logits stay
float32). Figures are medians over `--repeats` timed runs after one untimed
warm-up run (which also traces). Output tokens count each sentence up to and
including its EOS, or to its cap (input length + extra_length) where it has
none: outputs that reach the cap end without EOS, as in T2T.

Run:
  .venv/bin/python bench/bench_decode.py                         # worst case
  .venv/bin/python bench/bench_decode.py --cases=test --max_lines=128
  .venv/bin/python bench/bench_decode.py --cases=worst --dtypes=bfloat16 \
      --modes=beam:cached:xla --repeats=5
  .venv/bin/python bench/bench_decode.py --hparams=self_attention_type=dot_product_relative,pos=none
"""

import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, List, Tuple

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

import keras  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

from data_gen.text_encoder import EOS_ID  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras import hparams as hparams_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.decoding import seq2seq  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.model import Transformer  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.perf import flops as flops_lib  # noqa: E402  pylint: disable=g-import-not-at-top

PROBLEM = "translate_ende_ding_bible8k"
MODES = ("beam:cached:graph", "beam:cached:xla", "greedy:cached:graph", "greedy:cached:xla",
         "beam:uncached:graph", "beam:uncached:xla", "greedy:uncached:graph",
         "greedy:uncached:xla")
DEFAULT_MODES = ("beam:cached:graph,beam:cached:xla,greedy:cached:graph,greedy:cached:xla,"
                 "beam:uncached:xla,greedy:uncached:xla")


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--cases", default="worst", help="comma list of worst|test")
  p.add_argument("--dtypes", default="float32,bfloat16", help="comma list of float32|bfloat16")
  p.add_argument("--modes", default=DEFAULT_MODES, help=f"comma list among {MODES}")
  p.add_argument("--worst_modes", default="",
                 help="modes for the worst case if different from --modes (uncached beam "
                      "search on the worst case takes minutes a run)")
  p.add_argument("--repeats", type=int, default=3, help="timed runs (median taken)")
  p.add_argument("--batch", type=int, default=32, help="sentences per batch")
  p.add_argument("--beam_size", type=int, default=4)
  p.add_argument("--alpha", type=float, default=0.6)
  p.add_argument("--extra_length", type=int, default=50)
  p.add_argument("--worst_length", type=int, default=24, help="input tokens, EOS included")
  p.add_argument("--vocab_size", type=int, default=32768, help="worst case vocabulary")
  p.add_argument("--hparams_set", default="transformer_base", help="worst case model")
  p.add_argument("--hparams", default="",
                 help="T2T-syntax overrides of --hparams_set (and --test_hparams_set), e.g. "
                      "'self_attention_type=dot_product_relative,pos=none'")
  p.add_argument("--data_dir", default="work/data",
                 help="data dir of the default problem (what `make demo` writes)")
  p.add_argument("--output_dir", default="", help="trained run for the test case")
  p.add_argument("--test_hparams_set", default="transformer_small",
                 help="random model of the test case when no --output_dir")
  p.add_argument("--max_lines", type=int, default=128, help="test lines decoded (0: all)")
  p.add_argument("--mg_sentences_per_s", type=float, default=0.0,
                 help="Model Garden's float32 worst-case sentences/s on this machine "
                      "(anchor_model_garden_decode.py); 0: no ratio column")
  p.add_argument("--result_json", default="",
                 help="also write the rows here (bench_vs_model_garden.py reads them)")
  p.add_argument("--peak_size", type=int, default=1024,
                 help="n of the n*n*n matmuls timing the matmul peak (worst case)")
  args = p.parse_args(argv)
  harness.require_positive(args, ("repeats", "batch", "beam_size", "worst_length",
                                  "vocab_size"))
  if args.mg_sentences_per_s < 0:
    raise ValueError(f"--mg_sentences_per_s must be >= 0, got {args.mg_sentences_per_s}.")
  args.cases = harness.choices("cases", args.cases, ("worst", "test"))
  args.dtypes = harness.choices("dtypes", args.dtypes, ("float32", "bfloat16"))
  args.modes = harness.choices("modes", args.modes, MODES)
  args.worst_modes = (harness.choices("worst_modes", args.worst_modes, MODES)
                      if args.worst_modes else args.modes)
  return args


def set_dtype(dtype: str) -> None:
  keras.mixed_precision.set_global_policy(
      "mixed_bfloat16" if dtype == "bfloat16" else "float32")


# -- Cases: (model, list of padded input batches) ----------------------------------

def worst_case(args, dtype: str) -> Tuple[Transformer, List[np.ndarray]]:
  set_dtype(dtype)
  hp = hparams_lib.create_hparams(args.hparams_set, args.hparams)
  model = Transformer(hp, args.vocab_size, name="transformer")
  model.build()
  rng = np.random.default_rng(0)
  inputs = rng.integers(2, args.vocab_size, size=(args.batch, args.worst_length))
  inputs[:, -1] = EOS_ID
  return model, [inputs.astype(np.int32)]


def test_case(args, dtype: str) -> Tuple[Transformer, List[np.ndarray]]:
  from data_gen.text_encoder import SubwordTextEncoder  # pylint: disable=g-import-not-at-top
  set_dtype(dtype)
  if args.output_dir:
    import t2t_keras  # pylint: disable=g-import-not-at-top
    model = t2t_keras.open_run(args.output_dir, data_dir=args.data_dir).model
  else:
    vocab = SubwordTextEncoder(os.path.join(args.data_dir,
                                            f"vocab.{PROBLEM}.8192.subwords"))
    hp = hparams_lib.create_hparams(args.test_hparams_set, args.hparams)
    model = Transformer(hp, vocab.vocab_size, name="transformer")
    model.build()
  vocab = SubwordTextEncoder(os.path.join(args.data_dir, f"vocab.{PROBLEM}.8192.subwords"))
  with open(os.path.join(args.data_dir, f"{PROBLEM}.test.en"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  if args.max_lines:
    lines = lines[:args.max_lines]
  rows = sorted((vocab.encode(line) + [EOS_ID] for line in lines), key=len,
                reverse=True)
  batches = []
  for start in range(0, len(rows), args.batch):
    chunk = rows[start:start + args.batch]
    # Pad to a multiple of 8 so XLA traces a few shapes only.
    width = -(-max(len(r) for r in chunk) // 8) * 8
    batches.append(np.array([r + [0] * (width - len(r)) for r in chunk], np.int32))
  return model, batches


# -- Timing ---------------------------------------------------------------------------

def output_tokens(ids: np.ndarray) -> int:
  """Tokens up to and including the first EOS of each row, or up to its last
  non-pad id if it has none (`ids` `[batch, length]`, 0-padded)."""
  is_eos = ids == EOS_ID
  nonzero = ids != 0
  last = np.where(nonzero.any(1), ids.shape[1] - nonzero[:, ::-1].argmax(1), 0)
  ends = np.where(is_eos.any(1), is_eos.argmax(1) + 1, last)
  return int(ends.sum())


def time_mode(model, batches, mode: str, args) -> Dict[str, float]:
  search, cache, compile_ = mode.split(":")
  decode_hp = hparams_lib.DecodeHParams(
      beam_size=args.beam_size if search == "beam" else 1, alpha=args.alpha,
      extra_length=args.extra_length)
  fn = seq2seq.make_decode_fn(model, decode_hp, use_cache=cache == "cached",
                               jit_compile=compile_ == "xla")

  def run() -> Tuple[float, int]:
    start = time.perf_counter()
    outs = [fn(tf.constant(b)) for b in batches]
    outs = [(ids.numpy(), scores.numpy()) for ids, scores in outs]
    elapsed = time.perf_counter() - start
    for _, scores in outs:
      if not np.all(np.isfinite(scores)):
        raise RuntimeError(f"{mode}: non-finite scores {scores}")
    return elapsed, sum(output_tokens(ids) for ids, _ in outs)

  start = time.perf_counter()
  run()  # traces (and compiles) every batch shape
  warmup = time.perf_counter() - start
  runs = [run() for _ in range(args.repeats)]
  seconds = statistics.median(r[0] for r in runs)
  sentences = sum(len(b) for b in batches)
  tokens = runs[0][1]
  return {"sentences/s": sentences / seconds, "tokens/s": tokens / seconds,
          "seconds": seconds, "warmup": warmup, "tokens/sentence": tokens / sentences}


def worst_case_peak_fraction(model, args, mode: str, seconds: float, peak: float) -> str:
  """Achieved matmul FLOP/s of a cached worst-case decode over the measured peak."""
  search, cache, _ = mode.split(":")
  if cache != "cached":
    return ""
  beam = args.beam_size if search == "beam" else 1
  flop = flops_lib.decode_flops(model.hparams, args.vocab_size, args.batch, args.worst_length,
                                args.worst_length + args.extra_length, beam)
  return f"{flop / seconds / 1e9:7.1f} {100 * flop / seconds / peak:5.0f}%"


def main(argv: List[str]) -> None:
  args = parse_args(argv)
  harness.print_header(f"repeats={args.repeats}, batch={args.batch}, beam={args.beam_size}, "
                       f"alpha={args.alpha}, extra_length={args.extra_length}")
  header = (f"{'case':6} {'dtype':9} {'mode':22} {'sent/s':>8} {'tok/s':>8} "
            f"{'tok/sent':>8} {'sec/run':>8} {'warmup s':>8} {'x ModelGarden':>13} "
            f"{'GFLOP/s':>7} {'peak':>5}")
  harness.print_table_header(header)
  peaks, results = {}, []
  for case in args.cases:
    for dtype in args.dtypes:
      model, batches = (worst_case if case == "worst" else test_case)(args, dtype)
      if case == "worst" and dtype not in peaks:
        probe = harness.make_peak_probe(tf.as_dtype(dtype), args.peak_size)
        peaks[dtype] = max(probe() for _ in range(3))
      for mode in (args.worst_modes if case == "worst" else args.modes):
        r = time_mode(model, batches, mode, args)
        ratio = (f"{r['sentences/s'] / args.mg_sentences_per_s:13.2f}"
                 if case == "worst" and args.mg_sentences_per_s > 0 else f"{'':13}")
        fraction = (worst_case_peak_fraction(model, args, mode, r["seconds"], peaks[dtype])
                    if case == "worst" else "")
        print(f"{case:6} {dtype:9} {mode:22} {r['sentences/s']:8.2f} {r['tokens/s']:8.1f} "
              f"{r['tokens/sentence']:8.1f} {r['seconds']:8.2f} {r['warmup']:8.1f} {ratio} "
              f"{fraction}", flush=True)
        results.append(dict(r, case=case, dtype=dtype, mode=mode))
  set_dtype("float32")
  if args.result_json:
    with open(args.result_json, "w", encoding="utf-8") as f:
      json.dump(results, f)
  if args.mg_sentences_per_s > 0:
    print(f"'x ModelGarden' divides by --mg_sentences_per_s={args.mg_sentences_per_s} "
          "(Model Garden, float32, worst case).")
  for dtype, peak in peaks.items():
    print(f"{dtype} matmul peak measured in this process ({args.peak_size}^3 matmuls, best of "
          f"TF and XLA kernels): {peak / 1e9:.1f} GFLOP/s. 'GFLOP/s' and 'peak' count the "
          f"matmuls of cached decoding (t2t_keras.perf.flops.decode_flops).")


if __name__ == "__main__":
  main(sys.argv[1:])
