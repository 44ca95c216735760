"""Decoding speed and quality, side by side in one sitting: t2t-keras vs CTranslate2.

Engines: t2t-keras float32 (the decoder's default path: TensorFlow, XLA where
`decoding.inference_choices` chooses it; in the worst case also with XLA, which the decoder
takes for files of 2,000+ lines of such a model) and CTranslate2 float32, int8 and
int8_float32 of the same weights (`t2t_keras.export.ctranslate2_model`). Both use every CPU of the
process. Timed runs of the engines alternate (round-robin, `--repeats` rounds
after one untimed warm-up each); medians are printed, with the ratio to
t2t-keras float32.

Cases:
* `worst`: transformer_base dimensions with random weights (no beam finishes
  early: every sentence runs to its cap), vocabulary `--vocab_size` (8,190),
  one batch of 32 inputs of 24 ids (EOS included), beam 4, alpha 0.6,
  extra_length 50 (74 output ids a sentence).
* `test`: a trained run (`--output_dir`, e.g. the demo's `work/train` with
  `--checkpoint_path` its averaged checkpoint) on the test split of its problem
  in `--data_dir`, as `t2t_keras_decoder --eval_use_test_set` decodes it (text in,
  text out, the decode hparams below), with each engine's sacreBLEU; then where
  int8's error comes from (int8 everywhere, as CTranslate2 loads it, against int8
  embeddings and softmax projection only).

Run:
  .venv/bin/python bench/bench_ctranslate2.py --cases=worst
  .venv/bin/python bench/bench_ctranslate2.py --cases=test --data_dir=work/data \
      --output_dir=work/train --checkpoint_path=work/train/averaged/from-step-N/averaged.ckpt
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

from data_gen.text_encoder import EOS_ID  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras import hparams as hparams_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.decoding import text_decoder  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.export import ctranslate2_decoder, ctranslate2_model  # noqa: E402
from t2t_keras.model import Transformer  # noqa: E402  pylint: disable=g-import-not-at-top


def parse_args(argv: List[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--cases", default="worst,test", help="comma list of worst|test")
  p.add_argument("--repeats", type=int, default=3, help="timed rounds (median taken)")
  p.add_argument("--beam_size", type=int, default=4)
  p.add_argument("--alpha", type=float, default=0.6)
  p.add_argument("--extra_length", type=int, default=50)
  p.add_argument("--batch", type=int, default=32, help="sentences per batch")
  p.add_argument("--worst_length", type=int, default=24, help="input ids, EOS included")
  p.add_argument("--vocab_size", type=int, default=8190, help="worst case vocabulary")
  p.add_argument("--hparams_set", default="transformer_base", help="worst case model")
  p.add_argument("--data_dir", default="work/data", help="the test case's problem data")
  p.add_argument("--output_dir", default="work/train", help="the test case's trained run")
  p.add_argument("--checkpoint_path", default="", help="its checkpoint (default: newest)")
  p.add_argument("--max_lines", type=int, default=0, help="test lines decoded (0: all)")
  args = p.parse_args(argv)
  args.cases = harness.choices("cases", args.cases, ("worst", "test"))
  return harness.require_positive(args, ("repeats", "beam_size", "batch", "worst_length",
                                         "vocab_size"))


def _decode_hp(args, **kwargs):
  return hparams_lib.DecodeHParams(beam_size=args.beam_size, alpha=args.alpha,
                                   extra_length=args.extra_length, batch_size=args.batch,
                                   log_results=False, **kwargs)


def _engines(model, encoders, decode_hp, vocab_files, tmp) -> Dict[str, text_decoder.LineDecoder]:
  model_dir = ctranslate2_model.export(model, vocab_files, os.path.join(tmp, "ct2"))
  engines = {"t2t-keras float32": text_decoder.TextDecoder(model, encoders, decode_hp,
                                                          log=lambda _: None)}
  for compute_type in ctranslate2_decoder.COMPUTE_TYPES:
    engines[f"CTranslate2 {compute_type}"] = ctranslate2_decoder.CTranslate2Decoder(
        model_dir, encoders, decode_hp, compute_type=compute_type, log=lambda _: None)
  return engines


def _time_round_robin(calls: Dict[str, Callable[[], object]], repeats: int):
  """Median seconds of each call, timed in alternation after one warm-up each."""
  outputs = {name: fn() for name, fn in calls.items()}  # warm-up (traces, compiles)
  seconds = {name: [] for name in calls}
  for _ in range(repeats):
    for name, fn in calls.items():
      start = time.perf_counter()
      fn()
      seconds[name].append(time.perf_counter() - start)
  return {name: statistics.median(s) for name, s in seconds.items()}, outputs


def _print_table(title: str, sentences: int, seconds: Dict[str, float],
                 extra: Dict[str, str] = None) -> None:
  base = seconds["t2t-keras float32"]
  print(f"\n{title}")
  header = "| engine | sentences/s | vs t2t-keras float32 |" + (" test BLEU |" if extra else "")
  harness.print_table_header(header)
  for name, s in seconds.items():
    row = f"| {name} | {sentences / s:.2f} | {base / s:.2f}x |"
    print(row + (f" {extra[name]} |" if extra else ""), flush=True)


def worst(args, tmp) -> None:
  hp = hparams_lib.create_hparams(args.hparams_set)
  tf.keras.utils.set_random_seed(0)
  model = Transformer(hp, args.vocab_size, name="transformer")
  model.build()
  rng = np.random.default_rng(0)
  rows = [list(rng.integers(2, args.vocab_size, size=args.worst_length - 1)) + [EOS_ID]
          for _ in range(args.batch)]
  vocab = os.path.join(tmp, "vocab.txt")
  with open(vocab, "w") as f:
    f.write("'a'\n")
  engines = _engines(model, None, _decode_hp(args), {"inputs": vocab, "targets": vocab}, tmp)
  # The decoder's default for a file of 2,000+ lines with this model (decoding.inference_choices).
  engines["t2t-keras float32 XLA"] = text_decoder.TextDecoder(
      model, None, _decode_hp(args), jit_compile=True, log=lambda _: None)
  for engine in engines.values():
    engine._start(len(rows))  # pylint: disable=protected-access
  calls = {name: (lambda e=engine: e._decode_batch(rows))  # pylint: disable=protected-access
           for name, engine in engines.items()}
  seconds, _ = _time_round_robin(calls, args.repeats)
  _print_table(f"worst case: {args.hparams_set}, random weights, vocabulary {args.vocab_size}, "
               f"{args.batch} inputs of {args.worst_length} ids, beam {args.beam_size}, "
               f"+{args.extra_length} ({args.worst_length + args.extra_length} output ids a "
               f"sentence)", args.batch, seconds)


def test(args, tmp) -> None:
  import t2t_keras  # pylint: disable=g-import-not-at-top
  from t2t_keras.scoring import bleu  # pylint: disable=g-import-not-at-top
  run = t2t_keras.open_run(args.output_dir, args.checkpoint_path or None, args.data_dir)
  model, problem, encoders, path = run.model, run.problem, run.encoders, run.checkpoint_path
  read = lambda p: open(p, encoding="utf-8").read().splitlines()
  lines = read(problem.text_file(args.data_dir, "test", "inputs"))
  refs = read(problem.reference_file(args.data_dir, "test"))
  if args.max_lines:
    lines, refs = lines[:args.max_lines], refs[:args.max_lines]
  vocab_files = problem.vocab_paths(args.data_dir)
  engines = _engines(model, encoders, _decode_hp(args), vocab_files, tmp)
  calls = {name: (lambda e=engine: e.decode_lines(lines)) for name, engine in engines.items()}
  seconds, outputs = _time_round_robin(calls, args.repeats)
  base = outputs["t2t-keras float32"]
  extra = {}
  for name, out in outputs.items():
    score, _ = bleu.corpus_bleu(out, refs, tokenize="intl")
    same = sum(a == b for a, b in zip(out, base))
    extra[name] = f"{score:.2f} ({same}/{len(lines)} lines as t2t-keras)"
  _print_table(f"test split: {problem.name}, {len(lines)} lines, {path}, beam "
               f"{args.beam_size}, alpha {args.alpha}, +{args.extra_length}, batches of "
               f"{args.batch}", len(lines), seconds, extra)
  int8_error_parts(args, model, encoders, lines, refs, vocab_files, tmp)


def int8_error_parts(args, model, encoders, lines, refs, vocab_files, tmp) -> None:
  """Where int8's error comes from: log P(reference | source) of every test pair under
  int8 everywhere (what CTranslate2 loads), and under int8 embeddings and softmax
  projection only (the rest float32), against float32."""
  from t2t_keras.scoring import bleu  # pylint: disable=g-import-not-at-top
  float_dir = os.path.join(tmp, "ct2")  # written by _engines
  spec = ctranslate2_model.build_spec(model)
  spec.validate()
  spec.optimize()
  # CTranslate2's own per-row int8 scheme, applied to the lookup tables and projection.
  spec._quantize("int8", variable_filter=lambda name: (  # pylint: disable=protected-access
      "embeddings" in name or "projection" in name))
  parts_dir = os.path.join(tmp, "ct2_int8_tables")
  os.makedirs(parts_dir, exist_ok=True)
  spec.save(parts_dir)
  for side, path in vocab_files.items():
    shutil.copyfile(path, os.path.join(parts_dir, ctranslate2_model.VOCAB_FILES[side]))
  shutil.copyfile(os.path.join(float_dir, ctranslate2_model.INFO_FILE),
                  os.path.join(parts_dir, ctranslate2_model.INFO_FILE))
  decode_hp = _decode_hp(args)
  variants = {"float32": (float_dir, "float32"), "int8 everywhere": (float_dir, "int8"),
              "int8 embeddings and projection only": (parts_dir, "float32")}
  scores, bleus = {}, {}
  for name, (model_dir, compute_type) in variants.items():
    engine = ctranslate2_decoder.CTranslate2Decoder(model_dir, encoders, decode_hp,
                                                   compute_type=compute_type,
                                                   log=lambda _: None)
    scores[name] = np.array(engine.score_pairs(lines, refs))
    bleus[name] = bleu.corpus_bleu(engine.decode_lines(lines), refs, tokenize="intl")[0]
  print("\nint8's error on the test pairs: mean |log P(reference | source) - float32's| "
        "per sentence (nats), and test BLEU")
  harness.print_table_header("| CTranslate2 weights | mean abs. difference | test BLEU |")
  for name in variants:
    diff = float(np.mean(np.abs(scores[name] - scores["float32"])))
    print(f"| {name} | {diff:.4f} | {bleus[name]:.2f} |", flush=True)


def main(argv: List[str]) -> None:
  args = harness.parse_or_exit(parse_args, argv)
  import ctranslate2  # pylint: disable=g-import-not-at-top
  harness.print_header(f"CTranslate2 {ctranslate2.__version__}, "
                       f"{len(os.sched_getaffinity(0))} threads each")
  with tempfile.TemporaryDirectory() as tmp:
    for case in args.cases:
      {"worst": worst, "test": test}[case](args, tmp)


if __name__ == "__main__":
  main(sys.argv[1:])
