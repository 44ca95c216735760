"""Sharding, atomic TFRecord writing, parallel-text reading and vocab helpers.

Mirrors T2T's `data_generators/generator_utils.py` naming: shard files are
`<name>-<split>-00000-of-00100`; examples are first written round-robin to
`<name>-unshuffled-<split>-…` files, then each shard is shuffled in memory and
written under its final name. Every file is written by `file_io`'s atomic
writers (a temporary name, then a rename), so a killed run never leaves a file
that looks done; the next run removes such leftovers
(`remove_stale_temporaries`), and a failed run removes its own. The manifest
(`data_gen/manifest.py`) is marked complete last.
"""

import logging
import os
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

from data_gen import datagen_worker, file_io
from data_gen.datagen_worker import check_ids  # noqa: F401  (here since before workers)
from data_gen.file_io import remove_quietly

# Test hook: the TFRecord write of the shard with this base name pauses after its
# first record (tests/test_faults_datagen.py SIGKILLs the process there).
PAUSE_ENV = datagen_worker.PAUSE_ENV
_STALE_SECONDS = 3600  # a temp file untouched this long has no live writer

Progress = Optional[Callable[[str, int, Optional[int]], None]]


def sharded_name(base_name: str, shard: int, total_shards: int) -> str:
  """T2T shard naming: `base-00003-of-00100`."""
  return "%s-%05d-of-%05d" % (base_name, shard, total_shards)


def shard_filepaths(data_dir: str, problem_name: str, split: str, num_shards: int,
                    shuffled: bool = True) -> List[str]:
  """Paths of the `num_shards` shard files of one split of a problem."""
  if num_shards < 1:
    raise ValueError("num_shards must be >= 1, got %r" % (num_shards,))
  tag = split if shuffled else "unshuffled-" + split
  base = os.path.join(data_dir, "%s-%s" % (problem_name, tag))
  return [sharded_name(base, i, num_shards) for i in range(num_shards)]


def to_example(features: Dict[str, Sequence[int]]) -> tf.train.Example:
  """Builds a `tf.train.Example` with one int64 list feature per key."""
  feature = {}
  for key, values in features.items():
    values = list(values)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
      raise ValueError("feature %r must hold Python ints, got %r" % (key, values[:10]))
    feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
  return tf.train.Example(features=tf.train.Features(feature=feature))


def open_record_writer(path: str):
  """The TFRecord writer of every shard (one place, so tests can simulate a full disk)."""
  return tf.io.TFRecordWriter(path)


def _close_quietly(writers) -> None:
  for w in writers:
    try:
      w.close()
    except Exception as e:  # pylint: disable=broad-except
      logging.warning("closing a shard writer failed during clean-up: %s", e)


def remove_stale_temporaries(data_dir: str, problem_name: str) -> List[str]:
  """Removes leftovers of killed runs in `data_dir`; returns the removed paths.

  Removed: temporaries whose writer is gone or that were untouched for an hour
  (`file_io.abandoned`), and `<problem_name>-unshuffled-*` shards (only a
  finished split removes them). Files of a live concurrent writer are kept.
  """
  removed = file_io.remove_abandoned(data_dir, _STALE_SECONDS)
  for name in sorted(os.listdir(data_dir)) if os.path.isdir(data_dir) else []:
    path = os.path.join(data_dir, name)
    if file_io.is_temporary(path):
      logging.warning("keeping %s: its writer may still be running", path)
    elif name.startswith(problem_name + "-unshuffled-"):
      remove_quietly([path])
      removed.append(path)
  if removed:
    logging.warning("removed %d leftover file(s) of an interrupted run in %s",
                    len(removed), data_dir)
  return sorted(removed)


def _pause_for_test(final_path: str, writer) -> None:
  if os.environ.get(PAUSE_ENV) == os.path.basename(final_path):
    writer.flush()
    print("T2T_KERAS_TEST_PAUSED %s" % final_path, flush=True)
    time.sleep(600)


def write_tfrecords_atomic(path: str, records: Iterable[bytes]) -> int:
  """Writes serialized records to `path` via a temporary file; returns count."""
  count = 0
  with file_io.atomic_path(path) as tmp:
    writer = open_record_writer(tmp)
    try:
      for record in records:
        writer.write(record)
        count += 1
        if count == 1:
          _pause_for_test(path, writer)
    except BaseException:
      _close_quietly([writer])  # before atomic_path removes the file
      raise
    writer.close()
  return count


def generate_files(examples: Iterable[Dict[str, Sequence[int]]], output_paths: Sequence[str],
                   max_cases: Optional[int] = None, progress: Progress = None,
                   progress_every: int = 10000, stage: str = "",
                   vocab_sizes: Optional[Dict[str, int]] = None) -> int:
  """Round-robins examples over `output_paths` (T2T `generate_files`).

  `examples` may also be serialised records (bytes, see `data_gen/parallel.py`).
  Files are renamed to their final names only after the generator is exhausted.
  With `vocab_sizes` ({feature: size}), an id outside a feature's vocabulary
  raises ValueError (`check_ids`) and nothing is kept.

  Returns:
    The number of examples written.
  """
  writers = []
  count = 0
  with file_io.atomic_paths(output_paths) as tmp_paths:
    try:
      for p in tmp_paths:
        writers.append(open_record_writer(p))
      for example in examples:
        if max_cases is not None and count >= max_cases:
          break
        if vocab_sizes:
          check_ids(example, vocab_sizes, count + 1, stage)
        writers[count % len(writers)].write(  # serialised already by a datagen worker
            example if isinstance(example, bytes) else
            to_example(example).SerializeToString(deterministic=True))  # byte-identical reruns
        count += 1
        if progress is not None and count % progress_every == 0:
          progress(stage, count, max_cases)
      for w in writers:
        w.close()
    except BaseException:
      # Must not fail itself (a full disk makes close() raise); atomic_paths removes the files.
      _close_quietly(writers)
      raise
  if progress is not None:
    progress(stage, count, count)
  return count


def shuffle_shards(unshuffled_paths: Sequence[str], final_paths: Sequence[str],
                   random_seed: int) -> None:
  """Shuffles each shard in memory, writes it under its final name (T2T `shuffle_dataset`).

  The shard at position i uses seed `random_seed + i`, so reruns are reproducible.
  In one process; `data_gen/parallel.py` shuffles shards in worker processes.
  """
  for i, (src, dst) in enumerate(zip(unshuffled_paths, final_paths)):
    datagen_worker.shuffle_shard_file(src, dst, random_seed + i)


def read_records(path: str) -> List[bytes]:
  """All serialized records of one TFRecord file (one batched read, not per record)."""
  records: List[bytes] = []
  for chunk in tf.data.TFRecordDataset(path).batch(1 << 16):
    records.extend(chunk.numpy().tolist())
  return records


def shard_stats(paths: Sequence[str]) -> Dict[str, int]:
  """Counts examples and int64 ids per feature over TFRecord shards.

  Returns:
    {"examples": n, "inputs_tokens": n, "targets_tokens": n} (EOS included).
  """
  spec = {"inputs": tf.io.RaggedFeature(tf.int64), "targets": tf.io.RaggedFeature(tf.int64)}
  stats = {"examples": 0, "inputs_tokens": 0, "targets_tokens": 0}
  if not paths:
    return stats
  ds = tf.data.TFRecordDataset(list(paths)).batch(4096).map(
      lambda s: tf.io.parse_example(s, spec))
  for batch in ds:
    stats["examples"] += int(batch["targets"].nrows())
    stats["inputs_tokens"] += int(tf.size(batch["inputs"].flat_values))
    stats["targets_tokens"] += int(tf.size(batch["targets"].flat_values))
  return stats


def read_parallel_lines(source_path: str, target_path: str,
                        names: Tuple[str, str] = ("source", "target")) -> Iterator[Tuple[str, str]]:
  """Yields aligned (source, target) lines of two parallel text files.

  Raises:
    ValueError: naming file and line for an empty file, an empty line,
      invalid UTF-8, or files with different line counts.
  """
  src_iter = enumerate(file_io.iter_lines(source_path, name=names[0]), start=1)
  tgt_iter = enumerate(file_io.iter_lines(target_path, name=names[1]), start=1)
  count = 0
  for src, tgt in _zip_strict(src_iter, tgt_iter, source_path, target_path, names):
    count += 1
    for (number, text), path, name in ((src, source_path, names[0]),
                                       (tgt, target_path, names[1])):
      if not text.strip():
        raise ValueError("%s %r line %d is empty; parallel files need text on every line"
                         % (name, path, number))
    yield src[1].strip(), tgt[1].strip()
  if count == 0:
    raise ValueError("%s %r is empty; give a file with one sentence per line"
                     % (names[0], source_path))


def _zip_strict(a, b, path_a, path_b, names):
  while True:
    x = next(a, None)
    y = next(b, None)
    if x is None and y is None:
      return
    if x is None or y is None:
      longer, shorter = (names[1], path_b) if x is None else (names[0], path_a)
      line = (y if x is None else x)[0]
      short_name, short_path = (names[0], path_a) if x is None else (names[1], path_b)
      raise ValueError(
          "misaligned parallel files: %s %r has a line %d but %s %r ends after line %d; "
          "both files must have the same number of lines"
          % (longer, shorter, line, short_name, short_path, line - 1))
    yield x, y


def file_lines_for_vocab(path: str, byte_budget: float = 1e6) -> Iterator[str]:
  """About `byte_budget` bytes of evenly spaced lines of one text file.

  Like T2T's `generate_lines_for_vocab`, but the stride is chosen so the sample
  spans the whole file (T2T's spans roughly its first half).
  """
  stride = max(1, int(os.path.getsize(path) // max(1.0, byte_budget)))
  budget = byte_budget
  for number, line in enumerate(file_io.iter_lines(path), start=1):
    if (number - 1) % stride:
      continue
    line = line.strip()
    if line:
      budget -= len(line.encode("utf-8"))
      yield line
    if budget <= 0:
      return


def generate_lines_for_vocab(paths: Sequence[str], file_byte_budget: float = 1e6) -> Iterator[str]:
  """≈`file_byte_budget` bytes of evenly spaced lines from each file in `paths`."""
  for path in paths:
    yield from file_lines_for_vocab(path, file_byte_budget)


def get_or_generate_vocab(data_dir: str, vocab_filename: str, approx_vocab_size: int,
                          text_iterator: Callable[[], Iterable[str]],
                          max_subtoken_length: Optional[int] = None,
                          reserved_tokens: Optional[List[str]] = None):
  """Loads `data_dir/vocab_filename` or builds a SubwordTextEncoder and stores it.

  `text_iterator` is only called when the vocab has to be built.

  Returns:
    (encoder, seconds spent building; 0.0 when loaded).
  """
  from data_gen import text_encoder, tokenizer  # pylint: disable=g-import-not-at-top
  path = os.path.join(data_dir, vocab_filename)
  if os.path.exists(path):
    return text_encoder.SubwordTextEncoder(path), 0.0
  start = time.time()
  token_counts = tokenizer.corpus_token_counts(text_iterator())
  encoder = text_encoder.SubwordTextEncoder.build_to_target_size(
      approx_vocab_size, token_counts, VOCAB_MIN_COUNTS[0], VOCAB_MIN_COUNTS[1],
      max_subtoken_length=max_subtoken_length, reserved_tokens=reserved_tokens)
  encoder.store_to_file(path)  # atomic, readable by others (mode 0666 & ~umask)
  warning = vocab_size_warning(vocab_filename, approx_vocab_size, encoder.vocab_size)
  if warning:
    logging.warning(warning)
  return encoder, time.time() - start


# The min_count range the vocab builder searches (T2T's 1 .. 1e3).
VOCAB_MIN_COUNTS = (1, 1e3)
# "Far" from the requested size: off by more than VOCAB_SIZE_TOLERANCE of it. The
# builder bisects the integer min_count aiming within 1% (T2T's search), and
# neighbouring min_counts can be a few percent apart in size, so a few percent off
# is its normal result; more than 10% off means the search ended at min_count 1
# (every piece seen once kept: the text is too small) or 1e3 (the characters and
# frequent pieces alone exceed the request), so the text, not the request, set it.
VOCAB_SIZE_TOLERANCE = 0.10


def vocab_size_warning(vocab_filename: str, requested: int, built: int) -> Optional[str]:
  """One line saying why `built` is far from `requested` and what to do, else None."""
  if abs(built - requested) <= VOCAB_SIZE_TOLERANCE * requested:
    return None
  if built < requested:
    why = ("the training text is too small for more (every piece seen once is kept); give "
           "more training text, or a vocab_size near %d" % built)
  else:
    why = ("its characters and the pieces seen %d times or more alone make that many; ask "
           "for a vocab_size of at least %d" % (VOCAB_MIN_COUNTS[1], built))
  return ("%s: built %d subwords for a requested vocab_size of %d (more than %d%% off): %s "
          "(translate_from_files: --vocab_size)" % (vocab_filename, built, requested,
                                                round(100 * VOCAB_SIZE_TOLERANCE), why))

