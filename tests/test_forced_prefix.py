"""Forced target prefixes: beam search and greedy equal a NumPy port of T2T's search
that allows only the prefix's ids while inside it; an empty prefix decodes bit for bit
as without; scores count the prefix as scoring does; every search (and lm.py's prompts)
forces through the one step of search_utils; translate() and the decoder CLI."""

import numpy as np
import pytest
import tensorflow as tf

import t2t_keras
from data_gen.text_encoder import EOS_ID
from t2t_keras.decoding import beam_search, sampling, seq2seq
from t2t_keras.decoding import lm as lm_lib
from t2t_keras.hparams import create_decode_hparams, create_hparams
from t2t_keras.model import Transformer
from tests.support import near_ties, random_lm, t2t_numpy_decoding as t2t
from tests.support.cli import run_cli
from tests.support.t2t_numpy_lm import T2TNumpyLM, log_softmax
from tests.support.tolerances import SCORE_EPS

VOCAB = 30


@pytest.fixture(scope="module")
def model():
  tf.keras.utils.set_random_seed(3)
  hp = create_hparams("transformer_tiny", "num_hidden_layers=2,hidden_size=32,filter_size=64,"
                      "num_heads=2")
  m = Transformer(hp, VOCAB, target_space_id=2)
  m.build()
  return m


def _padded(rows, width=None):
  width = width or max(1, max(map(len, rows)))
  return np.array([list(r) + [0] * (width - len(r)) for r in rows], np.int32)


INPUTS = [[5, 9, 1], [7, 3, 12, 4, 1], [2, 8, 1], [11, 6, 14, 20, 17, 1]]
PREFIXES = [[4, 4], [], [13, 2, 25, 7], [9]]


@pytest.mark.parametrize("beam", [1, 4])
def test_prefix_decodes_as_the_port_with_the_prefix_forced(model, beam):
  extra, alpha = 5, 0.6
  dhp = create_decode_hparams(f"beam_size={beam},alpha={alpha},extra_length={extra},"
                              "return_beams=true")
  fn = seq2seq.make_decode_fn(model, dhp, with_prefix=True)
  ids, scores = [t.numpy() for t in fn(tf.constant(_padded(INPUTS)),
                                       tf.constant(_padded(PREFIXES)))]
  ties = 0
  for i, (row, prefix) in enumerate(zip(INPUTS, PREFIXES)):
    port_fn = near_ties.full_pass_logits_fn(model, row)
    cap = max(len(row) + extra, len(prefix) + 1)
    margins = []
    if beam == 1:
      want_ids, score = t2t.t2t_greedy(port_fn, cap, margins=margins, prefix=prefix)
      want_ids, want_scores = want_ids[None], np.array([score])
    else:
      want_ids, want_scores = t2t.t2t_beam_search(port_fn, beam, alpha, cap, VOCAB,
                                                  stop_early=False, margins=margins,
                                                  prefix=prefix)
    real = want_scores > -beam_search.INF / 2
    for hyp in ids[i][real]:  # every hypothesis starts with the prefix
      assert list(hyp[:len(prefix)]) == prefix, (i, hyp, prefix)
    if not near_ties.same(ids[i], want_ids):
      assert min(margins) <= 2 * SCORE_EPS, (i, ids[i], want_ids, min(margins))
      ties += 1
      continue
    np.testing.assert_allclose(scores[i][real], want_scores[real], rtol=1e-5, atol=SCORE_EPS)
  assert ties <= 1, ties


def test_the_prefix_changes_the_decode(model):
  """Not vacuous: the forced decodes differ from the free ones, which do not start so."""
  dhp = create_decode_hparams("beam_size=4,alpha=0.6,extra_length=5")
  x = tf.constant(_padded(INPUTS))
  free = seq2seq.make_decode_fn(model, dhp)(x)[0].numpy()
  forced = seq2seq.make_decode_fn(model, dhp, with_prefix=True)(
      x, tf.constant(_padded(PREFIXES)))[0].numpy()
  for i, prefix in enumerate(PREFIXES):
    if prefix:
      assert list(free[i][:len(prefix)]) != prefix
      assert list(forced[i][:len(prefix)]) == prefix


@pytest.mark.parametrize("decode_hp", ["beam_size=4,alpha=0.6,extra_length=5",
                                       "beam_size=4,alpha=0.6,extra_length=5,return_beams=true",
                                       "beam_size=1,extra_length=5"])
def test_an_empty_prefix_decodes_bit_for_bit_as_without(model, decode_hp):
  dhp = create_decode_hparams(decode_hp)
  x = tf.constant(_padded(INPUTS))
  free = seq2seq.make_decode_fn(model, dhp)(x)
  empty = seq2seq.make_decode_fn(model, dhp, with_prefix=True)(
      x, tf.constant(np.zeros([len(INPUTS), 2], np.int32)))
  # Exact on every CPU: one process and model, the same shapes and kernels (the
  # buffer length is unchanged: 2 + 1 <= input + extra); inside the search the
  # forced branch is a tf.where that selects the unforced tensors on every row.
  for a, b in zip(free, empty):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_prefix_scores_count_the_prefix_as_scoring_does(model):
  """Greedy: the score is log P(output) (prefix included) as `score_targets` gives it;
  beam: a finished hypothesis's score times its length penalty."""
  x = tf.constant(_padded(INPUTS))
  prefix = tf.constant(_padded(PREFIXES))
  for decode_hp in ("beam_size=1,extra_length=5", "beam_size=4,alpha=0.6,extra_length=5"):
    dhp = create_decode_hparams(decode_hp)
    ids, scores = [t.numpy() for t in seq2seq.make_decode_fn(model, dhp, with_prefix=True)(
        x, prefix)]
    for i in range(len(INPUTS)):
      out = list(ids[i][:np.count_nonzero(ids[i])])
      if 1 not in out:  # reached its cap: a beam's raw log-prob, greedy's sum
        penalty = 1.0
      else:
        penalty = 1.0 if dhp.beam_size == 1 else beam_search.length_penalty(
            len(out), dhp.alpha).numpy()
      logp = seq2seq.score_targets(model, x[i:i + 1], tf.constant([out])).numpy()[0]
      assert scores[i] * penalty == pytest.approx(logp, abs=SCORE_EPS), (decode_hp, i, out)


def _table_fn(table):
  """A model whose logits at step i are `table[i, last id]`, table `[steps, vocab, vocab]`."""
  def fn(ids, i, state):
    return tf.gather(tf.gather(table, i), ids[:, i]), state
  return fn


def _numpy_prefix_log_prob(table, prefix):
  """Brute force: the sum over the prefix of log-softmax(logits after the ids before it)."""
  last, total = 0, 0.0  # column 0 holds the initial id 0
  for i, token in enumerate(prefix):
    total += log_softmax(table[i, last].astype(np.float64))[token]
    last = token
  return total


def test_every_search_forces_and_scores_the_prefix_in_the_one_step():
  """Greedy, sampling at top_k 1 and at a temperature so high its draws ignore the model,
  and beam search with one beam, each row stopped at the end of its prefix: every row is
  its prefix, scored ("model") as the NumPy sum of its log-probs, or ("free") as 0."""
  rng = np.random.default_rng(11)
  table = (3 * rng.normal(size=(4, VOCAB, VOCAB))).astype(np.float32)
  fn = _table_fn(tf.constant(table))
  prefix = tf.constant(_padded(PREFIXES))
  lengths = tf.constant([len(p) for p in PREFIXES])
  initial = tf.zeros([len(PREFIXES)], tf.int32)
  want = np.array([_numpy_prefix_log_prob(table, p) for p in PREFIXES])
  free = sampling.greedy_search(fn, initial, 4, decode_lengths=lengths).ids.numpy()
  for row, p in zip(free, PREFIXES):  # not vacuous: no prefix is the free choice
    assert not p or list(row[1:1 + len(p)]) != p, (row, p)
  searches = {
      "greedy": lambda scoring: sampling.greedy_search(
          fn, initial, 4, decode_lengths=lengths, prefix=prefix, prefix_scoring=scoring),
      "top_k=1": lambda scoring: sampling.sample(
          fn, initial, 4, 1.0, 1, seed=5, decode_lengths=lengths, prefix=prefix,
          prefix_scoring=scoring),
      "temperature=1e9": lambda scoring: sampling.sample(
          fn, initial, 4, 1e9, seed=5, decode_lengths=lengths, prefix=prefix,
          prefix_scoring=scoring)}
  beam = beam_search.beam_search(fn, initial, 4, beam_search.BeamSearchOptions(1, VOCAB, 0.6),
                                 decode_lengths=lengths, prefix=prefix)
  outputs = {"beam=1 model": (beam.ids[:, 0], beam.scores[:, 0], want)}
  for name, search in searches.items():
    for scoring, scores in (("model", want), ("free", np.zeros_like(want))):
      out = search(scoring)
      outputs[f"{name} {scoring}"] = (out.ids, out.scores, scores)
  for name, (ids, scores, expected) in outputs.items():
    np.testing.assert_array_equal(ids.numpy()[:, 1:], _padded(PREFIXES, 4), err_msg=name)
    np.testing.assert_allclose(scores.numpy(), expected, rtol=1e-6, atol=1e-5, err_msg=name)


def test_lm_prompts_are_forced_ids_scored_free_even_at_a_huge_temperature():
  """lm.sample_ids forces its prompts in the same step, scored "free": at temperature 1e9
  the draws ignore the logits, yet each row keeps its prompt (forcing T2T's way, through
  the logits, would not) and scores log P(continuation | prompt) under T2T's NumPy LM."""
  model = random_lm.lm("transformer_base", "", seed=8)
  reference = T2TNumpyLM.from_tensors(random_lm.t2t_tensors(model), model.hparams.to_dict())
  prompts = [[4, 4, 30], [11, 2]]
  out = lm_lib.sample_ids(model, prompts, max_new_tokens=4, temperature=1e9, seed=3)
  for prompt, c in zip(prompts, out):
    new = c.ids + ([EOS_ID] if c.ended else [])
    joint = reference.log_prob(np.array([prompt + new]))[0]
    alone = reference.log_prob(np.array([prompt]))[0]
    np.testing.assert_allclose(c.log_prob, joint - alone, rtol=1e-5, atol=SCORE_EPS)


def test_translate_and_the_decoder_cli_force_prefixes(tiny_trained_run, tmp_path, capsys):
  run_dir, data_dir = tiny_trained_run
  run = t2t_keras.open_run(run_dir, data_dir=data_dir)
  lines = ["the big house", "a small cat", "the red dog runs"]
  free = run.translate(lines)
  assert free[0].split()[0] == "der"  # the tiny problem's word-for-word answer
  forced = run.translate(lines, prefix=["ein", "", "der rot Katze"])
  assert forced[0].split()[0] == "ein" and forced[2].startswith("der rot Katze")
  # Exact on every CPU: the line without a prefix decodes in its own batch row with
  # the same shapes and kernels as without prefixes.
  assert forced[1] == free[1]
  with pytest.raises(ValueError, match="one prefix per input line"):
    run.translate(lines, prefix=["ein"])
  source, prefixes, output = tmp_path / "in.en", tmp_path / "prefix.de", tmp_path / "out.de"
  source.write_text("".join(l + "\n" for l in lines), encoding="utf-8")
  prefixes.write_text("ein\n\nder rot Katze\n", encoding="utf-8")
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--output_dir={run_dir}", f"--data_dir={data_dir}", f"--decode_from_file={source}",
      f"--decode_prefix_file={prefixes}", f"--decode_to_file={output}"], capsys)
  assert code == 0, err[-2000:]
  # Exact on every CPU: the same code, weights and inputs as translate() above.
  assert output.read_text(encoding="utf-8").splitlines() == forced
  prefixes.write_text("ein\n", encoding="utf-8")
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--output_dir={run_dir}", f"--data_dir={data_dir}", f"--decode_from_file={source}",
      f"--decode_prefix_file={prefixes}"], capsys)
  assert code == 2 and "has 1 lines but the input has 3" in err, err[-2000:]
