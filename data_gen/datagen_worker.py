"""What a datagen worker process runs, free of TensorFlow (so a worker starts in a blink).

Datagen's main process reads samples and hands them in chunks to workers
(`data_gen/parallel.py`); a worker encodes them, appends EOS, checks the ids
(`check_ids`) and serialises each to `tf.train.Example` bytes (`serialize_example`,
byte for byte what `tf.train.Example.SerializeToString(deterministic=True)`
gives), or shuffles one unshuffled shard into its final shard
(`shuffle_shard_file`: the TFRecord frames are permuted whole, so their CRCs are
reused and no TensorFlow is needed). The main process runs the same task
functions itself with one worker, so any number of workers writes the same bytes.

A worker is `python -c ... worker_main()` with the tasks on stdin and the
results on a pipe of its own (stdout stays the command's, for the test hooks'
lines). Each message is an 8-byte little-endian length and a pickle. A worker
ignores Ctrl-C (the main process stops it), and dies with its parent on Linux.
"""

import errno
import os
import pickle
import queue
import random
import signal
import struct
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from data_gen import file_io

EOS_ID = 1  # text_encoder.EOS_ID; not imported, so the worker stays light
# Test hooks (tests/test_faults_datagen.py): writing the shard with this base name
# pauses after its first record, or fails with a full disk after it.
PAUSE_ENV = "T2T_KERAS_TEST_PAUSE_WRITING"
FULL_DISK_ENV = "T2T_KERAS_TEST_FULL_DISK"
_HEADER = struct.Struct("<Q")


# ---- tf.train.Example bytes ----------------------------------------------------------
def _varint(value: int) -> bytes:
  if value < 0:
    value += 1 << 64  # int64 as protobuf writes it: ten bytes
  out = bytearray()
  while value >= 0x80:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


_SMALL = [_varint(i) for i in range(1 << 14)]  # ids of any usual vocabulary: 1-2 bytes
_KEYS: Dict[str, bytes] = {}  # feature name -> its map entry's key field


def _sized(payload: bytes) -> bytes:
  """`payload` after its length (a varint), as a length-delimited field's value."""
  size = len(payload)
  return (_SMALL[size] if size < len(_SMALL) else _varint(size)) + payload


def serialize_example(features: Dict[str, Sequence[int]]) -> bytes:
  """`tf.train.Example` bytes with one int64 list feature per key (deterministic: keys sorted).

  Raises:
    ValueError: a value that is not a Python int (as `generator_utils.to_example`).
  """
  entries = []
  for key in sorted(features, key=lambda k: k.encode("utf-8")):
    values = list(features[key])
    if not set(map(type, values)) <= {int}:  # bool and numpy ints refused, as to_example does
      raise ValueError("feature %r must hold Python ints, got %r" % (key, values[:10]))
    if values and 0 <= min(values) and max(values) < len(_SMALL):
      packed = b"".join(map(_SMALL.__getitem__, values))
    else:
      packed = b"".join(map(_varint, values))
    int64_list = b"\x0a" + _sized(packed) if packed else b""  # Int64List.value, packed
    if key not in _KEYS:
      _KEYS[key] = b"\x0a" + _sized(key.encode("utf-8"))  # the map entry's key
    feature = b"\x1a" + _sized(int64_list)  # Feature.int64_list
    entries.append(b"\x0a" + _sized(_KEYS[key] + b"\x12" + _sized(feature)))  # Features.feature
  return b"\x0a" + _sized(b"".join(entries))  # Example.features


def check_ids(example: Dict[str, Sequence[int]], vocab_sizes: Dict[str, int],
              number: int, stage: str = "") -> None:
  """Raises ValueError unless every id of each feature in `vocab_sizes` is in [0, size).

  An id outside the vocabulary would only fail in the trainer's embedding lookup.
  """
  for key, size in vocab_sizes.items():
    ids = example.get(key)
    if ids and (max(ids) >= size or min(ids) < 0):
      bad = next(i for i in ids if not 0 <= i < size)
      raise ValueError("example %d%s: feature %r holds id %d, outside its vocabulary of %d ids "
                       "(0..%d); the problem's encoder or generate_encoded_samples must give ids "
                       "of the data_dir's vocabulary" % (number, " of " + stage if stage else "",
                                                          key, bad, size, size - 1))


# ---- TFRecord frames -----------------------------------------------------------------
def read_frames(path: str) -> List[bytes]:
  """The whole frames (length, its CRC, data, its CRC) of an uncompressed TFRecord file.

  Raises:
    ValueError: naming the file if it ends inside a record.
  """
  with open(path, "rb") as f:
    data = f.read()
  frames, pos = [], 0
  while pos < len(data):
    end = pos + 16 + (_HEADER.unpack_from(data, pos)[0] if pos + 12 <= len(data) else len(data))
    if end > len(data):
      raise ValueError("%s is truncated inside record %d" % (path, len(frames) + 1))
    frames.append(data[pos:end])
    pos = end
  return frames


def _test_hooks(path: str, f) -> None:
  name = os.path.basename(path)
  if os.environ.get(FULL_DISK_ENV) == name:
    raise OSError(errno.ENOSPC, "No space left on device")
  if os.environ.get(PAUSE_ENV) == name:
    f.flush()
    print("T2T_KERAS_TEST_PAUSED %s" % path, flush=True)
    time.sleep(600)


def shuffle_shard_file(src: str, dst: str, seed: int) -> int:
  """Writes `src`'s records to `dst` (atomically) shuffled by `random.Random(seed)`, removes
  `src`; returns the record count. Holds one shard in memory: about twice its bytes at peak.

  The permutation is the one `random.Random(seed).shuffle` gives a list of the records,
  as generator_utils' earlier TensorFlow reader and writer did, so the bytes are the same.
  """
  frames = read_frames(src)
  random.Random(seed).shuffle(frames)
  with file_io.atomic_open(dst, "wb") as f:
    for number, frame in enumerate(frames):
      f.write(frame)
      if number == 0:
        _test_hooks(dst, f)
  os.remove(src)
  return len(frames)


# ---- tasks ---------------------------------------------------------------------------
class TaskRunner:
  """Runs tasks with the split's encoders: in a worker process, or in the main one."""

  def __init__(self, encoders: Dict[str, Any], features: Sequence[str],
               vocab_sizes: Dict[str, int]):
    self.encoders, self.features, self.vocab_sizes = encoders, tuple(features), vocab_sizes

  def run(self, task: Tuple) -> Any:
    """("encode", first example number, stage, [texts per feature, ...]) -> [record bytes];
    ("serialize", first number, stage, [example dict, ...]) -> [record bytes];
    ("shuffle", src, dst, seed) -> record count."""
    kind = task[0]
    if kind == "shuffle":
      return shuffle_shard_file(*task[1:])
    _, first, stage, items = task
    records = []
    for offset, item in enumerate(items):
      if kind == "encode":
        item = {k: self.encoders[k].encode(text) + [EOS_ID]
                for k, text in zip(self.features, item)}
      check_ids(item, self.vocab_sizes, first + offset, stage)
      records.append(serialize_example(item))
    return records


# ---- the worker process --------------------------------------------------------------
def read_message(f) -> Optional[bytes]:
  """One message's payload, or None at the end of the pipe (a short one included)."""
  header = f.read(_HEADER.size)
  if len(header) < _HEADER.size:
    return None
  size = _HEADER.unpack(header)[0]
  payload = f.read(size)
  return payload if len(payload) == size else None


def write_message(f, payload: bytes) -> None:
  f.write(_HEADER.pack(len(payload)) + payload)
  f.flush()


def _die_with_parent(parent: int) -> None:
  """Linux: SIGKILL this worker when its parent dies (a SIGKILLed datagen leaves no orphans)."""
  try:
    import ctypes  # pylint: disable=g-import-not-at-top  (Linux only, best effort)
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass
  if os.getppid() != parent:
    os._exit(1)  # the parent died before prctl


def worker_main() -> None:
  """The loop of a worker: `argv` is (result fd, parent pid)."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  result_fd, parent = int(sys.argv[1]), int(sys.argv[2])
  _die_with_parent(parent)
  out = os.fdopen(result_fd, "wb")
  tasks: "queue.Queue[Optional[bytes]]" = queue.Queue()

  def reader():  # drains stdin, so the main process never blocks sending
    while True:
      message = read_message(sys.stdin.buffer)
      tasks.put(message)
      if message is None:
        return

  threading.Thread(target=reader, daemon=True).start()
  runner = None
  while True:
    message = tasks.get()
    if message is None:
      return
    try:
      task = pickle.loads(message)
      if task[0] == "init":
        sys.path[:] = task[1]  # the main process's, so user encoder classes import
        runner = TaskRunner(*pickle.loads(task[2]))
        continue
      reply = ("ok", runner.run(task))
    except Exception as e:  # pylint: disable=broad-except
      reply = ("error", _picklable(e))
    try:
      write_message(out, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError:
      return  # the main process is gone


def _picklable(e: Exception) -> Exception:
  """`e` if it survives pickling, else a RuntimeError with its message."""
  try:
    pickle.loads(pickle.dumps(e))
    return e
  except Exception:  # pylint: disable=broad-except
    return RuntimeError("%s: %s" % (type(e).__name__, e))
