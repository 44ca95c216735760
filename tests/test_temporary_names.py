"""Readers skip exactly what the atomic writers leave behind when killed mid-write.

Each writer of `data_gen/file_io.py` (and the export and datagen writers built on
it) is stopped mid-write; what is on disk then is what a killed run leaves. Every
such name must be recognised by `inputs.is_temporary_file` (a T2T `-train*` glob
matches it), and no finished file's name may be. The injected failure then
checks that the writer removes its temporary itself.
"""

import os

import pytest
import tensorflow as tf

from data_gen import file_io, generator_utils as gu
from t2t_keras.decoding import seq2seq
from t2t_keras.export import saved_model
from t2t_keras.hparams import create_decode_hparams, create_hparams
from t2t_keras.training import inputs
from tests.support import stub_decoding

FINISHED = ["p-train-00000-of-00002", "p-dev-00000-of-00001", "vocab.p.64.subwords",
            "p.train.inputs.txt", "hparams.json", "1", "12", "ckpt-5.index"]


class Killed(Exception):
  """The failure injected mid-write."""


def _stop_mid_write(directory, before):
  """Checks the names that appeared in `directory` since `before`, then raises Killed."""
  leftovers = sorted(set(os.listdir(directory)) - set(before))
  assert leftovers, "nothing is being written"
  for name in leftovers:
    assert inputs.is_temporary_file(os.path.join(directory, name)), name
  raise Killed(leftovers)


def _assert_only(directory, names):
  assert sorted(os.listdir(directory)) == sorted(names)


def test_finished_names_are_not_temporary():
  for name in FINISHED:
    assert not inputs.is_temporary_file(os.path.join("/data", name)), name
    assert inputs.is_temporary_file(file_io.temp_path(os.path.join("/data", name))), name


def test_text_writer(tmp_path):
  def lines():
    yield "a"
    _stop_mid_write(tmp_path, [])

  with pytest.raises(Killed, match=r"p\.train\.inputs\.txt\..*\.incomplete"):
    file_io.write_lines(str(tmp_path / "p.train.inputs.txt"), lines())
  _assert_only(tmp_path, [])


def test_record_writer(tmp_path):
  def records():
    yield b"x"
    _stop_mid_write(tmp_path, [])

  with pytest.raises(Killed, match=r"p-train-00000-of-00002\..*\.incomplete"):
    gu.write_tfrecords_atomic(str(tmp_path / "p-train-00000-of-00002"), records())
  _assert_only(tmp_path, [])


def test_sharded_writer(tmp_path):
  paths = [str(tmp_path / ("p-unshuffled-train-0000%d-of-00002" % i)) for i in range(2)]

  def examples():
    yield {"inputs": [5, 1], "targets": [6, 1]}
    _stop_mid_write(tmp_path, [])

  with pytest.raises(Killed) as killed:
    gu.generate_files(examples(), paths)
  assert len(killed.value.args[0]) == 2  # both shards were being written
  _assert_only(tmp_path, [])


def test_directory_writer(tmp_path):
  (tmp_path / "1").mkdir()
  with pytest.raises(Killed, match=r"run\..*\.incomplete"):
    with file_io.atomic_directory(str(tmp_path / "run")) as write:
      with open(os.path.join(write.tmp, "checkpoint"), "w") as f:
        f.write("x")
      _stop_mid_write(tmp_path, ["1"])
  _assert_only(tmp_path, ["1"])


def test_savedmodel_export(tmp_path, monkeypatch):
  vocab = stub_decoding.build_vocab(str(tmp_path / "vocab.subwords"))
  monkeypatch.setattr(seq2seq, "decode_ids",
                      stub_decoding.make_stub(stub_decoding.forced_escape_ids(vocab)))
  export_dir = tmp_path / "export"
  (export_dir / "1").mkdir(parents=True)
  save = tf.saved_model.save

  def save_then_stop(obj, path, signatures=None):
    save(obj, path, signatures=signatures)
    _stop_mid_write(export_dir, ["1"])

  monkeypatch.setattr(tf.saved_model, "save", save_then_stop)
  with pytest.raises(Killed, match=r"\.incomplete"):
    saved_model.export_saved_model(stub_decoding.NoModel(), create_hparams("transformer_tiny"),
                              create_decode_hparams("beam_size=1"),
                              {"inputs": vocab.filename, "targets": vocab.filename},
                              str(export_dir), {"inputs": vocab, "targets": vocab})
  _assert_only(export_dir, ["1"])
