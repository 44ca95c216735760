"""Bad decode hparams and Python-API arguments: one-line errors naming the argument and
its value, before any model is loaded or anything decoded.

A new user's mistakes on a tiny run, an ensemble (the tiny run twice: no second
training) and a language model (random weights, byte vocabulary): the decoder command
exits with status 2 and one line `<command>: error: ...`; the Python API raises a
ValueError. Texts are lists everywhere (translate, score, the LM functions, an
ensemble's): one string is refused, not read character by character.
"""

import pytest

from data_gen.text_encoder import ByteTextEncoder
import t2t_keras
from t2t_keras.decoding import lm as lm_lib
from tests.support.cli import run_cli_output
from tests.support.random_lm import lm

BYTES = 258  # ByteTextEncoder: 2 reserved ids + 256 bytes


@pytest.fixture(scope="module")
def opened(tiny_trained_run):
  run_dir, data_dir = tiny_trained_run
  return t2t_keras.open_run(run_dir, data_dir=data_dir)


@pytest.fixture(scope="module")
def ensemble_run(tiny_trained_run):
  """The tiny run ensembled with itself: an ensemble, at the cost of a second load."""
  run_dir, data_dir = tiny_trained_run
  return t2t_keras.open_run([run_dir, run_dir], data_dir=data_dir)


@pytest.fixture(scope="module")
def language_model():
  return lm("transformer_base", vocab=BYTES, seed=3), ByteTextEncoder()


def _one_line_error(code, err, *names):
  """Exit status 2, one `error:` line naming each of `names`, no model loaded first."""
  lines = [line for line in err.splitlines() if line.strip()]
  errors = [line for line in lines if ": error: " in line]
  assert code == 2 and len(errors) == 1, err[-3000:]
  assert "Traceback" not in err and "Loaded " not in err, err[-3000:]
  for name in names:
    assert name in errors[0], (name, errors[0])
  return errors[0]


def _single_line(error) -> str:
  text = str(error.value)
  assert "\n" not in text and "in user code" not in text, text
  return text


@pytest.mark.parametrize("setting, names", [
    ("return_alignments=true,alignment_layer=99", ("alignment_layer", "99")),
    ("return_alignments=true,alignment_layer=-3", ("alignment_layer", "-3")),
    ("return_alignments=true,alignment_heads=5", ("alignment_heads", "5")),
    ("beam_size=1,sampling_method=random,sampling_keep_top_k=100000",
     ("sampling_keep_top_k", "100000")),
    ("alpha=nan", ("alpha", "nan")),
    ("sampling_temp=nan", ("sampling_temp", "nan")),
    ("beam_size=0", ("beam_size", "0")),
    ("alpha=-1", ("alpha", "-1")),
    ("extra_length=-1", ("extra_length", "-1")),
    ("batch_size=-1", ("batch_size", "-1")),
    ("sampling_temp=-1", ("sampling_temp", "-1")),
    ("sampling_keep_top_k=0", ("sampling_keep_top_k", "0")),
    ("write_beam_scores=true", ("write_beam_scores",)),
    ("num_samples=0", ("num_samples", "0")),
    ("alignment_level=char", ("alignment_level", "char")),
])
def test_decoder_refuses_each_bad_decode_hparam_in_one_line_before_loading(
    tiny_trained_run, tmp_path, capsys, setting, names):
  # The tiny run has 2 decoder layers, 4 heads and a vocabulary of far fewer than 100000.
  run_dir, data_dir = tiny_trained_run
  source = tmp_path / "in.txt"
  source.write_text("the big house\n", encoding="utf-8")
  code, out, err = run_cli_output("t2t_keras.cli.decoder", [
      f"--output_dir={run_dir}", f"--data_dir={data_dir}", f"--decode_from_file={source}",
      f"--decode_hparams={setting}"], capsys)
  _one_line_error(code, err, *names)
  assert out == ""


def test_alignment_selection_is_checked_in_translate_naming_the_hparam(opened):
  with pytest.raises(ValueError) as error:
    opened.translate(["the big house"], return_alignments=True, alignment_layer=99)
  text = _single_line(error)
  assert "alignment_layer" in text and "99" in text and "alignment_heads" not in text


@pytest.mark.parametrize("call", [
    lambda run: run.translate("the big house"),
    lambda run: run.score("the big house", "das Haus"),
    lambda run: run.score("ab", "cd"),  # one text each, same length: no length mismatch
    lambda run: run.translate(["the big house"], prefix="der"),
])
def test_one_string_is_refused_by_translate_and_score_alone_and_in_an_ensemble(
    opened, ensemble_run, call):
  for run in (opened, ensemble_run):
    with pytest.raises(ValueError, match="takes a list of") as error:
      call(run)
    assert "pass [" in _single_line(error)


def test_one_string_is_refused_by_the_language_model_functions(language_model):
  model, encoder = language_model
  with pytest.raises(ValueError, match=r"takes a list of texts.*pass \['Der mann'\]"):
    lm_lib.score_texts(model, encoder, "Der mann")
  with pytest.raises(ValueError, match=r"takes a list of prompts.*pass \['Der mann'\]"):
    lm_lib.sample_texts(model, encoder, "Der mann", max_new_tokens=3)


@pytest.mark.parametrize("bad, shown", [(None, "None"), (5, "5"), (["x"], "['x']"),
                                        (b"\xff\xfe", r"b'\xff\xfe'")])
def test_a_bad_item_is_named_with_its_index(opened, ensemble_run, language_model, bad, shown):
  model, encoder = language_model
  calls = {
      "sentences[1]": lambda: opened.translate(["the big house", bad]),
      "sentences[0]": lambda: ensemble_run.translate([bad]),
      "prefix[1]": lambda: opened.translate(["a", "b"], prefix=["", bad]),
      "targets[0]": lambda: opened.score(["the big house"], [bad]),
      "texts[2]": lambda: lm_lib.score_texts(model, encoder, ["a", "b", bad]),
      "prompts[0]": lambda: lm_lib.sample_texts(model, encoder, [bad], max_new_tokens=2),
  }
  for name, call in calls.items():
    with pytest.raises(ValueError) as error:
      call()
    text = _single_line(error)
    assert name in text and shown in text, (name, text)


def test_utf8_bytes_are_taken_as_their_text(opened, language_model):
  model, encoder = language_model
  line = "the big house"
  # Greedy: the fastest search to trace; bytes and str in one batch, so one decode each.
  assert len(set(opened.translate([line.encode("utf-8"), line], beam_size=1))) == 1
  # Scores of two equal rows of one batch may differ in float32's last bits (oneDNN's
  # AVX2 kernels: -43.6337776 against -43.6337738); bytes read as their repr would
  # change the text, and the score by whole nats.
  from_bytes, from_text = opened.score([line.encode(), line], [b"der gross Haus",
                                                               "der gross Haus"])
  assert from_bytes == pytest.approx(from_text, rel=1e-6, abs=1e-6)
  from_bytes, from_text = lm_lib.score_texts(model, encoder, ["M\u00fcnchen".encode("utf-8"),
                                                              "M\u00fcnchen"])
  assert from_bytes == pytest.approx(from_text, rel=1e-6, abs=1e-6)


def test_beam_size_zero_is_blamed_on_beam_size_not_n_best(opened):
  with pytest.raises(ValueError) as error:
    opened.translate(["the big house"], beam_size=0)
  text = _single_line(error)
  assert "beam_size" in text and "got 0" in text and "n_best" not in text
  with pytest.raises(ValueError, match=r"n_best must be .*got '2'"):
    opened.translate(["the big house"], n_best="2")


def test_translate_refuses_the_decode_hparams_it_sets_from_n_best(opened):
  # With write_beam_scores each score would come back as a hypothesis.
  for name in ("write_beam_scores", "return_beams"):
    with pytest.raises(ValueError) as error:
      opened.translate(["the big house"], beam_size=2, n_best=2, **{name: True})
    assert name in _single_line(error)


def test_no_prompts_sample_nothing(language_model):
  model, encoder = language_model
  assert lm_lib.sample_texts(model, encoder, [], max_new_tokens=3) == []
  assert lm_lib.sample_ids(model, [], max_new_tokens=3) == []
  assert lm_lib.score_texts(model, encoder, []) == []


@pytest.mark.parametrize("settings, names", [
    (dict(temperature=-1.0), ("temperature", "-1.0")),
    (dict(temperature=float("nan")), ("temperature", "nan")),
    (dict(top_k=0), ("top_k", "0")),
    (dict(top_k=BYTES + 1), ("top_k", str(BYTES + 1))),
    (dict(seed="a"), ("seed", "'a'")),
])
def test_sampling_settings_are_plain_errors_before_tensorflow(language_model, settings,
                                                              names):
  model, encoder = language_model
  for call in (lambda: lm_lib.sample_texts(model, encoder, ["ab"], 3, **settings),
               lambda: lm_lib.sample_ids(model, [[5]], 3, **settings)):
    with pytest.raises(ValueError) as error:
      call()
    text = _single_line(error)
    assert all(name in text for name in names), text


def test_an_empty_input_gets_n_empty_hypotheses(opened, ensemble_run, tiny_trained_run,
                                                tmp_path, capsys):
  for run in (opened, ensemble_run):  # no model runs for empty inputs alone
    assert run.translate([""], beam_size=3, n_best=3) == [["", "", ""]]
  nbest = opened.translate(["the big house", "", "a red cat"], beam_size=3, n_best=2)
  assert [len(n) for n in nbest] == [2, 2, 2] and nbest[1] == ["", ""]
  run_dir, data_dir = tiny_trained_run
  source = tmp_path / "in.txt"
  source.write_text("the big house\n\na red cat\n", encoding="utf-8")
  code, out, err = run_cli_output("t2t_keras.cli.decoder", [
      f"--output_dir={run_dir}", f"--data_dir={data_dir}", f"--decode_from_file={source}",
      "--decode_hparams=beam_size=3,return_beams=true,write_beam_scores=true,"
      "log_results=false"], capsys)
  assert code == 0, err[-3000:]
  lines = out.splitlines()
  assert [len(line.split("\t")) for line in lines] == [6, 6, 6]  # 3 x (text, score)
  # An empty input's hypotheses are not decoded: each scores 0.0 (the SavedModel's
  # score of an empty row).
  assert lines[1] == "\t0.00\t\t0.00\t\t0.00"


@pytest.mark.parametrize("members", ["{run},", ",{run}", "{run},,{run}", "{run}, "])
def test_an_empty_ensemble_member_is_refused_in_one_line(tiny_trained_run, tmp_path, capsys,
                                                         monkeypatch, members):
  run_dir, data_dir = tiny_trained_run
  # From the run's parent: an empty member would otherwise be taken as the working
  # directory (here a directory without a run).
  monkeypatch.chdir(tmp_path)
  source = tmp_path / "in.txt"
  source.write_text("the big house\n", encoding="utf-8")
  code, _, err = run_cli_output("t2t_keras.cli.decoder", [
      f"--checkpoint_path={members.format(run=run_dir)}", f"--data_dir={data_dir}",
      f"--decode_from_file={source}"], capsys)
  line = _one_line_error(code, err, "--checkpoint_path", "empty")
  assert str(tmp_path) not in line.replace(str(run_dir), "")


@pytest.mark.parametrize("items, named", [
    ([None], "path[0] is None"),
    (["{run}", 5], "path[1] is 5"),
    (["{run}", ""], "path[1] is empty"),
    (["{run}", " "], "path[1] is empty"),
])
def test_open_run_names_a_bad_ensemble_item(tiny_trained_run, items, named):
  run_dir, data_dir = tiny_trained_run
  items = [i.format(run=run_dir) if isinstance(i, str) else i for i in items]
  with pytest.raises(ValueError) as error:
    t2t_keras.open_run(items, data_dir=data_dir)
  assert named in _single_line(error)


def test_open_run_takes_a_path_object_and_refuses_none(tiny_trained_run):
  import pathlib
  run_dir, data_dir = tiny_trained_run
  assert t2t_keras.open_run(pathlib.Path(run_dir), data_dir=data_dir).run_dir.path == run_dir
  with pytest.raises(ValueError) as error:
    t2t_keras.open_run(None)
  assert "open_run" in _single_line(error) and "None" in str(error.value)
