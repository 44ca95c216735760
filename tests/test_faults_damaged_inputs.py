"""Every damaged input a command reads is refused in one line naming the file, exit 2.

The inputs are damaged as a disk, a copy or a download damages them: a
checkpoint's data shard cut short or with bytes flipped, its index cut in half
(a T2T checkpoint for t2t_keras_import_checkpoint, a run's own for the decoder,
exporter, averager and a resuming trainer), also in a checkpoint too big to be
read whole before use (FULL_READ_BYTES lowered); a vocabulary that is not UTF-8,
cut mid-line, binary garbage or empty; a --flagfile that is binary, plain text
rather than flags, or missing. Each command must print exactly one line
`prog: error: ...` naming the damaged file, exit with status 2, show no traceback
and write nothing (its output absent, the inputs unchanged). The commands run in
this process.
"""

import gc
import hashlib
import importlib
import os
import shutil
import sys

import pytest

from t2t_keras.rundir import lock
from tests.support.tiny_problem import ONE_LAYER, make_tiny_problem

NAME = "translate_from_files"
VOCAB = "vocab.%s.200.subwords" % NAME
T2T_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                       "t2t_transformer_test_ckpt")
T2T_VOCAB = "vocab.translate_ende_wmt8k.8192.subwords"
T2T_DATA = "model.ckpt-1.data-00001-of-00002"  # the shard holding the weights
CHECKPOINT_DAMAGE = ["truncated_data", "flipped_bytes", "halved_index"]
VOCAB_DAMAGE = ["invalid_utf8", "truncated", "binary_garbage", "empty"]
EMPTY = hashlib.sha256(b"").hexdigest()


def _cli(module, argv, capsys):
  """Runs a command's console entry in this process; returns (status, stdout, stderr)."""
  from absl import flags
  cli = importlib.import_module(module)
  entry = cli.main if module.endswith(".datagen") else cli.run
  flags.FLAGS.unparse_flags()
  old = sys.argv
  sys.argv = ["prog", *map(str, argv)]
  try:
    with pytest.raises(SystemExit) as exit_info:
      entry()
  finally:
    sys.argv = old
    flags.FLAGS.unparse_flags()
  status = exit_info.value.code or 0
  del exit_info  # and its tracebacks: TF logs what a failed restore left when it goes,
  gc.collect()  # as at a command's exit
  out = capsys.readouterr()
  return status, out.out, out.err


def _refused(result, *names):
  """Asserts status 2 and one error line naming each of `names`; returns the line."""
  status, out, err = result
  lines = [l for l in err.splitlines() if l.strip()]
  assert status == 2, err[-3000:]
  assert "Traceback" not in err and len(lines) == 1, err[-3000:]
  assert lines[0].startswith(("prog: error: ", "t2t_keras_datagen: error: ")), lines[0]
  for name in names:
    assert str(name) in lines[0], (name, lines[0])
  return lines[0]


def _tree(directory):
  """{relative path: sha256} of every file under `directory`."""
  out = {}
  for root, _, files in os.walk(directory):
    for name in files:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
  return out


def _damage_checkpoint(prefix, data, damage):
  """Damages checkpoint `prefix` (data shard `data`); returns the file damaged."""
  if damage == "truncated_data":
    os.truncate(data, os.path.getsize(data) // 2)
    return data
  if damage == "flipped_bytes":
    with open(data, "r+b") as f:
      f.seek(os.path.getsize(data) // 2)
      chunk = f.read(16)
      f.seek(-len(chunk), os.SEEK_CUR)
      f.write(bytes(b ^ 0xFF for b in chunk))
    return data
  index = prefix + ".index"
  os.truncate(index, os.path.getsize(index) // 2)
  return index


def _damage_vocab(path, damage):
  with open(path, "rb") as f:
    good = f.read()
  if damage == "invalid_utf8":  # one subtoken in Latin-1, as an editor might save it
    lines = good.split(b"\n")
    lines[10] = b"'caf\xe9_'"
    bad = b"\n".join(lines)
  elif damage == "truncated":  # cut in the middle of a line, as a copy interrupted
    cut = good.index(b"\n", len(good) // 2) - 2
    bad = good[:cut]
  elif damage == "binary_garbage":
    bad = bytes((i * 151 + 7) % 256 for i in range(4096))
  else:
    bad = b""
  with open(path, "wb") as f:
    f.write(bad)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """{"data_dir", "run_dir", "source"}: a tiny run trained 1 step (one checkpoint, ckpt-1)."""
  import tensorflow as tf

  from data_gen import registry
  from t2t_keras.hparams import create_hparams
  from t2t_keras.rundir import settings
  from t2t_keras.training import schedules
  from t2t_keras.training.trainer import Trainer, create_strategy
  root = str(tmp_path_factory.mktemp("damaged_inputs"))
  data_dir = make_tiny_problem(root, train=200, dev=8)
  problem = registry.problem(NAME, data_dir)
  enc = problem.feature_encoders(data_dir)
  hp = create_hparams("transformer_tiny", ONE_LAYER)
  spec = settings.ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size, 0)
  output_dir = os.path.join(root, "run")
  settings.save_or_check_run_files(output_dir, hp, NAME, spec,
                                  settings.vocab_record(problem, data_dir, enc), data_dir=data_dir)
  tf.keras.utils.set_random_seed(0)
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=1)
  config = schedules.RunConfig(output_dir=output_dir, train_steps=1, local_eval_frequency=1)
  schedules.Experiment(trainer, config, problem.filepattern(data_dir, "train"), None,
                        log=lambda line: None).train()
  source = os.path.join(root, "source.en")
  with open(source, "w", encoding="utf-8") as f:
    f.write("the big house\na small cat\n")
  return {"data_dir": data_dir, "run_dir": output_dir, "source": source}


# -- The run's own checkpoints ---------------------------------------------------------------


def _damaged_run(run, tmp_path, damage):
  """A copy of the run whose only checkpoint is damaged: (run dir, damaged file)."""
  directory = str(tmp_path / "run")
  shutil.copytree(run["run_dir"], directory)
  prefix = os.path.join(directory, "ckpt-1")
  return directory, _damage_checkpoint(prefix, prefix + ".data-00000-of-00001", damage)


@pytest.mark.parametrize("damage", CHECKPOINT_DAMAGE)
def test_decoder_refuses_a_damaged_checkpoint(run, tmp_path, capsys, damage):
  directory, damaged = _damaged_run(run, tmp_path, damage)
  before = _tree(directory)
  out = tmp_path / "out.de"
  result = _cli("t2t_keras.cli.decoder", [
      f"--data_dir={run['data_dir']}", f"--output_dir={directory}",
      f"--decode_from_file={run['source']}", f"--decode_to_file={out}"], capsys)
  _refused(result, damaged)
  assert not out.exists() and _tree(directory) == before


@pytest.mark.parametrize("damage", CHECKPOINT_DAMAGE)
def test_exporter_refuses_a_damaged_checkpoint(run, tmp_path, capsys, damage):
  directory, damaged = _damaged_run(run, tmp_path, damage)
  before = _tree(directory)
  export_dir = tmp_path / "export"
  result = _cli("t2t_keras.cli.exporter", [
      f"--data_dir={run['data_dir']}", f"--output_dir={directory}",
      f"--export_dir={export_dir}"], capsys)
  _refused(result, damaged)
  assert not export_dir.exists() and _tree(directory) == before


@pytest.mark.parametrize("damage", CHECKPOINT_DAMAGE)
def test_averager_refuses_a_damaged_checkpoint(run, tmp_path, capsys, damage):
  directory, damaged = _damaged_run(run, tmp_path, damage)
  before = _tree(directory)
  result = _cli("t2t_keras.cli.avg_checkpoints", [
      f"--prefix={directory}", "--num_last_checkpoints=1"], capsys)
  _refused(result, damaged)
  assert _tree(directory) == before  # no averaged/ directory either


def _trainer_resumes(run, directory, damaged, capsys):
  before = _tree(directory)
  result = _cli("t2t_keras.cli.trainer", [
      f"--output_dir={directory}", "--train_steps=2", "--schedule=train"], capsys)
  _refused(result, damaged, "--start_over")
  after = _tree(directory)
  # The lock file stays, emptied, as after any trainer (run_lock.py: never deleted).
  assert after.pop(lock.LOCK_NAME, EMPTY) == EMPTY and after == before


@pytest.mark.parametrize("damage", CHECKPOINT_DAMAGE)
def test_resuming_trainer_refuses_a_damaged_checkpoint(run, tmp_path, capsys, damage):
  _trainer_resumes(run, *_damaged_run(run, tmp_path, damage), capsys)


def _flip_tensor(prefix, wanted):
  """Flips bytes inside the biggest float tensor of checkpoint `prefix` whose key has
  `wanted` in it; returns its data shard."""
  import numpy as np
  import tensorflow as tf
  reader = tf.train.load_checkpoint(prefix)
  dtypes = reader.get_variable_to_dtype_map()
  key = max((k for k in dtypes if wanted in k and dtypes[k].is_floating),
            key=lambda k: reader.get_tensor(k).size)
  raw = np.ascontiguousarray(reader.get_tensor(key)).tobytes()
  for data in tf.io.gfile.glob(prefix + ".data-*"):
    with open(data, "r+b") as f:
      where = f.read().find(raw)
      if where >= 0:
        f.seek(where + len(raw) // 2)
        f.write(bytes(b ^ 0xFF for b in raw[len(raw) // 2:len(raw) // 2 + 8]))
        return data
  raise AssertionError(f"{key} not found in the data of {prefix}")


@pytest.mark.parametrize("command", ["decoder", "exporter", "avg_checkpoints", "trainer"])
def test_a_crc_mismatch_in_a_checkpoint_too_big_to_verify_is_named(run, tmp_path, capsys,
                                                                   monkeypatch, command):
  # Above FULL_READ_BYTES only sizes are verified: TF finds the CRC mismatch when it reads.
  from t2t_keras import checkpoints
  monkeypatch.setattr(checkpoints, "FULL_READ_BYTES", 0)
  directory = str(tmp_path / "run")
  shutil.copytree(run["run_dir"], directory)
  # The trainer alone reads the optimizer's slots (a restore); the others the model.
  damaged = _flip_tensor(os.path.join(directory, "ckpt-1"),
                         "optimizer/" if command == "trainer" else "model/")
  if command == "trainer":
    _trainer_resumes(run, directory, damaged, capsys)
    return
  before, out = _tree(directory), tmp_path / "out"
  argv = {"decoder": [f"--data_dir={run['data_dir']}", f"--output_dir={directory}",
                      f"--decode_from_file={run['source']}", f"--decode_to_file={out}"],
          "exporter": [f"--data_dir={run['data_dir']}", f"--output_dir={directory}",
                       f"--export_dir={out}"],
          "avg_checkpoints": [f"--prefix={directory}", "--num_last_checkpoints=1"]}[command]
  _refused(_cli(f"t2t_keras.cli.{command}", argv, capsys), damaged, "Checksum does not match")
  assert not out.exists() and _tree(directory) == before


# -- A T2T checkpoint to import ------------------------------------------------------------


def _t2t_copy(tmp_path):
  directory = str(tmp_path / "t2t")
  shutil.copytree(T2T_RUN, directory)
  return directory


@pytest.mark.parametrize("damage", CHECKPOINT_DAMAGE)
def test_import_refuses_a_damaged_t2t_checkpoint(tmp_path, capsys, damage):
  t2t_dir = _t2t_copy(tmp_path)
  prefix = os.path.join(t2t_dir, "model.ckpt-1")
  damaged = _damage_checkpoint(prefix, os.path.join(t2t_dir, T2T_DATA), damage)
  before = _tree(t2t_dir)
  output_dir = tmp_path / "imported"
  result = _cli("t2t_keras.cli.import_checkpoint", [
      f"--t2t_output_dir={t2t_dir}", f"--output_dir={output_dir}"], capsys)
  _refused(result, damaged)
  assert not output_dir.exists() and _tree(t2t_dir) == before
  assert sorted(os.listdir(tmp_path)) == ["t2t"]  # no temporary directory left either


def test_import_names_a_crc_mismatch_in_a_t2t_checkpoint_too_big_to_verify(tmp_path, capsys,
                                                                           monkeypatch):
  from t2t_keras import checkpoints
  monkeypatch.setattr(checkpoints, "FULL_READ_BYTES", 0)
  t2t_dir = _t2t_copy(tmp_path)
  damaged = _flip_tensor(os.path.join(t2t_dir, "model.ckpt-1"), "transformer/body/")
  before = _tree(t2t_dir)
  result = _cli("t2t_keras.cli.import_checkpoint", [
      f"--t2t_output_dir={t2t_dir}", f"--output_dir={tmp_path / 'imported'}"], capsys)
  _refused(result, damaged, "Checksum does not match")
  assert sorted(os.listdir(tmp_path)) == ["t2t"] and _tree(t2t_dir) == before


# -- Vocabularies ----------------------------------------------------------------------------


def _damaged_data_dir(run, tmp_path, damage):
  data_dir = str(tmp_path / "data")
  shutil.copytree(run["data_dir"], data_dir)
  vocab = os.path.join(data_dir, VOCAB)
  _damage_vocab(vocab, damage)
  return data_dir, vocab


def _vocab_command(command, run, tmp_path, data_dir):
  """(module, argv, the output that must stay absent) of `command` reading data_dir's vocab."""
  out = tmp_path / "out"
  if command == "trainer":  # a new run
    return "t2t_keras.cli.trainer", [
        f"--problem={NAME}", f"--data_dir={data_dir}", f"--output_dir={out}",
        "--hparams_set=transformer_tiny", f"--hparams={ONE_LAYER}", "--train_steps=1",
        "--schedule=train"], out
  if command == "decoder":
    return "t2t_keras.cli.decoder", [
        f"--data_dir={data_dir}", f"--output_dir={run['run_dir']}",
        f"--decode_from_file={run['source']}", f"--decode_to_file={out}"], out
  if command == "exporter":
    return "t2t_keras.cli.exporter", [
        f"--data_dir={data_dir}", f"--output_dir={run['run_dir']}", f"--export_dir={out}"], out
  if command == "avg_checkpoints":
    return "t2t_keras.cli.avg_checkpoints", [
        f"--checkpoints={run['run_dir']}/ckpt-1", f"--output_dir={run['run_dir']}",
        f"--data_dir={data_dir}", f"--output_path={out}/averaged.ckpt"], out
  if command == "query":  # encodes with the vocabulary before it connects
    return "t2t_keras.cli.query", [
        "--server=127.0.0.1:9", "--servable_name=transformer",
        "--signature_name=serialized_example", f"--problem={NAME}", f"--data_dir={data_dir}",
        "--inputs_once=the big house"], out
  assert command == "datagen"  # reuses the vocabulary it finds
  text = os.path.join(os.path.dirname(run["data_dir"]), "text")
  return "t2t_keras.cli.datagen", [  # the settings make_tiny_problem gave
      f"--problem={NAME}", f"--data_dir={data_dir}", f"--tmp_dir={tmp_path / 'tmp'}",
      "--vocab_size=200", "--num_shards=2", "--source_lang=en", "--target_lang=de",
      *(f"--{split}_{side}={text}/{split}.{lang}" for split in ("train", "dev", "test")
        for side, lang in (("source", "en"), ("target", "de")))], out


@pytest.mark.parametrize("command", ["trainer", "decoder", "exporter", "avg_checkpoints",
                                     "query", "datagen"])
@pytest.mark.parametrize("damage", VOCAB_DAMAGE)
def test_a_damaged_vocabulary_is_refused(run, tmp_path, capsys, command, damage):
  data_dir, vocab = _damaged_data_dir(run, tmp_path, damage)
  before, run_before = _tree(data_dir), _tree(run["run_dir"])
  module, argv, out = _vocab_command(command, run, tmp_path, data_dir)
  result = _cli(module, argv, capsys)
  _refused(result, vocab)
  assert not out.exists() and (command != "query" or result[1] == "")  # query prints its output
  assert _tree(data_dir) == before and _tree(run["run_dir"]) == run_before


@pytest.mark.parametrize("damage", VOCAB_DAMAGE)
def test_import_refuses_a_damaged_t2t_vocabulary(tmp_path, capsys, damage):
  t2t_dir = _t2t_copy(tmp_path)
  vocab = os.path.join(t2t_dir, T2T_VOCAB)
  _damage_vocab(vocab, damage)
  before = _tree(t2t_dir)
  output_dir = tmp_path / "imported"
  result = _cli("t2t_keras.cli.import_checkpoint", [
      f"--t2t_output_dir={t2t_dir}", f"--output_dir={output_dir}"], capsys)
  _refused(result, vocab)
  assert not output_dir.exists() and _tree(t2t_dir) == before
  assert sorted(os.listdir(tmp_path)) == ["t2t"]


# -- Flagfiles -------------------------------------------------------------------------------

COMMANDS = ["datagen", "trainer", "decoder", "avg_checkpoints", "bleu", "parse_eval",
            "visualize", "exporter", "query", "import_checkpoint"]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", ["binary", "not_flags", "missing"])
def test_a_damaged_flagfile_is_refused(tmp_path, capsys, command, damage):
  flagfile = tmp_path / "run.flags"
  if damage == "binary":  # e.g. --flagfile given a checkpoint or an archive
    flagfile.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe--problem\n")
  elif damage == "not_flags":  # e.g. given the source text: absl passes its lines on
    flagfile.write_text("the big house\na small cat\n", encoding="utf-8")
  result = _cli(f"t2t_keras.cli.{command}", [f"--flagfile={flagfile}"], capsys)
  _refused(result, flagfile)
  assert sorted(p.name for p in tmp_path.iterdir()) == (
      [] if damage == "missing" else ["run.flags"])
