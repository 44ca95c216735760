"""Which checkpoint of a run directory can be trusted, before anything uses it.

A checkpoint `ckpt-<step>` is an index `ckpt-<step>.index` and data shards
`ckpt-<step>.data-<i>-of-<n>`. The `checkpoint` state file names the newest one.
A file can go missing or be cut short (disk full, a copy interrupted, a user
cleaning up); TF then either ignores the run (restarting from step 0 and
overwriting the old checkpoints) or fails deep inside a restore without naming
the file. Here:

* `verify_checkpoint` reads the index (TF's table format, parsed below, so that
  a big checkpoint is checked without reading its data) and requires every data
  shard to exist with exactly the size the index implies; for checkpoints up to
  `FULL_READ_BYTES` it also reads every tensor, which checks TF's CRC32C of each.
* `find_checkpoints` lists the checkpoints of a directory from the state file
  and from the files present, newest first, so that a lost or stale state file
  does not hide them.
* `check_finite_weights` refuses a checkpoint whose model weights hold NaN or
  inf (a diverged run, or one saved before the trainer checked its weights),
  naming the variable.
* `newest_loadable` picks the newest checkpoint that verifies and whose weights
  are finite, and says what was wrong with each newer one.
* `reading` wraps every read of a checkpoint (a run's, an averaged one, T2T's):
  TF's errors for a damaged file become a CheckpointError naming the file, which
  the commands print as one line (exit status 2).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import struct
import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import tensor_bundle_pb2, trackable_object_graph_pb2

from data_gen import file_io

FULL_READ_BYTES = 256 << 20  # read (and CRC-check) every tensor up to this data size
_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_BYTES = 48
_BLOCK_TRAILER_BYTES = 5
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_CKPT_RE = re.compile(r"^(?P<prefix>.*-(?P<step>\d+))\.(index|data-\d{5}-of-\d{5})$")
_TEMP_RE = re.compile(r"^.+-\d+_temp$")  # where tf.train.Checkpoint writes a save's shards


class CheckpointError(ValueError):
  """A checkpoint is missing, damaged or partial; the message names the file."""


class NonFiniteWeightsError(CheckpointError):
  """A checkpoint's model weights hold NaN or inf; the message names the variable."""


@dataclasses.dataclass(frozen=True)
class Candidate:
  prefix: str
  step: int
  error: Optional[str]  # None when the checkpoint verified


def checkpoint_step(prefix: str) -> int:
  """The step in a `<name>-<step>` checkpoint prefix (-1 when it has none)."""
  match = re.search(r"-(\d+)$", prefix)
  return int(match.group(1)) if match else -1


def checkpoint_files(prefix: str) -> List[str]:
  """The files of checkpoint `prefix` present on disk (index and data shards)."""
  return sorted(tf.io.gfile.glob(prefix + ".index") +
                tf.io.gfile.glob(prefix + ".data-?????-of-?????"))


def verify_checkpoint(prefix: str, full_read: Optional[bool] = None) -> None:
  """Checks that checkpoint `prefix` is complete and readable.

  Args:
    prefix: checkpoint prefix, e.g. `run/ckpt-200`.
    full_read: read every tensor (checks each CRC32C); default: when the data
      shards total at most FULL_READ_BYTES.
  Raises:
    CheckpointError: naming the missing, short or unreadable file.
  """
  index = prefix + ".index"
  if not tf.io.gfile.exists(index):
    raise CheckpointError(f"{index} is missing")
  try:
    with tf.io.gfile.GFile(index, "rb") as f:
      num_shards, shard_bytes = _shard_sizes(f.read())
  except (ValueError, IndexError, struct.error) as e:
    raise CheckpointError(f"{index} is unreadable ({e})") from None
  for shard in range(num_shards):
    path = f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"
    want = shard_bytes.get(shard, 0)
    if not tf.io.gfile.exists(path):
      raise CheckpointError(f"{path} is missing ({want} bytes expected)")
    got = tf.io.gfile.stat(path).length
    if got != want:
      raise CheckpointError(f"{path} has {got} bytes, its index implies {want}")
  if full_read is None:
    full_read = sum(shard_bytes.values()) <= FULL_READ_BYTES
  if full_read:
    try:
      reader = tf.train.load_checkpoint(prefix)
      for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)
    except (tf.errors.OpError, IndexError, ValueError) as e:
      raise _unreadable(prefix, e) from None


@contextlib.contextmanager
def reading(prefix: str) -> Iterator[None]:
  """Around TF's reading of checkpoint `prefix` (a restore, a CheckpointReader): the
  errors TF gives for a damaged file become a CheckpointError naming the file.

  TF's own messages name no file ("Read less bytes than requested" for a shard cut
  short, "not an sstable (bad magic number)" for a garbled index) or only the
  prefix and a shard number (a CRC mismatch, which `verify_checkpoint` leaves to
  the first read of a checkpoint above FULL_READ_BYTES). Other errors propagate.
  """
  try:
    yield
  except (tf.errors.DataLossError, tf.errors.OutOfRangeError, tf.errors.NotFoundError,
          tf.errors.UnknownError, IndexError) as e:
    silence_unrestored_warnings(e)
    raise read_error(prefix, e) from None
  except tf.errors.OpError as e:
    if type(e) is not tf.errors.OpError:  # pylint: disable=unidiomatic-typecheck
      raise
    silence_unrestored_warnings(e)
    raise read_error(prefix, e) from None  # CheckpointReader's errors have no code


def silence_unrestored_warnings(error: BaseException) -> None:
  """Marks the restore that raised `error` as partial, so that TensorFlow does not
  log its unrestored values at exit under a one-line error (its status object is
  never returned)."""
  tb = error.__traceback__
  while tb is not None:
    for value in tb.tb_frame.f_locals.values():
      if hasattr(value, "expect_partial_attr"):  # the restore coordinator
        value.expect_partial = True
    tb = tb.tb_next


def read_error(prefix: str, error: BaseException) -> CheckpointError:
  """The CheckpointError for TF's `error` in reading checkpoint `prefix`: a missing,
  short or garbled file as `verify_checkpoint` names it, else the data shard TF
  names (else the prefix) with what TF found."""
  try:
    verify_checkpoint(prefix, full_read=False)
  except CheckpointError as found:
    return found
  return _unreadable(prefix, error)


def _unreadable(prefix: str, error: BaseException) -> CheckpointError:
  what = _first_line(error)
  # Graph-mode decoration: "{{function_node ...}} <message> [Op:RestoreV2]".
  what = re.sub(r"^\{\{.*?\}\}\s*|\s*\[Op:\w+\]$", "", what)
  where = prefix
  shard = re.match(r"TensorBundle at .* shard (\d+) \(\d+ bytes\): (.*)$", what)
  if shard:
    pattern = re.compile(r"\.data-%05d-of-\d{5}$" % int(shard.group(1)))
    named = [p for p in checkpoint_files(prefix) if pattern.search(p)]
    if named:
      where, what = named[0], shard.group(2)
  return CheckpointError(f"{where} does not read back ({what}): the file is damaged")


def model_variables(prefix: str) -> Dict[str, Tuple[str, List[int]]]:
  """{variable path: (checkpoint key, shape)} of the model's float variables in `prefix`.

  The model's variables are those under the checkpoint's `model` object (what
  `tf.train.Checkpoint(model=...)` wrote), named by their Keras paths, e.g.
  `transformer/shared/weights`; the optimizer's slots and step counter are not
  among them. A checkpoint without a `model` object gives all its float tensors,
  named by their keys.
  """
  reader = tf.train.load_checkpoint(prefix)
  shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
  found = {}
  if reader.has_tensor(_OBJECT_GRAPH_KEY):
    graph = trackable_object_graph_pb2.TrackableObjectGraph.FromString(
        reader.get_tensor(_OBJECT_GRAPH_KEY))
    stack = [c.node_id for c in graph.nodes[0].children if c.local_name == "model"]
    seen = set()
    while stack:  # every object reachable from the model (layers share some)
      node_id = stack.pop()
      if node_id in seen:
        continue
      seen.add(node_id)
      node = graph.nodes[node_id]
      for attribute in node.attributes:
        if attribute.name == "VARIABLE_VALUE":
          found[attribute.full_name or attribute.checkpoint_key] = attribute.checkpoint_key
      stack.extend(c.node_id for c in node.children)
  if not found:
    found = {key: key for key in shapes if key != _OBJECT_GRAPH_KEY}
  return {name: (key, shapes[key]) for name, key in sorted(found.items())
          if key in dtypes and dtypes[key].is_floating}


def check_finite_weights(prefix: str) -> None:
  """Checks that every model variable of checkpoint `prefix` is finite.

  Only the model's variables (see `model_variables`) are read: they are what
  decoding, export, averaging and a resumed run compute with. A non-finite
  optimizer slot alone is not looked for; it makes the next update, and so the
  weights of the next checkpoint, non-finite, which the trainer stops at.

  Raises:
    NonFiniteWeightsError: naming the checkpoint, the first non-finite variable,
      what it holds (NaN or inf) and how many other variables are non-finite.
    CheckpointError: a tensor does not read back.
  """
  bad = []
  try:
    reader = tf.train.load_checkpoint(prefix)
    for name, (key, _) in model_variables(prefix).items():
      value = reader.get_tensor(key)
      if not np.isfinite(value).all():
        bad.append((name, "NaN" if np.isnan(value).any() else "inf"))
  except (tf.errors.OpError, IndexError, ValueError) as e:  # e.g. a CRC mismatch in a big one
    raise _unreadable(prefix, e) from None
  if bad:
    (name, kind), more = bad[0], len(bad) - 1
    others = f" (and {more} other variable{'s' if more > 1 else ''})" if more else ""
    raise NonFiniteWeightsError(f"{prefix} has non-finite weights: {name} holds {kind}{others}")


def find_checkpoints(directory: str) -> List[str]:
  """Checkpoint prefixes of `directory`, newest step first.

  The union of those named by the `checkpoint` state file (if readable) and of
  those with any file present, so that neither a lost state file nor a lost
  index hides a checkpoint. Each prefix is `os.path.join(directory, name)`, so
  it is relative when `directory` is; a state file entry naming a file outside
  `directory` is ignored.
  """
  prefixes = set()
  state = read_state(directory)
  if state is not None:
    named = list(state.all_model_checkpoint_paths) + [state.model_checkpoint_path]
    prefixes.update(p for p in named if _in_directory(directory, p))
  for path in tf.io.gfile.glob(os.path.join(directory, "*-*.*")):
    match = _CKPT_RE.match(path)
    if match:
      prefixes.add(match.group("prefix"))
  prefixes = [p for p in prefixes if checkpoint_files(p)]
  return sorted(prefixes, key=lambda p: (checkpoint_step(p), p), reverse=True)


def read_state(directory: str):
  """The `checkpoint` state proto of `directory`, or None if absent, empty or garbled.

  Its paths are as `tf.train.get_checkpoint_state` gives them: an entry relative
  to the state file is joined to `directory` (so `run/ckpt-4` for `directory`
  `run`), as `find_checkpoints` and `tf.train.CheckpointManager` name them; no
  further joining is needed.
  """
  if not tf.io.gfile.exists(os.path.join(directory, "checkpoint")):
    return None
  try:
    state = tf.train.get_checkpoint_state(directory)
  except (ValueError, tf.errors.OpError):
    return None
  return state if state is not None and state.model_checkpoint_path else None


def newest_loadable(directory: str, full_read: Optional[bool] = None
                    ) -> Tuple[Optional[str], List[Candidate]]:
  """The newest checkpoint of `directory` that verifies and has finite weights,
  and the newer bad ones (damaged, partial or non-finite).

  Returns:
    (prefix or None, [Candidate] for each newer checkpoint that failed, newest first).
  """
  damaged = []
  for prefix in find_checkpoints(directory):
    try:
      verify_checkpoint(prefix, full_read)
      check_finite_weights(prefix)
    except CheckpointError as e:
      damaged.append(Candidate(prefix, checkpoint_step(prefix), str(e)))
      continue
    return prefix, damaged
  return None, damaged


def describe(damaged: List[Candidate]) -> str:
  return "; ".join(c.error for c in damaged)


def write_state(directory: str, prefixes: List[str]) -> None:
  """Rewrites the `checkpoint` state file to list `prefixes` (oldest first).

  `prefixes` are named as `find_checkpoints` names them. The file gets what
  `tf.train.CheckpointManager` writes: entries relative to `directory`
  (`ckpt-4`) and their files' times (without times the manager would treat them
  as preserved forever and drop them from the list it keeps).
  """
  # TF's writer keeps the paths it is given under an absolute `directory`, and makes
  # them relative itself under any other (relative or remote) one.
  entries = ([os.path.relpath(p, directory) for p in prefixes] if os.path.isabs(directory)
             else list(prefixes))
  times = [max(tf.io.gfile.stat(f).mtime_nsec / 1e9 for f in checkpoint_files(p))
           for p in prefixes]
  tf.compat.v1.train.update_checkpoint_state(
      directory, entries[-1], all_model_checkpoint_paths=entries,
      all_model_checkpoint_timestamps=times, last_preserved_timestamp=min(times) - 1)


def move_aside(prefix: str, directory: str) -> List[str]:
  """Moves the files of checkpoint `prefix` into `directory`; returns their new paths."""
  tf.io.gfile.makedirs(directory)
  moved = []
  for path in checkpoint_files(prefix):
    target = os.path.join(directory, os.path.basename(path))
    tf.io.gfile.rename(path, target, overwrite=True)
    moved.append(target)
  return moved


def repair(directory: str, latest: str, damaged: List[Candidate],
           log: Callable[[str], None]) -> None:
  """Before training resumes from `latest`: moves the `damaged` checkpoints to
  `directory/damaged/` and rewrites a lost, garbled or stale `checkpoint` state file
  to list the checkpoints present up to `latest`."""
  for bad in damaged:
    moved = move_aside(bad.prefix, os.path.join(directory, "damaged"))
    log(f"Moved the {len(moved)} file(s) of damaged checkpoint {os.path.basename(bad.prefix)} "
        f"to {os.path.join(directory, 'damaged')}; training continues from "
        f"{os.path.basename(latest)}.")
  state = read_state(directory)
  named = state and state.model_checkpoint_path
  if damaged or named != latest:
    present = [p for p in find_checkpoints(directory)[::-1]
               if checkpoint_step(p) <= checkpoint_step(latest)]
    write_state(directory, present)
    why = ("has no usable `checkpoint` state file" if state is None else
           f"had a `checkpoint` state file naming {named}")
    log(f"{directory} {why}; rewrote it from the checkpoints present "
        f"({', '.join(os.path.basename(p) for p in present)}).")


def set_aside_all(directory: str, log: Callable[[str], None]) -> None:
  """Moves every checkpoint and the state file to `directory/replaced-<UTC time>/`."""
  found = find_checkpoints(directory)
  if not found:
    return
  target = os.path.join(directory, time.strftime("replaced-%Y%m%d-%H%M%S", time.gmtime()))
  for prefix in found:
    move_aside(prefix, target)
  state = os.path.join(directory, "checkpoint")
  if tf.io.gfile.exists(state):
    tf.io.gfile.rename(state, os.path.join(target, "checkpoint"), overwrite=True)
  log(f"--start_over: moved {len(found)} existing checkpoint(s) to {target}; training starts "
      "from step 0.")


def remove_temp_dirs(directory: str) -> List[str]:
  """Removes the `ckpt-<step>_temp/` directories of interrupted saves; returns their names.

  `tf.train.Checkpoint` writes a checkpoint's shards into `<prefix>_temp/` and
  then renames them into place; a save killed in between leaves the directory,
  which nothing in TF removes. Only the one process writing `directory` may call this.
  """
  found = sorted(p for p in tf.io.gfile.glob(os.path.join(directory, "*-*_temp"))
                 if _TEMP_RE.match(os.path.basename(p)) and tf.io.gfile.isdir(p))
  for path in found:
    tf.io.gfile.rmtree(path)
  return [os.path.basename(p) for p in found]


@contextlib.contextmanager
def undo_failed_save(prefix: str) -> Iterator[None]:
  """Around the save of checkpoint `prefix`: on an exception, removes what the save wrote.

  That is every file of `prefix` (a save that fails while TF renames its shards
  into place leaves some under their final names), its `<prefix>_temp/`
  directory, and a change to the `checkpoint` state file, which gets its old
  content back (or goes, if there was none). The exception propagates; a failure
  of this clean-up (say, the disk still full) does not hide it.
  """
  state_file = os.path.join(os.path.dirname(prefix), "checkpoint")
  before = _read_bytes(state_file)
  try:
    yield
  except BaseException:
    try:
      file_io.remove_quietly(checkpoint_files(prefix))
      if tf.io.gfile.isdir(prefix + "_temp"):
        tf.io.gfile.rmtree(prefix + "_temp")
      if _read_bytes(state_file) != before:
        if before is None:
          file_io.remove_quietly([state_file])
        else:
          with file_io.atomic_open(state_file, "wb") as f:
            f.write(before)
    except (OSError, tf.errors.OpError) as e:
      logging.warning("could not undo the failed save of %s: %s", prefix, e)
    raise


# -- TF's table format (tensorflow/core/lib/io/table*), uncompressed as written by BundleWriter --

def _shard_sizes(index: bytes) -> Tuple[int, Dict[int, int]]:
  """(number of data shards, {shard id: bytes its entries span}) from an index file."""
  if len(index) < _FOOTER_BYTES:
    raise ValueError(f"{len(index)} bytes, shorter than a table footer")
  footer = index[-_FOOTER_BYTES:]
  if struct.unpack("<Q", footer[-8:])[0] != _TABLE_MAGIC:
    raise ValueError("not a TensorFlow table (bad magic number)")
  pos = 0
  for _ in range(2):  # skip the metaindex handle
    _, pos = _varint(footer, pos)
  index_offset, pos = _varint(footer, pos)
  index_size, pos = _varint(footer, pos)
  num_shards, ends = None, {}
  for _, handle in _block_entries(_block(index, index_offset, index_size)):
    offset, p = _varint(handle, 0)
    size, _ = _varint(handle, p)
    for key, value in _block_entries(_block(index, offset, size)):
      if key == b"":
        header = tensor_bundle_pb2.BundleHeaderProto.FromString(value)
        num_shards = header.num_shards
        continue
      entry = tensor_bundle_pb2.BundleEntryProto.FromString(value)
      pieces = [entry] if not entry.slices else []  # sliced entries live in their slices' keys
      for e in pieces:
        ends[e.shard_id] = max(ends.get(e.shard_id, 0), e.offset + e.size)
  if num_shards is None:
    raise ValueError("no bundle header")
  return num_shards, ends


def _block(data: bytes, offset: int, size: int) -> bytes:
  if offset + size + _BLOCK_TRAILER_BYTES > len(data):
    raise ValueError("a block runs past the end of the file")
  if data[offset + size] != 0:
    raise ValueError("compressed block (not written by TF's BundleWriter)")
  return data[offset:offset + size]


def _block_entries(block: bytes):
  num_restarts = struct.unpack("<I", block[-4:])[0]
  limit = len(block) - 4 - 4 * num_restarts
  pos, key = 0, b""
  while pos < limit:
    shared, pos = _varint(block, pos)
    non_shared, pos = _varint(block, pos)
    value_len, pos = _varint(block, pos)
    key = key[:shared] + block[pos:pos + non_shared]
    pos += non_shared
    yield key, block[pos:pos + value_len]
    pos += value_len


def _varint(data: bytes, pos: int) -> Tuple[int, int]:
  result = shift = 0
  while True:
    byte = data[pos]
    pos += 1
    result |= (byte & 0x7F) << shift
    if not byte & 0x80:
      return result, pos
    shift += 7


def _in_directory(directory: str, path: str) -> bool:
  """Whether `path` names a file directly in `directory` (both as the caller spells them)."""
  if _is_remote(path) or _is_remote(directory):
    return os.path.dirname(path).rstrip("/") == directory.rstrip("/")
  return os.path.dirname(os.path.abspath(path)) == os.path.abspath(directory)


def _read_bytes(path: str) -> Optional[bytes]:
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path, "rb") as f:
    return f.read()


def _is_remote(path: str) -> bool:
  return "://" in path


def _first_line(error: Exception) -> str:
  text = getattr(error, "message", None) or str(error)
  return text.strip().splitlines()[0] if text.strip() else type(error).__name__
