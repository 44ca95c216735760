"""Tests for t2t_keras.decoding.beam_search against NumPy brute force and references.

The "models" are fixed tables `table[i, last_id] -> log-probs of next id`
(shape `[decode_length, V, V]`), so every expected result is computed
independently in NumPy: by enumeration, by a plain-Python greedy loop, or by
a plain-Python T2T beam search written from the reference description.
"""

import functools
import itertools

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.decoding import beam_search as bs, sampling
from t2t_keras.decoding_state import DecodingState
from tests.support import near_ties, t2t_numpy_decoding as t2t

EOS = 1
NEG = -bs.INF / 2  # below this a score belongs to an empty slot
# A float32 search's scores on a float32 table lie within this of the NumPy port's
# float64 ones (sums of <= 10 entries of magnitude < 30: ~10 * 2 ulp(32) = 8e-5).
TABLE_EPS = 1e-4


# ------------------------------------------------------------- references ---
def random_table(seed, length, vocab, eos_boost=0.0, scale=2.0):
  """Normalised log-prob table `[length, vocab, vocab]` (float32 values)."""
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(length, vocab, vocab)) * scale
  logits[..., EOS] += eos_boost
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return log_probs.astype(np.float32)


def table_fn(table):
  """symbols_to_logits_fn reading `table[i, ids[:, i]]`; state untouched."""
  table = tf.convert_to_tensor(table)

  def fn(ids, i, state):
    last = tf.gather(ids, i, axis=1)  # [n]
    return tf.gather(table[i], last), state

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


def numpy_t2t_beam_search(table, sos_ids, beam, alpha):
  """Plain-Python T2T beam search written from the reference (section 2).

  Stable sorts reproduce top_k's lower-index-first tie order. Returns
  (per item: list of token lists, scores) and the number of steps run.
  """
  length, vocab = table.shape[0], table.shape[1]
  inf = bs.INF
  alive = [[([s], 0.0)] + [([s], -inf)] * (beam - 1) for s in sos_ids]
  fin = [[([], -inf, False)] * beam for _ in sos_ids]
  step = 0
  while step < length:
    bound = [a[0][1] / penalty(length, alpha) for a in alive]
    if all(max(f[1] for f in fin[b]) > bound[b] for b in range(len(fin))):
      break
    for b in range(len(sos_ids)):
      cands = []  # flat index order: beam-major, then token
      for seq, log_prob in alive[b]:
        for tok in range(vocab):
          lp = log_prob + float(table[step, seq[-1], tok])
          cands.append((seq + [tok], lp, lp / penalty(step + 1, alpha)))
      top = sorted(cands, key=lambda c: -c[2])[:2 * beam]
      alive_order = sorted(
          top, key=lambda c: -(c[2] + (c[0][-1] == EOS) * -inf))
      alive[b] = [(c[0], c[1]) for c in alive_order[:beam]]
      new = [(c[0], c[2] + (c[0][-1] != EOS) * -inf, c[0][-1] == EOS)
             for c in top]
      fin[b] = sorted(fin[b] + new, key=lambda f: -f[1])[:beam]
    step += 1
  results = []
  for b in range(len(sos_ids)):
    if any(f[2] for f in fin[b]):
      results.append(([f[0][1:] for f in fin[b]], [f[1] for f in fin[b]]))
    else:
      results.append(([a[0][1:] for a in alive[b]], [a[1] for a in alive[b]]))
  return results, step


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
  np.testing.assert_array_equal(merged.reshape(3, 4, 2, 5), tiled)


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
  ids, scores, _, _ = bs.beam_search(fn, tf.constant(sos), 7,
                                     bs.BeamSearchOptions(1, 6, alpha=0.0))
  g_ids, g_scores, *_ = sampling.greedy_search(fn, tf.constant(sos), 7)
  # Exact ids whatever the kernels: every greedy choice is more than 2 * TABLE_EPS ahead.
  _assert_no_near_tie(table, sos, 1, 0.0, 7)
  np.testing.assert_array_equal(ids.numpy()[:, 0], g_ids.numpy())
  np.testing.assert_allclose(scores.numpy()[:, 0], g_scores.numpy(),
                             rtol=1e-5, atol=1e-5)
  ref_ids, ref_scores = numpy_greedy(table, sos)
  np.testing.assert_array_equal(g_ids.numpy(), ref_ids)
  np.testing.assert_allclose(g_scores.numpy(), ref_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed,alpha", [(0, 0.6), (1, 0.6), (2, 0.0),
                                        (3, 1.0)])
def test_matches_plain_python_t2t_beam_search(seed, alpha):
  # vocab >= 2 * beam, the regime where T2T and this port agree exactly.
  table = random_table(seed, length=7, vocab=7, eos_boost=1.0)
  sos = [0, 2, 3]
  out = bs.beam_search(table_fn(table), tf.constant(sos), 7, bs.BeamSearchOptions(3, 7, alpha))
  expected, steps = numpy_t2t_beam_search(table, sos, 3, alpha)
  _assert_no_near_tie(table, sos, 3, alpha, 7)  # exact ids: no choice within 2 * TABLE_EPS
  assert int(out.num_steps) == steps
  for b, (seqs, scores) in enumerate(expected):
    for k, (tokens, score) in enumerate(zip(seqs, scores)):
      if score < NEG:
        continue
      got = finished_tokens(out.ids.numpy()[b, k]) or list(
          out.ids.numpy()[b, k, 1:steps + 1])
      assert got == tokens
      np.testing.assert_allclose(out.scores.numpy()[b, k], score, rtol=1e-5,
                                 atol=1e-5)


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
  g_ids, _, *_ = sampling.greedy_search(fn, tf.constant([0]), 3)
  assert finished_tokens(g_ids.numpy()[0]) != best_tokens  # greedy misses
  ids, scores, _, _ = bs.beam_search(fn, tf.constant([0]), 3, bs.BeamSearchOptions(2, 4, alpha))
  assert finished_tokens(ids.numpy()[0, 0]) == best_tokens == [3, EOS]
  np.testing.assert_allclose(scores.numpy()[0, 0], best_score, rtol=1e-5,
                             atol=1e-5)


def test_early_stop_keeps_long_sequence_favoured_by_length_penalty():
  # [EOS] scores log(.6) = -0.51 at step 0; the 6-token path scores
  # log(.3 * .97**5) / ((5 + 6) / 6)**2 = -0.40 thanks to alpha=2. After
  # step 0 its prefix bound is log(.3) / 3.36 = -0.36 (> -0.51, go on) with
  # the largest penalty ahead, but log(.3) / ((5 + 2) / 6)**2 = -0.88 with
  # the next step's penalty, which would stop too early.
  probs = np.full((6, 4, 4), 0.01)
  probs[:, :, 2] = 0.97
  probs[0, 0] = [0.001, 0.6, 0.3, 0.099]
  probs[5, :, :] = [0.01, 0.97, 0.01, 0.01]
  table = np.log(probs / probs.sum(-1, keepdims=True)).astype(np.float32)
  best_tokens, best_score = enumerate_finished(table, 0, 2.0)[0]
  assert len(best_tokens) == 6
  out = bs.beam_search(table_fn(table), tf.constant([0]), 6, bs.BeamSearchOptions(2, 4, 2.0))
  assert finished_tokens(out.ids.numpy()[0, 0]) == best_tokens
  np.testing.assert_allclose(out.scores.numpy()[0, 0], best_score,
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed,alpha", [(0, 0.6), (1, 0.0), (2, 1.5),
                                        (3, 0.6)])
def test_large_beam_matches_exhaustive_enumeration(seed, alpha):
  # V=4, L=4: 27 alive prefixes at most and 40 finished sequences, so
  # beam 64 (128 candidates) never prunes anything.
  table = random_table(seed, length=4, vocab=4)
  sos = [0, 2, 3]
  fn = table_fn(table)
  ids, scores, _, _ = bs.beam_search(fn, tf.constant(sos), 4,
                                     bs.BeamSearchOptions(64, 4, alpha, stop_early=False))
  top_ids, top_scores, _, _ = bs.beam_search(fn, tf.constant(sos), 4,
                                             bs.BeamSearchOptions(64, 4, alpha))
  for b, start in enumerate(sos):
    expected = enumerate_finished(table, start, alpha)
    assert len(expected) == 40
    real = scores.numpy()[b] > NEG
    assert real.sum() == 40
    # The other slots stay empty: no children of the -INF placeholder beams.
    assert np.all(scores.numpy()[b][~real] <= -bs.INF)
    got = [tuple(finished_tokens(row)) for row in ids.numpy()[b][real]]
    want = {tuple(tokens): score for tokens, score in expected}
    assert sorted(got) == sorted(want)  # the 40 sequences, each once
    # Ranked as the float64 enumeration ranks them, except that two hypotheses whose
    # scores are within 2 * TABLE_EPS (each float32 score is within TABLE_EPS of its
    # float64 one) may come in either order: seed 0's closest pair is 3.5e-5 apart.
    ranked = [want[t] for t in got]
    swaps = [i for i in range(len(ranked) - 1) if ranked[i] < ranked[i + 1]]
    assert all(ranked[i + 1] - ranked[i] <= 2 * TABLE_EPS for i in swaps), (swaps, ranked)
    np.testing.assert_allclose(scores.numpy()[b][real], ranked, rtol=1e-5, atol=1e-5)
    # The premise of comparing the top exactly, on any CPU: no near-tie for first place.
    assert expected[0][1] - expected[1][1] > 2 * TABLE_EPS, expected[:2]
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
  out = bs.beam_search(table_fn(table), tf.constant(sos), 8,
                       bs.BeamSearchOptions(4, 8, 0.6, top_beams=4))
  check_rescored(table, sos, out.ids.numpy(), out.scores.numpy(), 0.6,
                 int(out.num_steps))


@functools.lru_cache(maxsize=None)
def traced_beam_search(beam_size, alpha, stop_early, top_beams,
                       jit_compile=False):
  """tf.function taking the table as an argument, so seeds share a trace."""

  @tf.function(jit_compile=jit_compile)
  def run(table, sos):
    length, vocab = table.shape[0], table.shape[1]
    return bs.beam_search(table_fn(table), sos, length, bs.BeamSearchOptions(
        beam_size, vocab, alpha, stop_early=stop_early, top_beams=top_beams))

  return run


def test_nbest_early_stopping_equals_full_run():
  # Exact on every CPU: the same step ops on the same shapes in one process (only the loop's
  # stop condition differs).
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


def _assert_no_near_tie(table, sos, beam_size, alpha, length, stop_early=True):
  """The premise of comparing two TF computations on `table` exactly, on any CPU.

  Both lie within TABLE_EPS of the NumPy port's float64 scores (the tests here check
  that bound against the port); where every choice of T2T's search has a margin
  above 2 * TABLE_EPS, both make the port's choices (tests/support/near_ties.py), so their
  ids are equal whatever kernels (XLA, graph, eager) the CPU gets.
  """
  for s in sos:
    margin = near_ties.reference_margin(port_fn(table, s), beam_size, alpha, length,
                                        table.shape[-1], stop_early)
    assert margin > 2 * TABLE_EPS, (s, margin)  # else pick another seed


def test_xla_matches_eager():
  sos = tf.constant([0, 2, 3, 4])
  for seed in range(2):
    table = random_table(seed, length=10, vocab=8, eos_boost=1.0)
    _assert_no_near_tie(table, sos.numpy(), 4, 0.6, 10)
    eager = bs.beam_search(table_fn(table), sos, 10, bs.BeamSearchOptions(4, 8, 0.6, top_beams=4))
    xla = traced_beam_search(4, 0.6, True, 4, True)(table, sos)
    for b, s in enumerate(sos.numpy()):  # the premise: eager within TABLE_EPS of the port
      ids, scores = t2t.t2t_beam_search(port_fn(table, s), 4, 0.6, 10, 8, stop_early=True)
      assert_equals_port(eager.ids.numpy()[b, :1, 1:], eager.scores.numpy()[b, :1],
                         ids[:1], scores[:1])
    np.testing.assert_array_equal(xla.ids.numpy(), eager.ids.numpy())
    np.testing.assert_allclose(xla.scores.numpy(), eager.scores.numpy(),
                               rtol=1e-5, atol=1e-5)
    assert int(xla.num_steps) == int(eager.num_steps)
  table = random_table(0, length=10, vocab=8, eos_boost=-1.0)

  @tf.function(jit_compile=True)
  def xla_decode(table, sos):
    fn = table_fn(table)
    return sampling.greedy_search(fn, sos, 10), sampling.sample(fn, sos, 10, seed=7, top_k=3)

  (g_ids, *_), (s_ids, *_) = xla_decode(table, sos)
  _assert_no_near_tie(table, sos.numpy(), 1, 0.0, 10)
  np.testing.assert_array_equal(g_ids.numpy(),
                                sampling.greedy_search(table_fn(table), sos,
                                                       10)[0].numpy())
  # TF's stateless RNG streams differ between XLA and non-XLA kernels, so
  # XLA samples are checked for reproducibility and for the top-k support.
  np.testing.assert_array_equal(s_ids.numpy(),
                                xla_decode(table, sos)[1][0].numpy())
  ids = s_ids.numpy()
  for b in range(4):
    for i in range(10):
      if EOS in ids[b, 1:i + 1]:
        break
      assert ids[b, i + 1] in np.argsort(-table[i, ids[b, i]])[:3]


def test_decode_length_may_be_a_tensor():
  table = random_table(5, length=6, vocab=7, eos_boost=1.0)
  sos = tf.constant([0, 3])
  _assert_no_near_tie(table, sos.numpy(), 3, 0.6, 6)  # graph and eager: ids exact
  expected = bs.beam_search(table_fn(table), sos, 6, bs.BeamSearchOptions(3, 7, 0.6))

  @tf.function
  def run(length):
    return bs.beam_search(table_fn(table), sos, length, bs.BeamSearchOptions(3, 7, 0.6))

  got = run(tf.constant(6))
  np.testing.assert_array_equal(got[0].numpy(), expected[0].numpy())
  np.testing.assert_allclose(got[1].numpy(), expected[1].numpy(), rtol=1e-6)


# ------------------------------------------------------------------ cache ---
def history_fn(table):
  """Records each consumed id and the running log-prob in the per-beam state."""
  table = tf.convert_to_tensor(table)
  length = table.shape[0]

  def fn(ids, i, state):
    cache = state.per_beam
    last = tf.gather(ids, i, axis=1)  # [n]
    prev = tf.gather(ids, tf.maximum(i - 1, 0), axis=1)  # [n]
    step = tf.fill(tf.shape(last), tf.maximum(i - 1, 0))
    last_log_prob = tf.gather_nd(table, tf.stack([step, prev, last], 1))
    history = tf.where(tf.range(length + 1) == i, last[:, None],
                       cache["history"])
    log_prob = cache["nested"]["log_prob"] + tf.where(i > 0, last_log_prob,
                                                      0.0)
    new_cache = {"history": history, "nested": {"log_prob": log_prob}}
    return tf.gather(table[i], last), state.replace(per_beam=new_cache)

  return fn


def test_cache_is_gathered_with_beams():
  length, vocab, beam = 6, 5, 3
  table = random_table(11, length=length, vocab=vocab)
  sos = [0, 2, 4]
  states = {"history": tf.fill([3, length + 1], -1),
            "nested": {"log_prob": tf.zeros([3])}}
  # eos_id outside the vocab: nothing finishes, so the returned beams are
  # the alive beams, whose cache is the one returned.
  out = bs.beam_search(history_fn(table), tf.constant(sos), length,
                       bs.BeamSearchOptions(beam, vocab, 0.6, eos_id=99),
                       DecodingState(per_beam=states))
  ids = out.ids.numpy().reshape(3 * beam, length + 1)
  history = out.state.per_beam["history"].numpy()
  assert history.shape == (3 * beam, length + 1)
  # The fn saw ids 0..length-1 of each final beam, in that beam's order.
  np.testing.assert_array_equal(history[:, :length], ids[:, :length])
  assert np.all(history[:, length] == -1)
  last = table[length - 1, ids[:, length - 1], ids[:, length]]
  np.testing.assert_allclose(
      out.state.per_beam["nested"]["log_prob"].numpy() + last,
      out.scores.numpy().reshape(-1), rtol=1e-5, atol=1e-5)
  for b, start in enumerate(sos):  # raw log-probs, as nothing finished
    for k in range(beam):
      np.testing.assert_allclose(
          out.scores.numpy()[b, k],
          seq_log_prob(table, start, out.ids.numpy()[b, k, 1:]),
          rtol=1e-5, atol=1e-5)


def test_states_tiled_per_example():
  length, vocab = 7, 6
  table = tf.constant(random_table(3, length=length, vocab=vocab,
                                   eos_boost=0.5))
  bias = np.random.default_rng(4).normal(size=(3, vocab)).astype(np.float32)

  def fn(ids, i, state):
    logits = tf.gather(table[i], tf.gather(ids, i, axis=1)) + state.per_beam["bias"]
    return logits, state

  sos = [0, 2, 2]
  options = bs.BeamSearchOptions(3, vocab, 0.6, stop_early=False)
  batch = bs.beam_search(fn, tf.constant(sos), length, options,
                         DecodingState(per_beam={"bias": tf.constant(bias)}))
  for b in range(3):
    single = bs.beam_search(fn, tf.constant(sos[b:b + 1]), length, options,
                            DecodingState(per_beam={"bias": tf.constant(bias[b:b + 1])}))
    # Exact ids on any CPU: T2T's search on this item's table (+ its bias) has no choice
    # within 2 * TABLE_EPS.
    _assert_no_near_tie(table.numpy() + bias[b], sos[b:b + 1], 3, 0.6, length,
                        stop_early=False)
    np.testing.assert_array_equal(batch[0].numpy()[b], single[0].numpy()[0])
    np.testing.assert_allclose(batch[1].numpy()[b], single[1].numpy()[0],
                               rtol=1e-6)
  # Same start, different per-example state -> different decodes.
  assert not np.array_equal(batch[0].numpy()[1], batch[0].numpy()[2])



def test_constant_state_outside_cache_matches_gathered_state():
  """Rows are item-major, so per-item constants repeated once with tf.repeat
  and captured by the fn (never gathered) give the result of cache states."""
  length, vocab, beam = 7, 6, 3
  table = tf.constant(random_table(5, length=length, vocab=vocab,
                                   eos_boost=0.5))
  bias = np.random.default_rng(6).normal(size=(3, vocab)).astype(np.float32)
  sos = tf.constant([0, 2, 2])

  def in_cache(ids, i, state):
    last = tf.gather(ids, i, axis=1)
    return tf.gather(table[i], last) + state.per_beam["bias"], state

  repeated = tf.repeat(tf.constant(bias), beam, axis=0)  # [3 * beam, vocab]

  def captured(ids, i, state):
    return tf.gather(table[i], tf.gather(ids, i, axis=1)) + repeated, state

  options = bs.BeamSearchOptions(beam, vocab, 0.6)
  want = bs.beam_search(in_cache, sos, length, options,
                        DecodingState(per_beam={"bias": tf.constant(bias)}))
  got = bs.beam_search(captured, sos, length, options)
  np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
  np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
  # The bias matters: without it the decodes differ.
  plain = bs.beam_search(table_fn(table.numpy()), sos, length, options)
  assert not np.array_equal(plain[0].numpy(), want[0].numpy())

def test_slot_states_stay_in_place_and_a_reordered_table_finds_them():
  # Exact on every CPU: identical logits either way; slot states are integer bookkeeping.
  """The cached model's scheme: each slot appends the id it consumed at step i
  to its own row of a slot state (never reordered); the cache (reordered with
  the beams) records which slot wrote each position. Following that table
  must give back every final beam's own ids, and the search must equal one
  without slot states."""
  length, vocab, beam = 7, 6, 3
  table = random_table(8, length=length, vocab=vocab)
  sos = tf.constant([0, 2, 4])
  rows = 3 * beam

  def fn(ids, i, state):
    last = tf.gather(ids, i, axis=1)  # [rows]
    at_i = tf.range(length + 1) == i
    written = tf.where(at_i, last[:, None], state.in_place["written"])
    slot_of = tf.where(at_i, tf.range(rows)[:, None], state.per_beam["slot_of"])
    return tf.gather(table[i], last), state.replace(per_beam={"slot_of": slot_of},
                                                    in_place={"written": written})

  options = bs.BeamSearchOptions(beam, vocab, 0.6, eos_id=99)
  out = bs.beam_search(
      fn, sos, length, options,
      DecodingState(per_beam={"slot_of": tf.fill([3, length + 1], -1)},
                    in_place={"written": tf.fill([rows, length + 1], -1)}))
  ids = out.ids.numpy().reshape(rows, length + 1)
  slot_of = out.state.per_beam["slot_of"].numpy()[:, :length]
  written = out.state.in_place["written"].numpy()
  # Slot r wrote something at every step, in its own row.
  assert np.all(written[:, :length] >= 0) and np.all(written[:, length] == -1)
  seen = written[slot_of, np.arange(length)[None, :]]
  np.testing.assert_array_equal(seen, ids[:, :length])
  plain = bs.beam_search(table_fn(table), sos, length, options)
  np.testing.assert_array_equal(out.ids.numpy(), plain.ids.numpy())
  np.testing.assert_array_equal(out.scores.numpy(), plain.scores.numpy())


@pytest.mark.parametrize("vocab,block", [(7, 128), (300, 128), (1024, 128), (1000, 16)])
def test_top_log_prob_extensions_equals_flat_top_k(vocab, block):
  rng = np.random.default_rng(vocab)
  batch, beam = 5, 3
  k = 2 * beam
  # Few distinct logit values: many exact ties, which must go to the lower index.
  logits = rng.integers(0, 4, size=(batch, beam, vocab)).astype(np.float32)
  logits[1] = logits[1, :1]  # identical beams: ties across beams too
  parents = rng.normal(size=(batch, beam)).astype(np.float32)
  parents[:, 1:] = np.where(rng.random((batch, beam - 1)) < 0.3, -bs.INF, parents[:, 1:])
  parents[1] = 0.0
  lp = tf.constant(logits) + (parents - tf.reduce_logsumexp(logits, axis=-1))[..., None]
  want_values, want_flat = tf.math.top_k(tf.reshape(lp, [batch, beam * vocab]), k=k)
  # Exact on every CPU: a tie is exact in both paths (the same logit plus the same
  # offset: one beam, or identical beams), and every other pair of the k + 1 best is
  # more than 1e-5 apart (checked here), beyond the few ulps (~1e-6 at these values) by
  # which the two paths' logsumexps can differ.
  best = -np.sort(-tf.reshape(lp, [batch, beam * vocab]).numpy(), axis=-1)[:, :k + 1]
  gaps = best[:, :-1] - best[:, 1:]
  assert np.all((gaps == 0) | (gaps > 1e-5)), gaps
  values, beams, ids = bs.top_log_prob_extensions(tf.constant(logits), tf.constant(parents),
                                                  k, block=block)
  np.testing.assert_array_equal(beams.numpy() * vocab + ids.numpy(), want_flat.numpy())
  np.testing.assert_allclose(values.numpy(), want_values.numpy(), rtol=1e-6, atol=1e-6)
  assert np.all(ids.numpy() < vocab)


def test_top_log_prob_extensions_tie_across_blocks_goes_to_lower_id():
  # Blocks of 2: maxima 5, 0, 9, 0. The second-best value 5 is at id 1 (block
  # 0) and id 5 (block 2, chosen first for its 9): a flat top-k takes id 1.
  logits = tf.constant([[[0.0, 5.0, 0.0, 0.0, 9.0, 5.0, 0.0, 0.0]]])
  values, beams, ids = bs.top_log_prob_extensions(logits, tf.zeros([1, 1]), 2, block=2)
  np.testing.assert_array_equal(ids.numpy(), [[4, 1]])
  np.testing.assert_array_equal(beams.numpy(), [[0, 0]])
  lse = np.log(np.exp(logits.numpy()).sum())
  np.testing.assert_allclose(values.numpy(), [[9.0 - lse, 5.0 - lse]], rtol=1e-6)


# -------------------------------------------------------- greedy / sample ---
@pytest.mark.parametrize("seed", range(3))
def test_greedy_matches_numpy_reference(seed):
  # Exact on every CPU: greedy takes the argmax of the raw float32 table entries (no
  # arithmetic).
  table = random_table(seed, length=9, vocab=7, eos_boost=0.5)
  sos = [0, 2, 3, 4, 5, 6]
  ids, scores, *_ = sampling.greedy_search(table_fn(table), tf.constant(sos), 9)
  ref_ids, ref_scores = numpy_greedy(table, sos)
  np.testing.assert_array_equal(ids.numpy(), ref_ids)  # 0 after EOS
  np.testing.assert_allclose(scores.numpy(), ref_scores, rtol=1e-5,
                             atol=1e-5)


def test_greedy_stops_when_all_rows_hit_eos():
  calls = []
  table = np.full((20, 4, 4), np.log(0.1), np.float32)
  table[:, :, EOS] = np.log(0.7)  # EOS is everybody's argmax

  def fn(ids, i, state):
    calls.append(int(i))
    return table_fn(table)(ids, i, state)

  ids, _, *_ = sampling.greedy_search(fn, tf.constant([0, 2]), 20)  # eager: counts
  assert calls == [0]
  np.testing.assert_array_equal(ids.numpy()[:, 1], [EOS, EOS])
  assert not ids.numpy()[:, 2:].any()


@pytest.mark.parametrize("temperature", [1.0, 0.5, 3.0])
def test_sample_top_k_one_equals_greedy(temperature):
  # Exact on every CPU: top_k=1 masks all but the argmax by 1e6, far beyond any Gumbel draw; no
  # rounding decides.
  table = random_table(21, length=8, vocab=9, eos_boost=0.3, scale=0.7)
  sos = tf.constant([0, 2, 3, 4, 5, 6, 7, 8])
  g_ids, g_scores, *_ = sampling.greedy_search(table_fn(table), sos, 8)
  for seed in range(3):
    ids, scores, *_ = sampling.sample(table_fn(table), sos, 8, temperature, top_k=1,
                                  seed=seed)
    np.testing.assert_array_equal(ids.numpy(), g_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), g_scores.numpy(), rtol=1e-6)


def test_temperature_zero_is_argmax():
  # Exact on every CPU: temperature 0 is tf.argmax of the raw table entries.
  table = random_table(22, length=8, vocab=9, scale=0.7)
  sos = [0, 2, 3, 4]
  ref_ids, _ = numpy_greedy(table, sos)
  for top_k in (-1, 4):
    ids, _, *_ = sampling.sample(table_fn(table), tf.constant(sos), 8, 0.0, top_k,
                             seed=5)
    np.testing.assert_array_equal(ids.numpy(), ref_ids)


def test_sample_reproducible_with_seed():
  table = random_table(23, length=8, vocab=9, eos_boost=-2.0, scale=0.3)
  sos = tf.constant(np.arange(64) % 9)
  first = sampling.sample(table_fn(table), sos, 8, seed=(3, 4))
  again = sampling.sample(table_fn(table), sos, 8, seed=(3, 4))
  other = sampling.sample(table_fn(table), sos, 8, seed=(3, 5))
  np.testing.assert_array_equal(first[0].numpy(), again[0].numpy())
  np.testing.assert_array_equal(first[1].numpy(), again[1].numpy())
  # 64 rows of near-uniform choices: equal draws would mean a fixed stream.
  assert not np.array_equal(first[0].numpy(), other[0].numpy())


@pytest.mark.parametrize("temperature,top_k", [(1.0, -1), (0.5, -1),
                                               (2.0, 3)])
def test_sample_frequencies_match_tempered_softmax(temperature, top_k):
  logits = np.array([1.0, -0.5, 0.3, 2.0, 0.0], np.float32)
  n = 20000

  def fn(ids, i, state):
    return tf.tile(tf.constant(logits)[None], [tf.shape(ids)[0], 1]), state

  ids, scores, *_ = sampling.sample(fn, tf.zeros([n], tf.int32), 1, temperature, top_k,
                                seed=1, eos_id=99)
  drawn = ids.numpy()[:, 1]
  kept = np.argsort(-logits)[:top_k] if top_k > 0 else np.arange(5)
  expected = np.zeros(5)
  expected[kept] = np.exp(logits[kept] / temperature)
  expected /= expected.sum()
  freq = np.bincount(drawn, minlength=5) / n
  tolerance = 5 * np.sqrt(expected * (1 - expected) / n) + 1e-9
  assert np.all(np.abs(freq - expected) <= tolerance), (freq, expected)
  log_softmax = logits - np.log(np.exp(logits).sum())  # untempered
  np.testing.assert_allclose(scores.numpy(), log_softmax[drawn], rtol=1e-5)


# ------------------------------------------------------------------ errors ---
def test_bad_arguments_raise_clear_errors():
  fn = table_fn(random_table(0, length=3, vocab=4))
  sos = tf.constant([0])
  cases = [
      (lambda: bs.beam_search(fn, sos, 3, bs.BeamSearchOptions(0, 4, 0.6)), "beam_size"),
      (lambda: bs.beam_search(fn, sos, 3, bs.BeamSearchOptions(2, 4, 0.6, top_beams=3)),
       "top_beams"),
      (lambda: bs.beam_search(fn, sos, -1, bs.BeamSearchOptions(2, 4, 0.6)), "decode_length"),
      (lambda: bs.beam_search(fn, sos, 3, bs.BeamSearchOptions(2, 5, 0.6)), "vocab_size=5"),
      (lambda: bs.beam_search(fn, tf.constant([[0]]), 3, bs.BeamSearchOptions(2, 4, 0.6)),
       "initial_ids"),
      (lambda: sampling.sample(fn, sos, 3, temperature=-1.0), "temperature"),
      (lambda: sampling.sample(fn, sos, 3, top_k=0), "top_k"),
      (lambda: sampling.sample(fn, sos, 3, seed=(1, 2, 3)), "seed"),
      (lambda: sampling.sample(fn, sos, 3, top_k=5), "top_k"),
      (lambda: sampling.sample_with_temperature(tf.zeros([2, 4]), 1.0), "seed"),
      (lambda: bs.beam_search(fn, sos, 3, bs.BeamSearchOptions(2, 4, 0.6),
                              DecodingState(per_beam={"x": tf.zeros([2, 3])})), "batch=1"),
      (lambda: sampling.greedy_search(fn, sos, 3,
                                      state=DecodingState(per_beam={"x": tf.zeros([3])})),
       "batch=1"),
  ]
  for call, name in cases:
    with pytest.raises(ValueError, match=name):
      call()


# ------------------------------------ per-item decode lengths (T2T alone) ---
def port_fn(table, sos):
  """The NumPy port's logits_fn for a table item whose first id is `sos`."""
  def fn(prefix):
    last = prefix[:, -1] if prefix.shape[1] > 1 else np.full(len(prefix), sos)
    return table[prefix.shape[1] - 1, last]
  return fn


def assert_equals_port(ids, scores, port_ids, port_scores):
  """ids `[beam, L]` (no initial id), scores `[beam]` vs the NumPy port's."""
  width = port_ids.shape[1]
  np.testing.assert_array_equal(ids[:, :width], port_ids)
  assert not ids[:, width:].any()
  real = port_scores > NEG
  np.testing.assert_array_equal(scores > NEG, real)  # same empty slots
  np.testing.assert_allclose(scores[real], port_scores[real], rtol=1e-5,
                             atol=TABLE_EPS)


def _hand_made_table():
  """`[5, 6, 6]` log-probs: item A (sos 0) loops on 2, item B (sos 5) on 4.

  A: sos -> 2 (0.6) or EOS (0.3); 2 -> 2 (0.9) or EOS (0.01).
  B: sos, 4 -> 4 (0.9), 5 (0.08), EOS (1e-6): no EOS is ever among the
  2 * beam candidates, so nothing of B finishes.
  """
  probs = np.full((5, 6, 6), 1e-3)
  probs[0, 0, [2, EOS]] = [0.6, 0.3]
  probs[:, 2, [2, EOS]] = [0.9, 0.01]
  probs[:, 5, [4, 5, EOS]] = [0.9, 0.08, 1e-6]
  probs[:, 4, [4, 5, EOS]] = [0.9, 0.08, 1e-6]
  probs /= probs.sum(-1, keepdims=True)
  return np.log(probs).astype(np.float32)


def test_at_cap_nothing_is_forced_hand_made_table():
  """A loop reaching its cap does not finish; nothing-finished returns alive.

  A (cap 4): the looping [2, 2, 2, 2] would win with a free EOS at the cap
  (-0.72 / 1.5 > log 0.3); in T2T it stays alive, so the early [EOS] wins
  with score log p(EOS | sos) / 1. B (cap 3): no EOS ever: the best alive
  beam [4, 4, 4] is returned without EOS, with its raw log-prob.
  """
  table = _hand_made_table()
  sos, lengths = [0, 5], [4, 3]
  out = bs.beam_search(table_fn(table), tf.constant(sos), 5, bs.BeamSearchOptions(2, 6, 1.0),
                       decode_lengths=tf.constant(lengths))
  ids, scores = out.ids.numpy()[:, :, 1:], out.scores.numpy()
  np.testing.assert_array_equal(ids[0, 0], [EOS, 0, 0, 0, 0])
  np.testing.assert_allclose(scores[0, 0], table[0, 0, EOS], rtol=1e-6)
  np.testing.assert_array_equal(ids[1, 0], [4, 4, 4, 0, 0])
  raw = table[0, 5, 4] + table[1, 4, 4] + table[2, 4, 4]
  np.testing.assert_allclose(scores[1, 0], raw, rtol=1e-6)
  for b in range(2):
    port = t2t.t2t_beam_search(port_fn(table, sos[b]), 2, 1.0, lengths[b], 6)
    assert_equals_port(ids[b], scores[b], *port)
  # Greedy stops at each row's cap without EOS.
  g_ids, g_scores, *_ = sampling.greedy_search(table_fn(table), tf.constant(sos), 5,
                                           decode_lengths=tf.constant(lengths))
  np.testing.assert_array_equal(g_ids.numpy()[:, 1:],
                                [[2, 2, 2, 2, 0], [4, 4, 4, 0, 0]])
  for b in range(2):
    port_ids, port_score = t2t.t2t_greedy(port_fn(table, sos[b]), lengths[b])
    np.testing.assert_array_equal(g_ids.numpy()[b, 1:1 + len(port_ids)],
                                  port_ids)
    np.testing.assert_allclose(g_scores.numpy()[b], port_score, rtol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_per_item_decode_lengths_equal_t2t_on_each_item_alone(seed):
  """One batch, own lengths per item == the NumPy T2T port on each alone.

  Top beam (stop_early, top_beams=1) and n-best (top_beams=beam, T2T's
  stop_early=False), ids, scores and steps taken; greedy likewise.
  """
  table = random_table(seed, length=9, vocab=8, eos_boost=seed - 2.0)
  sos, lengths = [0, 2, 3, 4, 5, 6], [1, 3, 5, 9, 7, 2]
  results, steps = {}, {}

  def counting_fn(ids, i, state):  # the per-beam state counts each row's steps
    logits, _ = table_fn(table)(ids, i, state)
    return logits, state.replace(per_beam={"steps": state.per_beam["steps"] + 1})

  for top in (1, 3):
    out = bs.beam_search(
        counting_fn, tf.constant(sos), 9, bs.BeamSearchOptions(3, 8, 0.6, top_beams=top),
        DecodingState(per_beam={"steps": tf.zeros([len(sos)], tf.int32)}),
        decode_lengths=tf.constant(lengths))
    results[top] = out.ids.numpy()[:, :, 1:], out.scores.numpy()
    # A stopped item keeps the per-beam state of its own last step.
    steps[top] = out.state.per_beam["steps"].numpy().reshape([len(sos), 3])[:, 0]
  g_ids, g_scores, *_ = sampling.greedy_search(table_fn(table), tf.constant(sos), 9,
                                           decode_lengths=tf.constant(lengths))
  for b in range(len(sos)):
    fn = port_fn(table, sos[b])
    # The ids are compared exactly: no choice of the port within 2 * TABLE_EPS.
    for stop_early in (True, False):
      _assert_no_near_tie(table, sos[b:b + 1], 3, 0.6, lengths[b], stop_early)
    top1 = t2t.t2t_beam_search(fn, 3, 0.6, lengths[b], 8, stop_early=True)
    assert_equals_port(results[1][0][b, :1], results[1][1][b, :1],
                       top1[0][:1], top1[1][:1])
    nbest = t2t.t2t_beam_search(fn, 3, 0.6, lengths[b], 8, stop_early=False)
    assert_equals_port(results[3][0][b], results[3][1][b], *nbest)
    # Each item stops when T2T alone does (its own cap and length penalty).
    assert (steps[1][b], steps[3][b]) == (top1[0].shape[1], nbest[0].shape[1])
    port_ids, port_score = t2t.t2t_greedy(fn, lengths[b])
    width = len(port_ids)
    np.testing.assert_array_equal(g_ids.numpy()[b, 1:1 + width], port_ids)
    assert not g_ids.numpy()[b, 1 + width:].any()
    np.testing.assert_allclose(g_scores.numpy()[b], port_score, rtol=1e-5,
                               atol=1e-5)


def test_sample_stops_each_row_at_its_decode_length_without_eos():
  table = _hand_made_table()
  table[:, :, EOS] = -30.0  # never drawn
  table -= np.log(np.exp(table).sum(-1, keepdims=True))  # normalised again
  lengths = [4, 1, 3]
  ids, scores, *_ = sampling.sample(table_fn(table), tf.constant([0, 5, 2]), 5,
                                temperature=1.0, seed=3,
                                decode_lengths=tf.constant(lengths))
  ids = ids.numpy()
  for b, n in enumerate(lengths):
    assert np.all(ids[b, 1:1 + n] != EOS) and not ids[b, 1 + n:].any()
    want = sum(table[s, ids[b, s], ids[b, s + 1]] for s in range(n))
    np.testing.assert_allclose(scores.numpy()[b], want, rtol=1e-5, atol=1e-6)


def test_every_search_returns_one_type_with_its_steps():
  """Beam, greedy and sampling all return `search_utils.SearchOutput`; greedy's
  `num_steps` is the first step at which every row has hit EOS (or the cap)."""
  from t2t_keras.decoding.search_utils import SearchOutput  # pylint: disable=g-import-not-at-top
  table = random_table(3, length=9, vocab=8, eos_boost=1.0)
  sos = tf.constant([0, 2, 3])
  beam = bs.beam_search(table_fn(table), sos, 9, bs.BeamSearchOptions(2, 8, 0.6))
  greedy = sampling.greedy_search(table_fn(table), sos, 9)
  drawn = sampling.sample(table_fn(table), sos, 9, seed=(1, 2))
  assert all(type(out) is SearchOutput for out in (beam, greedy, drawn))
  ids = greedy.ids.numpy()[:, 1:]
  ends = [list(row).index(EOS) + 1 if EOS in row else 9 for row in ids]
  assert int(greedy.num_steps) == max(ends)
