"""The vocabulary is part of a run's and of a data_dir's identity.

One tiny run is trained by the trainer CLI (in this process) on a 2-train-shard
data_dir. Each test copies the data_dir and edits its vocab file as a user might:
two lines swapped (same size) or one line lost. The decoder, exporter, averager
and visualizer must refuse such a data_dir in one line naming the run's run.json
and the vocab file, before any model is loaded; the trainer's advice to regenerate must, run exactly
as printed, re-encode every split with the new vocabulary at the same shard
counts; and datagen must refuse ids outside the vocabulary.
"""

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from data_gen import manifest as manifest_lib
from data_gen import text_encoder
from data_gen.translate_from_files import TranslateFromFiles
from tests.support.cli import run_cli, run_datagen_in_process
from tests.support.tiny_problem import ONE_LAYER, make_tiny_problem

NAME = "translate_from_files"
VOCAB = "vocab.%s.200.subwords" % NAME
ROOT = pathlib.Path(__file__).parent.parent
BIN = pathlib.Path(sys.executable).parent


def _train(capsys, data_dir, output_dir, steps=1):
  """Runs the trainer CLI in this process; returns (exit code, stdout, stderr)."""
  code = _cli_plain("t2t_keras.cli.trainer", [
      "--problem=" + NAME, f"--data_dir={data_dir}", f"--output_dir={output_dir}",
      "--hparams_set=transformer_tiny", f"--hparams={ONE_LAYER}", f"--train_steps={steps}",
      "--schedule=train", "--log_every_steps=1"])
  captured = capsys.readouterr()
  return code, captured.out, captured.err


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """{"root", "data_dir", "run_dir", "source"}: a run trained 1 step by the trainer CLI."""
  root = tmp_path_factory.mktemp("vocab")
  data_dir = make_tiny_problem(str(root), train=200, dev=8)
  run_dir = str(root / "run")
  code = _cli_plain("t2t_keras.cli.trainer", [
      "--problem=" + NAME, f"--data_dir={data_dir}", f"--output_dir={run_dir}",
      "--hparams_set=transformer_tiny", f"--hparams={ONE_LAYER}", "--train_steps=1",
      "--schedule=train"])
  assert code in (0, None)
  source = root / "source.en"
  source.write_text("the big house\na small cat\n", encoding="utf-8")
  return {"root": root, "data_dir": data_dir, "run_dir": run_dir, "source": str(source)}


def _cli_plain(module, argv):
  """`run_cli` without pytest's capsys (for the module fixture)."""
  from absl import flags
  import importlib
  cli = importlib.import_module(module)
  flags.FLAGS.unparse_flags()
  old = sys.argv
  sys.argv = ["prog", *argv]
  try:
    cli.run()
    code = 0
  except SystemExit as e:
    code = e.code
  finally:
    sys.argv = old
    flags.FLAGS.unparse_flags()
  return code


def _edited_copy(run, tmp_path, edit):
  """A copy of the run's data_dir whose vocab lost a line or had two lines swapped.

  The edited lines are subtokens the source sentences use, so ids change meaning.
  """
  data_dir = str(tmp_path / "data")
  shutil.copytree(run["data_dir"], data_dir)
  path = os.path.join(data_dir, VOCAB)
  old = text_encoder.SubwordTextEncoder(path)
  used = sorted(set(old.encode("the big house a small cat")))
  first, second = used[0], used[1]
  assert first >= 2 and second >= 2  # not a reserved token
  with open(path, encoding="utf-8") as f:
    lines = f.read().splitlines(keepends=True)
  if edit == "swapped":
    lines[first], lines[second] = lines[second], lines[first]
  else:
    del lines[first]
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(lines))
  return data_dir, path, old


def _assert_refused(code, err, *names):
  assert code == 2, err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and "Traceback" not in err, err
  for name in names:
    assert name in lines[0], (name, lines[0])
  assert "Loaded " not in err  # no model was loaded first
  return lines[0]


@pytest.mark.parametrize("edit, differs", [("swapped", "SHA-256"), ("lost", "size")])
def test_decoder_exporter_averager_visualizer_refuse_an_edited_vocab(run, tmp_path, capsys, edit, differs):
  data_dir, vocab_path, _ = _edited_copy(run, tmp_path, edit)
  run_json = os.path.join(run["run_dir"], "run.json")
  out = tmp_path / "out.txt"
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--data_dir={data_dir}", f"--output_dir={run['run_dir']}",
      f"--decode_from_file={run['source']}", f"--decode_to_file={out}"], capsys)
  line = _assert_refused(code, err, run_json, vocab_path, differs)
  assert not out.exists()
  if edit == "lost":  # both sizes are named
    with open(run_json) as f:
      size = json.load(f)["input_vocab_size"]
    assert f"size {size - 1}, the run's {size}" in line
  export_dir = tmp_path / "export"
  code, err = run_cli("t2t_keras.cli.exporter", [
      f"--data_dir={data_dir}", f"--output_dir={run['run_dir']}",
      f"--export_dir={export_dir}"], capsys)
  _assert_refused(code, err, run_json, vocab_path, differs)
  assert not export_dir.exists()
  averaged = tmp_path / "avg" / "averaged.ckpt"
  code, err = run_cli("t2t_keras.cli.avg_checkpoints", [
      f"--prefix={run['run_dir']}", "--num_last_checkpoints=1", f"--output_path={averaged}",
      f"--data_dir={data_dir}"], capsys)
  _assert_refused(code, err, run_json, vocab_path, differs)
  assert not averaged.parent.exists()
  code, err = run_cli("t2t_keras.cli.visualize", [
      f"--data_dir={data_dir}", f"--output_dir={run['run_dir']}", "--sentence=the cat",
      f"--plot_dir={tmp_path / 'plots'}"], capsys)
  _assert_refused(code, err, run_json, vocab_path, differs)
  # The shards were encoded with the vocab before the edit: the trainer's check says so.
  with pytest.raises(ValueError, match=re.escape(VOCAB) + r" has .*the vocabulary changed"):
    manifest_lib.check_data_dir(data_dir, NAME)


def test_trainer_advice_followed_exactly_reencodes_every_split(run, tmp_path, capsys):
  data_dir, vocab_path, old = _edited_copy(run, tmp_path, "lost")
  shards_before = sorted(n for n in os.listdir(data_dir) if re.search(r"-\d{5}-of-\d{5}$", n))
  code, out, err = _train(capsys, data_dir, tmp_path / "new_run")
  line = _assert_refused(code, err, data_dir)
  command = re.search(r"Regenerate with `([^`]+)`", line).group(1)
  argv = shlex.split(command)
  assert argv[0] == "t2t_keras_datagen"
  env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "skipped" not in proc.stdout, proc.stdout
  # Same shard files (names carry the counts), every split encoded with the new vocab.
  assert sorted(n for n in os.listdir(data_dir)
                if re.search(r"-\d{5}-of-\d{5}$", n)) == shards_before
  new = text_encoder.SubwordTextEncoder(vocab_path)
  text = os.path.join(run["root"], "text")
  changed = 0
  for split, source_file in (("train", "train.en"), ("dev", "dev.en"), ("test", "test.en")):
    with open(os.path.join(text, source_file), encoding="utf-8") as f:
      sources = f.read().splitlines()
    expected = sorted(new.encode(s) + [1] for s in sources)
    changed += sum(new.encode(s) != old.encode(s) for s in sources)
    records = []
    for name in shards_before:
      if f"-{split}-" in name:
        for raw in tf.data.TFRecordDataset(os.path.join(data_dir, name)):
          example = tf.train.Example.FromString(raw.numpy())
          records.append(list(example.features.feature["inputs"].int64_list.value))
    assert sorted(records) == expected, split
  assert changed > 0  # the edit changed ids: the comparison above can fail
  code, out, err = _train(capsys, data_dir, tmp_path / "new_run")
  assert code in (0, None), err
  # The original run was trained with the old vocabulary: resuming it on this data is refused.
  code, out, err = _train(capsys, data_dir, run["run_dir"], steps=2)
  _assert_refused(code, err, os.path.join(run["run_dir"], "run.json"), vocab_path, "size")


def test_run_of_an_older_version_warns_and_resume_records_the_hash(run, tmp_path, capsys):
  run_dir = str(tmp_path / "old_run")
  shutil.copytree(run["run_dir"], run_dir)
  run_json = os.path.join(run_dir, "run.json")
  with open(run_json) as f:
    recorded = json.load(f)
  assert [e["features"] for e in recorded["vocab"]] == [["inputs", "targets"]]
  legacy = {k: v for k, v in recorded.items() if k != "vocab"}
  with open(run_json, "w") as f:
    json.dump(legacy, f)
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--data_dir={run['data_dir']}", f"--output_dir={run_dir}",
      f"--decode_from_file={run['source']}", f"--decode_to_file={tmp_path / 'out.txt'}"],
                   capsys)
  assert code in (0, None), err
  assert len([l for l in err.splitlines() if "records no vocabulary hash" in l]) == 1
  code, out, err = _train(capsys, run["data_dir"], run_dir, steps=2)
  assert code in (0, None), err
  notes = [l for l in out.splitlines() if "records no vocabulary hash" in l]
  assert len(notes) == 1 and "recording that of" in notes[0], out
  with open(run_json) as f:
    assert json.load(f)["vocab"] == recorded["vocab"]


def test_datagen_refuses_ids_outside_the_vocab(tmp_path, capsys, monkeypatch):
  text = tmp_path / "text"
  text.mkdir()
  from tests.support.tiny_problem import write_parallel
  write_parallel(str(text / "train"), 50, seed=1)
  write_parallel(str(text / "dev"), 5, seed=2)
  real = TranslateFromFiles.generate_encoded_samples

  def too_big(self, data_dir, tmp_dir, split, encoders, text_sink=None):
    for i, example in enumerate(real(self, data_dir, tmp_dir, split, encoders, text_sink)):
      if i == 2:  # the 3rd example gets the first id past the vocabulary
        example["targets"][0] = encoders["targets"].vocab_size
      yield example

  monkeypatch.setattr(TranslateFromFiles, "generate_encoded_samples", too_big)
  data_dir = tmp_path / "data"
  code, out, err = run_datagen_in_process(
      capsys, "--problem=" + NAME, f"--data_dir={data_dir}", "--vocab_size=64",
      "--num_shards=2", f"--tmp_dir={tmp_path / 'tmp'}",
      f"--train_source={text}/train.en", f"--train_target={text}/train.de",
      f"--dev_source={text}/dev.en", f"--dev_target={text}/dev.de")
  assert code == 2, out + err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("t2t_keras_datagen: error: example 3 of train")
  assert "'targets' holds id" in lines[0] and "outside its vocabulary" in lines[0]
  assert not [n for n in os.listdir(data_dir) if "-train-" in n]
  with pytest.raises(ValueError, match="incomplete"):
    manifest_lib.check_data_dir(str(data_dir), NAME)
