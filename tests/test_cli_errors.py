"""A user's mistake ends the installed commands with one line and exit status 2.

Each case runs the real console script as a new user would, and checks that
stderr is exactly `<command>: error: <message>` naming the bad value, with exit
status 2; where the mistake can be seen in the flags or files alone, that no
model was loaded first (the decoder logs `Loaded <checkpoint>` once it has one).
"""

import os
import pathlib
import shutil
import socket
import subprocess
import sys

import pytest

BIN = pathlib.Path(sys.executable).parent


def _run(command, *args, env=None, timeout=600):
  env = dict(os.environ, **(env or {}))
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user's shell has it
  return subprocess.run([str(BIN / command), *map(str, args)], capture_output=True, text=True,
                        stdin=subprocess.DEVNULL,
                        env=env, timeout=timeout, cwd=pathlib.Path(__file__).parent.parent)


def _assert_error(proc, command, *values):
  """Exit status 2 and one stderr line `<command>: error: ...` naming every value."""
  lines = proc.stderr.splitlines()
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert len(lines) == 1, proc.stderr[-3000:]
  assert lines[0].startswith(f"{command}: error: "), lines[0]
  for value in values:
    assert str(value) in lines[0], (value, lines[0])
  assert "Loaded " not in proc.stderr  # no model was loaded before the error
  return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("cli_errors")
  (root / "three.txt").write_text("a b\nc d\ne f\n", encoding="utf-8")
  (root / "two.txt").write_text("a b\nc d\n", encoding="utf-8")
  (root / "empty.txt").write_text("", encoding="utf-8")
  return root


def _free_loopback_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


# --- the decoder ---------------------------------------------------------------------------


def test_decoder_missing_source_before_loading(tiny_trained_run, files):
  run_dir, data_dir = tiny_trained_run
  missing = files / "missing.en"
  line = _assert_error(_run("t2t_keras_decoder", f"--output_dir={run_dir}",
                            f"--data_dir={data_dir}", f"--decode_from_file={missing}"),
                       "t2t_keras_decoder", f"--decode_from_file={missing}")
  assert "no such file" in line


def test_decoder_missing_reference_before_decoding(tiny_trained_run, files):
  run_dir, data_dir = tiny_trained_run
  missing = files / "missing.de"
  proc = _run("t2t_keras_decoder", f"--output_dir={run_dir}", f"--data_dir={data_dir}",
              f"--decode_from_file={files / 'three.txt'}", f"--decode_reference={missing}")
  _assert_error(proc, "t2t_keras_decoder", f"--decode_reference={missing}")
  assert proc.stdout == ""  # nothing was decoded


def test_decoder_reference_line_count_before_decoding(tiny_trained_run, files):
  run_dir, data_dir = tiny_trained_run
  proc = _run("t2t_keras_decoder", f"--output_dir={run_dir}", f"--data_dir={data_dir}",
              f"--decode_from_file={files / 'three.txt'}",
              f"--decode_reference={files / 'two.txt'}")
  line = _assert_error(proc, "t2t_keras_decoder", files / "two.txt", files / "three.txt")
  assert "has 2 lines" in line and "has 3" in line
  assert proc.stdout == ""


def test_decoder_without_dev_data_names_decode_from_file(tiny_trained_run, tmp_path):
  run_dir, data_dir = tiny_trained_run
  no_dev = tmp_path / "data"
  shutil.copytree(data_dir, no_dev, ignore=shutil.ignore_patterns("*dev*"))
  line = _assert_error(_run("t2t_keras_decoder", f"--output_dir={run_dir}",
                            f"--data_dir={no_dev}"),
                       "t2t_keras_decoder", f"--data_dir={no_dev}", "--decode_from_file=")
  assert "dev" in line


@pytest.mark.parametrize("flag,name,expected", [
    ("decode_from_file", "empty.txt", "is empty"),
    ("decode_from_file", ".", "is a directory"),
    ("score_file", "missing.tsv", "no such file"),
])
def test_decoder_bad_input_files(tiny_trained_run, files, flag, name, expected):
  run_dir, data_dir = tiny_trained_run
  path = files / name
  line = _assert_error(_run("t2t_keras_decoder", f"--output_dir={run_dir}",
                            f"--data_dir={data_dir}", f"--{flag}={path}"),
                       "t2t_keras_decoder", f"--{flag}={path}")
  assert expected in line


# --- t2t_keras_bleu and t2t_keras_parse_eval ---------------------------------------------


def test_bleu_line_counts_differ(files):
  line = _assert_error(_run("t2t_keras_bleu", f"--translation={files / 'three.txt'}",
                            f"--reference={files / 'two.txt'}"),
                       "t2t_keras_bleu", files / "three.txt", files / "two.txt")
  assert "has 3 lines" in line and "has 2" in line


@pytest.mark.parametrize("name,expected", [("missing.de", "no such file"),
                                           ("empty.txt", "is empty"), (".", "is a directory")])
def test_bleu_bad_translation_file(files, name, expected):
  path = files / name
  line = _assert_error(_run("t2t_keras_bleu", f"--translation={path}",
                            f"--reference={files / 'two.txt'}"),
                       "t2t_keras_bleu", f"--translation={path}")
  assert expected in line


def test_parse_eval_missing_gold(files):
  missing = files / "missing.trees"
  _assert_error(_run("t2t_keras_parse_eval", f"--gold={missing}",
                     f"--test={files / 'two.txt'}"),
                "t2t_keras_parse_eval", f"--gold={missing}")


# --- t2t_keras_query ---------------------------------------------------------------------


@pytest.mark.parametrize("rest", [False, True])
def test_query_without_a_server(rest):
  port = _free_loopback_port()
  args = [f"--server=127.0.0.1:{port}", "--servable_name=transformer", "--inputs_once=Hello",
          "--timeout_secs=5"] + (["--rest"] if rest else [])
  line = _assert_error(_run("t2t_keras_query", *args), "t2t_keras_query",
                       f"--server=127.0.0.1:{port}", "tensorflow_model_server")
  assert ("REST" if rest else "gRPC") in line


@pytest.mark.parametrize("flag,value,expected", [
    ("server", "localhost", "host:port"),
    ("input_file", "MISSING", "no such file"),
])
def test_query_bad_flags_before_connecting(files, flag, value, expected):
  value = files / "missing.en" if value == "MISSING" else value
  args = {"server": "127.0.0.1:%d" % _free_loopback_port(), "servable_name": "transformer",
          "inputs_once": None, "input_file": None, flag: value}
  line = _assert_error(
      _run("t2t_keras_query", *[f"--{k}={v}" for k, v in args.items() if v is not None]),
      "t2t_keras_query", f"--{flag}={value}")
  assert expected in line


# --- t2t_keras_visualize -------------------------------------------------------------------


def test_visualize_without_matplotlib_before_the_model(tiny_trained_run, tmp_path):
  run_dir, data_dir = tiny_trained_run
  hidden = tmp_path / "hide" / "matplotlib"
  hidden.mkdir(parents=True)
  (hidden / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
  env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(hidden.parent),
                                                      os.environ.get("PYTHONPATH")]))}
  line = _assert_error(_run("t2t_keras_visualize", f"--output_dir={run_dir}",
                            f"--data_dir={data_dir}", "--sentence=a b",
                            f"--plot_dir={tmp_path / 'plots'}", env=env),
                       "t2t_keras_visualize", "matplotlib")
  assert "pip install matplotlib" in line and "pip install -e '.[viz]'" in line
  assert "t2t-keras[viz]" not in line  # not a package on PyPI
  assert not (tmp_path / "plots").exists()


def test_visualize_plot_dir_is_a_file(tiny_trained_run, files):
  run_dir, data_dir = tiny_trained_run
  path = files / "two.txt"
  _assert_error(_run("t2t_keras_visualize", f"--output_dir={run_dir}", f"--data_dir={data_dir}",
                     "--sentence=a b", f"--plot_dir={path}"),
                "t2t_keras_visualize", f"--plot_dir={path}")


# --- t2t_keras_exporter --------------------------------------------------------------------


def test_exporter_export_dir_ending_in_a_version(tiny_trained_run, tmp_path):
  run_dir, data_dir = tiny_trained_run
  export_dir = tmp_path / "export" / "1"
  line = _assert_error(_run("t2t_keras_exporter", f"--output_dir={run_dir}",
                            f"--data_dir={data_dir}", f"--export_dir={export_dir}"),
                       "t2t_keras_exporter", f"--export_dir={export_dir}",
                       f"--export_dir={tmp_path / 'export'} ")
  assert "version" in line
  assert not (tmp_path / "export").exists()  # no export/1/1 nesting, nothing written


def test_exporter_export_dir_under_a_file(tiny_trained_run, files):
  run_dir, data_dir = tiny_trained_run
  export_dir = files / "two.txt" / "export"
  _assert_error(_run("t2t_keras_exporter", f"--output_dir={run_dir}", f"--data_dir={data_dir}",
                     f"--export_dir={export_dir}"),
                "t2t_keras_exporter", f"--export_dir={export_dir}")


def test_exporter_bad_serving_beam_size(tiny_trained_run, tmp_path):
  run_dir, data_dir = tiny_trained_run
  for bad in ("0", "four"):
    _assert_error(_run("t2t_keras_exporter", f"--output_dir={run_dir}", f"--data_dir={data_dir}",
                       f"--export_dir={tmp_path / 'export'}", f"--serving_beam_sizes=1,{bad}"),
                  "t2t_keras_exporter", "--serving_beam_sizes", repr(bad))
  assert not (tmp_path / "export").exists()


# --- the trainer and datagen ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["t2t_keras_trainer", "t2t_keras_datagen"])
def test_unknown_problem_is_status_2_in_trainer_and_datagen(command, tmp_path):
  args = ["--problem=no_such_problem", f"--data_dir={tmp_path / 'data'}"]
  if command == "t2t_keras_trainer":
    args += [f"--output_dir={tmp_path / 'run'}", "--hparams_set=transformer_tiny"]
  _assert_error(_run(command, *args), command, "no_such_problem")


def test_trainer_bleu_source_missing_before_training(files, tmp_path):
  missing = files / "missing.en"
  _assert_error(_run("t2t_keras_trainer", "--problem=translate_from_files",
                     f"--data_dir={tmp_path / 'data'}", f"--output_dir={tmp_path / 'run'}",
                     "--hparams_set=transformer_tiny", f"--decode_from_file={missing}",
                     f"--decode_reference={files / 'two.txt'}"),
                "t2t_keras_trainer", f"--decode_from_file={missing}")
  assert not (tmp_path / "run").exists()


def test_datagen_missing_source_file(files, tmp_path):
  missing = files / "missing.en"
  two = files / "two.txt"
  _assert_error(_run("t2t_keras_datagen", "--problem=translate_from_files",
                     f"--data_dir={tmp_path / 'data'}", f"--tmp_dir={tmp_path / 'tmp'}",
                     f"--train_source={missing}", f"--train_target={two}",
                     f"--dev_source={two}", f"--dev_target={two}"),
                "t2t_keras_datagen", f"--train_source={missing}")
