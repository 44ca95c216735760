"""Tests for t2t_keras/training/inputs.py: T2T length bucketing and the tf.data pipeline."""

import collections
import types

import numpy as np
import pytest
import tensorflow as tf

from data_gen import generator_utils as gu
from t2t_keras.training import inputs

# Reference §4.4: the 41 boundaries of _bucket_boundaries(256).
T2T_BOUNDARIES_256 = [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 24, 26, 28, 30, 33,
                      36, 39, 42, 46, 50, 55, 60, 66, 72, 79, 86, 94, 103, 113, 124, 136, 149,
                      163, 179, 196, 215, 236]


def _hparams(**kw):
  base = dict(batch_size=256, max_length=64, min_length_bucket=8, length_bucket_step=1.1,
              use_fixed_batch_size=False, eval_drop_long_sequences=False,
              batch_shuffle_size=512, max_input_seq_length=0, max_target_seq_length=0)
  base.update(kw)
  return types.SimpleNamespace(**base)


def test_bucket_boundaries_256_matches_t2t():
  assert inputs.bucket_boundaries(256) == T2T_BOUNDARIES_256
  assert len(T2T_BOUNDARIES_256) == 41
  assert inputs.bucket_boundaries(10, 8, 1.1) == [8, 9]
  with pytest.raises(ValueError, match="length_bucket_step"):
    inputs.bucket_boundaries(256, 8, 1.0)


def test_highly_composite_numbers_by_brute_force():
  n = 60000
  divisors = np.zeros(n + 1, dtype=np.int64)
  for d in range(1, n + 1):
    divisors[d::d] += 1
  running_max = np.maximum.accumulate(divisors[1:])
  is_record = np.concatenate([[True], divisors[2:] > running_max[:-1]])
  expected = [int(i) + 1 for i in np.flatnonzero(is_record)]
  assert [h for h in inputs.HIGHLY_COMPOSITE_NUMBERS if h <= n] == expected


def test_batching_scheme_transformer_base():
  scheme = inputs.batching_scheme(4096, 256, 8, 1.1)
  assert scheme["boundaries"] == T2T_BOUNDARIES_256
  sizes = scheme["batch_sizes"]
  assert len(sizes) == 42
  # Reference example: 4096 // 8 = 512, window = largest HCN <= 1536 = 1260, 512 -> 420.
  assert scheme["window_size"] == 1260 and sizes[0] == 420
  for length, size in zip(T2T_BOUNDARIES_256 + [256], sizes):
    raw = max(1, 4096 // length)
    best = max(d for d in range(1, raw + 1) if 1260 % d == 0)
    assert size == best and size * length <= 4096
  assert scheme["max_length"] == 10**9
  assert inputs.batching_scheme(4096, 256, drop_long_sequences=True)["max_length"] == 256
  doubled = inputs.batching_scheme(4096, 256, shard_multiplier=8)
  assert doubled["batch_sizes"] == [8 * s for s in sizes]
  with pytest.raises(ValueError, match="batch_size"):
    inputs.batching_scheme(0, 256)


def _write_examples(tmp_path, n=600, seed=0, shards=3, max_len=90):
  rng = np.random.default_rng(seed)
  examples = []
  for _ in range(n):
    li, lt = int(rng.integers(1, max_len)), int(rng.integers(1, max_len))
    examples.append({"inputs": rng.integers(2, 50, li).tolist() + [1],
                     "targets": rng.integers(2, 50, lt).tolist() + [1]})
  paths = gu.shard_filepaths(str(tmp_path), "fake", "train", shards)
  gu.generate_files(iter(examples), paths)
  return examples, str(tmp_path / "fake-train*")


def _unpad(row):
  row = list(row)
  while row and row[-1] == 0:
    row.pop()
  return tuple(row)


def _collect(ds):
  batches = []
  for b in ds:
    batches.append({k: v.numpy() for k, v in b.items()})
  return batches


def _check_budget_and_buckets(batches, hp, multiplier=1):
  boundaries = inputs.bucket_boundaries(hp.max_length, hp.min_length_bucket,
                                        hp.length_bucket_step)
  for b in batches:
    rows, width = b["inputs"].shape[0], max(b["inputs"].shape[1], b["targets"].shape[1])
    assert b["inputs"].dtype == np.int64 and b["targets"].shape[0] == rows
    assert rows * width <= hp.batch_size * multiplier
    lengths = [max(len(_unpad(i)), len(_unpad(t))) for i, t in zip(b["inputs"], b["targets"])]
    assert max(lengths) == width  # padded to the longest example only
    buckets = {int(np.searchsorted(boundaries, length, side="right")) for length in lengths}
    assert len(buckets) == 1


def test_one_epoch_loses_and_duplicates_nothing(tmp_path):
  examples, pattern = _write_examples(tmp_path)
  hp = _hparams()
  counter = tf.Variable(0, dtype=tf.int64)
  ds = inputs.make_dataset(pattern, hp, "train", repeat=False, deterministic=True, seed=3,
                           drop_counter=counter)
  batches = _collect(ds)
  _check_budget_and_buckets(batches, hp)
  got = collections.Counter()
  for b in batches:
    for i, t in zip(b["inputs"], b["targets"]):
      got[(_unpad(i), _unpad(t))] += 1
  kept = [e for e in examples if max(len(e["inputs"]), len(e["targets"])) <= hp.max_length]
  assert got == collections.Counter((tuple(e["inputs"]), tuple(e["targets"])) for e in kept)
  assert int(counter.numpy()) == len(examples) - len(kept) > 0
  # Deterministic: the same seed gives the same batches in the same order.
  again = _collect(inputs.make_dataset(pattern, hp, "train", repeat=False, deterministic=True,
                                       seed=3))
  assert len(again) == len(batches)
  assert all(np.array_equal(a["inputs"], b["inputs"]) for a, b in zip(again, batches))


def test_eval_keeps_long_examples_and_does_not_repeat(tmp_path):
  examples, pattern = _write_examples(tmp_path, n=200)
  hp = _hparams()
  n = sum(b["inputs"].shape[0] for b in _collect(inputs.make_dataset(pattern, hp, "eval")))
  assert n == len(examples)
  hp_drop = _hparams(eval_drop_long_sequences=True)
  n_drop = sum(b["inputs"].shape[0] for b in _collect(inputs.make_dataset(pattern, hp_drop,
                                                                          "eval")))
  assert n_drop == sum(max(len(e["inputs"]), len(e["targets"])) <= 64 for e in examples)


def test_training_repeats_and_multiplier_scales_budget(tmp_path):
  examples, pattern = _write_examples(tmp_path, n=100, max_len=30)
  hp = _hparams(batch_shuffle_size=4)  # a small buffer keeps the test fast
  ds = inputs.make_dataset(pattern, hp, "train", batch_size_multiplier=2, seed=1)
  batches = [{k: v.numpy() for k, v in b.items()} for b in ds.take(40)]
  assert sum(b["inputs"].shape[0] for b in batches) > len(examples)  # repeated
  _check_budget_and_buckets(batches, hp, multiplier=2)
  # All examples of length 21 (20 ids + EOS) fall in bucket [20, 22): batch = 2 x single.
  same = [{"inputs": [5] * 20 + [1], "targets": [6] * 10 + [1]} for _ in range(200)]
  gu.generate_files(iter(same), [str(tmp_path / "same-train-00000-of-00001")])
  single = inputs.batching_scheme(256, 64)
  bucket = inputs.bucket_boundaries(64).index(22)
  sizes = [b["inputs"].shape[0] for b in inputs.make_dataset(
      str(tmp_path / "same-train*"), hp, "train", batch_size_multiplier=2, seed=1).take(5)]
  assert sizes == [2 * single["batch_sizes"][bucket]] * 5 and sizes[0] * 21 <= 512


def test_truncation_and_fixed_batch_size(tmp_path):
  examples, pattern = _write_examples(tmp_path, n=50, max_len=40)
  hp = _hparams(max_input_seq_length=5, max_target_seq_length=7, use_fixed_batch_size=True,
                batch_size=8)
  batches = _collect(inputs.make_dataset(pattern, hp, "eval"))
  assert [b["inputs"].shape[0] for b in batches] == [8] * 6 + [2]
  got = sorted((_unpad(i), _unpad(t)) for b in batches for i, t in zip(b["inputs"], b["targets"]))
  assert got == sorted((tuple(e["inputs"][:5]), tuple(e["targets"][:7])) for e in examples)


def test_bad_arguments(tmp_path):
  _, pattern = _write_examples(tmp_path, n=5)
  with pytest.raises(ValueError, match="mode must be one of"):
    inputs.make_dataset(pattern, _hparams(), "training")
  with pytest.raises(ValueError, match="no files match"):
    inputs.make_dataset(str(tmp_path / "nothing*"), _hparams(), "train")
  with pytest.raises(ValueError, match="batch_size_multiplier"):
    inputs.make_dataset(pattern, _hparams(), "train", batch_size_multiplier=0)


def test_unfinished_files_are_never_read(tmp_path):
  done = str(tmp_path / "p-train-00000-of-00002")
  gu.write_tfrecords_atomic(done, [gu.to_example({"inputs": [5, 1], "targets": [6, 1]})
                                   .SerializeToString()])
  # What killed writers leave: a truncated record, and temp names of atomic writers.
  with open(str(tmp_path / "p-train-00001-of-00002.4242.incomplete"), "wb") as f:
    f.write(b"\x40\x00\x00\x00\x00\x00\x00\x00trunc")
  (tmp_path / "p-train-00001-of-00002.tmp-77").write_bytes(b"x")
  pattern = str(tmp_path / "p-train*")
  assert inputs.match_shard_files(pattern) == [done]
  batches = _collect(inputs.make_dataset(pattern, _hparams(), "eval"))
  assert [_unpad(b) for batch in batches for b in batch["inputs"]] == [(5, 1)]
  for path in tf.io.gfile.glob(pattern):
    if path != done:
      gu.remove_quietly([path])
  gu.remove_quietly([done])
  with pytest.raises(ValueError, match="no files match.*t2t_keras_datagen"):
    inputs.match_shard_files(pattern)
