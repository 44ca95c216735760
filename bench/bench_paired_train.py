"""Training speed against Model Garden's, paired step by step, with a confidence interval.

`bench_vs_model_garden.py` starts fresh processes each round (about 4 minutes a
round), so a 2-core shared machine's drift between rounds (our float32 figure
moved 29% between rounds on a Zen 5) lands in its ratios. Here both sides stay
alive and alternate every few seconds:

* Model Garden: its training anchor (`anchor_model_garden.py`, its own model,
  optimizer and step) in `bench/mg_train_worker.py`, a child process of the
  Model Garden virtualenv that runs `--steps` steps on request;
* ours: `bench_train.make_trainer_probe` for each configuration, in this process
  (the same Trainer step `bench_train.py` times).

Both train transformer_base dimensions on 64 x 32 tokens a side, vocabulary
32,768, so the ratio of speeds is Model Garden's seconds per step over ours.
Each pair times Model Garden then ours, or ours then Model Garden (alternating),
and gives one ratio per configuration. The summary is the median of the pair
ratios with a distribution-free confidence interval (order statistics of the
binomial), and a verdict against the target: "met" when the whole
interval is at or above it, "not met" when it is below, else "undecided".

Targets: float32 1.15x; mixed bfloat16 2x on a CPU with native
bfloat16, 3x with AMX; no bfloat16 target without native bfloat16.

Model Garden's virtualenv and anchor scripts are set up as in
`bench_vs_model_garden.py` (PATH/TO/ stands for wherever you keep them; only
`anchor_model_garden.py` is needed here):

  export T2T_KERAS_ANCHORS=PATH/TO/anchors
  .venv/bin/python bench/bench_paired_train.py --mg_python=PATH/TO/mg-venv/bin/python
  .venv/bin/python bench/bench_paired_train.py --mg_python=PATH/TO/mg-venv/bin/python \
      --pairs=30 --configs=float32:eager

Sittings of the same library code on the same CPU can be pooled: each writes its
pair ratios with `--ratios_out=FILE` (with the CPU and the git tree of
`t2t_keras/`), and `--pool=FILE,FILE,...` prints the summary over all their pairs
without timing anything; files from another CPU or other library code are refused.

  .venv/bin/python bench/bench_paired_train.py --mg_python=PATH/TO/mg-venv/bin/python \
      --pairs=40 --ratios_out=work/paired1.json
  .venv/bin/python bench/bench_paired_train.py --pool=work/paired1.json,work/paired2.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

import bench_train  # noqa: E402  pylint: disable=g-import-not-at-top
import bench_vs_model_garden  # noqa: E402  pylint: disable=g-import-not-at-top
import mg_train_worker  # noqa: E402  pylint: disable=g-import-not-at-top

from data_gen import file_io  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.perf import cpu_info  # noqa: E402  pylint: disable=g-import-not-at-top


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--mg_python",
                 help="python of the Model Garden virtualenv (tf-models-official 2.20); "
                      "required unless --pool")
  p.add_argument("--anchors", default=os.environ.get(bench_vs_model_garden.ANCHORS_ENV, ""),
                 help="folder of Model Garden's anchor_model_garden.py (default: "
                      f"${bench_vs_model_garden.ANCHORS_ENV})")
  p.add_argument("--configs", default="float32:eager,bfloat16:eager",
                 help=f"ours, among {bench_train.CONFIGS} ('eager': graph without XLA)")
  p.add_argument("--pairs", type=int, default=20, help="paired timings (at least 6)")
  p.add_argument("--steps", type=int, default=2, help="train steps per side per pair")
  p.add_argument("--confidence", type=float, default=0.95,
                 help="coverage of the interval around the median ratio")
  p.add_argument("--mg_onednn", type=int, default=0,
                 help="1: Model Garden with TF_ENABLE_ONEDNN_OPTS=1 forced (0: as "
                      "TensorFlow configures it)")
  p.add_argument("--ratios_out", help="also write the pair ratios to this JSON file")
  p.add_argument("--pool", help="comma list of --ratios_out files: print their pooled "
                                "summary and time nothing")
  args = p.parse_args(argv)
  if not 0.5 <= args.confidence < 1:
    raise ValueError(f"--confidence must be in [0.5, 1), got {args.confidence}.")
  if args.pool:
    args.pool = [f.strip() for f in args.pool.split(",") if f.strip()]
    return args
  args.configs = harness.choices("configs", args.configs, bench_train.CONFIGS)
  harness.require_positive(args, ("steps",))
  median_interval([1.0] * args.pairs, args.confidence)  # too few pairs fail here, not later
  bench_vs_model_garden.check_anchors(args.anchors, ("anchor_model_garden.py",))
  args.anchor = os.path.join(args.anchors, "anchor_model_garden.py")
  if not args.mg_python or not os.access(args.mg_python, os.X_OK):
    raise ValueError(f"--mg_python={args.mg_python} is not an executable; see the set-up "
                     "in this script's docstring.")
  return args


def median_interval(values: Sequence[float],
                    confidence: float = 0.95) -> Tuple[float, float, float]:
  """Distribution-free interval for the median: (low, high, its exact coverage).

  With n values sorted, [x_k, x_(n+1-k)] (1-based) covers the median with
  probability 1 - 2 P(B <= k - 1), B ~ Binomial(n, 1/2); k is the largest with
  that tail at most (1 - confidence) / 2.
  """
  n = len(values)
  tail_limit = (1.0 - confidence) / 2.0
  tail, k = 0.0, 0
  for j in range(n + 1):
    p = math.comb(n, j) / 2.0 ** n
    if tail + p > tail_limit:
      break
    tail, k = tail + p, j + 1
  if k == 0:
    raise ValueError(f"{n} pairs cannot give a {confidence:.0%} interval for the median; "
                     "use more pairs (at least 6 for 95%).")
  ordered = sorted(values)
  return ordered[k - 1], ordered[n - k], 1.0 - 2.0 * tail


def target(config: str, cpuinfo: Optional[str] = None) -> Optional[float]:
  """The speed target over Model Garden for `config` on this CPU (None: none)."""
  dtype = config.split(":")[0]
  if dtype == "float32":
    return 1.15
  if not cpu_info.native_bfloat16(cpuinfo):
    return None
  return 3.0 if "amx_bf16" in cpu_info.cpu_flags(cpuinfo) else 2.0


def verdict(low: float, high: float, goal: Optional[float]) -> str:
  """'met' when the interval is at or above `goal`, 'not met' below it, else 'undecided'."""
  if goal is None:
    return "no target on this CPU"
  if low >= goal:
    return "met"
  if high < goal:
    return "not met"
  return "undecided"


class ModelGardenWorker:
  """`mg_train_worker.py` in the Model Garden virtualenv, timing steps on request."""

  def __init__(self, python: str, anchor: str, onednn: bool):
    worker = mg_train_worker.__file__
    self._process = subprocess.Popen(
        [python, worker, f"--anchor={anchor}"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env=bench_vs_model_garden.mg_env(onednn),
        cwd=os.path.dirname(worker))
    ready = self._read()
    if not ready.startswith(mg_train_worker.READY):
      raise RuntimeError(f"Model Garden's worker did not start: {ready!r}")
    self.tokens_per_step = int(ready[len(mg_train_worker.READY):])

  def _read(self) -> str:
    """The worker's next reply (its lines marked REPLY; anything else is skipped)."""
    while True:
      line = self._process.stdout.readline()
      if not line:
        code = self._process.wait()
        raise RuntimeError(f"Model Garden's worker exited ({code}); its errors are above.")
      if line.startswith(mg_train_worker.REPLY):
        return line[len(mg_train_worker.REPLY):].strip()

  def seconds_per_step(self, steps: int) -> float:
    self._process.stdin.write(f"{steps}\n")
    self._process.stdin.flush()
    return float(self._read())

  def close(self) -> None:
    if self._process.poll() is None:
      self._process.stdin.write("quit\n")
      self._process.stdin.close()
      self._process.wait(timeout=60)


def run(args) -> Dict[str, List[float]]:
  """{config: [Model Garden's s/step over ours, one per pair]}."""
  train_args = bench_train.parse_args([f"--steps={args.steps}"])
  tokens = 2 * train_args.batch * train_args.length
  t0 = time.perf_counter()
  mg = ModelGardenWorker(args.mg_python, args.anchor, bool(args.mg_onednn))
  try:
    if mg.tokens_per_step != tokens:
      raise RuntimeError(f"Model Garden's anchor trains {mg.tokens_per_step} tokens a step, "
                         f"ours {tokens}: the ratio would compare different work.")
    print(f"Model Garden's worker ready in {time.perf_counter() - t0:.0f}s", flush=True)
    probes = {}
    for config in args.configs:
      dtype, mode = config.split(":")
      probes[config] = bench_train.make_trainer_probe(train_args, dtype, mode == "xla")[0]
    ratios: Dict[str, List[float]] = {c: [] for c in args.configs}
    for pair in range(args.pairs):
      mg_first = pair % 2 == 0
      if mg_first:
        mg_s = mg.seconds_per_step(args.steps)
      ours = {c: probe() for c, probe in probes.items()}
      if not mg_first:
        mg_s = mg.seconds_per_step(args.steps)
      for config, seconds in ours.items():
        ratios[config].append(mg_s / seconds)
      print(f"pair {pair + 1}/{args.pairs} ({'MG first' if mg_first else 'ours first'}): "
            f"Model Garden {tokens / mg_s:.0f} tokens/s; " + "; ".join(
                f"{c.replace('eager', 'graph')} {tokens / s:.0f} ({mg_s / s:.2f}x)"
                for c, s in ours.items()), flush=True)
  finally:
    mg.close()
  return ratios


def library_tree() -> str:
  """Git tree hash of `t2t_keras/` at HEAD: which library code a sitting timed."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    out = subprocess.run(["git", "-C", root, "rev-parse", "HEAD:t2t_keras"],
                         capture_output=True, text=True, check=True)
  except (OSError, subprocess.CalledProcessError):
    return "unknown"
  return out.stdout.strip()


def write_ratios(path: str, ratios: Dict[str, List[float]], cpu: str, tree: str) -> None:
  """The pair ratios as JSON (`file_io.atomic_open`: no half-written file)."""
  with file_io.atomic_open(path) as f:
    json.dump({"cpu": cpu, "library_tree": tree, "ratios": ratios}, f, indent=1)


def pool(paths: Sequence[str], cpu: str) -> Dict[str, List[float]]:
  """The pair ratios of several --ratios_out files, all from `cpu` and one library tree.

  `cpu` is this machine's (`cpu_info.describe()`): the targets depend on it.
  """
  if len(paths) < 2:
    raise ValueError(f"--pool needs at least two files, got {list(paths)}.")
  sittings = []
  for path in paths:
    try:
      with open(path) as f:
        sittings.append(json.load(f))
    except (OSError, ValueError) as e:
      raise ValueError(f"--pool: cannot read {path}: {e}") from e
  for key in ("cpu", "library_tree"):
    seen = {path: s.get(key) for path, s in zip(paths, sittings)}
    if len(set(seen.values())) != 1 or "unknown" in seen.values():
      raise ValueError(f"--pool: the files differ in (or lack) {key}, so their pairs did "
                       f"not time the same thing: {seen}")
  if sittings[0]["cpu"] != cpu:
    raise ValueError(f"--pool: the files were timed on {sittings[0]['cpu']!r}, this machine "
                     f"is {cpu!r}; pool them where they were timed (the targets depend on "
                     "the CPU).")
  configs = list(sittings[0]["ratios"])
  if any(list(s["ratios"]) != configs for s in sittings):
    raise ValueError(f"--pool: the files time different configurations: "
                     f"{[list(s['ratios']) for s in sittings]}")
  return {c: [r for s in sittings for r in s["ratios"][c]] for c in configs}


def print_summary(ratios: Dict[str, List[float]], confidence: float) -> None:
  print(f"\nratio to Model Garden's float32 graph (its speed in tokens/s), median of "
        f"{len(next(iter(ratios.values())))} pairs, interval for the median:")
  for config, values in ratios.items():
    low, high, coverage = median_interval(values, confidence)
    goal = target(config)
    print(f"  {config.replace('eager', 'graph'):<16} {statistics.median(values):.3f}x  "
          f"[{low:.3f}, {high:.3f}] ({coverage:.1%})  target "
          f"{'-' if goal is None else f'{goal:.2f}x'}: {verdict(low, high, goal)}")


def main(argv: Optional[Sequence[str]] = None) -> None:
  args = harness.parse_or_exit(parse_args, sys.argv[1:] if argv is None else argv)
  if args.pool:
    ratios = pool(args.pool, cpu_info.describe())
    print(f"pooled over {len(args.pool)} sittings: {', '.join(args.pool)}")
    print_summary(ratios, args.confidence)
    return
  harness.print_header()
  ratios = run(args)
  if args.ratios_out:
    write_ratios(args.ratios_out, ratios, cpu_info.describe(), library_tree())
  print_summary(ratios, args.confidence)


if __name__ == "__main__":
  main()
