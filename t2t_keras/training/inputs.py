"""T2T input pipeline: TFRecord shards → length-bucketed, token-budgeted batches.

Faithful to T2T's `utils/data_reader.py`:
* bucket boundaries 8, 9, …, ×1.1 … < max_length (`bucket_boundaries`);
* batch size per bucket = `batch_size // bucket_upper_length`, rounded down to a
  divisor of a highly-composite window size, × `batch_size_multiplier`
  (the number of replicas, T2T's `shard_multiplier`) (`batching_scheme`);
* an example's length is max(len(inputs), len(targets)), EOS included; training
  drops examples longer than `max_length` (eval only with `eval_drop_long_sequences`);
* training shuffles files, examples (buffer 1024) and whole batches
  (`batch_shuffle_size`), and repeats forever.

Under several input pipelines (workers), each one reads a disjoint part of the
records, chosen before any shuffle (`shard_files`): its own files when there are
at least as many files as pipelines, else every n-th record of all files. One
epoch over all pipelines then reads every example exactly once, whatever the seeds.

Batches are dicts {"inputs": int64 [batch, length], "targets": int64 [batch, length]},
0-padded to the longest example of the batch, as T2T (a language model's "inputs"
are `[batch, 0]`). With `prepend_mode` the targets are T2T's [inputs, 0, targets].

Packed (T2T's `pack_dataset`: `hparams.pack_dataset`, rows of `max_length`
tokens, or a problem's `packed_length`), the training examples kept are packed
several to a row after the shuffle (`pack_dataset`), with T2T's "<key>_segmentation"
(which example of the row, 1, 2, ...; 0 is padding) and "<key>_position"
(position within its example) features, and batched `batch_size // length` rows
at a time. The models keep the examples of a row apart (attention within a
segment only, positions restarting), so each example is computed as alone.

With `pad_to_bucket=True` both are padded further, to their bucket's upper
length (`bucket_padded_length`), so the batch shapes are at most one per bucket.
A train step holding XLA compiles once per shape (per device), so the trainer
asks for it whenever its step holds XLA (`perf.step_compiles_per_shape`).
Padding changes no loss or gradient (padding is masked out of attention and
weighted 0 in the loss), only the work per batch, and little of it: a batch's
longest example is mostly near its bucket's top. On one epoch of a WMT-like
corpus with transformer_base batching, 72 shapes padded to the longest (and
more as training goes on) against 40 for 42 buckets, for 0.1% more batch slots
(`bench/bench_bucket_padding.py`).
"""

import logging
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf

from data_gen import file_io
from data_gen.text_encoder import PAD_ID
from t2t_keras import errors

TRAIN, EVAL, PREDICT = "train", "eval", "predict"
_MODES = {"train": TRAIN, "eval": EVAL, "predict": PREDICT, "infer": PREDICT}

# OEIS A002182: n with more divisors than any smaller number. T2T rounds batch
# sizes to divisors of one of these so every bucket divides the window evenly.
HIGHLY_COMPOSITE_NUMBERS = [
    1, 2, 4, 6, 12, 24, 36, 48, 60, 120, 180, 240, 360, 720, 840, 1260, 1680, 2520, 5040,
    7560, 10080, 15120, 20160, 25200, 27720, 45360, 50400, 55440, 83160, 110880, 166320,
    221760, 277200, 332640, 498960, 554400, 665280, 720720, 1081080, 1441440, 2162160,
    2882880, 3603600, 4324320, 6486480, 7207200, 8648640, 10810800, 14414400, 17297280,
    21621600, 32432400, 36756720, 43243200, 61261200, 73513440, 110270160]

_EXAMPLE_SHUFFLE_BUFFER = 1024
_PARSE_BATCH = 256
_CHECK_BATCH = 1024  # records per step of check_examples_kept


def bucket_boundaries(max_length: int, min_length: int = 8,
                      length_bucket_step: float = 1.1) -> List[int]:
  """T2T `_bucket_boundaries`: x = min_length; while x < max_length: x = max(x + 1, int(x * step)).

  Returns:
    e.g. 41 boundaries for max_length=256: [8, 9, …, 215, 236].
  """
  if length_bucket_step <= 1.0:
    raise ValueError("length_bucket_step must be > 1.0, got %r" % (length_bucket_step,))
  if min_length < 1:
    raise ValueError("min_length must be >= 1, got %r" % (min_length,))
  x, boundaries = min_length, []
  while x < max_length:
    boundaries.append(x)
    x = max(x + 1, int(x * length_bucket_step))
  return boundaries


def bucket_padded_length(width: tf.Tensor, boundaries: List[int],
                         max_length: Optional[int] = None,
                         length_bucket_step: float = 1.1) -> tf.Tensor:
  """The length a batch of longest example `width` is padded to under `pad_to_bucket`.

  The upper length of width's bucket, boundary - 1 (as tf.data's
  `pad_to_bucket_boundary`), capped at `max_length` when examples longer than it
  were dropped. Beyond the last boundary (evaluation keeps long examples unless
  `eval_drop_long_sequences`) T2T's series of boundaries is continued, so that
  long batches too take few shapes.

  Args:
    width: int32 scalar, the batch's longest example (>= 1).
    boundaries: `bucket_boundaries(...)`, ascending.
    max_length: the longest example kept, or None when none was dropped.
    length_bucket_step: the series' ratio, to continue it.

  Returns:
    int32 scalar >= width.
  """
  series = list(boundaries) or [1]
  while series[-1] < 1 << 20:
    series.append(max(series[-1] + 1, int(series[-1] * length_bucket_step)))
  series = tf.constant(series, tf.int32)
  upper = tf.gather(series, tf.searchsorted(series, [width], side="right")[0]) - 1
  if max_length is not None:
    upper = tf.minimum(upper, max_length)
  return tf.maximum(upper, width)


def _pad_to_bucket_fn(scheme: Dict[str, Any], length_bucket_step: float):
  """Pads every non-empty feature of a batch to `bucket_padded_length` of its longest."""
  max_length = scheme["max_length"] if scheme["max_length"] < 10**9 else None

  def fn(batch):
    width = tf.reduce_max([tf.shape(v)[1] for v in batch.values()])
    length = bucket_padded_length(width, scheme["boundaries"], max_length, length_bucket_step)
    # A language model's empty "inputs" [batch, 0] stay empty.
    return {k: tf.pad(v, [[0, 0], [0, tf.where(tf.shape(v)[1] > 0, length - tf.shape(v)[1], 0)]],
                      constant_values=PAD_ID)
            for k, v in batch.items()}

  return fn


def batching_scheme(batch_size: int, max_length: int, min_length_bucket: int = 8,
                    length_bucket_step: float = 1.1, drop_long_sequences: bool = False,
                    shard_multiplier: int = 1, length_multiplier: int = 1,
                    min_length: int = 0) -> Dict[str, Any]:
  """T2T `batching_scheme`: bucket boundaries and a batch size (in sentences) per bucket.

  Returns:
    {"boundaries": [n], "batch_sizes": [n + 1], "min_length", "max_length"
     (10**9 unless drop_long_sequences), "window_size", "shuffle_queue_size"}.
  """
  if batch_size < 1:
    raise ValueError("batch_size must be >= 1, got %r" % (batch_size,))
  if shard_multiplier < 1:
    raise ValueError("shard_multiplier (batch_size_multiplier) must be >= 1, got %r"
                     % (shard_multiplier,))
  max_length = max_length or batch_size
  if max_length < min_length:
    raise ValueError("max_length (%r) must be >= min_length (%r)" % (max_length, min_length))
  boundaries = [b * length_multiplier
                for b in bucket_boundaries(max_length, min_length_bucket, length_bucket_step)]
  max_length *= length_multiplier
  batch_sizes = [max(1, batch_size // length) for length in boundaries + [max_length]]
  window_size = max(n for n in HIGHLY_COMPOSITE_NUMBERS if n <= 3 * max(batch_sizes))
  divisors = [d for d in range(1, window_size + 1) if window_size % d == 0]
  batch_sizes = [max(d for d in divisors if d <= bs) for bs in batch_sizes]
  window_size *= shard_multiplier
  batch_sizes = [bs * shard_multiplier for bs in batch_sizes]
  return {
      "boundaries": boundaries,
      "batch_sizes": batch_sizes,
      "min_length": min_length,
      "max_length": max_length if drop_long_sequences else 10**9,
      "window_size": window_size,
      "shuffle_queue_size": 3 * (window_size // min(batch_sizes)),
  }


def hparams_to_batching_scheme(hparams, drop_long_sequences: bool = False,
                               shard_multiplier: int = 1) -> Dict[str, Any]:
  """`batching_scheme` from hparams fields (read by attribute)."""
  return batching_scheme(
      batch_size=hparams.batch_size, max_length=hparams.max_length,
      min_length_bucket=hparams.min_length_bucket,
      length_bucket_step=hparams.length_bucket_step,
      drop_long_sequences=drop_long_sequences, shard_multiplier=shard_multiplier,
      min_length=getattr(hparams, "min_length", 0))


def is_temporary_file(path: str) -> bool:
  """True for a file that a writer has not finished (never read as a shard).

  A T2T `<name>-train*` glob matches the temporary names of `file_io`'s writers.
  """
  return file_io.is_temporary(path)


def match_shard_files(filepattern: str) -> List[str]:
  """Sorted files matching `filepattern`, without temporary files (logged once).

  Raises:
    ValueError: if no finished file matches.
  """
  matched = sorted(tf.io.gfile.glob(filepattern))
  files = [f for f in matched if not is_temporary_file(f)]
  if len(files) < len(matched):
    logging.warning("ignoring %d unfinished file(s) matching %s (of an interrupted writer), "
                    "e.g. %s", len(matched) - len(files), filepattern,
                    next(f for f in matched if is_temporary_file(f)))
  if not files:
    raise ValueError("no files match filepattern %r; generate them with t2t_keras_datagen"
                     % (filepattern,))
  return files


def example_length(example: Dict[str, tf.Tensor]) -> tf.Tensor:
  """max(len(inputs), len(targets)) of one example (int32 scalar)."""
  return tf.maximum(tf.shape(example["inputs"])[0], tf.shape(example["targets"])[0])


def _parse(serialized: tf.Tensor) -> Dict[str, tf.RaggedTensor]:
  spec = {"inputs": tf.io.RaggedFeature(tf.int64), "targets": tf.io.RaggedFeature(tf.int64)}
  return tf.io.parse_example(serialized, spec)


def _kept_fn(hparams, min_length: int, max_length: int, mode: str = TRAIN):
  """fn(serialized [n]) -> (examples {"inputs", "targets": ragged [n, None]}, keep bool [n]).

  T2T's `preprocess_example_common`: inputs cut to max_input_seq_length (when
  > 0); with `prepend_mode` (not in predict mode) the targets become
  [inputs, 0, targets]; then targets cut to max_target_seq_length (when > 0).
  `keep` is min_length <= length <= max_length. A record without "inputs" (a
  language-model problem) has empty inputs.
  """
  max_in = int(getattr(hparams, "max_input_seq_length", 0) or 0)
  max_tgt = int(getattr(hparams, "max_target_seq_length", 0) or 0)
  prepend = getattr(hparams, "prepend_mode", "none") != "none" and _MODES[mode] != PREDICT

  def fn(serialized):
    ex = _parse(serialized)
    if max_in > 0:
      ex["inputs"] = ex["inputs"][:, :max_in]
    if prepend:
      rows = ex["targets"].nrows()
      separator = tf.RaggedTensor.from_tensor(tf.zeros(tf.stack([rows, tf.ones_like(rows)]),
                                                       tf.int64), row_splits_dtype=rows.dtype)
      ex["targets"] = tf.concat([ex["inputs"], separator, ex["targets"]], axis=1)
    if max_tgt > 0:
      ex["targets"] = ex["targets"][:, :max_tgt]
    length = tf.maximum(ex["inputs"].row_lengths(), ex["targets"].row_lengths())
    return ex, tf.logical_and(length >= min_length, length <= max_length)

  return fn


def _parse_batch_fn(hparams, min_length: int, max_length: int,
                    drop_counter: Optional[tf.Variable], mode: str = TRAIN):
  """Parses a batch of serialized examples, truncates and length-filters it, vectorized."""
  kept = _kept_fn(hparams, min_length, max_length, mode)

  def fn(serialized):
    ex, keep = kept(serialized)
    if drop_counter is not None:
      drop_counter.assign_add(tf.reduce_sum(tf.cast(tf.logical_not(keep), drop_counter.dtype)))
    return {k: tf.ragged.boolean_mask(v, keep) for k, v in ex.items()}

  return fn


def check_examples_kept(filepattern: str, hparams, mode: str) -> None:
  """Refuses a split of which `mode` would keep no example (its pipeline would wait for ever).

  Training repeats a split for ever after dropping the examples outside
  [min_length, max_length]: when it keeps none, no batch ever comes. Reads the
  shards in order, `_CHECK_BATCH` records at a time, and stops at the first
  batch with a kept example, so a usable split costs one such read; only a
  split with nothing kept is read once in full, to count what it drops.

  Args:
    filepattern, hparams, mode: as for `make_dataset`.
  Raises:
    errors.RunError: naming the split, the number of examples dropped and the
      hparams that dropped them (or that the split has no example at all).
    ValueError: if no file matches `filepattern`.
  """
  if mode not in _MODES:
    raise ValueError("mode must be one of %s, got %r" % (sorted(_MODES), mode))
  drop_long = _MODES[mode] == TRAIN or bool(getattr(hparams, "eval_drop_long_sequences", False))
  scheme = hparams_to_batching_scheme(hparams, drop_long)
  kept = _kept_fn(hparams, scheme["min_length"], scheme["max_length"], mode)
  count = tf.function(lambda serialized: (tf.size(serialized),
                                           tf.reduce_any(kept(serialized)[1])),
                      input_signature=[tf.TensorSpec([None], tf.string)])
  dropped = 0
  # File by file, so that no file after the first kept example is even opened.
  for path in match_shard_files(filepattern):
    for serialized in tf.data.TFRecordDataset(path, buffer_size=1 << 20).batch(_CHECK_BATCH):
      records, any_kept = count(serialized)
      if any_kept:
        return
      dropped += int(records)
  raise errors.RunError(_nothing_kept_message(filepattern, hparams, mode, scheme, dropped))


def _nothing_kept_message(filepattern: str, hparams, mode: str, scheme: Dict[str, Any],
                          dropped: int) -> str:
  split = "training" if _MODES[mode] == TRAIN else "evaluation"
  if not dropped:
    return (f"the {split} files {filepattern} hold no example; regenerate the data with "
            "t2t_keras_datagen.")
  max_length = int(hparams.max_length)
  limit = (f"max_length={max_length}" if max_length else
           f"max_length=0, i.e. batch_size={hparams.batch_size},")
  min_length = scheme["min_length"]
  what = (f"longer than {limit}" if not min_length else
          f"shorter than min_length={min_length} or longer than {limit}")
  fix = "raise max_length"
  if not max_length:
    fix = "set max_length (T2T's transformer_base has 256) or raise batch_size"
  outcome = "training would wait for ever for a batch"
  if _MODES[mode] != TRAIN:
    fix += " or set eval_drop_long_sequences=false"
    outcome = "there is nothing to evaluate"
  return (f"all {dropped} {split} examples in {filepattern} were dropped as {what} "
          "(an example's length is max(len(inputs), len(targets)) in subword tokens, EOS "
          f"included), so {outcome}; {fix} in --hparams.")


def shard_files(files: List[str], num_shards: int = 1,
                shard_index: int = 0) -> Tuple[List[str], bool]:
  """The files input pipeline `shard_index` of `num_shards` reads, and whether it shards records.

  With at least as many files as shards, pipeline i reads files[i::num_shards]
  whole (returns them and False); otherwise it reads all files, in order, and
  keeps every num_shards-th record from the i-th (returns all files and True).
  Either way the shards are disjoint and together hold every record once.

  Raises:
    ValueError: if num_shards < 1 or shard_index is not in [0, num_shards).
  """
  if not isinstance(num_shards, int) or num_shards < 1:
    raise ValueError("num_shards must be an int >= 1, got %r" % (num_shards,))
  if not isinstance(shard_index, int) or not 0 <= shard_index < num_shards:
    raise ValueError("shard_index must be an int in [0, num_shards=%d), got %r"
                     % (num_shards, shard_index))
  if len(files) >= num_shards:
    return files[shard_index::num_shards], False
  return files, True


def _read_records(files: List[str], training: bool, shuffle: bool, repeat: bool,
                  seed: Optional[int], deterministic: bool, num_shards: int = 1,
                  shard_index: int = 0) -> tf.data.Dataset:
  # Shard before any shuffle: sharding a stream each pipeline shuffled in its own
  # order would give overlapping shards that miss examples.
  files, by_record = shard_files(files, num_shards, shard_index)
  ds = tf.data.Dataset.from_tensor_slices(files)
  # Record sharding needs the same record order in every pipeline: files in
  # order, read one after another.
  if shuffle and not by_record:
    ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
  ds = ds.interleave(
      lambda f: tf.data.TFRecordDataset(f, buffer_size=1 << 20),
      cycle_length=1 if by_record else min(len(files), 16), block_length=16,
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=deterministic or not training or by_record)
  if by_record:
    ds = ds.shard(num_shards, shard_index)
  if repeat:
    ds = ds.repeat()
  if shuffle:
    ds = ds.shuffle(_EXAMPLE_SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True)
  return ds


# -- Packing (T2T's pack_dataset) -------------------------------------------------

PACK_KEYS = ("inputs", "targets")
# Open rows an example may join (T2T's `queue_size` of pack_examples and pack_dataset).
PACK_QUEUE_SIZE = 10


def packed_row_length(hparams, mode: str, packed_length: Optional[int] = None) -> Optional[int]:
  """The tokens per packed row of `mode`'s batches, or None when they are not packed.

  A problem's `packed_length` when given, else `max_length` (0: batch_size) with
  `hparams.pack_dataset`, as T2T's `pack_dataset(dataset, hparams.max_length)`.
  Training only: evaluation reads its examples one per row, so that its metrics
  are an unpacked run's (T2T packed them too, and counted rows as sequences in
  its per-sequence accuracy; the per-token metrics are the same either way).
  """
  if mode not in _MODES:
    raise ValueError("mode must be one of %s, got %r" % (sorted(_MODES), mode))
  if _MODES[mode] != TRAIN:
    return None
  length = None
  if packed_length is not None:
    if not isinstance(packed_length, int) or packed_length < 1:
      raise ValueError("packed_length must be an int >= 1, got %r" % (packed_length,))
    length = packed_length
  elif getattr(hparams, "pack_dataset", False):
    length = int(hparams.max_length or hparams.batch_size)
  if length and getattr(hparams, "prepend_mode", "none") != "none":
    raise ValueError("packed examples (hparams.pack_dataset or a problem's packed_length) "
                     "with hparams.prepend_mode=%r are not implemented; use prepend_mode=none."
                     % (hparams.prepend_mode,))
  return length


def packed_features(keys=PACK_KEYS) -> Tuple[str, ...]:
  """The features T2T adds to each packed key: `<key>_segmentation`, `<key>_position`."""
  return tuple(f"{k}_{suffix}" for k in keys for suffix in ("segmentation", "position"))


def pack_dataset(dataset: tf.data.Dataset, length: int, keys=PACK_KEYS,
                 queue_size: int = PACK_QUEUE_SIZE) -> tf.data.Dataset:
  """T2T's `pack_dataset`: several examples per row of at most `length` tokens.

  Each example (its `keys`' sequences, each cut to `length` tokens) joins the
  first of the open rows, oldest first, in which every one of its sequences
  still fits; when none has room and `queue_size` rows are open, the oldest
  row is emitted, and the example opens a new row. At the end of the data the
  open rows are emitted, oldest first. (T2T's `pack_examples` and
  `SequenceDatasetPacker`, with spacing 0; one stream, not T2T's windows of it.)

  An example's sequences get the same segment id in their rows: 1, 2, ... in
  the order the examples joined it, so that the inputs and targets of one
  translation pair carry one id.

  Args:
    dataset: examples {key: int [n_key]} (at least the `keys`; others are dropped).
    length: tokens per row (T2T's `packed_length`, or `max_length` with
      hparams.pack_dataset).
    keys: the sequences packed together.
    queue_size: rows open at once.

  Returns:
    Rows {key: int64 [n], key + "_segmentation": int32 [n] (the example's id in
    the row, 1, 2, ...), key + "_position": int32 [n] (the token's position in
    its example, from 0)}, n <= length the row's tokens of that key (an empty
    key, a language model's inputs, stays empty). `padded_batch` pads all three
    with 0, T2T's segment of padding.
  """
  if length < 1 or queue_size < 1:
    raise ValueError(f"length and queue_size must be >= 1, got {length} and {queue_size}")
  keys = tuple(keys)
  rows = (queue_size, len(keys), length)

  def example(ex):
    return tf.constant(False), tuple(tf.cast(ex[k][:length], tf.int64) for k in keys)

  # The end of the data: queue_size elements that fit nowhere flush the open rows.
  flush = tf.data.Dataset.from_tensors(
      (tf.constant(True), tuple(tf.zeros([0], tf.int64) for _ in keys))).repeat(queue_size)
  state = (tf.zeros(rows[:2], tf.int32), tf.zeros(rows[:1], tf.int32),
           tf.zeros(rows, tf.int64), tf.zeros(rows, tf.int32), tf.zeros(rows, tf.int32))

  def step(state, element):
    fill, count, tokens, segment, position = state  # fill [queue, keys], count [queue]
    is_flush, sequences = element
    lengths = tf.stack([tf.shape(s)[0] for s in sequences])
    fits = tf.logical_and(tf.reduce_all(fill + lengths[None] <= length, axis=1),
                          tf.logical_not(is_flush))
    placed = tf.reduce_any(fits)
    # Nothing fits: the oldest row goes out and a new row opens at the queue's end.
    emit = tf.logical_and(tf.logical_not(placed), count[0] > 0)
    out = (emit, fill[0], tokens[0], segment[0], position[0])
    fill, count, tokens, segment, position = tf.cond(
        placed, lambda: state,
        lambda: tuple(tf.concat([x[1:], tf.zeros_like(x[:1])], 0) for x in state))
    row = tf.where(placed, tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32),
                   queue_size - 1)
    for k, sequence in enumerate(sequences):
      n = lengths[k]
      where = tf.stack([tf.fill([n], row), tf.fill([n], k), fill[row, k] + tf.range(n)], 1)
      tokens = tf.tensor_scatter_nd_update(tokens, where, sequence)
      segment = tf.tensor_scatter_nd_update(segment, where, tf.fill([n], count[row] + 1))
      position = tf.tensor_scatter_nd_update(position, where, tf.range(n))
    joined = tf.one_hot(row, queue_size, dtype=tf.int32) * tf.cast(
        tf.logical_not(is_flush), tf.int32)
    return (fill + joined[:, None] * lengths[None], count + joined, tokens, segment,
            position), out

  def row_features(_, fill, tokens, segment, position):
    features = {}
    for k, key in enumerate(keys):
      features[key] = tokens[k, :fill[k]]
      features[key + "_segmentation"] = segment[k, :fill[k]]
      features[key + "_position"] = position[k, :fill[k]]
    return features

  packed = dataset.map(example).concatenate(flush).scan(state, step)
  return packed.filter(lambda emit, *_: emit).map(row_features)


def make_dataset(filepattern: str, hparams, mode: str, *, batch_size_multiplier: int = 1,
                 seed: Optional[int] = None, deterministic: bool = False,
                 repeat: Optional[bool] = None, shuffle: Optional[bool] = None,
                 drop_counter: Optional[tf.Variable] = None, num_shards: int = 1,
                 shard_index: int = 0, pad_to_bucket: bool = False,
                 packed_length: Optional[int] = None) -> tf.data.Dataset:
  """Batched T2T examples from TFRecord files matching `filepattern`.

  With num_shards > 1 (one input pipeline per worker) the dataset holds only
  pipeline `shard_index`'s part of the records, split before any shuffle (see
  `shard_files`), so that the pipelines' epochs are disjoint and together read
  every example once.

  Args:
    filepattern: glob of shard files, e.g. `problem.filepattern(data_dir, "train")`.
    hparams: object with T2T fields batch_size (tokens per replica incl. padding),
      max_length, min_length_bucket, length_bucket_step, use_fixed_batch_size,
      eval_drop_long_sequences, batch_shuffle_size, max_input_seq_length,
      max_target_seq_length.
    mode: "train", "eval" or "predict"/"infer".
    batch_size_multiplier: number of replicas; batch sizes are multiplied by it.
    seed: seed of all shuffles (default 0 when deterministic).
    deterministic: fixed element order for a given seed.
    repeat: repeat forever (default: in training).
    shuffle: shuffle files, examples and batches (default: in training).
    drop_counter: optional int64 tf.Variable incremented for every over-long
      example dropped.
    num_shards: number of input pipelines the records are split between.
    shard_index: this pipeline's index, in [0, num_shards).
    pad_to_bucket: pad each batch to its bucket's upper length
      (`bucket_padded_length`), not only to its longest example: at most one
      shape per bucket, for steps that XLA compiles per shape.
    packed_length: in training, pack the examples into rows of this many
      tokens (a problem's `packed_length`); None: rows of `max_length` when
      `hparams.pack_dataset`, else no packing (see `packed_row_length`).

  Returns:
    tf.data.Dataset of {"inputs": int64 [batch, length], "targets": int64 [batch, length]};
    packed (training), also int32 [batch, length] "inputs_segmentation", "inputs_position",
    "targets_segmentation" and "targets_position" (`pack_dataset`), in batches of
    `batch_size // row length` rows (T2T's number of packed rows on TPUs).
  """
  if mode not in _MODES:
    raise ValueError("mode must be one of %s, got %r" % (sorted(_MODES), mode))
  if not isinstance(batch_size_multiplier, int) or batch_size_multiplier < 1:
    raise ValueError("batch_size_multiplier must be an int >= 1, got %r" % (batch_size_multiplier,))
  training = _MODES[mode] == TRAIN
  files = match_shard_files(filepattern)
  repeat = training if repeat is None else repeat
  shuffle = training if shuffle is None else shuffle
  if deterministic and seed is None:
    seed = 0
  drop_long = training or bool(getattr(hparams, "eval_drop_long_sequences", False))
  scheme = hparams_to_batching_scheme(hparams, drop_long, batch_size_multiplier)

  ds = _read_records(files, training, shuffle, repeat, seed, deterministic, num_shards,
                    shard_index)
  parse = _parse_batch_fn(hparams, scheme["min_length"], scheme["max_length"], drop_counter,
                          mode)
  ds = ds.batch(_PARSE_BATCH).map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                                  deterministic=True).unbatch()
  # Unbatched ragged rows arrive as rank-0-ragged specs; make them plain tensors.
  ds = ds.map(lambda ex: {k: tf.identity(v) for k, v in ex.items()},
              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  pad = tf.constant(PAD_ID, tf.int64)
  row_length = packed_row_length(hparams, mode, packed_length)
  if row_length:
    # Rows of one length need no buckets; padding (0) is segment 0 and position 0.
    rows = hparams.batch_size if getattr(hparams, "use_fixed_batch_size", False) else max(
        1, hparams.batch_size // row_length)
    ds = pack_dataset(ds, row_length).padded_batch(rows * batch_size_multiplier)
  elif getattr(hparams, "use_fixed_batch_size", False):
    # T2T: batch_size then counts examples per replica, no bucketing.
    ds = ds.padded_batch(hparams.batch_size * batch_size_multiplier, padding_values=pad)
  else:
    ds = ds.bucket_by_sequence_length(example_length, scheme["boundaries"],
                                      scheme["batch_sizes"], padding_values=pad)
  if pad_to_bucket:
    ds = ds.map(_pad_to_bucket_fn(scheme, hparams.length_bucket_step),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  batch_shuffle = int(getattr(hparams, "batch_shuffle_size", 0) or 0)
  if shuffle and batch_shuffle:
    ds = ds.shuffle(batch_shuffle, seed=seed, reshuffle_each_iteration=True)
  options = tf.data.Options()
  options.deterministic = deterministic or not training
  ds = ds.with_options(options)
  return ds.prefetch(tf.data.AUTOTUNE)
