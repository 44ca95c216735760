"""The one atomic file writer and the one text line reader (no TensorFlow import).

Writing: a file (`atomic_open`, `atomic_path`, `atomic_paths`) or a directory
(`atomic_directory`) is written under a temporary name beside it, and renamed to
its final name only once it is complete and closed; on any error (a full disk
included, even when only the final flush fails) the temporary is removed and
the old `path`, if any, is unchanged. So a reader never sees a half-written
file. Every temporary is named by one rule, `temp_path`:
`<path>.<host>-<pid>.incomplete`. Readers skip such names (`is_temporary`), and
the leftovers of a killed writer are told from a live writer's by that host and
pid (`abandoned`). A new file gets mode `0o666 & ~umask`, as `open()` gives.

What the final path names decides how it is written (`output_file`,
`output_directory`), before anything is: a character or block device or a FIFO
(`/dev/null`, `/dev/stdout`, a named pipe) is opened and written in place, with no
temporary and no rename, as a shell redirection would; a symbolic link is followed
and its final target written as above, so the link stays; a directory given for
a file (or a file for a directory) raises `OutputPathError`, one line naming it.

Reading: UTF-8 text split at a delimiter (default a newline, where `\\r\\n`
counts as one terminator); only the terminator is removed, and a final
terminator does not start another line. Invalid UTF-8 raises a `ValueError`
that names the file and the line.

Paths with a scheme (`gs://bucket/run/hparams.json`) go through `tf.io.gfile`,
imported only then; there the rename is as atomic as the file system makes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import socket
import stat
import time
from typing import IO, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

# Suffix of files being written; never matched by a shard file pattern.
TMP_SUFFIX = ".incomplete"
_CHUNK_BYTES = 1 << 20
# `<path>.<host>-<pid>.incomplete`, or `<path>.<pid>.incomplete` (older versions).
# The host has no "." (see `_host`), so the match starts at the right dot.
_OWNED = re.compile(r"\.(?:([^./]+)-)?([0-9]+)%s$" % re.escape(TMP_SUFFIX))
# Temporary names older versions wrote (export and import directories, vocabs).
_OLD_EXPORT = re.compile(r"\.tmp-export-(?:(.+)-)?([0-9]+)")
_OLD_IMPORT = re.compile(r".+\.tmp-import-([0-9]+)")
_OLD_ORPHANS = re.compile(r"\.tmp_vocab_.*|.*%s" % re.escape(TMP_SUFFIX))
# What readers skip: the names above, and any other temp-looking name.
_TEMPORARY = re.compile(r"(%s|\.tmp[-_][^/]*)$|^\.tmp" % re.escape(TMP_SUFFIX))


class OutputPathError(ValueError):
  """An output path that names something other than what is to be written there (a
  directory for a file, a file for a directory, a socket, a link into a missing
  directory). Its message is one line naming the path; the commands print it and
  exit with status 2."""


def _host() -> str:
  """This host's name as temporary names hold it (dots made "_": see `_OWNED`)."""
  return socket.gethostname().replace(".", "_").replace("/", "_") or "localhost"


def temp_path(path: str) -> str:
  """`<path>.<host>-<pid>.incomplete`: where this process writes `path` before renaming it."""
  return "%s.%s-%d%s" % (path, _host(), os.getpid(), TMP_SUFFIX)


def is_temporary(path: str) -> bool:
  """True for a name that a writer has not finished (`temp_path`'s, or an older
  version's temporary): readers never take it for data."""
  return bool(_TEMPORARY.search(os.path.basename(path)))


def _owner(name: str) -> Optional[Tuple[Optional[str], int]]:
  """(host or None, pid) that a temporary `name` records, else None."""
  for pattern in (_OWNED, _OLD_EXPORT):
    match = pattern.search(name) if pattern is _OWNED else pattern.fullmatch(name)
    if match:
      return match.group(1), int(match.group(2))
  match = _OLD_IMPORT.fullmatch(name)
  return (None, int(match.group(1))) if match else None


def _process_running(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # someone else's process
  return True


def abandoned(path: str, max_age_secs: float) -> bool:
  """True for a local temporary whose writer is gone, so that it can be removed.

  That is a temporary name (`temp_path`'s, or an older version's) that was last
  modified over `max_age_secs` ago, or that names this host (or no host) and a
  process id that is not running, or this process (which is not writing it
  while it cleans up). A name with no owner is abandoned only if an older
  version wrote it (`*.incomplete`, `.tmp_vocab_*`); other names never are.
  """
  name = os.path.basename(path)
  owner = _owner(name)
  if owner is None:
    return bool(_OLD_ORPHANS.fullmatch(name))
  try:
    if time.time() - os.stat(path).st_mtime > max_age_secs:
      return True
  except FileNotFoundError:
    return False
  host, pid = owner
  if host not in (None, _host(), socket.gethostname()):
    return False  # its process cannot be checked from here
  return pid == os.getpid() or not _process_running(pid)


def remove_abandoned(directory: str, max_age_secs: float) -> List[str]:
  """Removes the `abandoned` temporaries (files or directories) in `directory`; returns them."""
  removed = []
  for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
    path = os.path.join(directory, name)
    if is_temporary(path) and abandoned(path, max_age_secs):
      if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
      else:
        remove_quietly([path])
      removed.append(path)
  return removed


def current_umask() -> int:
  """The process umask (from /proc on Linux, else by setting and restoring it)."""
  try:
    with open("/proc/self/status", encoding="ascii") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except OSError:
    pass
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def readable_file_mode() -> int:
  """`0o666 & ~umask`: the mode `open()` gives a new file (0644 with umask 022)."""
  return 0o666 & ~current_umask()


def make_tree_readable(root: str) -> None:
  """chmod every file under `root` to 0o666 & ~umask and every directory to 0o777 &
  ~umask (files written through mkstemp, and directories made by mkdtemp, are private)."""
  file_mode = readable_file_mode()
  dir_mode = file_mode | ((file_mode & 0o444) >> 2)  # x wherever r
  os.chmod(root, dir_mode)
  for directory, dirs, files in os.walk(root):
    for name in dirs:
      os.chmod(os.path.join(directory, name), dir_mode)
    for name in files:
      os.chmod(os.path.join(directory, name), file_mode)


def _is_remote(path: str) -> bool:
  return "://" in path


def _gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.gfile


def _open(path: str, mode: str) -> IO:
  """`open()` for local paths, `tf.io.gfile.GFile` for `scheme://` paths."""
  if _is_remote(path):
    return _gfile().GFile(path, mode)
  if "b" in mode:
    return open(path, mode)
  return open(path, mode, encoding="utf-8", newline="\n")


def remove_quietly(paths: Iterable[str]) -> None:
  """Removes files; never raises (used in clean-up, e.g. on a full disk)."""
  for path in paths:
    try:
      if _is_remote(path):
        if _gfile().exists(path):
          _gfile().remove(path)
      else:
        os.remove(path)
    except FileNotFoundError:
      pass
    except Exception as e:  # pylint: disable=broad-except
      logging.warning("could not remove %s: %s", path, e)


def _follow(path: str) -> Tuple[Optional[int], str]:
  """(st_mode of what local `path` names, links followed, or None if nothing; the
  path to write it at: a link's final target, else `path`)."""
  try:
    mode = os.stat(path).st_mode
  except (FileNotFoundError, NotADirectoryError):
    mode = None  # new; a missing parent is made, a file as parent fails, as before
  if not os.path.islink(path):
    return mode, path
  target = os.path.realpath(path)
  if mode is None and not os.path.isdir(os.path.dirname(target)):
    # Making directories elsewhere than the named path's parent would surprise.
    raise OutputPathError(f"{path} is a symbolic link to {target}, whose directory does "
                          "not exist; create that directory or give another path")
  return mode, target


def output_file(path: str) -> Tuple[str, bool]:
  """Where writing the file `path` goes: (the path to write, whether in place).

  A character or block device or a FIFO: (`path`, True), to open and write as it
  is (renaming a file over it would remove the device node, or leave the pipe's
  reader waiting). A symbolic link: (its final target, False), created if missing
  and its directory exists. Otherwise, or for `scheme://` paths: (`path`, False).

  Raises:
    OutputPathError: `path` is a directory or a socket, or a link whose target's
      directory does not exist.
  """
  if _is_remote(path):
    return path, False
  mode, target = _follow(path)
  if mode is None or stat.S_ISREG(mode):
    return target, False
  if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode):
    return path, True  # opened through the link, if any: /dev/stdout -> /proc/self/fd/1
  what = "a directory" if stat.S_ISDIR(mode) else "not a file (a socket?)"
  raise OutputPathError(f"{path} is {what}; give the path of a file to write")


def output_directory(path: str) -> str:
  """Where writing the local directory `path` goes: a symbolic link's final target
  (so that the link stays, as for files), else `path`.

  Raises:
    OutputPathError: `path` exists and is not a directory, or is a link whose
      target's directory does not exist.
  """
  mode, target = _follow(path)
  if mode is not None and not stat.S_ISDIR(mode):
    raise OutputPathError(f"{path} is not a directory; give the path of a directory to write")
  return target


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
  """Yields a temporary path to write `path` at; renames it over `path` on success.

  For writers that take a path (e.g. `tf.io.TFRecordWriter`): they must be
  closed inside the `with` block. On an exception the temporary file is removed
  and the exception propagates. The parent directory is created if needed.
  A device or FIFO is yielded itself and written in place; a symbolic link's
  target is written (see `output_file`).

  Raises:
    OutputPathError: as `output_file`, before the `with` block runs.
  """
  target, in_place = output_file(path)
  if in_place:
    yield path
    return
  tmp = temp_path(target)
  directory = os.path.dirname(target)
  if directory:
    if _is_remote(target):
      _gfile().makedirs(directory)
    else:
      os.makedirs(directory, exist_ok=True)
  try:
    yield tmp
    if _is_remote(target):
      _gfile().rename(tmp, target, overwrite=True)
    else:
      os.replace(tmp, target)
  except BaseException:
    remove_quietly([tmp])
    raise


@contextlib.contextmanager
def atomic_paths(paths: Sequence[str]) -> Iterator[List[str]]:
  """`atomic_path` for several local files that appear together (e.g. the shards of a split).

  Yields their temporary paths, in order (a device or FIFO: itself, written in
  place); once the `with` block ends, each is renamed to its path, or its link's
  target (writers must be closed by then). On an exception all temporary files
  are removed and the exception propagates.

  Raises:
    OutputPathError: as `output_file`, for any of `paths`, before the `with` block runs.
  """
  targets = [output_file(p) for p in paths]
  tmps = [p if in_place else temp_path(t) for p, (t, in_place) in zip(paths, targets)]
  renamed = [(tmp, t) for tmp, (t, in_place) in zip(tmps, targets) if not in_place]
  try:
    yield tmps
    for tmp, target in renamed:
      os.replace(tmp, target)
  except BaseException:
    remove_quietly([tmp for tmp, _ in renamed])  # never a device or FIFO
    raise


@dataclasses.dataclass
class DirectoryWrite:
  """What `atomic_directory` yields: write into `tmp`; `path` is where it lands."""
  tmp: str
  path: str


@contextlib.contextmanager
def atomic_directory(path: str,
                     next_free: Optional[Callable[[], str]] = None) -> Iterator[DirectoryWrite]:
  """A new local directory written under `temp_path(path)` and renamed when complete.

  The yielded `DirectoryWrite.tmp` exists and is empty (a leftover of this
  process under that name is removed first). When the `with` block ends, `tmp`
  is renamed to `path`, which must not exist or be an empty directory. On an
  exception `tmp` is removed and the exception propagates.

  A `path` that is a symbolic link is followed: the temporary is made beside
  its final target and renamed over it (an empty directory, or a missing one in
  an existing directory), so the link stays and still names the result, as for
  files (`output_file`); `DirectoryWrite.path` stays `path`.

  Args:
    path: the directory to write.
    next_free: for a directory whose name is picked at the rename (a new export
      version): returns the path to rename to, and is called again while
      another writer takes that name first. `path` then only names the
      temporary; the name chosen is in `DirectoryWrite.path` afterwards.

  Raises:
    OutputPathError: `path` is not a directory (a file, a device, ...), or a
      link whose target's directory is missing: before the `with` block runs.
    OSError: `path` exists and is not an empty directory (without `next_free`).
  """
  final = path if next_free else output_directory(path)
  write = DirectoryWrite(temp_path(final), path)
  shutil.rmtree(write.tmp, ignore_errors=True)
  try:
    os.makedirs(write.tmp)
    yield write
    while True:
      target = next_free() if next_free else final
      try:
        os.rename(write.tmp, target)  # fails if target is a non-empty directory
      except OSError:
        if next_free is None or not os.path.exists(target):
          raise
        continue  # another writer took that name
      write.path = target if next_free else path  # a link's name, not its target
      break
  except BaseException:
    shutil.rmtree(write.tmp, ignore_errors=True)
    raise


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w") -> Iterator[IO]:
  """A file object (text UTF-8 with "\\n" newlines, or binary) that becomes `path` on success.

  Args:
    path: the final path (local or `scheme://`).
    mode: "w" (text) or "wb" (bytes).

  Raises:
    ValueError: another `mode`.
  """
  if mode not in ("w", "wb"):
    raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
  with atomic_path(path) as tmp:
    f = _open(tmp, mode)
    try:
      yield f
    except BaseException:
      try:
        f.close()
      except Exception:  # pylint: disable=broad-except
        pass  # the original error matters; a full disk also fails the flush
      raise
    f.close()  # a failed final flush (full disk) raises here: the temp file goes


def write_text(path: str, text: str) -> None:
  """Writes `text` to `path` atomically (e.g. a JSON document)."""
  with atomic_open(path) as f:
    f.write(text)


def write_lines(path: str, lines: Iterable[str]) -> int:
  """Writes `lines`, each followed by "\\n", to `path` atomically; returns their count."""
  count = 0
  with atomic_open(path) as f:
    for line in lines:
      f.write(line)
      f.write("\n")
      count += 1
  return count


def _records(f: IO, delimiter: bytes) -> Iterator[bytes]:
  """Raw records of a binary file split at `delimiter` (a final empty one dropped)."""
  tail = b""
  while True:
    chunk = f.read(_CHUNK_BYTES)
    if not chunk:
      break
    parts = (tail + chunk).split(delimiter)
    tail = parts.pop()
    yield from parts
  if tail:
    yield tail


def iter_lines(path: str, delimiter: str = "\n", name: str = "file") -> Iterator[str]:
  """Yields the lines of a UTF-8 text file, without their terminators.

  Lines are read in chunks, so a file of any size streams. Number them with
  `enumerate(iter_lines(path), start=1)`.

  Args:
    path: a local or `scheme://` path.
    delimiter: what ends a line; with "\\n", a "\\r" before it is part of the
      terminator. Nothing else is stripped: "\\r" alone, U+2028 or form feeds
      stay inside lines, so line counts match `wc -l` and aligned files stay aligned.
    name: what the file is, for error messages ("source", "reference", ...).

  Raises:
    ValueError: `path` is not a file; a line is not valid UTF-8 (naming the file
      and the 1-based line); `delimiter` is empty.
  """
  if not delimiter:
    raise ValueError(f"delimiter must not be empty, got {delimiter!r}")
  remote = _is_remote(path)
  if not (_gfile().exists(path) and not _gfile().isdir(path) if remote
          else os.path.isfile(path)):
    raise ValueError("%s %r does not exist or is not a file" % (name, path))
  with _open(path, "rb") as f:
    yield from iter_stream_lines(f, delimiter, name, path)


def iter_stream_lines(f: IO, delimiter: str = "\n", name: str = "file",
                      label: str = "<stdin>") -> Iterator[str]:
  """Yields the lines of an open binary stream (a file, a pipe, stdin) as `iter_lines`.

  Args:
    f: a binary file object, read to its end.
    delimiter, name: as `iter_lines`.
    label: the stream's name in error messages (its path, or "<stdin>").

  Raises:
    ValueError: a line is not valid UTF-8 (naming `label` and the 1-based line);
      `delimiter` is empty.
  """
  if not delimiter:
    raise ValueError(f"delimiter must not be empty, got {delimiter!r}")
  crlf = delimiter == "\n"
  for number, raw in enumerate(_records(f, delimiter.encode("utf-8")), start=1):
    if crlf and raw.endswith(b"\r"):
      raw = raw[:-1]
    try:
      line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
      # Both the `path:line:` form editors jump to and the file's role.
      raise ValueError(
          "%s:%d: invalid UTF-8 (%s at byte %d); %s %r line %d is not valid UTF-8: "
          "re-encode it as UTF-8, e.g. with iconv"
          % (label, number, e.reason, e.start, name, label, number)) from None
    yield line


def read_lines(path: str, delimiter: str = "\n", name: str = "file") -> list[str]:
  """All lines of a UTF-8 text file as a list; see `iter_lines`."""
  return list(iter_lines(path, delimiter, name))


def read_aligned_lines(path_a: str, path_b: str,
                       names: tuple[str, str] = ("file", "file")) -> tuple[list[str], list[str]]:
  """The lines of two files that pair up line by line (e.g. translation and reference).

  Raises:
    ValueError: as `iter_lines`, or the files have different line counts
      (both named, with the first line that has no partner).
  """
  a, b = read_lines(path_a, name=names[0]), read_lines(path_b, name=names[1])
  if len(a) != len(b):
    raise ValueError(
        f"{names[0]} {path_a} has {len(a)} lines but {names[1]} {path_b} has {len(b)}; "
        f"line {min(len(a), len(b)) + 1} has no partner. Both need one item per line, "
        "in the same order.")
  return a, b
