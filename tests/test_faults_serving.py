"""Serving faults: decoder/SavedModel agreement on nasty input, bad rows, ranks, modes, leftovers.

The model is a stub (`tests/support/stub_decoding.py`): output = "Haus\\nKatze\\t" + the input
echoed, so the text path (normalisation, encode, decode, output clean-up) is tested
exactly, without training.
"""

import os
import socket
import subprocess
import time

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the TF-Text ops the SavedModel uses)

from data_gen import graph_text_encoder, text_encoder, tokenizer
from t2t_keras.decoding import seq2seq, text_decoder, text_rules
from t2t_keras.export import saved_model
from t2t_keras.hparams import create_decode_hparams, create_hparams
from tests.support import stub_decoding

NASTY = ["", " ", "\u2028", "\u00a0", "\u2028\u00a0 \u2029", "\t", "\r", "\x00", "\u200b",
         "\ufeff", "\u0301", "\u3000", "\x85\x0b\x0c", "Haus\u0301", " \u2028Haus\u00a0\t",
         "\u3000der Hund\u3000", "der\x00Hund", "der\tHund", "der\u2028Hund", "Katze\r",
         "rot \u200d", "\ufeffgroß", "\u0600 1", "\u200bneu\u200b", "alt\u00a0und\u00a0neu"]
WHITESPACE_ONLY = NASTY[:10] + NASTY[11:13]  # NASTY[10] is a lone combining mark


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """(loaded SavedModel, TextDecoder, export_dir, version_dir, kept/removed temp dirs)."""
  root = tmp_path_factory.mktemp("serving")
  old_umask = os.umask(0o022)
  mp = pytest.MonkeyPatch()
  live = subprocess.Popen(["sleep", "120"])
  try:
    vocab = stub_decoding.build_vocab(str(root / "vocab.subwords"))
    os.chmod(vocab.filename, 0o600)  # as older datagen wrote it (mkstemp)
    mp.setattr(seq2seq, "decode_ids",
               stub_decoding.make_stub(stub_decoding.forced_escape_ids(vocab)))
    hp, decode_hp = create_hparams("transformer_tiny"), create_decode_hparams("beam_size=1")
    export_dir = str(root / "export")
    temps = _seed_temp_exports(export_dir, live.pid)
    version = saved_model.export_saved_model(stub_decoding.NoModel(), hp, decode_hp,
                                        {"inputs": vocab.filename, "targets": vocab.filename},
                                        export_dir, {"inputs": vocab, "targets": vocab})
    decoder = text_decoder.TextDecoder(stub_decoding.NoModel(),
                                      {"inputs": vocab, "targets": vocab}, decode_hp,
                                      log=lambda line: None)
    yield dict(loaded=tf.saved_model.load(version), decoder=decoder, vocab=vocab,
               export_dir=export_dir, version=version, temps=temps)
  finally:
    live.kill()
    live.wait()
    mp.undo()
    os.umask(old_umask)


def _seed_temp_exports(export_dir, live_pid):
  """Temp dirs as killed / running exporters leave them: {name: kept?}."""
  dead = subprocess.Popen(["true"])
  dead.wait()
  host = socket.gethostname()
  here = host.replace(".", "_")
  temps = {".tmp-export-%d" % dead.pid: False,  # older names: no host
           ".tmp-export-%s-%d" % (host, dead.pid): False,
           ".tmp-export-%s-%d" % (host, live_pid): True,  # a running exporter
           ".tmp-export-other-host-%d" % dead.pid: True,  # cannot tell: kept for a day
           ".tmp-export-other-host-7": False,  # two days old
           ".export.%s-%d.incomplete" % (here, dead.pid): False,
           ".export.%s-%d.incomplete" % (here, live_pid): True,
           ".export.other-host-%d.incomplete" % dead.pid: True,
           ".export.other-host-8.incomplete": False}
  for name in temps:
    os.makedirs(os.path.join(export_dir, name, "variables"))
  old = time.time() - 2 * 86400
  for name in (".tmp-export-other-host-7", ".export.other-host-8.incomplete"):
    os.utime(os.path.join(export_dir, name), (old, old))
  return temps


def _serve(loaded, values):
  out = loaded.signatures["serving_default"](inputs=tf.constant(values, tf.string))
  return ([o.decode("utf-8") for o in out["outputs"].numpy()], out["scores"].numpy(),
          [e.decode("utf-8") for e in out["errors"].numpy()])


def test_one_normalisation_python_and_graph(served):
  graph = served["loaded"].signatures  # keep the module fixture warm
  del graph
  encoder = graph_text_encoder.GraphSubwordEncoder(served["vocab"].filename)
  got = [s.decode("utf-8") for s in encoder.normalize_input(tf.constant(NASTY)).numpy()]
  assert got == [tokenizer.normalize_input(s) for s in NASTY]
  assert [tokenizer.normalize_input(s) for s in WHITESPACE_ONLY] == [""] * len(WHITESPACE_ONLY)
  assert tokenizer.normalize_input(" \u2028Haus\u00a0\t") == "Haus"
  assert tokenizer.normalize_input("der\u2028Hund") == "der\u2028Hund"  # inner kept
  assert tokenizer.normalize_input("\u0600 1") == "\u0600 1"  # number sign kept


def test_decoder_and_saved_model_agree_on_nasty_inputs(served):
  want = served["decoder"].decode_lines(NASTY)
  got, scores, errors = _serve(served["loaded"], NASTY)
  assert got == want
  assert errors == [""] * len(NASTY)
  for line, out, score in zip(NASTY, got, scores):
    if line in WHITESPACE_ONLY:
      assert out == "" and score == 0.0, repr(line)
    else:
      assert out.startswith("Haus Katze ") and "\n" not in out and "\t" not in out
      assert out[len("Haus Katze "):] == text_rules.clean_output(served["vocab"].decode(
          served["vocab"].encode(tokenizer.normalize_input(line))))


def test_invalid_utf8_row_does_not_fail_the_batch(served):
  good = ["der Hund %d" % i if i % 3 else "rot und blau" for i in range(64)]
  batch = [s.encode("utf-8") for s in good]
  bad = {5: b"der \xff Hund", 40: b"\xed\xa0\x80", 63: b"\xc0\x80"}  # bad byte, surrogate, overlong
  for row, value in bad.items():
    batch[row] = value
  out, scores, errors = _serve(served["loaded"], batch)
  want, _, _ = _serve(served["loaded"], good)
  for row in range(64):
    if row in bad:
      assert out[row] == "" and scores[row] == 0.0 and errors[row] == saved_model.INVALID_UTF8_ERROR
    else:
      assert out[row] == want[row] and errors[row] == ""


def test_rank_2_input_is_a_clear_error(served):
  error = tf.errors.InvalidArgumentError
  with pytest.raises(error, match=r"signature input inputs must be a \[batch\] vector"):
    served["loaded"].signatures["serving_default"](inputs=tf.constant([["der Hund", "rot"]]))
  example = saved_model.make_example([5, 1])
  with pytest.raises(error, match=r"signature input input must be a \[batch\] vector"):
    served["loaded"].signatures["serialized_example"](input=tf.constant([[example]]))
  out = served["loaded"].signatures["serialized_example"](input=tf.constant([example]))
  assert out["outputs"].shape[0] == 1


def test_exported_files_and_vocab_are_readable_by_others(served, tmp_path):
  assert os.stat(served["vocab"].filename).st_mode & 0o777 == 0o600  # the seeded old vocab
  modes = {}
  for directory, dirs, files in os.walk(served["version"]):
    for name in dirs + files:
      path = os.path.join(directory, name)
      modes[os.path.relpath(path, served["version"])] = os.stat(path).st_mode & 0o777
  assert modes["assets/vocab.subwords"] == 0o644 and "saved_model.pb" in modes
  assert {m for m in modes.values()} <= {0o644, 0o755}, modes
  vocab = served["vocab"]
  for umask, want in ((0o022, 0o644), (0o027, 0o640), (0o077, 0o600)):
    old = os.umask(umask)
    try:
      path = str(tmp_path / ("v%o" % umask))
      vocab.store_to_file(path)
    finally:
      os.umask(old)
    assert os.stat(path).st_mode & 0o777 == want
    assert text_encoder.SubwordTextEncoder(path).all_subtoken_strings == vocab.all_subtoken_strings


def test_interrupted_exports_are_cleaned_up(served):
  left = sorted(n for n in os.listdir(served["export_dir"])
                if n.startswith((".tmp-export-", ".export")))
  assert left == sorted(n for n, kept in served["temps"].items() if kept)
  assert saved_model.existing_versions(served["export_dir"]) == [1]
