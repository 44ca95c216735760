"""Output paths that are not plain files: one rule in `file_io`, kept by every writer.

A character or block device or a FIFO is written in place (no temporary, no
rename); a symbolic link is followed and its target written atomically (the link
stays); a directory given for a file is refused in one line before anything is
written. Device nodes are made with mknod in a temporary directory, with the
numbers of /dev/null (1, 3) and /dev/full (1, 7): no system device is written.
"""

import errno
import os
import socket
import stat
import subprocess
import sys
import threading

import pytest
import tensorflow as tf

from data_gen import file_io
from t2t_keras import errors
from t2t_keras.rundir import model_factory, settings
from tests.support.cli import run_cli_output
from tests.support.tiny_problem import make_tiny_problem

LINES = ["der Hund", "", "Haus und Katze", "rot"]
TEXT = "".join(line + "\n" for line in LINES)
NULL, FULL = (1, 3), (1, 7)  # the device numbers of /dev/null and /dev/full


def _node(path, numbers):
  """A character device node at `path` with `numbers`, or a skip if this user cannot make one."""
  try:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*numbers))
  except PermissionError as e:
    pytest.skip(f"mknod needs root (or CAP_MKNOD): {e}")
  return path


def _is_node(path, numbers):
  info = os.lstat(path)
  return stat.S_ISCHR(info.st_mode) and (os.major(info.st_rdev), os.minor(info.st_rdev)) == numbers


class _FifoReader:
  """Reads a FIFO to its end in a thread; what it read is in `data` once `join` returns."""

  def __init__(self, path):
    # Holding a write end lets the thread's open return at once and keeps the reader
    # attached to this FIFO, even if a writer renames another file over its name.
    self._hold = os.open(path, os.O_RDWR)
    self.data = None
    opened = threading.Event()

    def read():
      with open(path, "rb") as f:
        opened.set()
        self.data = f.read()

    self._thread = threading.Thread(target=read, daemon=True)
    self._thread.start()
    assert opened.wait(10)

  def join(self):
    os.close(self._hold)  # the reader's end of file, once the writer has closed too
    self._thread.join(10)
    assert not self._thread.is_alive()
    return self.data


def _consumed(lines, seen):
  for line in lines:
    seen.append(line)
    yield line


# -- file_io ---------------------------------------------------------------------------------


def test_write_lines_to_a_fifo_reaches_its_reader(tmp_path):
  fifo = str(tmp_path / "out.fifo")
  os.mkfifo(fifo)
  reader = _FifoReader(fifo)
  assert file_io.write_lines(fifo, LINES) == len(LINES)
  assert reader.join() == TEXT.encode("utf-8")
  assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
  assert os.listdir(tmp_path) == ["out.fifo"]


def test_write_lines_to_a_symlink_writes_its_target_and_keeps_the_link(tmp_path):
  (tmp_path / "real").mkdir()
  (tmp_path / "links").mkdir()
  target = tmp_path / "real" / "out.txt"
  target.write_text("old\n", encoding="utf-8")
  link = tmp_path / "links" / "out.txt"
  os.symlink(os.path.join("..", "real", "out.txt"), link)  # relative, as `ln -s` makes them
  assert file_io.write_lines(str(link), LINES) == len(LINES)
  assert os.path.islink(link) and os.readlink(link) == os.path.join("..", "real", "out.txt")
  assert target.read_text(encoding="utf-8") == TEXT
  assert os.listdir(tmp_path / "real") == ["out.txt"]  # no temporary beside the target
  assert os.listdir(tmp_path / "links") == ["out.txt"]  # nor beside the link


def test_write_text_to_a_dangling_symlink_creates_its_target(tmp_path):
  link = tmp_path / "out.txt"
  os.symlink(tmp_path / "new.txt", link)
  file_io.write_text(str(link), TEXT)
  assert os.path.islink(link) and (tmp_path / "new.txt").read_text(encoding="utf-8") == TEXT
  assert sorted(os.listdir(tmp_path)) == ["new.txt", "out.txt"]
  # A target whose directory does not exist: refused in one line, nothing made.
  os.symlink(tmp_path / "missing" / "new.txt", tmp_path / "nowhere.txt")
  with pytest.raises(file_io.OutputPathError, match=r"^[^\n]*nowhere\.txt[^\n]*missing"):
    file_io.write_text(str(tmp_path / "nowhere.txt"), TEXT)
  assert sorted(os.listdir(tmp_path)) == ["new.txt", "nowhere.txt", "out.txt"]


def test_write_lines_to_a_null_device_node_keeps_the_node(tmp_path):
  node = _node(str(tmp_path / "null"), NULL)
  assert file_io.write_lines(node, LINES) == len(LINES)
  with file_io.atomic_open(node, "wb") as f:
    f.write(b"bytes too")
  assert _is_node(node, NULL)
  assert os.listdir(tmp_path) == ["null"]


def test_writing_a_full_device_node_fails_as_a_full_disk(tmp_path):
  node = _node(str(tmp_path / "full"), FULL)
  with pytest.raises(OSError) as raised:
    file_io.write_lines(node, LINES)
  assert raised.value.errno == errno.ENOSPC and errors.is_storage_error(raised.value)
  assert _is_node(node, FULL)
  assert os.listdir(tmp_path) == ["full"]


@pytest.mark.parametrize("write", [
    lambda path, lines: file_io.write_lines(path, lines),
    lambda path, lines: file_io.write_text(path, "text"),
    lambda path, lines: file_io.atomic_paths([path + "-0", path]).__enter__(),
], ids=["write_lines", "write_text", "atomic_paths"])
def test_a_directory_is_refused_in_one_line_before_anything_is_written(tmp_path, write):
  directory = tmp_path / "out"
  (directory / "inside").mkdir(parents=True)
  seen = []
  with pytest.raises(file_io.OutputPathError) as raised:
    write(str(directory), _consumed(LINES, seen))
  message = str(raised.value)
  assert "\n" not in message and str(directory) in message and "is a directory" in message
  assert seen == []  # refused before the first line was asked for
  assert sorted(os.listdir(tmp_path)) == ["out"] and os.listdir(directory) == ["inside"]


def test_atomic_paths_writes_devices_in_place_and_links_through(tmp_path):
  node = _node(str(tmp_path / "null"), NULL)
  (tmp_path / "real").write_text("old\n", encoding="utf-8")
  os.symlink("real", tmp_path / "link")
  paths = [str(tmp_path / "plain"), node, str(tmp_path / "link")]
  with file_io.atomic_paths(paths) as tmps:
    assert tmps[1] == node
    for tmp in tmps:
      with open(tmp, "w", encoding="utf-8") as f:
        f.write(TEXT)
  assert _is_node(node, NULL) and os.path.islink(tmp_path / "link")
  assert (tmp_path / "real").read_text(encoding="utf-8") == TEXT
  assert (tmp_path / "plain").read_text(encoding="utf-8") == TEXT
  assert sorted(os.listdir(tmp_path)) == ["link", "null", "plain", "real"]


def test_atomic_directory_follows_a_link_and_refuses_a_file(tmp_path):
  (tmp_path / "real").mkdir()
  os.symlink("real", tmp_path / "link")
  with file_io.atomic_directory(str(tmp_path / "link")) as write:
    assert os.path.dirname(write.tmp) == str(tmp_path)  # beside the target: one rename
    (tmp_path / write.tmp / "saved_model.pb").write_bytes(b"pb")
  assert os.path.islink(tmp_path / "link")
  assert os.listdir(tmp_path / "real") == ["saved_model.pb"]
  assert sorted(os.listdir(tmp_path)) == ["link", "real"]
  (tmp_path / "file").write_text("data\n", encoding="utf-8")
  entered = []
  with pytest.raises(file_io.OutputPathError, match=r"^[^\n]*file is not a directory"):
    with file_io.atomic_directory(str(tmp_path / "file")):
      entered.append(True)
  assert entered == [] and sorted(os.listdir(tmp_path)) == ["file", "link", "real"]


# -- The checkpoint averager's temporaries ---------------------------------------------------


@pytest.fixture
def averaged_run(tmp_path):
  """A run directory with hparams.json, run.json and two untrained checkpoints."""
  from t2t_keras.hparams import create_hparams
  hp = create_hparams("transformer_tiny", "num_hidden_layers=1,hidden_size=16,filter_size=32")
  spec = settings.ModelSpec(40, 40)
  output_dir = str(tmp_path / "run")
  settings.save_or_check_run_files(output_dir, hp, "translate_from_files", spec)
  for step in (1, 2):
    tf.train.Checkpoint(model=model_factory.build_model(hp, spec)).write(
        os.path.join(output_dir, f"ckpt-{step}"))
  return output_dir


def test_a_killed_averagers_temporaries_are_removed_on_rerun(averaged_run, tmp_path, capsys):
  out_dir = tmp_path / "avg"
  output = out_dir / "averaged.ckpt"
  # What SIGKILL during tf.train.Checkpoint.write leaves (as seen for the trainer's saves),
  # and a killed averager's own temporary; a running writer's (pid 1) is kept.
  killed_save = out_dir / "averaged.ckpt_temp"
  killed_save.mkdir(parents=True)
  (killed_save / "part-00000-of-00001.data-00000-of-00001.tempstate1234").write_bytes(b"\0" * 8)
  gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True)
  host = socket.gethostname().replace(".", "_")
  killed_own = out_dir / f"averaged.ckpt.{host}-{int(gone.stdout)}.incomplete"
  (killed_own / "averaged.ckpt_temp").mkdir(parents=True)
  running = out_dir / f"averaged.ckpt.{host}-1.incomplete"
  running.mkdir()
  paths = ",".join(os.path.join(averaged_run, f"ckpt-{s}") for s in (1, 2))
  code, out, err = run_cli_output("t2t_keras.cli.avg_checkpoints",
                                  [f"--checkpoints={paths}", f"--output_path={output}"], capsys)
  assert code == 0, err[-3000:]
  assert f"Averaged checkpoint written to {output}" in out
  assert sorted(os.listdir(out_dir)) == sorted([
      "averaged.ckpt.data-00000-of-00001", "averaged.ckpt.index", running.name])
  tf.train.load_checkpoint(str(output))  # complete under its name


# -- t2t_keras_decoder --decode_to_file --------------------------------------------------------


@pytest.fixture(scope="module")
def decode_run(tmp_path_factory):
  """(data_dir, output_dir, source file) of an untrained run of the tiny problem."""
  from data_gen import registry
  from t2t_keras.hparams import create_hparams
  root = str(tmp_path_factory.mktemp("output_paths"))
  data_dir = make_tiny_problem(root, train=100, dev=4)
  problem = registry.problem("translate_from_files", data_dir)
  encoders = problem.feature_encoders(data_dir)
  spec = settings.ModelSpec(encoders["inputs"].vocab_size, encoders["targets"].vocab_size, 0)
  hp = create_hparams("transformer_tiny",
                      "num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2")
  output_dir = os.path.join(root, "run")
  settings.save_or_check_run_files(output_dir, hp, "translate_from_files", spec,
                                  settings.vocab_record(problem, data_dir, encoders))
  tf.keras.utils.set_random_seed(0)
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model_factory.build_model(hp, spec)),
                             output_dir, 1).save(1)
  source = os.path.join(root, "source.txt")
  with open(source, "w", encoding="utf-8") as f:
    f.write("the red house\nold dog\na cat runs\n")
  return data_dir, output_dir, source


def _decode_to(decode_run, path, capsys):
  data_dir, output_dir, source = decode_run
  return run_cli_output("t2t_keras.cli.decoder", [
      f"--data_dir={data_dir}", f"--output_dir={output_dir}",
      "--decode_hparams=beam_size=1,extra_length=2", f"--decode_from_file={source}",
      f"--decode_to_file={path}"], capsys)


def _error_lines(err):
  return [line for line in err.splitlines() if "error:" in line or "Traceback" in line]


@pytest.mark.parametrize("kind", ["fifo", "symlink", "null_device", "full_device", "directory",
                                  "link_into_missing_directory"])
def test_decoder_writes_each_kind_of_output_path(decode_run, tmp_path, capsys, kind):
  out = str(tmp_path / "out")
  reader = None
  if kind == "fifo":
    os.mkfifo(out)
    reader = _FifoReader(out)
  elif kind == "symlink":
    os.symlink("target.txt", out)
  elif kind in ("null_device", "full_device"):
    _node(out, NULL if kind == "null_device" else FULL)
  elif kind == "directory":
    os.mkdir(out)
  else:
    os.symlink(os.path.join("missing", "out.txt"), out)
  code, _, err = _decode_to(decode_run, out, capsys)
  if kind == "full_device":
    assert code == 4 and _error_lines(err) == [
        f"prog: error: no space left writing --decode_to_file={out} (No space left on device); "
        "free some space and decode again: the file was not written."], err[-3000:]
    assert _is_node(out, FULL) and os.listdir(tmp_path) == ["out"]
    return
  if kind == "directory":
    assert code == 2 and _error_lines(err) == [
        f"prog: error: --decode_to_file={out} is a directory; give a file path."], err[-3000:]
    assert os.listdir(out) == [] and os.listdir(tmp_path) == ["out"]
    return
  if kind == "link_into_missing_directory":
    missing = tmp_path / "missing" / "out.txt"
    assert code == 2 and _error_lines(err) == [
        f"prog: error: {out} is a symbolic link to {missing}, whose directory does not exist; "
        "create that directory or give another path"], err[-3000:]
    assert os.path.islink(out) and os.listdir(tmp_path) == ["out"]
    return
  assert code == 0 and f"Wrote 3 lines to {out}." in err, err[-3000:]
  if kind == "fifo":
    assert len(reader.join().decode("utf-8").split("\n")) == 4  # 3 lines, each ended
    assert stat.S_ISFIFO(os.lstat(out).st_mode) and os.listdir(tmp_path) == ["out"]
  elif kind == "symlink":
    assert os.path.islink(out) and os.readlink(out) == "target.txt"
    with open(tmp_path / "target.txt", encoding="utf-8") as f:
      assert len(f.read().split("\n")) == 4
    assert sorted(os.listdir(tmp_path)) == ["out", "target.txt"]
  else:
    assert _is_node(out, NULL) and os.listdir(tmp_path) == ["out"]
