"""Datagen in worker processes (`data_gen/parallel.py`): the same bytes as one process,
bounded memory, and failures that stop the run cleanly."""

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from data_gen import datagen_worker, generate, manifest as manifest_lib, parallel
from data_gen import generator_utils as gu
from data_gen.translate_from_files import TranslateFromFiles
from tests.support.cli import run_datagen_in_process
from tests.support.env import REPO
from tests.support.tiny_problem import write_parallel

NAME = "translate_from_files"
CHUNK = 7  # small: many chunks in flight, each shard fed by several chunks


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
  monkeypatch.setattr(parallel, "CHUNK_SIZE", CHUNK)


def _texts(root, train=600, dev=40, test=30):
  os.makedirs(root, exist_ok=True)
  write_parallel(os.path.join(root, "train"), train, seed=1)
  write_parallel(os.path.join(root, "dev"), dev, seed=2)
  write_parallel(os.path.join(root, "test"), test, seed=3)
  return {"train_source": root + "/train.en", "train_target": root + "/train.de",
          "dev_source": root + "/dev.en", "dev_target": root + "/dev.de",
          "test_source": root + "/test.en", "test_target": root + "/test.de"}


def _digests(data_dir):
  out = {}
  for name in sorted(os.listdir(data_dir)):
    with open(os.path.join(data_dir, name), "rb") as f:
      out[name] = hashlib.sha256(f.read()).hexdigest()
  return out


def _children():
  """Pids of this process's child processes (from /proc)."""
  kids = set()
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open("/proc/%s/stat" % entry) as f:
          stat = f.read()
      except OSError:
        continue
      if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
        kids.add(int(entry))
  return kids


def _run(tmp_path, tag, workers, problem=NAME, **kwargs):
  data_dir = str(tmp_path / tag)
  result = generate.generate_data(problem, data_dir, str(tmp_path / "tmp"), num_workers=workers,
                                  **kwargs)
  return data_dir, result


def test_workers_write_the_files_one_worker_writes(tmp_path):
  files = _texts(str(tmp_path / "text"))
  one, result = _run(tmp_path, "one", 1, num_shards=5, vocab_size=64, source_lang="en",
                     target_lang="de", **files)
  assert result["splits"]["test"]["examples"] == 30
  want = _digests(one)
  assert {"translate_from_files.test.en", "translate_from_files.dev.de"} <= set(want)
  for workers in (2, 3):
    other, _ = _run(tmp_path, "n%d" % workers, workers, num_shards=5, vocab_size=64,
                    source_lang="en", target_lang="de", **files)
    assert _digests(other) == want, workers
  # The number of workers shapes nothing: a rerun with another one skips every split.
  _, again = _run(tmp_path, "n3", 1)
  assert all(s["skipped"] for s in again["splits"].values()) and not again["changed"]
  assert _digests(other) == want
  assert "num_workers" not in manifest_lib.read_manifest(other, NAME)["settings"]


def test_workers_write_the_language_model_files_one_worker_writes(tmp_path):
  text = tmp_path / "text"
  write_parallel(str(text), 500, seed=4)  # its .en side as the text
  write_parallel(str(text) + "_dev", 45, seed=5)
  files = {"train_text": str(text) + ".en", "dev_text": str(text) + "_dev.en"}
  digests = []
  for workers in (1, 2):
    data_dir, result = _run(tmp_path, "lm%d" % workers, workers,
                            problem="languagemodel_from_files", num_shards=3, max_cases=400,
                            vocab_size=64, **files)
    assert result["splits"]["train"]["examples"] == 400
    digests.append(_digests(data_dir))
  assert digests[0] == digests[1]


def test_the_reader_stays_a_bounded_distance_ahead_of_the_writer(tmp_path, monkeypatch):
  files = _texts(str(tmp_path / "text"), train=3000)
  state = {"writing": False, "written": 0, "ahead": []}
  real_open = gu.open_record_writer

  class Counting:
    def __init__(self, path):
      self.real = real_open(path)

    def write(self, record):
      state["written"] += 1
      self.real.write(record)

    def close(self):
      self.real.close()

  def open_writer(path):
    if "-unshuffled-train-" in path:
      state["writing"], state["written"] = True, 0
      return Counting(path)
    return real_open(path)

  class Problem(TranslateFromFiles):
    def generate_samples(self, data_dir, tmp_dir, split):
      for read, sample in enumerate(super().generate_samples(data_dir, tmp_dir, split)):
        if split == "train" and state["writing"]:
          state["ahead"].append(read - state["written"])
        yield sample

  monkeypatch.setattr(gu, "open_record_writer", open_writer)
  problem = Problem(vocab_size=64, **files)
  problem.generate_data(str(tmp_path / "data"), str(tmp_path / "tmp"), num_shards=4,
                        num_workers=2)
  bound = (2 * 2 + 2) * CHUNK  # max_in_flight chunks, the one read and the one written
  assert len(state["ahead"]) == 3000
  assert CHUNK < max(state["ahead"]) <= bound, max(state["ahead"])


def _cli_args(tmp_path, files, workers):
  return ["--problem=" + NAME, "--data_dir=%s" % (tmp_path / ("data%d" % workers)),
          "--tmp_dir=%s" % (tmp_path / "tmp"), "--vocab_size=64", "--num_shards=3",
          "--num_workers=%d" % workers] + ["--%s=%s" % kv for kv in files.items()]


def _failure(tmp_path, capsys, files, workers):
  before = _children()
  code, out, err = run_datagen_in_process(capsys, *_cli_args(tmp_path, files, workers))
  data_dir = tmp_path / ("data%d" % workers)
  names = os.listdir(data_dir)
  assert not [n for n in names if "-train-" in n or n.endswith(".incomplete")], names
  assert manifest_lib.read_manifest(str(data_dir), NAME)["complete"] is False
  assert _children() <= before  # every worker ended and was waited for
  lines = err.strip().splitlines()
  assert len(lines) == 1, out + err
  return code, lines[0].replace(str(data_dir), "DATA")


def test_a_worker_failure_stops_the_run_as_one_process_does(tmp_path, capsys, monkeypatch):
  files = _texts(str(tmp_path / "text"), train=300)
  # An id outside the vocabulary, found by the worker that serialises example 30.
  real = TranslateFromFiles.generate_encoded_samples

  def too_big(self, data_dir, tmp_dir, split, encoders, text_sink=None):
    for i, example in enumerate(real(self, data_dir, tmp_dir, split, encoders, text_sink)):
      if i == 29:
        example["targets"][0] = encoders["targets"].vocab_size
      yield example

  monkeypatch.setattr(TranslateFromFiles, "generate_encoded_samples", too_big)
  outcomes = [_failure(tmp_path, capsys, files, n) for n in (1, 3)]
  assert outcomes[0] == outcomes[1] and outcomes[0][0] == 2
  assert outcomes[0][1].startswith("t2t_keras_datagen: error: example 30 of train: feature")
  monkeypatch.undo()
  monkeypatch.setattr(parallel, "CHUNK_SIZE", CHUNK)
  # A full disk while a worker writes a shuffled shard.
  monkeypatch.setenv(datagen_worker.FULL_DISK_ENV, "%s-train-00001-of-00003" % NAME)
  outcomes = [_failure(tmp_path, capsys, files, n) for n in (1, 2)]
  assert outcomes[0] == outcomes[1] and outcomes[0][0] == 1
  assert "No space left on device" in outcomes[0][1] and "disk full" in outcomes[0][1]
  monkeypatch.delenv(datagen_worker.FULL_DISK_ENV)
  # Invalid UTF-8 read by the main process while workers are busy.
  with open(files["train_source"], "ab") as f:
    f.write(b"caf\xe9 au lait\n")
  with open(files["train_target"], "a", encoding="utf-8") as f:
    f.write("Milchkaffee\n")
  outcomes = [_failure(tmp_path, capsys, files, n) for n in (1, 2)]
  assert outcomes[0] == outcomes[1] and outcomes[0][0] == 2
  assert "UTF-8" in outcomes[0][1] and "line 301" in outcomes[0][1], outcomes[0][1]


def _descendants(pid):
  out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
  parents = {int(a): int(b) for a, b in (line.split() for line in out.splitlines())}
  found, frontier = set(), {pid}
  while frontier:
    frontier = {p for p, parent in parents.items() if parent in frontier} - found
    found |= frontier
  return found


def test_ctrl_c_kills_the_workers_and_removes_partial_files(tmp_path, monkeypatch):
  files = _texts(str(tmp_path / "text"), train=200, dev=10, test=10)
  data_dir = tmp_path / "data"
  # A worker pauses in the middle of shuffled shard 1; then Ctrl-C reaches every process.
  monkeypatch.setenv(datagen_worker.PAUSE_ENV, "%s-train-00001-of-00003" % NAME)
  before = _children()
  started = time.time()

  def interrupt():
    while time.time() - started < 60:
      names = os.listdir(data_dir) if os.path.isdir(data_dir) else []
      if any(n.startswith("%s-train-00001" % NAME) and n.endswith(".incomplete") for n in names):
        for pid in _children() - before:
          os.kill(pid, signal.SIGINT)  # ignored by the workers
        os.kill(os.getpid(), signal.SIGINT)
        return
      time.sleep(0.05)

  thread = threading.Thread(target=interrupt, daemon=True)
  thread.start()
  with pytest.raises(KeyboardInterrupt):
    generate.generate_data(NAME, str(data_dir), str(tmp_path / "tmp"), num_shards=3,
                           vocab_size=64, num_workers=2, **files)
  thread.join()
  assert _children() <= before
  names = os.listdir(data_dir)
  assert not [n for n in names if "-train-" in n or n.endswith(".incomplete")], names


def test_a_killed_run_leaves_no_worker(tmp_path):
  files = _texts(str(tmp_path / "text"), train=200, dev=10, test=10)
  env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3",
             **{datagen_worker.PAUSE_ENV: "%s-train-00001-of-00003" % NAME})
  proc = subprocess.Popen([sys.executable, "-m", "t2t_keras.cli.datagen",
                           *_cli_args(tmp_path, files, 2)], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    seen = []
    for line in proc.stdout:
      seen.append(line)
      if line.startswith("T2T_KERAS_TEST_PAUSED"):
        break
    else:
      pytest.fail("datagen never paused:\n" + "".join(seen))
    workers = _descendants(proc.pid)
    assert len(workers) == 2
    os.kill(proc.pid, signal.SIGKILL)  # no clean-up of its own: the workers die with it
    proc.wait(timeout=60)
  finally:
    proc.kill()
    proc.wait()
  deadline = time.time() + 20
  while time.time() < deadline and any(os.path.exists("/proc/%d" % p) for p in workers):
    time.sleep(0.1)
  assert not [p for p in workers if os.path.exists("/proc/%d" % p)]


def test_the_vocab_of_a_files_problem_reads_a_bounded_sample(tmp_path):
  files = _texts(str(tmp_path / "small"), train=300)
  small = TranslateFromFiles(vocab_size=64, **files)
  whole = [text for s in small.generate_samples("", "", "train")
           for text in (s["inputs"], s["targets"])]
  assert list(small.generate_text_for_vocab("", "")) == whole  # under the budget: all, in order
  big = _texts(str(tmp_path / "big"), train=130000, dev=5, test=5)  # ≈3.2 MB of English
  problem = TranslateFromFiles(vocab_size=64, **big)
  stride = int(os.path.getsize(big["train_source"]) // 1e6)
  assert stride == 3
  sample = list(problem.generate_text_for_vocab("", "", "inputs"))
  assert 1e6 <= sum(len(line.encode("utf-8")) for line in sample) < 1e6 + 100
  with open(big["train_source"], encoding="utf-8") as f:
    lines = [line.strip() for line in f]
  assert sample == lines[::stride][:len(sample)]  # evenly spaced over the whole file
