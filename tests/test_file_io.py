"""Tests for data_gen/file_io.py: the atomic writer and the line reader."""

import errno
import os
import re
import socket
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_gen import file_io


def _write_bytes(path, data):
  with open(path, "wb") as f:
    f.write(data)
  return str(path)


# -- writer --------------------------------------------------------------------

def test_write_lines_and_text_round_trip(tmp_path):
  path = str(tmp_path / "sub" / "t.txt")  # the parent directory is created
  assert file_io.write_lines(path, ["a", "", "Grüße", "x\ty"]) == 4
  with open(path, "rb") as f:
    assert f.read() == "a\n\nGrüße\nx\ty\n".encode("utf-8")
  assert file_io.read_lines(path) == ["a", "", "Grüße", "x\ty"]
  assert file_io.write_lines(path, []) == 0
  assert os.path.getsize(path) == 0 and file_io.read_lines(path) == []

  file_io.write_text(path, '{\n "a": 1\n}')
  with open(path, encoding="utf-8") as f:
    assert f.read() == '{\n "a": 1\n}'
  with file_io.atomic_open(path, "wb") as f:
    f.write(b"\x00\xff")
  with open(path, "rb") as f:
    assert f.read() == b"\x00\xff"
  assert sorted(os.listdir(tmp_path / "sub")) == ["t.txt"]
  with pytest.raises(ValueError, match="mode must be 'w' or 'wb', got 'a'"):
    with file_io.atomic_open(path, "a"):
      pass


def test_writer_raising_midway_leaves_old_file_and_no_temp(tmp_path):
  path = str(tmp_path / "t.txt")
  file_io.write_lines(path, ["old"])

  def broken():
    yield "new"
    raise RuntimeError("killed")

  with pytest.raises(RuntimeError, match="killed"):
    file_io.write_lines(path, broken())
  assert file_io.read_lines(path) == ["old"]
  assert os.listdir(tmp_path) == ["t.txt"]

  # A path-taking writer: the temp path is where it writes, removed on failure.
  with pytest.raises(KeyError):
    with file_io.atomic_path(path) as tmp:
      assert tmp == "%s.%s-%d.incomplete" % (path, socket.gethostname().replace(".", "_"),
                                            os.getpid())
      _write_bytes(tmp, b"half")
      raise KeyError("x")
  assert file_io.read_lines(path) == ["old"] and os.listdir(tmp_path) == ["t.txt"]


class _FullDisk:
  """A text file whose writes fail with ENOSPC after `room` characters, or
  (room=None) whose final flush in close() fails, as a full disk does."""

  def __init__(self, f, room):
    self.f, self.room = f, room

  def write(self, s):
    if self.room is not None:
      self.room -= len(s)
      if self.room < 0:
        raise OSError(errno.ENOSPC, "No space left on device")
    return self.f.write(s)

  def close(self):
    self.f.close()
    if self.room is None:
      raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("room", [5, None])
def test_full_disk_leaves_no_partial_file(tmp_path, monkeypatch, room):
  path = str(tmp_path / "out.txt")
  real_open = file_io._open
  monkeypatch.setattr(file_io, "_open", lambda p, mode: _FullDisk(real_open(p, mode), room))
  with pytest.raises(OSError) as info:
    file_io.write_lines(path, ["0123456789"] * 3)
  assert info.value.errno == errno.ENOSPC
  assert os.listdir(tmp_path) == []  # neither the final name nor the temp file


@pytest.mark.parametrize("umask,want", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600),
                                        (0o002, 0o664)])
def test_new_file_mode_is_0666_masked_by_umask(tmp_path, umask, want):
  old = os.umask(umask)
  try:
    path = str(tmp_path / ("f%o" % umask))
    file_io.write_text(path, "x")
    with file_io.atomic_open(path + ".bin", "wb") as f:
      f.write(b"x")
    assert file_io.readable_file_mode() == want
  finally:
    os.umask(old)
  assert os.stat(path).st_mode & 0o777 == want
  assert os.stat(path + ".bin").st_mode & 0o777 == want


def test_gfile_paths_round_trip():
  # TensorFlow's in-memory file system stands in for gs:// and friends.
  path = "ram://file_io_test/run/hparams.json"
  file_io.write_text(path, '{"a": 1}\nsecond\r\n')
  assert file_io.read_lines(path) == ['{"a": 1}', "second"]
  assert file_io.write_lines(path, ["x", "y"]) == 2
  assert file_io.read_lines(path) == ["x", "y"]
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  assert tf.io.gfile.listdir("ram://file_io_test/run") == ["hparams.json"]
  with pytest.raises(ValueError, match="does not exist"):
    file_io.read_lines("ram://file_io_test/run/missing")


def test_importing_file_io_does_not_import_tensorflow():
  code = ("import sys; import data_gen.file_io; "
          "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0


# -- reader --------------------------------------------------------------------

@pytest.mark.parametrize("data,lines", [
    (b"", []),
    (b"\n", [""]),
    (b"a", ["a"]),                      # no final newline
    (b"a\n", ["a"]),                    # a final newline starts no line
    (b"a\n\nb\n\n", ["a", "", "b", ""]),
    (b"a\r\nb\r\n", ["a", "b"]),        # CRLF is one terminator
    (b"a\r\r\nb", ["a\r", "b"]),        # only the terminator goes
    (b"a\rb\n", ["a\rb"]),              # a lone CR ends no line
    (b"  a \t\n", ["  a \t"]),          # white space is kept
    ("x\u2028y\x85z\x0cw\n".encode("utf-8"), ["x\u2028y\x85z\x0cw"]),  # as `wc -l`
])
def test_read_lines_splits_only_at_newline(tmp_path, data, lines):
  path = _write_bytes(tmp_path / "f", data)
  assert file_io.read_lines(path) == lines
  assert len(lines) == data.count(b"\n") + (not data.endswith(b"\n") and bool(data))


def test_read_lines_with_a_delimiter(tmp_path):
  path = _write_bytes(tmp_path / "f", b"ab c;d\nef;g h\n")
  assert file_io.read_lines(path, ";") == ["ab c", "d\nef", "g h\n"]
  path = _write_bytes(tmp_path / "g", b"a ||| b\r ||| ")
  assert file_io.read_lines(path, " ||| ") == ["a", "b\r"]  # CR is kept: not a newline
  with pytest.raises(ValueError, match="delimiter must not be empty"):
    file_io.read_lines(path, "")


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)
                      .filter(lambda s: "\n" not in s and not s.endswith("\r")), max_size=8),
       delimiter=st.sampled_from(["\n", ";", "é|"]),
       chunk=st.integers(1, 7))
def test_chunked_reading_equals_splitting_the_whole_file(tmp_path_factory, lines, delimiter,
                                                         chunk):
  """Records split across read chunks (multi-byte characters, CRLF, a
  multi-character delimiter) come out as a split of the whole text."""
  path = str(tmp_path_factory.mktemp("chunks") / "f")
  text = "".join(line + ("\r\n" if delimiter == "\n" and i % 2 else delimiter)
                 for i, line in enumerate(lines))
  _write_bytes(path, text.encode("utf-8"))
  if delimiter == "\n":
    want = list(lines)
  else:  # the lines may hold the delimiter themselves
    want = text.split(delimiter)
    if want and want[-1] == "":
      want.pop()
  saved, file_io._CHUNK_BYTES = file_io._CHUNK_BYTES, chunk
  try:
    got = file_io.read_lines(path, delimiter)
  finally:
    file_io._CHUNK_BYTES = saved
  assert got == want


def test_bad_utf8_names_file_and_line(tmp_path):
  path = _write_bytes(tmp_path / "bad.txt", b"fine\nok\nbad \xff byte\nnever read\n")
  lines = file_io.iter_lines(path, name="source")
  assert next(lines) == "fine" and next(lines) == "ok"  # streams up to the bad line
  with pytest.raises(ValueError) as info:
    next(lines)
  message = str(info.value)
  assert message.startswith(f"{path}:3: invalid UTF-8 (invalid start byte at byte 4)")
  assert re.search(r"source '%s' line 3 is not valid UTF-8" % re.escape(path), message)
  # A multi-byte character cut by the end of its line, numbered past a CRLF line.
  path = _write_bytes(tmp_path / "cut.txt", b"a\r\n\xc3\n")
  with pytest.raises(ValueError, match=re.escape(f"{path}:2: invalid UTF-8")):
    file_io.read_lines(path)


def test_missing_file_or_directory(tmp_path):
  for path in (str(tmp_path / "missing"), str(tmp_path)):
    with pytest.raises(ValueError, match=r"reference '%s' does not exist or is not a file"
                       % re.escape(path)):
      file_io.read_lines(path, name="reference")


def test_read_aligned_lines(tmp_path):
  hyp = _write_bytes(tmp_path / "hyp", b"a\nb\n")
  ref = _write_bytes(tmp_path / "ref", b"A\r\nB")
  assert file_io.read_aligned_lines(hyp, ref) == (["a", "b"], ["A", "B"])
  short = _write_bytes(tmp_path / "short", b"A\n")
  with pytest.raises(ValueError) as info:
    file_io.read_aligned_lines(hyp, short, ("translation file", "reference file"))
  assert str(info.value).startswith(
      f"translation file {hyp} has 2 lines but reference file {short} has 1; "
      "line 2 has no partner.")
