"""One output line per input line: escaped newlines/tabs a model emits never break a line."""

import pytest

from data_gen import file_io
from t2t_keras.decoding import seq2seq, text_decoder, text_rules
from t2t_keras.hparams import create_decode_hparams
from tests.support import stub_decoding

LINES = ["der Hund", "", "Haus und Katze", "\u2028", "rot"]
ECHO = ["der Hund", "", "Haus und Katze", "", "rot"]  # the inputs as the stub echoes them


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return stub_decoding.build_vocab(str(tmp_path_factory.mktemp("vocab") / "vocab.subwords"))


def _decoder(vocab, monkeypatch, overrides):
  monkeypatch.setattr(seq2seq, "decode_ids",
                      stub_decoding.make_stub(stub_decoding.forced_escape_ids(vocab)))
  logged = []
  decoder = text_decoder.TextDecoder(stub_decoding.NoModel(),
                                    {"inputs": vocab, "targets": vocab},
                                    create_decode_hparams(overrides), log=logged.append)
  return decoder, logged


def test_decode_to_file_keeps_one_line_per_input(vocab, monkeypatch, tmp_path):
  decoder, logged = _decoder(vocab, monkeypatch, "beam_size=1")
  outputs = decoder.decode_lines(LINES)
  # Hand-derived: "Haus" "\n" "Katze" "\t" + echo; each break becomes one space.
  assert outputs == ["Haus Katze " + e if e else "" for e in ECHO]
  path = str(tmp_path / "out.txt")
  file_io.write_lines(path, outputs)  # what --decode_to_file writes
  with open(path, encoding="utf-8") as f:
    assert f.read().split("\n") == outputs + [""]
  replaced = [line for line in logged if "Replaced" in line]
  assert replaced == ["Replaced line breaks/tabs by spaces in 3 output(s) (the model emitted "
                      "escaped newlines or tabs), to keep one line per input."]


def test_return_beams_columns_stay_intact(vocab, monkeypatch, tmp_path):
  decoder, logged = _decoder(vocab, monkeypatch,
                             "beam_size=3,return_beams=true,write_beam_scores=true")
  outputs = decoder.decode_lines(LINES)
  path = str(tmp_path / "nbest.txt")
  file_io.write_lines(path, outputs)
  with open(path, encoding="utf-8") as f:
    rows = f.read().split("\n")[:-1]
  assert len(rows) == len(LINES)
  for row, echo in zip(rows, ECHO):
    if not echo:  # an empty input: 3 empty hypotheses, each scored 0.0
      assert row.split("\t") == ["", "0.00"] * 3
      continue
    columns = row.split("\t")
    assert len(columns) == 6  # 3 beams x (text, score)
    assert columns[0::2] == ["Haus Katze " + echo] * 3
    assert [float(c) for c in columns[1::2]] == pytest.approx(
        [float(columns[1]) - k for k in range(3)])
  replaced = [line for line in logged if "Replaced" in line]
  assert len(replaced) == 1 and " 9 output(s)" in replaced[0]


def test_clean_output_covers_every_line_break():
  # Everything str.splitlines splits at, plus tab; nothing else changes.
  breaks = [chr(c) for c in range(0x110000) if len(("a" + chr(c) + "b").splitlines()) > 1]
  assert sorted(text_rules.OUTPUT_BREAKS) == sorted(breaks + ["\t"])
  text = "a" + "b".join(breaks) + "\tz\u00a0é"
  cleaned = text_rules.clean_output(text)
  assert len(cleaned.splitlines()) == 1 and "\t" not in cleaned
  assert cleaned == "a" + "b".join(" " * len(breaks)) + " z\u00a0é"
