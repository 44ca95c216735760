"""The commands on a language model's run: `t2t_keras_decoder` continues the prompts of
--decode_from_file (and scores --score_file's texts) as `open_run(...).sample` and
`.score` do; `t2t_keras_exporter` writes a SavedModel that a stock TF Serving start-up
(tests/support/tf_serving_harness.py: XLA disabled, session loader, warm-up replay)
serves with the decoder's output. The run is a random-weights LM (tests/support/lm_run.py)."""

import io
import sys

import numpy as np
import pytest

import t2t_keras
from t2t_keras.decoding.text_rules import clean_output
from tests.support import tf_serving_harness
from tests.support.cli import run_cli_output
from tests.support.lm_run import make_lm_run

PROMPTS = ["the cat", "a big red dog sees", "", "the house.", "red"]
TEXTS = ["the cat sees the dog.", "a red house", "", "dog dog dog"]
SAMPLING = "beam_size=1,sampling_method=random,sampling_temp=0.9,sampling_keep_top_k=20"


@pytest.fixture(scope="module")
def lm_dirs(tmp_path_factory):
  root = tmp_path_factory.mktemp("lm_commands")
  run_dir, data_dir = make_lm_run(str(root))
  (root / "prompts.txt").write_text("".join(p + "\n" for p in PROMPTS), encoding="utf-8")
  (root / "texts.txt").write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
  return dict(run_dir=run_dir, data_dir=data_dir, root=root)


@pytest.fixture(scope="module")
def opened(lm_dirs):
  return t2t_keras.open_run(lm_dirs["run_dir"])


def _decode(lm_dirs, capsys, *flags, name="out.txt"):
  """(exit status, stderr, the output file's lines or None) of the decoder."""
  out = lm_dirs["root"] / name
  if out.exists():
    out.unlink()
  code, _, err = run_cli_output("t2t_keras.cli.decoder", [
      f"--output_dir={lm_dirs['run_dir']}", f"--data_dir={lm_dirs['data_dir']}",
      f"--decode_to_file={out}", *flags], capsys)
  lines = out.read_text(encoding="utf-8").split("\n")[:-1] if out.exists() else None
  return code, err, lines


def _continuations(samples):
  return [clean_output(s.text) for s in samples]


def test_decoder_continues_each_prompt_as_the_api_greedy_and_sampling(lm_dirs, opened, capsys):
  prompts = f"--decode_from_file={lm_dirs['root'] / 'prompts.txt'}"
  code, err, lines = _decode(lm_dirs, capsys, prompts,
                             "--decode_hparams=beam_size=1,extra_length=6")
  assert code == 0, err[-2000:]
  greedy = opened.sample(PROMPTS, max_new_tokens=6, temperature=0)
  assert lines == _continuations(greedy) and len(lines) == len(PROMPTS)
  assert sum(bool(line) for line in lines) >= 3  # not vacuous: continuations were written
  code, err, lines = _decode(lm_dirs, capsys, prompts, "--random_seed=5",
                             f"--decode_hparams={SAMPLING},extra_length=6")
  assert code == 0, err[-2000:]
  sampled = opened.sample(PROMPTS, max_new_tokens=6, temperature=0.9, top_k=20, seed=5)
  assert lines == _continuations(sampled) and lines != _continuations(greedy)


def test_decoder_beam_search_and_interactive_prompts_as_the_api(lm_dirs, opened, capsys,
                                                               monkeypatch):
  code, err, lines = _decode(lm_dirs, capsys,
                             f"--decode_from_file={lm_dirs['root'] / 'prompts.txt'}",
                             "--decode_hparams=beam_size=3,alpha=0.6,extra_length=5")
  assert code == 0, err[-2000:]
  assert lines == _continuations(opened.sample(PROMPTS, max_new_tokens=5, beam_size=3))
  monkeypatch.setattr(sys, "stdin", io.StringIO("the cat\nred\n"))
  code, out, err = run_cli_output("t2t_keras.cli.decoder", [
      f"--output_dir={lm_dirs['run_dir']}", f"--data_dir={lm_dirs['data_dir']}",
      "--decode_interactive", "--decode_hparams=beam_size=1,extra_length=4,log_results=false"],
      capsys)
  assert code == 0, err[-2000:]
  assert out.splitlines() == _continuations(
      [opened.sample([p], max_new_tokens=4, temperature=0)[0] for p in ("the cat", "red")])


def test_score_file_writes_log_prob_and_perplexity_per_input_line(lm_dirs, opened, capsys):
  code, err, lines = _decode(lm_dirs, capsys, f"--score_file={lm_dirs['root'] / 'texts.txt'}")
  assert code == 0, err[-2000:]
  assert len(lines) == len(TEXTS)
  for line, score in zip(lines, opened.score(TEXTS)):
    log_prob, perplexity = map(float, line.split("\t"))
    assert log_prob == pytest.approx(score.log_prob, abs=1e-5)
    assert perplexity == pytest.approx(score.perplexity, rel=1e-5)
    assert perplexity == pytest.approx(np.exp(-log_prob / score.tokens), rel=1e-4)


@pytest.mark.parametrize("flags, message", [
    (["--decode_from_file=PROMPTS", "--decode_hparams=return_beams=true"], "return_beams"),
    (["--decode_from_file=PROMPTS", "--decode_hparams=extra_length=0"], "extra_length"),
    (["--decode_from_file=PROMPTS", "--decode_prefix_file=PROMPTS"],
     "--decode_prefix_file does not apply"),
    (["--decode_from_file=PROMPTS", "--engine=ctranslate2"], "--engine=ctranslate2"),
    ([], "No input"),
    (["--decode_from_file=PROMPTS", "--score_file=TEXTS"], "--decode_from_file and --score_file"),
    (["--decode_from_file=MISSING"], "missing.txt"),
    (["--score_file=TEXTS", "--decode_hparams=sampling_method=random,beam_size=1,"
      "sampling_keep_top_k=1000"], "sampling_keep_top_k"),
])
def test_bad_input_is_one_line_exit_2_and_no_file(lm_dirs, capsys, flags, message):
  paths = {"PROMPTS": "prompts.txt", "TEXTS": "texts.txt", "MISSING": "missing.txt"}
  for name, file in paths.items():
    flags = [f.replace(name, str(lm_dirs["root"] / file)) for f in flags]
  code, err, lines = _decode(lm_dirs, capsys, *flags, name="bad.txt")
  assert code == 2 and lines is None, err[-2000:]
  last = err.strip().splitlines()[-1]
  assert "error:" in last and message in last, err[-2000:]
  assert "Traceback" not in err


@pytest.fixture(scope="module")
def exported(lm_dirs):
  """The base path of the exporter command's SavedModel of the run (sampling, seed 5)."""
  from absl import flags
  from t2t_keras.cli import exporter
  export_dir = lm_dirs["root"] / "export"
  flags.FLAGS.unparse_flags()
  argv, sys.argv = sys.argv, ["t2t_keras_exporter", f"--output_dir={lm_dirs['run_dir']}",
                              f"--data_dir={lm_dirs['data_dir']}", f"--export_dir={export_dir}",
                              "--random_seed=5", f"--decode_hparams={SAMPLING},extra_length=6"]
  try:
    with pytest.raises(SystemExit) as exit_info:
      exporter.run()
  finally:
    sys.argv = argv
    flags.FLAGS.unparse_flags()
  assert not exit_info.value.code
  return str(export_dir)


def test_exported_language_model_is_served_with_the_decoders_output(lm_dirs, opened, exported,
                                                                    capsys):
  code, err, decoded = _decode(lm_dirs, capsys, "--random_seed=5",
                               f"--decode_hparams={SAMPLING},extra_length=6",
                               f"--decode_from_file={lm_dirs['root'] / 'prompts.txt'}")
  assert code == 0, err[-2000:]
  with tf_serving_harness.serve(exported, "lm") as server:
    assert server.version == 1 and server.project_modules == []
    assert server.warmup_replayed == 2  # one request per signature
    requests = [p.encode("utf-8") for p in PROMPTS] + [b"\xff"]  # the last: not UTF-8
    got = server.predict("serving_default", {"inputs": np.array(requests, object)})
    scores = server.predict("score", {"inputs": np.array(TEXTS, object)})
  texts = [v.decode("utf-8") for v in got["outputs"]]
  assert texts[:-1] == decoded, (texts, decoded)
  assert texts[-1] == "" and got["errors"][-1] and not got["errors"][:-1].any()
  # The decoder's --score_file lines are the run's scores (test above).
  for score, log_prob, tokens, perplexity in zip(opened.score(TEXTS), scores["log_prob"],
                                                 scores["tokens"], scores["perplexity"]):
    assert (log_prob, perplexity) == pytest.approx((score.log_prob, score.perplexity), rel=1e-5)
    assert tokens == score.tokens
