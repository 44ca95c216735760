"""Decoder and exporter faults: long inputs, stdin, bad files and run dirs, full disks.

One untrained run (learned positions, max_length=16, so inputs of 17+ subword
tokens are "long") serves every case. Errors must be one line
`<command>: error: ...` with the exit status of errors.py; those that the flags
and files show must come before the model loads (`Loaded <checkpoint>` is
logged once it has). A full disk is simulated with RLIMIT_FSIZE (writes past the
limit fail with EFBIG; SIGXFSZ ignored) and, as root, with a small tmpfs (ENOSPC).
"""

import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the TF-Text ops the SavedModel uses)

import t2t_keras
from t2t_keras import checkpoints, errors
from t2t_keras.decoding import seq2seq, text_decoder
from t2t_keras.export import saved_model
from t2t_keras.hparams import create_decode_hparams, create_hparams
from t2t_keras.rundir import model_factory, settings
from tests.support import near_ties, stub_decoding
from tests.support.cli import run_cli_output
from tests.support.tiny_problem import make_tiny_problem
from tests.support.tolerances import SCORE_EPS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
HP = ("num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,batch_size=128,"
      "max_length=16,pos=emb")
DECODE_HP = "beam_size=2,alpha=0.6,extra_length=4,log_results=false"
# 2 to 40 words: most lines are longer than max_length subword tokens.
LINES = [" ".join(["the big red house and", "a small cat sees the old dog"][i % 2].split()
                  * (1 + i))[:400] for i in range(8)] + ["old", "", "new blue dog runs"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """An untrained run: {dir, data, hp, model, encoders}, and `other`: a checkpoint
  of a model with another hidden_size."""
  from data_gen import registry
  root = str(tmp_path_factory.mktemp("decode_export"))
  data_dir = make_tiny_problem(root, train=200, dev=8)
  problem = registry.problem("translate_from_files", data_dir)
  encoders = problem.feature_encoders(data_dir)
  spec = settings.ModelSpec(encoders["inputs"].vocab_size, encoders["targets"].vocab_size, 0)
  paths = {}
  for name, overrides in (("dir", HP), ("other", HP.replace("hidden_size=16", "hidden_size=32"))):
    tf.keras.utils.set_random_seed(0)
    hp = create_hparams("transformer_tiny", overrides)
    output_dir = os.path.join(root, name)
    settings.save_or_check_run_files(output_dir, hp, "translate_from_files", spec,
                                    settings.vocab_record(problem, data_dir, encoders))
    checkpoint = tf.train.Checkpoint(model=model_factory.build_model(hp, spec))
    paths[name] = tf.train.CheckpointManager(checkpoint, output_dir, 1).save(1)
  opened = t2t_keras.open_run(os.path.join(root, "dir"), data_dir=data_dir)
  model, hp = opened.model, opened.hparams
  return dict(dir=os.path.join(root, "dir"), data=data_dir, hp=hp, model=model,
              encoders=encoders, other=paths["other"])


def _decoder(run, *args):
  return ("t2t_keras.cli.decoder", [f"--data_dir={run['data']}", f"--output_dir={run['dir']}",
                                    f"--decode_hparams={DECODE_HP}", *args])


def _one_line(status, err, want_status, *values, loaded=False):
  lines = [l for l in err.splitlines() if l.strip()]
  assert status == want_status, err[-3000:]
  assert "Traceback" not in err and (loaded or len(lines) == 1), err[-3000:]
  assert lines[-1].startswith("prog: error: ") and ("Loaded " in err) == loaded, err[-3000:]
  for value in values:
    assert str(value) in lines[-1], (value, lines[-1])


def _subprocess(args, fsize=None, **kwargs):
  """A console command in a new process; with `fsize`, no file may grow past it."""
  def limit():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
  return subprocess.run([sys.executable, "-m", *map(str, args)], capture_output=True, text=True,
                        env=ENV, cwd=REPO, timeout=300,
                        preexec_fn=limit if fsize is not None else None, **kwargs)


def _error_line(proc):
  return [l for l in proc.stderr.splitlines() if ": error: " in l]


# -- Long inputs: decoder == SavedModel ----------------------------------------------------


def test_long_inputs_decoder_equals_saved_model_on_every_line(run, tmp_path):
  lengths = [len(run["encoders"]["inputs"].encode(l)) for l in LINES]
  assert sum(n > run["hp"].max_length for n in lengths) >= 5, lengths
  decode_hp = create_decode_hparams(DECODE_HP)
  version = saved_model.export_saved_model(run["model"], run["hp"], decode_hp, _vocab(run),
                                      str(tmp_path / "export"), run["encoders"])
  out = tf.saved_model.load(version).signatures["serving_default"](inputs=tf.constant(LINES))
  served = [o.decode("utf-8") for o in out["outputs"].numpy()]
  logs = []
  decoder = text_decoder.TextDecoder(run["model"], run["encoders"], decode_hp, log=logs.append)
  decoded = decoder.decode_lines(LINES)
  # The SavedModel decodes the 11 lines as one batch in input order, TextDecoder the 10
  # non-empty ones sorted longest first: the same float32 model on other shapes and
  # rows, whose kernels may round differently. Each is the cached decode, within
  # SCORE_EPS (1e-4, tests/test_decoding.py) of the full pass T2T's NumPy search
  # reads, so a line may differ only at a choice of margin <= 2 * SCORE_EPS
  # (tests/support/near_ties.py). The empty line has no choice (inf): it must match.
  margin_of = near_ties.model_margin_of(
      run["model"], [decoder._encode(line)[0] for line in LINES], decode_hp.beam_size,
      decode_hp.alpha, decode_hp.extra_length, run["model"].target_vocab_size)
  near_ties.assert_equal_or_near_tie(
      served, decoded, lambda i: margin_of(i) if LINES[i] else float("inf"), SCORE_EPS,
      "SavedModel vs TextDecoder, long inputs")
  assert [e.decode() for e in out["errors"].numpy()] == [""] * len(LINES)
  assert not any("Truncated" in line for line in logs)
  assert served[LINES.index("")] == ""


def _vocab(run):
  from data_gen import registry
  problem = registry.problem("translate_from_files", run["data"])
  return {s: os.path.join(run["data"], problem.vocab_filenames[s]) for s in ("inputs", "targets")}


def test_max_input_size_cuts_both_alike_and_names_each_cut_line(tmp_path, monkeypatch):
  vocab = stub_decoding.build_vocab(str(tmp_path / "vocab.subwords"))
  monkeypatch.setattr(seq2seq, "decode_ids", stub_decoding.make_stub([]))  # echoes the input
  decode_hp = create_decode_hparams("beam_size=1,max_input_size=4")  # T2T: 3 tokens + EOS
  lines = ["the big red house and the cat", "old", "a small dog runs", ""]
  encoders = {"inputs": vocab, "targets": vocab}
  version = saved_model.export_saved_model(stub_decoding.NoModel(), create_hparams("transformer_tiny"),
                                      decode_hp, {"inputs": vocab.filename,
                                                  "targets": vocab.filename},
                                      str(tmp_path / "export"), encoders)
  out = tf.saved_model.load(version).signatures["serving_default"](inputs=tf.constant(lines))
  logs = []
  decoded = text_decoder.TextDecoder(stub_decoding.NoModel(), encoders, decode_hp,
                                    log=logs.append).decode_lines(lines)
  assert [o.decode() for o in out["outputs"].numpy()] == decoded
  assert decoded[0] == vocab.decode(vocab.encode(lines[0])[:3]) and decoded[1] == "old"
  cut = [i for i, line in enumerate(lines) if len(vocab.encode(line)) > 3]
  assert cut == [0, 2]
  row_errors = [e.decode() for e in out["errors"].numpy()]
  assert [bool(e) for e in row_errors] == [i in cut for i in range(len(lines))]
  assert row_errors[0] == saved_model.truncation_message(decode_hp)
  assert "max_input_size=4" in row_errors[0]
  assert [l for l in logs if "Truncated" in l] == [
      "Truncated 2 input line(s) to max_input_size=4 (3 subword tokens + EOS): line(s) 1, 3."]


# -- Input files and stdin -------------------------------------------------------------------


def test_decode_from_stdin_dash_equals_decoding_the_file(run, tmp_path, capsys, monkeypatch):
  # Exact on every CPU: two in-process decodes of the same lines in the same batches.
  text = "\n".join(LINES[:4]) + "\n"
  source = tmp_path / "source.txt"
  source.write_text(text, encoding="utf-8")
  status, _, err = run_cli_output(*_decoder(run, f"--decode_from_file={source}",
                                  f"--decode_to_file={tmp_path / 'from_file.txt'}"), capsys)
  assert status == 0, err[-3000:]
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
  status, out, err = run_cli_output(*_decoder(run, "--decode_from_file=-"), capsys)
  assert status == 0, err[-3000:]
  assert out.split("\n") == (tmp_path / "from_file.txt").read_text("utf-8").split("\n")
  assert len(out.split("\n")) == 5


def test_decode_from_dev_stdin_reads_a_pipe_to_its_end(run, tmp_path):
  text = "\n".join(LINES[:3]) + "\n"
  proc = _subprocess(["t2t_keras.cli.decoder", f"--data_dir={run['data']}",
                      f"--output_dir={run['dir']}", f"--decode_hparams={DECODE_HP}",
                      "--decode_from_file=/dev/stdin"], input=text)
  assert proc.returncode == 0, proc.stderr[-3000:]
  decode_hp = create_decode_hparams(DECODE_HP)
  decoder = text_decoder.TextDecoder(run["model"], run["encoders"], decode_hp,
                                    log=lambda line: None)
  expected = decoder.decode_lines(LINES[:3])
  got = proc.stdout.split("\n")
  assert len(got) == 4 and got[-1] == "", proc.stdout  # every line read, one output each
  # Another process may round the same float32 model differently (its own thread
  # split of a matmul): a line may differ only at a near-tie (tests/support/near_ties.py).
  margin_of = near_ties.model_margin_of(
      run["model"], [decoder._encode(line)[0] for line in LINES[:3]], decode_hp.beam_size,
      decode_hp.alpha, decode_hp.extra_length, run["model"].target_vocab_size)
  near_ties.assert_equal_or_near_tie(got[:3], expected, margin_of, SCORE_EPS,
                                     "decoder reading /dev/stdin vs in-process")


@pytest.mark.parametrize("flag", ["decode_from_file", "decode_reference", "score_file"])
def test_binary_input_file_is_refused_before_loading(run, tmp_path, capsys, monkeypatch, flag):
  binary = tmp_path / "model.bin"
  binary.write_bytes(b"the cat\tder Hund\n" + bytes(64) + b"\n")  # valid UTF-8, but NULs
  text = tmp_path / "text.txt"
  text.write_text("the cat\nold dog\n", encoding="utf-8")
  args = {"decode_from_file": [f"--decode_from_file={binary}"],
          "decode_reference": [f"--decode_from_file={text}", f"--decode_reference={binary}"],
          "score_file": [f"--score_file={binary}"]}[flag]
  status, out, err = run_cli_output(*_decoder(run, *args), capsys)
  _one_line(status, err, 2, f"--{flag}={binary} is a binary file (a NUL byte on line 2)")
  assert out == ""


# -- Output directories ------------------------------------------------------------------------


def test_unwritable_export_dir_is_refused_before_loading(run, tmp_path, capsys, monkeypatch):
  target = tmp_path / "readonly"
  target.mkdir()
  mounted = False
  if os.geteuid() == 0:  # root writes through permissions: a read-only file system
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(target)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
      pytest.skip(f"root, and cannot mount a read-only tmpfs here: {mount.stderr.strip()}")
    mounted = True
  else:
    target.chmod(0o555)
  # access(2) answered by a client that cannot know (NFS root_squash, some FUSE file
  # systems): it says yes; only a real write tells.
  monkeypatch.setattr(os, "access", lambda path, mode, **kwargs: True)
  try:
    status, _, err = run_cli_output("t2t_keras.cli.exporter", [
        f"--data_dir={run['data']}", f"--output_dir={run['dir']}",
        f"--export_dir={target / 'export'}"], capsys)
  finally:
    if mounted:
      subprocess.run(["umount", str(target)], check=True)
    target.chmod(0o755)
  _one_line(status, err, 2, f"--export_dir={target / 'export'}", f"{target} is not writable")


# -- Run directories and checkpoints -------------------------------------------------------


@pytest.mark.parametrize("name, damage, message", [
    ("hparams.json", lambda text: text[:len(text) // 2], "hparams.json is damaged ("),
    ("run.json", lambda text: "{problem: 1}", "run.json is damaged (Expecting property name"),
    ("run.json", lambda text: json.dumps(["a list"]), "run.json is damaged"),
    ("run.json", None, "No run.json in"),
])
def test_damaged_or_missing_run_file_is_one_line(run, tmp_path, capsys, monkeypatch, name, damage,
                                                 message):
  directory = str(tmp_path / "run")
  shutil.copytree(run["dir"], directory)
  path = os.path.join(directory, name)
  if damage is None:
    os.remove(path)
  else:
    with open(path, encoding="utf-8") as f:
      text = f.read()
    with open(path, "w", encoding="utf-8") as f:
      f.write(damage(text))
  for module, extra in (("t2t_keras.cli.decoder", [f"--decode_from_file={__file__}"]),
                        ("t2t_keras.cli.exporter", [f"--export_dir={tmp_path / 'export'}"])):
    status, _, err = run_cli_output(module, [f"--data_dir={run['data']}", f"--output_dir={directory}",
                                   *extra], capsys)
    _one_line(status, err, 2, message, directory, "t2t_keras_trainer")
  assert not os.path.exists(tmp_path / "export")


def test_checkpoint_of_another_model_names_a_variable_and_both_shapes(run, capsys, monkeypatch):
  status, out, err = run_cli_output(*_decoder(run, f"--checkpoint_path={run['other']}",
                                    f"--decode_from_file={__file__}"), capsys)
  _one_line(status, err, 2, f"Checkpoint {run['other']} holds another model: variable ",
            "has shape (32,) there but (16,) in this run's model", run["dir"])
  assert out == ""


# -- A full disk: exit status 4, nothing under the final name --------------------------------


def test_full_disk_while_writing_decode_output(run, tmp_path):
  source = tmp_path / "source.txt"
  source.write_text("\n".join(["old", "new blue dog runs"] * 10) + "\n", encoding="utf-8")
  out = tmp_path / "out.txt"
  proc = _subprocess(["t2t_keras.cli.decoder", f"--data_dir={run['data']}",
                      f"--output_dir={run['dir']}", f"--decode_hparams={DECODE_HP}",
                      f"--decode_from_file={source}", f"--decode_to_file={out}"], fsize=8)
  assert proc.returncode == 4, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr
  assert _error_line(proc) == [
      f"t2t_keras_decoder: error: no space left writing --decode_to_file={out} (File too "
      "large); free some space and decode again: the file was not written."]
  assert sorted(os.listdir(tmp_path)) == ["source.txt"]  # no out.txt, no temp file


def _export_on_a_full_disk(run, export_dir, fsize=None):
  proc = _subprocess(["t2t_keras.cli.exporter", f"--data_dir={run['data']}",
                      f"--output_dir={run['dir']}", f"--export_dir={export_dir}"], fsize=fsize)
  assert proc.returncode == 4, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr
  [line] = _error_line(proc)
  assert line.startswith(f"t2t_keras_exporter: error: no space left writing the SavedModel "
                         f"in {export_dir} (")
  assert line.endswith("free some space and export again: no version was written.")
  assert os.listdir(export_dir) == []  # no version, no temp dir
  return line


def test_full_disk_while_exporting_file_size_limit(run, tmp_path):
  line = _export_on_a_full_disk(run, tmp_path / "export", fsize=64 * 1024)
  assert "File too large" in line


@pytest.fixture
def small_tmpfs(tmp_path):
  """A 4 KiB tmpfs (ENOSPC past it), or a skip saying why there is none."""
  if os.geteuid() != 0:
    pytest.skip("mounting a tmpfs needs root; the file size limit tests cover EFBIG")
  target = tmp_path / "small"
  target.mkdir()
  mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(target)],
                         capture_output=True, text=True)
  if mount.returncode != 0:
    pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
  yield target
  subprocess.run(["umount", str(target)], check=True)


def test_full_tmpfs_while_exporting_and_decoding(run, small_tmpfs, tmp_path, capsys,
                                                 monkeypatch):
  vocab = stub_decoding.build_vocab(str(tmp_path / "vocab.subwords"))
  monkeypatch.setattr(seq2seq, "decode_ids", stub_decoding.make_stub([]))
  with pytest.raises(errors.StorageError, match=r"no space left writing the SavedModel in "
                     r".*No space left on device.*no version was written"):
    saved_model.export_saved_model(stub_decoding.NoModel(), create_hparams("transformer_tiny"),
                              create_decode_hparams("beam_size=1"),
                              {"inputs": vocab.filename, "targets": vocab.filename},
                              str(small_tmpfs / "export"), {"inputs": vocab, "targets": vocab})
  assert os.listdir(small_tmpfs / "export") == []
  monkeypatch.undo()  # the real model decodes below
  source = tmp_path / "source.txt"
  source.write_text("\n".join(LINES) * 40 + "\n", encoding="utf-8")  # > 4 KiB out
  out = small_tmpfs / "out.txt"
  status, _, err = run_cli_output(*_decoder(run, f"--decode_from_file={source}",
                                  f"--decode_to_file={out}"), capsys)
  _one_line(status, err, 4, f"no space left writing --decode_to_file={out} (No space left",
            loaded=True)
  assert os.listdir(small_tmpfs) == ["export"]


def test_checkpoint_of_another_vocabulary_names_the_matrix_and_both_shapes(run, tmp_path):
  """A 2-D mismatch (shapes print with a space) is named as well: only the shared
  embedding differs between a model of vocab V and one of V + 4."""
  spec = settings.load_run_files(run["dir"])[2]
  wider = settings.ModelSpec(spec.input_vocab_size + 4, spec.target_vocab_size + 4, 0)
  prefix = tf.train.Checkpoint(model=model_factory.build_model(run["hp"], wider)).write(
      str(tmp_path / "wider"))
  with pytest.raises(checkpoints.CheckpointError) as e:
    model_factory.load_trained_model(run["dir"], prefix)
  depth = run["hp"].hidden_size
  assert (f"has shape ({spec.target_vocab_size + 4}, {depth}) there but "
          f"({spec.target_vocab_size}, {depth}) in this run's model") in str(e.value)
