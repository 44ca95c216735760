"""Model Garden's Transformer against ours, interleaved in one sitting, as ratios.

Speed targets are ratios against TensorFlow Model Garden's Transformer measured
on the same machine in the same sitting (absolute figures on these shared
machines drift by 2x). Each round runs, one process after another:

  training: Model Garden's anchor (graph, float32), then `bench_train.py` for
    each of our configurations (float32 / bfloat16, graph / XLA), all on
    transformer_base dimensions, 64 x 32 tokens a side, vocabulary 32,768;
  decoding: Model Garden's anchor (graph, float32, its fastest mode), then
    `bench_decode.py`'s worst case for each of our modes (beam 4, 32 x 24
    inputs, +50, random weights: no beam finishes early).

With `--before_repo` (another checkout of this project, e.g. a git worktree of
an earlier commit, with its own `.venv`), each round also runs that checkout's
benchmarks for the same configurations, labelled "before": a before/after
table measured in one sitting.

Our commands turn TensorFlow's oneDNN kernels on (t2t_keras.perf.process), which
TensorFlow itself leaves off on AVX2-only CPUs; Model Garden is timed as
TensorFlow configures it and, with `--mg_onednn=1` (default), also with oneDNN
forced on, and both ratios are printed.

Rounds alternate A B A B, and the table gives each figure's median and range
over the rounds with its ratio to Model Garden's median, then the ratio within
each round (each figure over Model Garden's of the same round: the one to read
on a noisy machine) and their median. The CPU model and its
bfloat16 capability head the output: figures from another CPU are not
comparable.

For training on a noisy machine, `bench_paired_train.py` is the finer tool: it keeps
both sides alive and alternates them every few steps, with an interval for the median
ratio.

Model Garden runs in its own virtualenv (it pins TensorFlow 2.20), through two
anchor scripts kept outside this repository: `anchor_model_garden.py` (its training
step) and `anchor_model_garden_decode.py` (its beam-4 decode). Pass their folder as
`--anchors` or in $T2T_KERAS_ANCHORS. Set-up once, then runs (PATH/TO/ stands for
wherever you keep them):

  python3 -m venv PATH/TO/mg-venv && PATH/TO/mg-venv/bin/pip install tf-models-official==2.20.0
  export T2T_KERAS_ANCHORS=PATH/TO/anchors
  .venv/bin/python bench/bench_vs_model_garden.py --mg_python=PATH/TO/mg-venv/bin/python
  .venv/bin/python bench/bench_vs_model_garden.py --mg_python=PATH/TO/mg-venv/bin/python \
      --what=decode --rounds=3 --decode_modes=float32:beam:cached:xla
  git worktree add PATH/TO/before <commit> && make -C PATH/TO/before install
  .venv/bin/python bench/bench_vs_model_garden.py --mg_python=PATH/TO/mg-venv/bin/python \
      --before_repo=PATH/TO/before
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

import harness
from t2t_keras.perf import cpu_info  # noqa: E402  pylint: disable=g-import-not-at-top

REPO = harness.REPO

ANCHORS_ENV = "T2T_KERAS_ANCHORS"
ANCHOR_SCRIPTS = ("anchor_model_garden.py", "anchor_model_garden_decode.py")
TRAIN_CONFIGS = ("float32:eager", "float32:xla", "bfloat16:eager", "bfloat16:xla")
DECODE_MODES = ("float32:beam:cached:xla", "float32:beam:cached:graph",
                "bfloat16:beam:cached:xla", "bfloat16:beam:cached:graph")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
MG = "Model Garden float32 graph"
MG_ONEDNN = "Model Garden float32 graph, oneDNN on"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--mg_python", required=True,
                 help="python of the Model Garden virtualenv (tf-models-official 2.20)")
  p.add_argument("--anchors", default=os.environ.get(ANCHORS_ENV, ""),
                 help=f"folder of Model Garden's anchor scripts {ANCHOR_SCRIPTS} "
                      f"(default: ${ANCHORS_ENV})")
  p.add_argument("--what", default="train,decode", help="comma list of train|decode")
  p.add_argument("--rounds", type=int, default=2, help="interleaved rounds (A B A B)")
  p.add_argument("--train_configs", default=",".join(TRAIN_CONFIGS),
                 help=f"ours, among {TRAIN_CONFIGS}")
  p.add_argument("--decode_modes", default=",".join(DECODE_MODES),
                 help="ours, dtype:search:cache:compile, e.g. float32:beam:cached:xla")
  p.add_argument("--train_steps", type=int, default=6, help="timed steps per process")
  p.add_argument("--mg_onednn", type=int, default=1,
                 help="1: also time Model Garden with TF_ENABLE_ONEDNN_OPTS=1 (our commands "
                      "turn oneDNN on; TensorFlow leaves it off on AVX2-only CPUs)")
  p.add_argument("--before_repo", default="",
                 help="another checkout of this project (its .venv/bin/python runs its "
                      "bench/ scripts) timed in the same rounds, labelled 'before'")
  args = p.parse_args(argv)
  harness.require_positive(args, ("rounds", "train_steps"))
  args.what = harness.choices("what", args.what, ("train", "decode"))
  args.train_configs = harness.choices("train_configs", args.train_configs, TRAIN_CONFIGS)
  args.decode_modes = [m.strip() for m in args.decode_modes.split(",") if m.strip()]
  for mode in args.decode_modes:
    if len(mode.split(":")) != 4 or mode.split(":")[0] not in ("float32", "bfloat16"):
      raise ValueError(f"--decode_modes entries are dtype:search:cache:compile, got {mode!r}.")
  check_anchors(args.anchors, ANCHOR_SCRIPTS)
  if not os.access(args.mg_python, os.X_OK):
    raise ValueError(f"--mg_python={args.mg_python} is not an executable; see the set-up "
                     "in this script's docstring.")
  if args.before_repo:
    python = os.path.join(args.before_repo, ".venv", "bin", "python")
    if not os.access(python, os.X_OK):
      raise ValueError(f"--before_repo={args.before_repo} has no .venv/bin/python; run "
                       f"`make -C {args.before_repo} install` first.")
  return args


def check_anchors(folder: str, scripts: Sequence[str]) -> None:
  """Raises ValueError unless `folder` (--anchors or $T2T_KERAS_ANCHORS) holds `scripts`."""
  if not folder:
    raise ValueError(f"--anchors is required (or set {ANCHORS_ENV}): the folder holding "
                     f"Model Garden's anchor scripts {', '.join(scripts)}.")
  for script in scripts:
    if not os.path.isfile(os.path.join(folder, script)):
      raise ValueError(f"--anchors={folder} has no {script}.")


def _run(cmd: List[str], cwd: str = REPO, env: Optional[Dict[str, str]] = None) -> str:
  """Runs `cmd`, returns its stdout; a failure raises with the end of its stderr."""
  result = subprocess.run(cmd, capture_output=True, text=True, env=env or ENV, cwd=cwd)
  if result.returncode:
    raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n"
                       f"{result.stderr[-2000:]}")
  return result.stdout


def _field(text: str, name: str) -> float:
  """The number after `name=` in an anchor's output line."""
  match = re.search(rf"\b{name}=([0-9.]+)", text)
  if not match:
    raise RuntimeError(f"no {name}= in the anchor's output:\n{text[-1000:]}")
  return float(match.group(1))


def mg_env(onednn: bool) -> Dict[str, str]:
  """Model Garden's environment: TensorFlow's own oneDNN choice, or oneDNN forced on."""
  env = {k: v for k, v in ENV.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
  if onednn:
    env["TF_ENABLE_ONEDNN_OPTS"] = "1"
  return env


def mg_train(args, onednn: bool = False) -> float:
  out = _run([args.mg_python, os.path.join(args.anchors, "anchor_model_garden.py"),
              f"--steps={args.train_steps}"], env=mg_env(onednn))
  return _field(out, "tokens_per_s")


def mg_decode(args, onednn: bool = False) -> float:
  out = _run([args.mg_python, os.path.join(args.anchors, "anchor_model_garden_decode.py")],
             env=mg_env(onednn))
  return _field(out, "sent_per_s")


def _ours(script: str, flags: List[str], repo: str = "") -> List[Dict]:
  """Rows of `repo`'s bench/`script` (this checkout when empty) run with its venv."""
  repo = os.path.abspath(repo) if repo else REPO
  python = sys.executable if repo == REPO else os.path.join(repo, ".venv", "bin", "python")
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "rows.json")
    _run([python, os.path.join(repo, "bench", script), *flags,
          f"--result_json={path}"], cwd=repo)
    with open(path, encoding="utf-8") as f:
      return json.load(f)


def ours_train(args, config: str, repo: str = "") -> float:
  rows = _ours("bench_train.py", [f"--configs={config}", "--repeats=1",
                                  f"--steps={args.train_steps}"], repo)
  return rows[0]["tokens_s"]


def ours_decode(mode: str, repo: str = "") -> float:
  dtype, rest = mode.split(":", 1)
  rows = _ours("bench_decode.py", ["--cases=worst", f"--dtypes={dtype}", f"--modes={rest}",
                                   "--repeats=1"], repo)
  return rows[0]["sentences/s"]


def _checkouts(args):
  """(label prefix, repo) of each checkout timed: 'before' first when given."""
  return ([("before", args.before_repo)] if args.before_repo else []) + [("ours", "")]


def run(args) -> Dict[str, Dict[str, List[float]]]:
  samples: Dict[str, Dict[str, List[float]]] = {"train": {}, "decode": {}}
  for r in range(args.rounds):
    if "train" in args.what:
      samples["train"].setdefault(MG, []).append(mg_train(args))
      if args.mg_onednn:
        samples["train"].setdefault(MG_ONEDNN, []).append(mg_train(args, onednn=True))
      for label, repo in _checkouts(args):
        for config in args.train_configs:
          samples["train"].setdefault(f"{label} {config.replace('eager', 'graph')}",
                                      []).append(ours_train(args, config, repo))
    if "decode" in args.what:
      samples["decode"].setdefault(MG, []).append(mg_decode(args))
      if args.mg_onednn:
        samples["decode"].setdefault(MG_ONEDNN, []).append(mg_decode(args, onednn=True))
      for label, repo in _checkouts(args):
        for mode in args.decode_modes:
          samples["decode"].setdefault(f"{label} {mode}", []).append(ours_decode(mode, repo))
    print(f"round {r + 1}/{args.rounds}: " + "; ".join(
        f"{what} {name} {values[-1]:.2f}" for what, table in samples.items()
        for name, values in table.items()), flush=True)
  return samples


def round_ratios(values: Sequence[float], anchors: Sequence[float]) -> List[float]:
  """Each round's figure over Model Garden's in the same round."""
  if len(values) != len(anchors) or not values:
    raise ValueError(f"one figure per round expected: {len(values)} vs {len(anchors)} anchors.")
  return [v / a for v, a in zip(values, anchors)]


def print_table(samples: Dict[str, Dict[str, List[float]]], cpu: str) -> None:
  units = {"train": "tokens/s (source + target)", "decode": "sentences/s"}
  print(f"\nCPU: {cpu}")
  for what, table in samples.items():
    if not table:
      continue
    anchor = statistics.median(table[MG])
    forced = statistics.median(table[MG_ONEDNN]) if MG_ONEDNN in table else None
    print(f"\n{what}: {units[what]}, median (range) over rounds, ratio to Model Garden "
          "as TensorFlow configures it" + (" | to Model Garden with oneDNN forced on"
                                           if forced else ""))
    for name, values in table.items():
      median = statistics.median(values)
      print(f"  {name:<40} {median:9.2f} ({min(values):.2f}-{max(values):.2f})  "
            f"{median / anchor:5.2f}x" + (f" | {median / forced:5.2f}x" if forced else ""))
    print("  within each round, ratio to Model Garden as TensorFlow configures it:")
    for name, values in table.items():
      if name in (MG, MG_ONEDNN):
        continue
      ratios = round_ratios(values, table[MG])
      print(f"  {name:<40} " + " / ".join(f"{r:.2f}" for r in ratios) +
            f"  (median {statistics.median(ratios):.2f}x)")


def main(argv: Optional[Sequence[str]] = None) -> None:
  args = harness.parse_or_exit(parse_args, sys.argv[1:] if argv is None else argv)
  cpu = cpu_info.describe()
  print(f"CPU: {cpu}", flush=True)
  print_table(run(args), cpu)


if __name__ == "__main__":
  main()
