"""Tests for t2t_keras.beam_search against NumPy brute force and references.

The "models" are fixed tables `table[i, last_id] -> log-probs of next id`
(shape `[decode_length, V, V]`), so every expected result is computed
independently in NumPy by enumeration or by a plain-Python greedy loop.
"""

import functools
import itertools

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import beam_search as bs

EOS = 1
NEG = -bs.INF / 2  # below this a score belongs to an empty slot


# ------------------------------------------------------------- references ---
def random_table(seed, length, vocab, eos_boost=0.0, scale=2.0):
  """Normalised log-prob table `[length, vocab, vocab]` (float32 values)."""
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(length, vocab, vocab)) * scale
  logits[..., EOS] += eos_boost
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return log_probs.astype(np.float32)


def table_fn(table):
  """symbols_to_logits_fn reading `table[i, ids[:, i]]`; cache untouched."""
  table = tf.convert_to_tensor(table)

  def fn(ids, i, cache):
    last = tf.gather(ids, i, axis=1)  # [n]
    return tf.gather(table[i], last), cache

  return fn


def penalty(length, alpha):
  return ((5.0 + length) / 6.0) ** alpha


def seq_log_prob(table, sos, tokens):
  """Sum of table log-probs of `tokens` following `sos` (float64)."""
  prev, total = sos, 0.0
  for step, tok in enumerate(tokens):
    total += float(table[step, prev, tok])
    prev = tok
  return total


def enumerate_finished(table, sos, alpha):
  """All (tokens ending in EOS, normalised score), best first."""
  length, vocab = table.shape[0], table.shape[1]
  non_eos = [t for t in range(vocab) if t != EOS]
  found = []
  for n in range(1, length + 1):
    for prefix in itertools.product(non_eos, repeat=n - 1):
      tokens = list(prefix) + [EOS]
      found.append((tokens,
                    seq_log_prob(table, sos, tokens) / penalty(n, alpha)))
  return sorted(found, key=lambda x: -x[1])


def finished_tokens(row):
  """ids row `[L+1]` -> tokens after the initial id up to the first EOS."""
  tokens = list(row[1:])
  return tokens[:tokens.index(EOS) + 1] if EOS in tokens else None


def numpy_greedy(table, sos_ids):
  """Plain-Python greedy reference: (ids [b, L+1], scores [b])."""
  length = table.shape[0]
  ids = np.zeros((len(sos_ids), length + 1), np.int32)
  scores = np.zeros(len(sos_ids))
  for b, sos in enumerate(sos_ids):
    ids[b, 0], prev = sos, sos
    for step in range(length):
      tok = int(np.argmax(table[step, prev]))
      scores[b] += table[step, prev, tok]
      ids[b, step + 1], prev = tok, tok
      if tok == EOS:
        break
  return ids, scores


# ---------------------------------------------------------------- helpers ---
def test_length_penalty_closed_form():
  lengths = np.arange(1, 20)
  for alpha in (0.0, 0.6, 1.0, 2.5):
    np.testing.assert_allclose(bs.length_penalty(lengths, alpha).numpy(),
                               ((5.0 + lengths) / 6.0) ** alpha, rtol=1e-6)
  assert float(bs.length_penalty(1, 0.6)) == 1.0  # (5 + 1) / 6 = 1


def test_beam_dim_helpers_round_trip():
  x = np.random.default_rng(0).normal(size=(3, 2, 5)).astype(np.float32)
  tiled = bs.expand_to_beam_size(tf.constant(x), 4).numpy()
  assert tiled.shape == (3, 4, 2, 5)
  for beam in range(4):
    np.testing.assert_array_equal(tiled[:, beam], x)
  merged = bs.merge_beam_dim(tf.constant(tiled)).numpy()
  assert merged.shape == (12, 2, 5)
  np.testing.assert_array_equal(merged[4 * 2 + 3], x[2])  # row b*beam + k
  back = bs.unmerge_beam_dim(tf.constant(merged), 3, 4).numpy()
  np.testing.assert_array_equal(back, tiled)


def test_gather_beams_matches_numpy_indexing():
  x = np.arange(2 * 3 * 4).reshape(2, 3, 4)
  idx = np.array([[2, 2, 0, 1], [1, 0, 0, 2]])
  got = bs.gather_beams(tf.constant(x), tf.constant(idx)).numpy()
  np.testing.assert_array_equal(got, x[np.arange(2)[:, None], idx])


# ------------------------------------------------------------ beam search ---
def eos_first_or_last_table(seed, length, vocab):
  """Random table where EOS is each row's argmax or its least likely id.

  Then EOS is never the runner-up, so beam 1 (which keeps 2 candidates) only
  ever finishes on greedy's EOS; with alpha=0 it stops right there.
  """
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(length, vocab, vocab)) * 2.0
  logits[..., EOS] += rng.choice([3.0, 0.0], size=(length, vocab))
  not_top = logits.argmax(-1) != EOS
  logits[..., EOS] = np.where(not_top, logits.min(-1) - 3.0, logits[..., EOS])
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return log_probs.astype(np.float32)


@pytest.mark.parametrize("seed", range(8))
def test_beam_size_one_equals_greedy(seed):
  table = eos_first_or_last_table(seed, length=7, vocab=6)
  sos = [0, 2, 3, 4, 5]
  fn = table_fn(table)
  ids, scores = bs.beam_search(fn, tf.constant(sos), 1, 7, 6, alpha=0.0)
  g_ids, g_scores = bs.greedy_search(fn, tf.constant(sos), 7)
  np.testing.assert_array_equal(ids.numpy()[:, 0], g_ids.numpy())
  np.testing.assert_allclose(scores.numpy()[:, 0], g_scores.numpy(),
                             rtol=1e-5, atol=1e-5)
  ref_ids, ref_scores = numpy_greedy(table, sos)
  np.testing.assert_array_equal(g_ids.numpy(), ref_ids)
  np.testing.assert_allclose(g_scores.numpy(), ref_scores, rtol=1e-5, atol=1e-5)


def test_beam_search_beats_greedy_on_hand_built_model():
  # Ids: 0 start, 1 EOS, 2 "greedy trap", 3 "good".
  probs = np.full((3, 4, 4), 0.25)
  probs[0, 0] = [0.05, 0.05, 0.5, 0.4]  # greedy takes 2 first ...
  probs[1, 2] = [0.3, 0.2, 0.26, 0.24]  # ... then only weak continuations
  probs[1, 3] = [0.03, 0.9, 0.04, 0.03]  # 3 -> EOS is the better sentence
  table = np.log(probs).astype(np.float32)
  fn = table_fn(table)
  alpha = 0.6
  best_tokens, best_score = enumerate_finished(table, 0, alpha)[0]
  g_ids, _ = bs.greedy_search(fn, tf.constant([0]), 3)
  assert finished_tokens(g_ids.numpy()[0]) != best_tokens  # greedy misses
  ids, scores = bs.beam_search(fn, tf.constant([0]), 2, 3, 4, alpha)
  assert finished_tokens(ids.numpy()[0, 0]) == best_tokens == [3, EOS]
  np.testing.assert_allclose(scores.numpy()[0, 0], best_score, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed,alpha", [(0, 0.6), (1, 0.0), (2, 1.5),
                                        (3, 0.6)])
def test_large_beam_matches_exhaustive_enumeration(seed, alpha):
  # V=4, L=4: 27 alive prefixes at most and 40 finished sequences, so
  # beam 64 (128 candidates) never prunes anything.
  table = random_table(seed, length=4, vocab=4)
  sos = [0, 2, 3]
  fn = table_fn(table)
  ids, scores = bs.beam_search(fn, tf.constant(sos), 64, 4, 4, alpha,
                               stop_early=False)
  top_ids, top_scores = bs.beam_search(fn, tf.constant(sos), 64, 4, 4, alpha)
  for b, start in enumerate(sos):
    expected = enumerate_finished(table, start, alpha)
    assert len(expected) == 40
    real = scores.numpy()[b] > NEG
    assert real.sum() == 40
    got = [finished_tokens(row) for row in ids.numpy()[b][real]]
    assert got == [tokens for tokens, _ in expected]
    np.testing.assert_allclose(scores.numpy()[b][real],
                               [score for _, score in expected], rtol=1e-5, atol=1e-5)
    assert finished_tokens(top_ids.numpy()[b, 0]) == expected[0][0]
    np.testing.assert_allclose(top_scores.numpy()[b, 0], expected[0][1],
                               rtol=1e-5, atol=1e-5)


def check_rescored(table, sos, ids, scores, alpha, num_steps):
  """n-best sorted; scores equal a recomputation from the table."""
  for b, start in enumerate(sos):
    row_scores = scores[b]
    assert np.all(np.diff(row_scores) <= 0), row_scores
    for row, score in zip(ids[b], row_scores):
      tokens = finished_tokens(row)
      if score < NEG:  # empty finished slot
        continue
      if tokens is None:  # nothing finished: alive beams, raw log-probs
        tokens = list(row[1:num_steps + 1])
        expected = seq_log_prob(table, start, tokens)
      else:
        expected = seq_log_prob(table, start, tokens) / penalty(
            len(tokens), alpha)
      np.testing.assert_allclose(score, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed,eos_boost", [(0, 1.0), (1, 0.0), (2, -4.0),
                                            (3, 2.0)])
def test_nbest_sorted_and_rescored(seed, eos_boost):
  table = random_table(seed, length=8, vocab=8, eos_boost=eos_boost)
  sos = [0, 2, 3, 4, 5]
  out = bs.beam_search_with_info(table_fn(table), tf.constant(sos), 4, 8, 8,
                                 0.6, top_beams=4)
  check_rescored(table, sos, out.ids.numpy(), out.scores.numpy(), 0.6,
                 int(out.num_steps))


@functools.lru_cache(maxsize=None)
def traced_beam_search(beam_size, alpha, stop_early, top_beams,
                       jit_compile=False):
  """tf.function taking the table as an argument, so seeds share a trace."""

  @tf.function(jit_compile=jit_compile)
  def run(table, sos):
    length, vocab = table.shape[0], table.shape[1]
    return bs.beam_search_with_info(table_fn(table), sos, beam_size, length,
                                    vocab, alpha, stop_early=stop_early,
                                    top_beams=top_beams)

  return run


def test_nbest_early_stopping_equals_full_run():
  steps_nbest, steps_top1 = [], []
  for seed in range(24):
    table = random_table(seed, length=12, vocab=8, eos_boost=1.5)
    sos = tf.constant([0, 2, 3, 4])
    full = traced_beam_search(4, 0.6, False, 4)(table, sos)
    nbest = traced_beam_search(4, 0.6, True, 4)(table, sos)
    top1 = traced_beam_search(4, 0.6, True, 1)(table, sos)
    assert int(full.num_steps) == 12
    np.testing.assert_array_equal(nbest.ids.numpy(), full.ids.numpy())
    np.testing.assert_array_equal(nbest.scores.numpy(), full.scores.numpy())
    np.testing.assert_array_equal(top1.ids.numpy()[:, 0],
                                  full.ids.numpy()[:, 0])
    np.testing.assert_array_equal(top1.scores.numpy()[:, 0],
                                  full.scores.numpy()[:, 0])
    assert int(top1.num_steps) <= int(nbest.num_steps)
    steps_nbest.append(int(nbest.num_steps))
    steps_top1.append(int(top1.num_steps))
  print(f"steps of 12: n-best {steps_nbest}, top-1 {steps_top1}")
  assert np.mean(steps_nbest) < 12 and sum(s < 12 for s in steps_nbest) >= 12
