"""Input pipelines of several workers: one epoch over all of them reads every example once.

Each example's targets start with a token that encodes its id; the test reads one
epoch (no repeat) of every worker's pipeline, built as the trainer builds it
(`experiment.worker_dataset`), and counts the ids.
"""

import collections
import types

import numpy as np
import pytest
import tensorflow as tf

from data_gen import generator_utils as gu
from t2t_keras.training import inputs, schedules

NUM_EXAMPLES = 300
_ID_OFFSET = 2  # ids start after PAD=0 and EOS=1


def _hparams():
  return types.SimpleNamespace(
      batch_size=64, max_length=32, min_length_bucket=8, length_bucket_step=1.1,
      use_fixed_batch_size=False, eval_drop_long_sequences=False, batch_shuffle_size=16,
      max_input_seq_length=0, max_target_seq_length=0)


def _write_numbered(tmp_path, num_files):
  """NUM_EXAMPLES examples of lengths 2..31 whose first target token is id + 2."""
  rng = np.random.default_rng(0)
  examples = []
  for i in range(NUM_EXAMPLES):
    length = int(rng.integers(1, 30))
    examples.append({"inputs": rng.integers(2, 50, length).tolist() + [1],
                     "targets": [i + _ID_OFFSET] + rng.integers(2, 50, length).tolist() + [1]})
  gu.generate_files(iter(examples), gu.shard_filepaths(str(tmp_path), "ids", "train", num_files))
  return str(tmp_path / "ids-train*")


def _epoch_ids(pattern, mode, num_workers, index, seed):
  ctx = tf.distribute.InputContext(num_input_pipelines=num_workers, input_pipeline_id=index,
                                   num_replicas_in_sync=num_workers)
  ds = schedules.worker_dataset(pattern, _hparams(), mode, ctx, seed, repeat=False)
  return [int(t) - _ID_OFFSET for batch in ds for t in batch["targets"][:, 0].numpy()]


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("seed", [None, 5])
@pytest.mark.parametrize("num_files,num_workers", [
    (1, 2), (1, 3), (2, 3),  # fewer files than workers: every n-th record
    (4, 2), (3, 3)])  # files enough: each worker its own files
def test_workers_split_an_epoch_exactly(tmp_path, num_files, num_workers, seed, mode):
  pattern = _write_numbered(tmp_path, num_files)
  shards = [_epoch_ids(pattern, mode, num_workers, i, seed) for i in range(num_workers)]
  counts = collections.Counter(i for shard in shards for i in shard)
  twice = sorted(i for i, c in counts.items() if c > 1)
  missed = sorted(set(range(NUM_EXAMPLES)) - set(counts))
  assert not twice and not missed, (
      f"{len(twice)} examples read by two workers (e.g. {twice[:5]}), "
      f"{len(missed)} read by none (e.g. {missed[:5]})")
  assert sum(counts.values()) == NUM_EXAMPLES
  # A fair split: no worker idles while another reads the rest.
  sizes = [len(s) for s in shards]
  assert min(sizes) >= NUM_EXAMPLES // num_workers // 2, sizes


def test_workers_shuffle_their_own_part(tmp_path):
  """Sharding comes before shuffling, not instead of it: two unseeded epochs differ."""
  pattern = _write_numbered(tmp_path, 1)
  first = _epoch_ids(pattern, "train", 2, 0, None)
  second = _epoch_ids(pattern, "train", 2, 0, None)
  assert sorted(first) == sorted(second) and first != second


def test_shard_files_splits_files_or_records():
  files = ["a", "b", "c", "d", "e"]
  assert inputs.shard_files(files, 2, 1) == (["b", "d"], False)
  assert inputs.shard_files(files, 5, 4) == (["e"], False)
  assert inputs.shard_files(files, 6, 0) == (files, True)
  assert inputs.shard_files(files) == (files, False)
  with pytest.raises(ValueError, match="shard_index must be an int in \\[0, num_shards=2\\)"):
    inputs.shard_files(files, 2, 2)
  with pytest.raises(ValueError, match="num_shards must be an int >= 1, got 0"):
    inputs.shard_files(files, 0, 0)
