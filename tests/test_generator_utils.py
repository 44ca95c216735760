"""Tests for data_gen/generator_utils.py: shard names, atomic writes, sharding, readers."""

import os

import numpy as np
import pytest
import tensorflow as tf

from data_gen import file_io
from data_gen import generator_utils as gu


def _read_examples(path):
  out = []
  for raw in tf.data.TFRecordDataset(path):
    ex = tf.train.Example.FromString(raw.numpy())
    out.append({k: list(v.int64_list.value) for k, v in ex.features.feature.items()})
  return out


def test_sharded_name_and_paths():
  assert gu.sharded_name("/d/p-train", 3, 100) == "/d/p-train-00003-of-00100"
  paths = gu.shard_filepaths("/d", "prob", "dev", 2)
  assert paths == ["/d/prob-dev-00000-of-00002", "/d/prob-dev-00001-of-00002"]
  assert gu.shard_filepaths("/d", "prob", "train", 1, shuffled=False) == [
      "/d/prob-unshuffled-train-00000-of-00001"]
  with pytest.raises(ValueError, match="num_shards"):
    gu.shard_filepaths("/d", "prob", "train", 0)


def test_to_example_rejects_non_ints():
  ex = gu.to_example({"inputs": [5, 1]})
  assert list(ex.features.feature["inputs"].int64_list.value) == [5, 1]
  with pytest.raises(ValueError, match="inputs"):
    gu.to_example({"inputs": [1.5]})


def test_generate_files_round_robin_and_max_cases(tmp_path):
  examples = [{"inputs": [i + 2, 1], "targets": [i + 3, 1]} for i in range(10)]
  paths = [str(tmp_path / ("s%d" % i)) for i in range(3)]
  calls = []
  n = gu.generate_files(iter(examples), paths, max_cases=7,
                        progress=lambda *a: calls.append(a), progress_every=2, stage="train")
  assert n == 7
  for shard, path in enumerate(paths):
    expected = [examples[i] for i in range(7) if i % 3 == shard]
    assert _read_examples(path) == expected
  assert calls[-1] == ("train", 7, 7) and ("train", 2, 7) in calls
  assert not [f for f in os.listdir(tmp_path) if f.endswith(".incomplete")]


def test_generate_files_failure_leaves_no_final_or_temp_file(tmp_path):
  def broken():
    yield {"inputs": [2, 1], "targets": [3, 1]}
    raise RuntimeError("killed")

  path = str(tmp_path / "shard")
  with pytest.raises(RuntimeError):
    gu.generate_files(broken(), [path])
  assert os.listdir(tmp_path) == []


def test_shuffle_shards_is_a_seeded_permutation(tmp_path):
  examples = [{"inputs": [i + 2, 1], "targets": [1]} for i in range(50)]
  outs = []
  for run in range(2):
    src = [str(tmp_path / ("u%d" % run))]
    dst = [str(tmp_path / ("f%d" % run))]
    gu.generate_files(iter(examples), src)
    gu.shuffle_shards(src, dst, random_seed=7)
    assert not os.path.exists(src[0])
    outs.append(_read_examples(dst[0]))
  key = lambda e: (e["inputs"], e["targets"])  # noqa: E731
  assert sorted(outs[0], key=key) == sorted(examples, key=key)
  assert outs[0] == outs[1] and outs[0] != examples


def test_shard_stats_matches_python_count(tmp_path):
  rng = np.random.default_rng(0)
  examples = [{"inputs": [2] * int(rng.integers(1, 9)) + [1],
               "targets": [3] * int(rng.integers(1, 5)) + [1]} for _ in range(30)]
  paths = [str(tmp_path / "a"), str(tmp_path / "b")]
  gu.generate_files(iter(examples), paths)
  assert gu.shard_stats(paths) == {
      "examples": 30,
      "inputs_tokens": sum(len(e["inputs"]) for e in examples),
      "targets_tokens": sum(len(e["targets"]) for e in examples)}


def _write(path, data: bytes):
  with open(path, "wb") as f:
    f.write(data)
  return str(path)


def test_read_parallel_lines_ok_and_errors(tmp_path):
  src = _write(tmp_path / "s", b"a b\nc d\n")
  tgt = _write(tmp_path / "t", "x y\n\xfc z\n".encode("utf-8"))
  assert list(gu.read_parallel_lines(src, tgt)) == [("a b", "x y"), ("c d", "\xfc z")]

  short = _write(tmp_path / "short", b"x y\n")
  with pytest.raises(ValueError, match=r"misaligned.*'%s' has a line 2.*'%s' ends after line 1"
                     % (src, short)):
    list(gu.read_parallel_lines(src, short))
  with pytest.raises(ValueError, match=r"misaligned.*'%s' has a line 2" % src):
    list(gu.read_parallel_lines(short, src))

  empty = _write(tmp_path / "empty", b"")
  with pytest.raises(ValueError, match=r"'%s' is empty" % empty):
    list(gu.read_parallel_lines(empty, _write(tmp_path / "e2", b"")))

  blank = _write(tmp_path / "blank", b"x\n \n")
  with pytest.raises(ValueError, match=r"target '%s' line 2 is empty" % blank):
    list(gu.read_parallel_lines(src, blank))

  bad = _write(tmp_path / "bad", b"ok\n\xff\xfe broken\n")
  with pytest.raises(ValueError, match=r"source '%s' line 2 is not valid UTF-8" % bad):
    list(gu.read_parallel_lines(bad, src))

  with pytest.raises(ValueError, match="does not exist"):
    list(gu.read_parallel_lines(str(tmp_path / "missing"), src))


def test_file_lines_for_vocab_budget_and_spacing(tmp_path):
  lines = ["line %04d %s" % (i, "x" * 40) for i in range(1000)]  # 50 bytes each
  path = _write(tmp_path / "big", ("\n".join(lines) + "\n").encode())
  sample = list(gu.file_lines_for_vocab(path, byte_budget=5000))
  size = os.path.getsize(path)
  stride = size // 5000  # 51,000 // 5000 = 10
  assert stride == 10
  assert sample == lines[::stride][:len(sample)]
  # Budget: stops as soon as ≥ 5000 bytes were yielded.
  assert sum(len(s) for s in sample) >= 5000 > sum(len(s) for s in sample[:-1])
  # Small file: every line.
  small = _write(tmp_path / "small", b"a\nb\n\nc\n")
  assert list(gu.file_lines_for_vocab(small, 1e6)) == ["a", "b", "c"]
  assert list(gu.generate_lines_for_vocab([small, small], 1e6)) == ["a", "b", "c"] * 2


def test_write_text_atomic(tmp_path):
  path = str(tmp_path / "t.txt")
  assert file_io.write_lines(path, ["a", "b"]) == 2
  with open(path, encoding="utf-8") as f:
    assert f.read() == "a\nb\n"

  def broken():
    yield "c"
    raise RuntimeError("killed")

  with pytest.raises(RuntimeError):
    file_io.write_lines(path, broken())
  with open(path, encoding="utf-8") as f:
    assert f.read() == "a\nb\n"  # old content intact, no temp left behind
  assert os.listdir(tmp_path) == ["t.txt"]


def test_get_or_generate_vocab_builds_once(tmp_path):
  calls = []

  def text():
    calls.append(1)
    return ["the cat sat on the mat", "the dog sat"] * 5

  enc, seconds = gu.get_or_generate_vocab(str(tmp_path), "vocab.x.64.subwords", 64, text,
                                          reserved_tokens=["<pad>", "<EOS>"])
  path = tmp_path / "vocab.x.64.subwords"
  assert path.exists() and seconds > 0 and calls == [1]
  mtime = os.stat(path).st_mtime_ns
  enc2, seconds2 = gu.get_or_generate_vocab(str(tmp_path), "vocab.x.64.subwords", 64, text)
  assert seconds2 == 0.0 and calls == [1] and os.stat(path).st_mtime_ns == mtime
  ids = enc2.encode("the cat sat")
  assert enc.decode(ids) == "the cat sat" and min(ids) >= 2
