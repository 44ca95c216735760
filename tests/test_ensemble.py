"""Ensembles: two trained runs decode as T2T's search (NumPy port) on the mean of their
log-probabilities; scoring; an ensemble of one; vocabulary mismatch; the decoder CLI
and the SavedModel holding both."""

import os

import numpy as np
import pytest
import tensorflow as tf

import t2t_keras
from t2t_keras.decoding import beam_search, ensemble, seq2seq
from t2t_keras.hparams import create_decode_hparams
from tests.support import near_ties, t2t_numpy_decoding as t2t
from tests.support.cli import run_cli
from tests.support.trained_fixture import SMALL, train_tiny_run

# Two float32 computations of one model's scores lie within this (tolerances.SCORE_EPS);
# the ensemble's are a mean of two such, so the same bound holds.
SCORE_EPS = 1e-4
LINES = ["the big house", "a small red cat runs and the dog sees", "old", "the dog",
         "a green cat sees the old house and a blue dog", "new red", "the cat runs",
         "a dog and a cat"]


@pytest.fixture(scope="module")
def runs(tiny_trained_run, tmp_path_factory):
  """(run A, run B, data_dir): two runs on one vocabulary, B smaller and from
  another seed, so their log-probabilities differ."""
  run_a, data_dir = tiny_trained_run
  run_b, _ = train_tiny_run(str(tmp_path_factory.mktemp("member_b")), steps=300,
                            overrides=SMALL.replace("hidden_size=64", "hidden_size=32"),
                            seed=7, data_dir=data_dir)
  return run_a, run_b, data_dir


@pytest.fixture(scope="module")
def opened(runs):
  run_a, run_b, data_dir = runs
  return t2t_keras.open_run([run_a, run_b], data_dir=data_dir)


def _log_softmax(x):
  x = np.asarray(x, np.float64)
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _mean_logits_fn(models, row):
  """The NumPy port's logits_fn of the ensemble for one sentence: the mean, in
  float64, of each member's log-softmax over its own full decoder pass."""
  fns = [near_ties.full_pass_logits_fn(m, row) for m in models]
  return lambda prefix: np.mean([_log_softmax(fn(prefix)) for fn in fns], axis=0)


def _rows(encoders, lines):
  return [encoders["inputs"].encode(s) + [1] for s in lines]


def _padded(rows):
  width = max(map(len, rows))
  return np.array([r + [0] * (width - len(r)) for r in rows], np.int32)


def test_ensemble_decodes_as_t2t_search_on_the_mean_log_probs(opened):
  members = [m.model for m in opened.members]
  assert isinstance(opened.model, ensemble.Ensemble) and len(members) == 2
  assert members[0].hparams.hidden_size == 64 and members[1].hparams.hidden_size == 32
  rows = _rows(opened.encoders, LINES)
  x = tf.constant(_padded(rows))
  extra, alpha, vocab = 10, 0.6, opened.model.target_vocab_size
  fns = {name: seq2seq.make_decode_fn(opened.model, create_decode_hparams(
      f"beam_size={beam},alpha={alpha},extra_length={extra},return_beams=true"))
         for name, beam in (("nbest", 4), ("greedy", 1))}
  alone = [seq2seq.make_decode_fn(m, create_decode_hparams(
      f"beam_size=4,alpha={alpha},extra_length={extra}"))(x)[1].numpy() for m in members]
  got = {name: [t.numpy() for t in fn(x)] for name, fn in fns.items()}
  ties = 0
  for i, row in enumerate(rows):
    port_fn, cap = _mean_logits_fn(members, row), len(row) + extra
    margins = {"nbest": [], "greedy": []}
    nbest = t2t.t2t_beam_search(port_fn, 4, alpha, cap, vocab, stop_early=False,
                                margins=margins["nbest"])
    greedy = t2t.t2t_greedy(port_fn, cap, margins=margins["greedy"])
    for ids, scores, (want_ids, want_scores), kind in (
        (got["nbest"][0][i], got["nbest"][1][i], nbest, "nbest"),
        (got["greedy"][0][i], got["greedy"][1][i], (greedy[0][None], np.array([greedy[1]])),
         "greedy")):
      if not near_ties.same(ids, want_ids):
        assert min(margins[kind]) <= 2 * SCORE_EPS, (i, kind, ids, want_ids)
        ties += 1
        continue
      real = want_scores > -beam_search.INF / 2
      np.testing.assert_allclose(scores[real], want_scores[real], rtol=1e-5, atol=SCORE_EPS)
  assert ties <= len(rows) // 4, ties
  # The mean is neither member: the top scores are the ensemble's own.
  for member_scores in alone:
    assert np.max(np.abs(got["nbest"][1][:, 0] - member_scores)) > 1e-2, member_scores


def test_ensemble_scores_are_log_probs_of_the_mean_distribution(opened):
  """score(): sum over target tokens of log softmax(mean of the members' log-softmax)."""
  sources, targets = LINES[:4], ["der groß Haus", "ein klein rot Katze", "alt", "Hund der"]
  got = opened.score(sources, targets)
  for source, target, score in zip(sources, targets, got):
    x = tf.constant([opened.encoders["inputs"].encode(source) + [1]])
    y = opened.encoders["targets"].encode(target) + [1]
    logits = [m.model({"inputs": x, "targets": tf.constant([y])}).numpy()[0]
              for m in opened.members]
    mean = _log_softmax(np.mean([_log_softmax(l) for l in logits], axis=0))
    want = sum(mean[t, token] for t, token in enumerate(y))
    assert score == pytest.approx(want, abs=SCORE_EPS)
  assert got[0] > got[3] + 1.0  # the right translation beats a scrambled one


def test_an_ensemble_of_one_is_the_model(runs):
  run_a, _, data_dir = runs
  alone = t2t_keras.open_run(run_a, data_dir=data_dir)
  one = t2t_keras.open_run([run_a], data_dir=data_dir)
  assert ensemble.ensemble([alone.model]) is alone.model
  assert one.members == [] and not isinstance(one.model, ensemble.Ensemble)
  assert one.checkpoint_path == alone.checkpoint_path
  # Exact on every CPU: the same checkpoint, code, process and kernels on both sides.
  assert one.translate(LINES) == alone.translate(LINES)
  assert one.score(LINES[:2], ["der groß Haus", "ein"]) == alone.score(
      LINES[:2], ["der groß Haus", "ein"])


def test_a_model_ensembled_with_itself_decodes_as_alone(runs):
  """(l + l) / 2 == l exactly, so only the search's renormalisation of l (a few ulp)
  parts the two: equal decodes, or a near-tie; scores within SCORE_EPS."""
  run_a, _, data_dir = runs
  model = t2t_keras.open_run(run_a, data_dir=data_dir).model
  twice = ensemble.Ensemble([model, model])
  encoders = t2t_keras.open_run(run_a, data_dir=data_dir).encoders
  rows = _rows(encoders, LINES)
  x = tf.constant(_padded(rows))
  dhp = create_decode_hparams("beam_size=4,alpha=0.6,extra_length=10")
  near_ties.assert_decodes_equal_or_near_tie(
      seq2seq.make_decode_fn(twice, dhp)(x), seq2seq.make_decode_fn(model, dhp)(x),
      near_ties.model_margin_of(model, rows, 4, 0.6, 10, model.target_vocab_size),
      SCORE_EPS, "model twice vs alone")


def test_cached_equals_uncached_for_the_ensemble(opened):
  rows = _rows(opened.encoders, LINES[:4])
  x = tf.constant(_padded(rows))
  dhp = create_decode_hparams("beam_size=3,alpha=0.6,extra_length=8")
  members = [m.model for m in opened.members]

  def margin_of(i):
    return near_ties.reference_margin(_mean_logits_fn(members, rows[i]), 3, 0.6,
                                      len(rows[i]) + 8, opened.model.target_vocab_size)

  near_ties.assert_decodes_equal_or_near_tie(
      seq2seq.make_decode_fn(opened.model, dhp, use_cache=True)(x),
      seq2seq.make_decode_fn(opened.model, dhp, use_cache=False)(x), margin_of, SCORE_EPS,
      "ensemble cached vs uncached")


def _other_vocabulary_run(root):
  """A run of translate_from_files on other words (another vocabulary), 5 steps."""
  from data_gen.translate_from_files import TranslateFromFiles
  text = os.path.join(root, "text")
  os.makedirs(text)
  pairs = [("one two three", "eins zwei drei"), ("four five", "vier fünf"),
           ("six seven eight nine", "sechs sieben acht neun")] * 40
  for split in ("train", "dev"):
    for side, lang in ((0, "en"), (1, "de")):
      with open(os.path.join(text, f"{split}.{lang}"), "w", encoding="utf-8") as f:
        f.write("".join(p[side] + "\n" for p in pairs))
  problem = TranslateFromFiles(*(os.path.join(text, n) for n in (
      "train.en", "train.de", "dev.en", "dev.de")), vocab_size=100)
  data_dir = os.path.join(root, "data")
  problem.generate_data(data_dir, os.path.join(root, "tmp"), num_shards=1)
  return train_tiny_run(root, steps=5, data_dir=data_dir)[0]


def test_members_with_another_vocabulary_are_refused_in_one_line(runs, tmp_path, capsys):
  run_a, _, data_dir = runs
  other = _other_vocabulary_run(str(tmp_path))
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--checkpoint_path={run_a},{other}", f"--data_dir={data_dir}",
      f"--output_dir={run_a}", "--decode_interactive"], capsys)
  assert code == 2
  lines = [l for l in err.splitlines() if "ensemble members need the same vocabulary" in l]
  assert len(lines) == 1 and other in lines[0] and run_a in lines[0], err[-2000:]
  assert "Traceback" not in err


def test_decoder_cli_decodes_the_ensemble_as_the_api(runs, opened, tmp_path, capsys):
  run_a, run_b, data_dir = runs
  source, output = tmp_path / "in.en", tmp_path / "out.de"
  source.write_text("".join(l + "\n" for l in LINES), encoding="utf-8")
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--checkpoint_path={run_a},{run_b}", f"--data_dir={data_dir}",
      f"--output_dir={run_a}", f"--decode_from_file={source}", f"--decode_to_file={output}",
      "--decode_hparams=beam_size=4,alpha=0.6,extra_length=10"], capsys)
  assert code == 0, err[-2000:]
  # Exact on every CPU: the same code, weights, inputs and kernels in one process.
  assert output.read_text(encoding="utf-8").splitlines() == opened.translate(
      LINES, beam_size=4, alpha=0.6, extra_length=10)
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--checkpoint_path={run_a},{run_b}", f"--data_dir={data_dir}",
      f"--output_dir={run_a}", f"--decode_from_file={source}", "--engine=ctranslate2"], capsys)
  assert code == 2 and "ensemble" in err and "--engine=tensorflow" in err


def test_one_saved_model_holds_the_ensemble(opened, tmp_path):
  version = opened.export_saved_model(str(tmp_path / "export"),
                                      "beam_size=4,alpha=0.6,extra_length=10")
  loaded = tf.saved_model.load(version)
  # Every weight of both members is in the one SavedModel.
  assert len(loaded.model_variables) == sum(len(m.model.variables) for m in opened.members)
  out = loaded.signatures["serving_default"](inputs=tf.constant(LINES))
  served = [o.decode("utf-8") for o in out["outputs"].numpy()]
  expected = opened.translate(LINES, beam_size=4, alpha=0.6, extra_length=10)
  rows = _rows(opened.encoders, LINES)
  members = [m.model for m in opened.members]

  def margin_of(i):
    return near_ties.reference_margin(_mean_logits_fn(members, rows[i]), 4, 0.6,
                                      len(rows[i]) + 10, opened.model.target_vocab_size)

  near_ties.assert_equal_or_near_tie(served, expected, margin_of, SCORE_EPS,
                                     "ensemble SavedModel vs decoder")
  assert sum(bool(s) for s in served) == len(LINES)
