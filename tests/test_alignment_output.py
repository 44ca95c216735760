"""`--decode_hparams=return_alignments=true`: what the decoder writes, on hand-built models
whose encoder-decoder attention is known (tests/support/alignment_models.py builds them); the
hypotheses are forced with a prefix, so the expected pairs are hand-computed. Also the
n-best columns, the decoder command and the refusals (CTranslate2, the SavedModel)."""

import re

import numpy as np
import pytest

from data_gen import text_encoder
import t2t_keras
from t2t_keras.decoding import text_decoder
from t2t_keras.hparams import create_decode_hparams
from tests.support import alignment_models as built
from tests.support.cli import run_cli

# Subword ids: <pad> 0, <EOS> 1, "a_".."e_" 2..6 (the token model's source tokens),
# then what the position model's sentences use ("ka" + "tze_" is one word).
SUBWORDS = ["<pad>", "<EOS>", "a_", "b_", "c_", "d_", "e_", "der_", "ka", "tze_", "hund_",
            "one_", "two_", "three_", "four_", "f_"]


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "align.subwords"
  path.write_text("".join(f"'{s}'\n" for s in SUBWORDS), encoding="utf-8")
  encoder = text_encoder.SubwordTextEncoder(str(path))
  assert encoder.encode("der katze hund") == [7, 8, 9, 10]  # the premise of the cases
  return {"inputs": encoder, "targets": encoder}


def _decode(model, encoders, lines, prefixes, decode_hp):
  decoder = text_decoder.TextDecoder(model, encoders, create_decode_hparams(
      "log_results=false,return_alignments=true," + decode_hp), log=lambda line: None)
  return decoder.decode_lines(lines, prefixes=prefixes)


def _pairs(alignment: str, below: int):
  """The pairs of a Pharaoh string whose target index is below `below`."""
  pairs = [tuple(map(int, p.split("-"))) for p in alignment.split()]
  return " ".join(f"{s}-{t}" for s, t in pairs if t < below)


@pytest.mark.parametrize("level, want", [("subword", "0-0 1-1 2-2 3-3"),
                                         ("word", "0-0 1-1 2-1 3-2")])
def test_position_model_aligns_position_i_to_i_in_subwords_and_words(encoders, level, want):
  """Target subword i attends to source subword i (built.position_model); "katze" is
  two subwords (1, 2) of one word, so at word level both map to word 1."""
  model = built.position_model(vocab_size=len(SUBWORDS))
  out = _decode(model, encoders, ["one two three four"], ["der katze hund"],
                f"beam_size=1,extra_length=0,alignment_level={level}")
  text, alignment = out[0].split(text_decoder.ALIGNMENT_SEPARATOR)
  # All logits are 0 (zero embeddings): after the prefix greedy picks PAD, which the
  # text and the alignment leave out.
  assert text == "der katze hund"
  assert alignment == want


@pytest.mark.parametrize("layer, heads, want", [
    (-1, 0, "sigma_b"), (-1, 1, "identity"), (0, 0, "sigma_a"), (-2, 1, "sigma_a")])
def test_alignment_layer_and_heads_choose_the_attention(encoders, layer, heads, want):
  """built.token_model: each layer/head attends by a known permutation of the tokens;
  the pairs are test_alignments' hand-computed ones for source "a b c d e" and target
  "c a e b d" (its first rows of INPUTS / OUTPUTS)."""
  model = built.token_model(built.HEADS_SPEC)
  out = _decode(model, encoders, ["a b c d e"], ["c a e b d"],
                f"beam_size=1,extra_length=0,alignment_level=subword,"
                f"alignment_layer={layer},alignment_heads={heads}")
  text, alignment = out[0].split(text_decoder.ALIGNMENT_SEPARATOR)
  assert text.split()[:5] == ["c", "a", "e", "b", "d"]
  assert _pairs(alignment, 5) == built.WANT[want][0]


def test_every_n_best_column_carries_its_alignment(encoders):
  model = built.position_model(vocab_size=len(SUBWORDS))
  out = _decode(model, encoders, ["one two three four", ""], ["der katze hund", ""],
                "beam_size=2,extra_length=1,return_beams=true,write_beam_scores=true,"
                "alignment_level=subword")
  columns = out[0].split("\t")
  assert len(columns) == 4  # two beams, each text ||| pairs then score
  # An empty input: as many columns, empty hypotheses scored 0.0, without pairs.
  assert out[1].split("\t") == [text_decoder.ALIGNMENT_SEPARATOR, "0.00"] * 2
  for text_and_pairs in columns[0::2]:
    text, alignment = text_and_pairs.split(text_decoder.ALIGNMENT_SEPARATOR)
    assert text.startswith("der katze hund") and _pairs(alignment, 4) == "0-0 1-1 2-2 3-3"


def test_a_layer_or_head_the_model_lacks_is_refused_before_decoding(encoders):
  model = built.position_model(vocab_size=len(SUBWORDS))  # one layer, one head
  for setting, named in (("alignment_layer=1", "layer must be in [-1, 1)"),
                         ("alignment_heads=2", "heads must be in [0, 1]")):
    with pytest.raises(ValueError, match=re.escape(named)):
      _decode(model, encoders, ["one"], None, setting)


def test_decoder_cli_api_and_refusals(tiny_trained_run, tmp_path, capsys):
  run_dir, data_dir = tiny_trained_run
  run = t2t_keras.open_run(run_dir, data_dir=data_dir)
  lines = ["the big house", "a small red cat runs"]
  api = run.translate(lines, return_alignments=True)
  for line, out in zip(lines, api):
    text, alignment = out.split(text_decoder.ALIGNMENT_SEPARATOR)
    assert text == run.translate([line])[0]  # the text is the decode's, unchanged
    pairs = np.array([list(map(int, p.split("-"))) for p in alignment.split()])
    assert pairs[:, 0].max() < len(line.split()) and pairs[:, 1].max() < len(text.split())
    assert sorted(set(pairs[:, 1])) == list(range(len(text.split())))  # every target word
  source, output = tmp_path / "in.en", tmp_path / "out.de"
  source.write_text("".join(l + "\n" for l in lines), encoding="utf-8")
  args = [f"--output_dir={run_dir}", f"--data_dir={data_dir}", f"--decode_from_file={source}"]
  code, err = run_cli("t2t_keras.cli.decoder", args + [
      f"--decode_to_file={output}", "--decode_hparams=return_alignments=true"], capsys)
  assert code == 0, err[-2000:]
  # Exact on every CPU: the same code, weights and inputs as translate() above.
  assert output.read_text(encoding="utf-8").splitlines() == api
  code, err = run_cli("t2t_keras.cli.decoder", args + [
      "--engine=ctranslate2", "--decode_hparams=return_alignments=true"], capsys)
  assert code == 2 and "needs --engine=tensorflow" in err
  code, err = run_cli("t2t_keras.cli.exporter", [
      f"--output_dir={run_dir}", f"--data_dir={data_dir}", f"--export_dir={tmp_path / 'x'}",
      "--decode_hparams=return_alignments=true"], capsys)
  assert code == 2 and "t2t_keras_decoder writes alignments" in err
  with pytest.raises(ValueError, match="SavedModel returns outputs and scores only"):
    run.export_saved_model(str(tmp_path / "y"), return_alignments=True)
