"""Decoding: equals T2T's decode of each sentence alone (NumPy port), cached == uncached,
batch == alone, XLA == default, n-best scores, CLI."""

import functools
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import t2t_keras
from t2t_keras.decoding import beam_search, inference_choices, seq2seq, text_decoder
from t2t_keras.hparams import create_decode_hparams
from t2t_keras.training import bleu_hook
from tests.support import near_ties, t2t_numpy_decoding as t2t
from tests.support.decode_checks import (assert_batch_equals_alone,
                                         assert_cached_logits_equal_recomputation, id_rows,
                                         op_types, random_model)
from tests.support.env import ENV
from tests.support.tolerances import SCORE_EPS


@pytest.fixture(scope="module")
def trained(tiny_trained_run):
  """A small model trained on the tiny word-for-word problem: (run_dir, data_dir)."""
  return tiny_trained_run


def _loaded(trained):
  run_dir, data_dir = trained
  opened = t2t_keras.open_run(run_dir, data_dir=data_dir)
  return opened.model, opened.hparams, opened.encoders


class _PeakyLateEos:
  """A Transformer whose logits are sharpened and whose EOS logit rises per step.

  `logits * scale + slope * (step - eos_step)` on EOS (and PAD made unlikely),
  so short caps are reached before anything ends and long ones end on their
  own. Delegates everything else, so `decode_ids` (cached and uncached) and
  the NumPy port see the same logits.
  """

  def __init__(self, model, scale=2.0, eos_step=6.0, slope=4.0):
    self.model, self.scale, self.eos_step, self.slope = model, scale, eos_step, slope

  def __getattr__(self, name):
    return getattr(self.model, name)

  def _adjust(self, logits, step):
    vocab = logits.shape[-1]
    eos_bias = self.slope * (tf.cast(step, tf.float32) - self.eos_step)
    return (tf.cast(logits, tf.float32) * self.scale + eos_bias[..., None] * tf.one_hot(1, vocab)
            - 30.0 * tf.one_hot(0, vocab))

  def decode_step(self, ids, i, cache):
    logits, cache = self.model.decode_step(ids, i, cache)
    return self._adjust(logits, i), cache

  def decode(self, targets, encoder_output, encdec_bias, training=None):
    logits = self.model.decode(targets, encoder_output, encdec_bias, training=training)
    return self._adjust(logits, tf.range(tf.shape(logits)[1])[None])  # [1, length]


def _assert_row_equals_port(ids, scores, port_ids, port_scores, port_margins, ties):
  """ids `[beams, L]`, scores `[beams]` vs the port's `[beams, steps]`, `[beams]`; where
  the ids differ, the port's search must have made a choice within 2 * SCORE_EPS (a
  near-tie, appended to `ties`)."""
  if not near_ties.same(ids, port_ids):
    assert min(port_margins) <= 2 * SCORE_EPS, (ids, port_ids, min(port_margins))
    ties.append(port_ids)
    return
  real = port_scores > -beam_search.INF / 2
  np.testing.assert_array_equal(scores > -beam_search.INF / 2, real)
  np.testing.assert_allclose(scores[real], port_scores[real], rtol=1e-5, atol=SCORE_EPS)


def test_each_sentence_decodes_as_t2t_alone():
  """Top beam, n-best and greedy, in a batch and alone == NumPy port of T2T alone.

  The cap is each sentence's input length + extra_length = T2T's decode_length
  for it alone. The model's EOS comes late, so some sentences end on their own
  (with early stopping), some reach the cap with finished beams, and some reach
  it with nothing finished (returned without EOS, raw log-prob).
  """
  model = _PeakyLateEos(random_model(overrides=",hidden_size=32,"
                                      "filter_size=64,num_heads=2")[0])
  lengths, extra, alpha = [2, 3, 4, 6, 8], 4, 0.6
  x = id_rows(np.random.default_rng(0), 30, lengths)
  # The n-best run's top beam is T2T's stop_early top beam: once the best finished
  # score beats the alive bound no later hypothesis can beat it (the top_beams=1
  # stopping itself is checked against the port in test_beam_search.py).
  fns = {name: seq2seq.make_decode_fn(model, create_decode_hparams(
      f"beam_size={beam},alpha={alpha},extra_length={extra},return_beams=true"))
         for name, beam in (("nbest", 4), ("greedy", 1))}
  batch = {name: [t.numpy() for t in fn(tf.constant(x))] for name, fn in fns.items()}
  kinds, ties = set(), []
  for row, n in enumerate(lengths):
    port_fn, cap = near_ties.full_pass_logits_fn(model, x[row, :n]), n + extra
    margins = {"top": [], "nbest": [], "greedy": []}
    top = t2t.t2t_beam_search(port_fn, 4, alpha, cap, 30, stop_early=True,
                              margins=margins["top"])
    nbest = t2t.t2t_beam_search(port_fn, 4, alpha, cap, 30, stop_early=False,
                                margins=margins["nbest"])
    greedy_ids, greedy_score = t2t.t2t_greedy(port_fn, cap, margins=margins["greedy"])
    alone = {name: [t.numpy()[0] for t in fn(tf.constant(x[row:row + 1, :n]))]
             for name, fn in fns.items()}
    for out in ({name: [t[row] for t in value] for name, value in batch.items()}, alone):
      _assert_row_equals_port(out["nbest"][0][:1], out["nbest"][1][:1], top[0][:1], top[1][:1],
                              margins["top"] + margins["nbest"], ties)
      _assert_row_equals_port(*out["nbest"], *nbest, margins["nbest"], ties)
      _assert_row_equals_port(*out["greedy"], greedy_ids[None], np.array([greedy_score]),
                              margins["greedy"], ties)
    ended = 1 in top[0][0]
    kinds.add("ended early" if ended and top[0].shape[1] < cap else
              "ended" if ended else "nothing finished")
    kinds.add("greedy eos" if 1 in greedy_ids else "greedy at cap")
  assert len(ties) <= 3, ties  # of 30 comparisons
  assert kinds == {"ended early", "ended", "nothing finished", "greedy eos", "greedy at cap"}


@pytest.mark.parametrize("beam", [1, 3])
def test_cached_equals_uncached_random_model(beam):
  model, _ = random_model()
  x = id_rows(np.random.default_rng(0), 30, [5, 3, 7])
  dhp = create_decode_hparams(f"beam_size={beam},extra_length=6")
  fast = seq2seq.make_decode_fn(model, dhp, use_cache=True)(tf.constant(x))
  slow = seq2seq.make_decode_fn(model, dhp, use_cache=False)(tf.constant(x))
  near_ties.assert_decodes_equal_or_near_tie(
      fast, slow, near_ties.model_margin_of(model, x, beam, dhp.alpha, 6, 30), SCORE_EPS,
      "cached vs uncached")  # the bound of two float32 computations of one model


def test_cached_logits_equal_recomputation_each_step():
  model, _ = random_model()
  assert_cached_logits_equal_recomputation(model, id_rows(np.random.default_rng(1), 30, [6, 4]))


@pytest.mark.parametrize("beam", [1, 4])
def test_cached_equals_uncached_trained_model(trained, beam):
  model, _, encoders = _loaded(trained)
  lines = ["the big house", "a small red cat runs and the dog sees", "old"]
  rows = [encoders["inputs"].encode(s) + [1] for s in lines]
  width = max(map(len, rows))
  x = tf.constant([r + [0] * (width - len(r)) for r in rows], tf.int32)
  dhp = create_decode_hparams(f"beam_size={beam},alpha=0.6,extra_length=10")
  fast = seq2seq.make_decode_fn(model, dhp, use_cache=True)(x)
  slow = seq2seq.make_decode_fn(model, dhp, use_cache=False)(x)
  margin_of = near_ties.model_margin_of(model, x.numpy(), beam, 0.6, 10,
                                        model.target_vocab_size)
  near_ties.assert_decodes_equal_or_near_tie(fast, slow, margin_of, SCORE_EPS,
                                             "cached vs uncached")


# The trained fixture's expected translations (here, in the decoder CLI and BLEU
# hook tests) are the tiny problem's word-for-word answers, which the fixture learns;
# T2T's search on them makes every choice by a margin of 1.7e-3 or more (measured on
# the fixture: `near_ties.model_margin_of`), beyond 2 * SCORE_EPS, so kernel rounding
# cannot change them. Sentences the fixture decodes near a tie (a repeated last word)
# are compared only through the near-tie rule.
def test_trained_model_translates(trained):
  model, _, encoders = _loaded(trained)
  decoder = text_decoder.TextDecoder(model, encoders, create_decode_hparams("beam_size=4"))
  out = decoder.decode_lines(["the big house", "a red cat sees the old dog"])
  assert out == ["der groß Haus", "ein rot Katze sieht der alt Hund"]


def test_beam_one_equals_greedy():
  """Beam 1 keeps greedy's path; it may only prefer an EOS it saw as runner-up.

  With one beam, T2T's search also files the best EOS candidate of each step as
  finished, so where that beats greedy's final score beam 1 returns it instead:
  then it is greedy's prefix followed by EOS, with a higher score.
  """
  model, _ = random_model()
  x = tf.constant(id_rows(np.random.default_rng(2), 30, [4, 6, 5, 7, 3, 5]))
  dhp = "extra_length=5,alpha=0.0"
  greedy_ids, greedy_scores = seq2seq.make_decode_fn(
      model, create_decode_hparams("beam_size=1," + dhp))(x)
  fn = seq2seq.make_symbols_to_logits_fn(model, True)
  enc, bias = model.encode(x)
  state = model.init_decoding_state(enc, bias, int(x.shape[1]) + 5)
  ids, scores, _, _ = beam_search.beam_search(
      fn, tf.zeros([6], tf.int32), int(x.shape[1]) + 5,
      beam_search.BeamSearchOptions(beam_size=1, vocab_size=30, alpha=0.0), state,
      decode_lengths=seq2seq._input_lengths(x) + 5)
  # Otherwise the two searches part only at a near-tie of greedy's choices (both
  # read this model's cached logits; tests/support/near_ties.py).
  margin_of = near_ties.model_margin_of(model, x.numpy(), 1, 0.0, 5, 30)
  same = ties = 0
  for row in range(6):
    got, want = ids[row, 0, 1:].numpy(), greedy_ids[row].numpy()
    n = len(seq2seq.strip_ids(got))
    if np.array_equal(got, want):
      same += 1
      np.testing.assert_allclose(scores[row, 0], greedy_scores[row], atol=1e-5)
    elif got[n] == 1 and np.array_equal(got[:n], want[:n]):
      # the beam's finished top beats greedy's longer one (up to the two computations'
      # score error, on every CPU)
      assert scores[row, 0] > greedy_scores[row] - 2 * SCORE_EPS
    else:
      assert margin_of(row) <= 2 * SCORE_EPS, (row, got, want, margin_of(row))
      ties += 1
  assert same >= 4 and ties <= 1, (same, ties)


@pytest.mark.parametrize("beam", [1, 4])
def test_batch_equals_alone(beam):
  model, _ = random_model()
  x = id_rows(np.random.default_rng(3), 30, [7, 3, 5, 2])
  dhp = create_decode_hparams(f"beam_size={beam},extra_length=4")
  assert_batch_equals_alone(seq2seq.make_decode_fn(model, dhp), x,
                            near_ties.model_margin_of(model, x, beam, dhp.alpha, 4, 30))


@pytest.mark.parametrize("beam", [1, 3])
def test_xla_equals_default(beam):
  model, _ = random_model()
  x = tf.constant(id_rows(np.random.default_rng(4), 30, [6, 4]))
  dhp = create_decode_hparams(f"beam_size={beam},extra_length=5")
  plain = seq2seq.make_decode_fn(model, dhp)(x)
  xla = seq2seq.make_decode_fn(model, dhp, jit_compile=True)(x)
  near_ties.assert_decodes_equal_or_near_tie(
      xla, plain, near_ties.model_margin_of(model, x.numpy(), beam, dhp.alpha, 5, 30),
      SCORE_EPS, "XLA vs graph")


def test_nbest_sorted_and_scores_match_score_file(trained):
  model, _, encoders = _loaded(trained)
  alpha = 0.6
  dhp = create_decode_hparams(f"beam_size=4,alpha={alpha},return_beams=true,extra_length=8")
  decoder = text_decoder.TextDecoder(model, encoders, dhp)
  source = "a small cat sees the house"
  x = tf.constant([encoders["inputs"].encode(source) + [1]], tf.int32)
  ids, scores = decoder.decode_fn(jit_compile=False)(x)
  ids, scores = ids[0].numpy(), scores[0].numpy()
  assert list(scores) == sorted(scores, reverse=True)
  for beam_ids, score in zip(ids, scores):
    tokens = seq2seq.strip_ids(beam_ids)
    assert beam_ids[len(tokens)] == 1  # finished with EOS
    text = encoders["targets"].decode(tokens)
    log_prob = decoder.score_pairs([source], [text])[0]
    penalty = ((5.0 + len(tokens) + 1) / 6.0) ** alpha
    np.testing.assert_allclose(score, log_prob / penalty, rtol=1e-4, atol=1e-4)


def _decoder_cli(trained, *flags_):
  run_dir, data_dir = trained
  return subprocess.run([sys.executable, "-m", "t2t_keras.cli.decoder",
                         f"--data_dir={data_dir}", f"--output_dir={run_dir}", *flags_],
                        env=ENV, capture_output=True, text=True, timeout=300)


def test_decoder_cli_file_order_empty_lines_truncation_and_bleu(trained, tmp_path):
  src = tmp_path / "src.txt"
  ref = tmp_path / "ref.txt"
  out = tmp_path / "out.txt"
  long_line = " ".join(["the big red house"] * 30)
  src.write_text("the cat\n\n" + long_line + "\nold dog\n   \n", encoding="utf-8")
  ref.write_text("der Katze\n\nx\nalt Hund\n\n", encoding="utf-8")
  res = _decoder_cli(trained, f"--decode_from_file={src}", f"--decode_to_file={out}",
                     f"--decode_reference={ref}",
                     "--decode_hparams=beam_size=2,max_input_size=20,batch_size=2")
  assert res.returncode == 0, res.stderr[-3000:]
  lines = out.read_text(encoding="utf-8").split("\n")
  assert lines[-1] == "" and len(lines) - 1 == 5
  assert lines[0] == "der Katze" and lines[3] == "alt Hund"
  assert lines[1] == "" and lines[4] == ""
  assert "Truncated 1 input line(s) to max_input_size=20" in res.stderr
  assert "BLEU = " in res.stdout and "tok:intl" in res.stdout


def test_decoder_cli_bad_input(trained, tmp_path):
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"fine line\nbad \xff byte\n")
  res = _decoder_cli(trained, f"--decode_from_file={bad}")
  assert res.returncode != 0 and f"{bad}:2: invalid UTF-8" in res.stderr
  good = tmp_path / "good.txt"  # input files are checked first, so a readable one here
  good.write_text("the cat\n", encoding="utf-8")
  res = _decoder_cli(trained, f"--decode_from_file={good}",
                     f"--checkpoint_path={tmp_path}/nothing")
  # The checkpoint check (t2t_keras/checkpoints.py) names the unusable path.
  assert res.returncode != 0 and f"{tmp_path}/nothing is not usable" in res.stderr
  empty_run = tmp_path / "empty_run"
  empty_run.mkdir()
  res = subprocess.run([sys.executable, "-m", "t2t_keras.cli.decoder",
                        f"--data_dir={trained[1]}", f"--output_dir={empty_run}"],
                       env=ENV, capture_output=True, text=True, timeout=300)
  assert res.returncode != 0 and "t2t_keras_trainer --output_dir" in res.stderr


def test_score_file_cli(trained, tmp_path):
  pairs = tmp_path / "pairs.tsv"
  pairs.write_text("the cat\tder Katze\nthe cat\tder Hund\n", encoding="utf-8")
  res = _decoder_cli(trained, f"--score_file={pairs}")
  assert res.returncode == 0, res.stderr[-2000:]
  good, bad = (float(v) for v in res.stdout.split())
  assert good > bad and good < 0


def test_bleu_hook_of_training_decodes_and_scores(trained, tmp_path):
  model, _, encoders = _loaded(trained)
  src, ref = tmp_path / "dev.en", tmp_path / "dev.de"
  src.write_text("the old dog sees a cat\nthe big house\n", encoding="utf-8")
  ref.write_text("der alt Hund sieht ein Katze\nder groß Haus\n", encoding="utf-8")
  hook = bleu_hook.make_bleu_hook(model, encoders, create_decode_hparams("beam_size=2"),
                                    str(src), str(ref))
  assert hook(0)["bleu"] == pytest.approx(100.0)
  ref.write_text("der alt Hund sieht ein Katze\nx\n", encoding="utf-8")
  hook = bleu_hook.make_bleu_hook(model, encoders, create_decode_hparams("beam_size=2"),
                                    str(src), str(ref), max_lines=1)
  assert hook(0)["bleu"] == pytest.approx(100.0)  # only the first line is decoded


def test_xla_length_buckets():
  # Multiples of 8 up to 32, then about x1.5 per bucket, then multiples of 256.
  cases = {1: 8, 8: 8, 9: 16, 25: 32, 33: 48, 49: 64, 65: 96, 97: 128, 129: 192,
           200: 256, 257: 384, 385: 512, 513: 768, 1000: 1024}
  for length, bucket in cases.items():
    assert inference_choices.xla_length(length) == bucket, length
  lengths = range(1, 600)
  assert len({inference_choices.xla_length(n) for n in lengths}) == 13  # few compilations
  assert all(inference_choices.xla_length(n) <= max(8, 2 * n) for n in lengths)


def test_automatic_xla_only_for_long_float32_files_of_large_models():
  import types

  def model(hidden, dtype):
    return types.SimpleNamespace(hparams=types.SimpleNamespace(hidden_size=hidden),
                                 dtype_policy=types.SimpleNamespace(compute_dtype=dtype))

  many, few = inference_choices.AUTO_XLA_MIN_LINES, inference_choices.AUTO_XLA_MIN_LINES - 1
  assert inference_choices.decode_with_xla(model(512, "float32"), many)
  assert not inference_choices.decode_with_xla(model(512, "float32"), few)
  assert not inference_choices.decode_with_xla(model(128, "float32"), many)
  assert not inference_choices.decode_with_xla(model(1024, "bfloat16"), many)


def test_xla_with_bucketed_lengths_decodes_as_without(trained):
  model, _, encoders = _loaded(trained)
  lines = ["the big house", "a red cat sees the old dog", "", "the dog",
           "the old house sees a big red cat and the dog"] * 3
  dhp = create_decode_hparams("beam_size=3,batch_size=4")
  plain = text_decoder.TextDecoder(model, encoders, dhp, jit_compile=False,
                                  log=lambda line: None).decode_lines(lines)
  xla = text_decoder.TextDecoder(model, encoders, dhp, jit_compile=True, log=lambda line: None)
  margin_of = near_ties.model_margin_of(model, [xla._encode(line)[0] for line in lines], 3,
                                        dhp.alpha, dhp.extra_length, model.target_vocab_size)
  compiled = xla.decode_lines(lines)
  near_ties.assert_equal_or_near_tie(compiled, plain, margin_of, SCORE_EPS,
                                     "XLA, bucketed lengths vs graph")
  # The compiled function is kept: the same one decodes again, bit for bit (same
  # kernels, same shapes); another batch is compiled for other shapes, so near-ties.
  assert xla.decode_lines(lines) == compiled
  near_ties.assert_equal_or_near_tie(xla.decode_lines(lines[:2]), compiled[:2], margin_of,
                                     SCORE_EPS, "XLA, two lines vs all")
  assert list(xla._decode_fns) == [(True, False)]  # XLA, no prefix input


def test_graph_decoding_writes_buffers_in_place_xla_by_scatter():
  """Without XLA the graph runtime would copy each whole key/value buffer at every
  step to scatter into it: the graph path writes in place (one write per key and
  value buffer of each decoder layer), XLA by its own scatter."""
  model, hp = random_model()
  x = tf.constant(id_rows(np.random.default_rng(4), 30, [6, 4]))
  dhp = create_decode_hparams("beam_size=3,extra_length=5")
  graph = op_types(seq2seq.make_decode_fn(model, dhp).get_concrete_function(x))
  assert graph[("InplaceUpdate", "float32")] == 2 * hp.num_hidden_layers
  assert graph[("Empty", "")] == 2 * hp.num_hidden_layers
  assert not graph[("TensorScatterUpdate", "float32")]
  xla = op_types(seq2seq.make_decode_fn(model, dhp, jit_compile=True)
                  .get_concrete_function(x))
  assert xla[("TensorScatterUpdate", "float32")] == 2 * hp.num_hidden_layers
  assert not xla[("InplaceUpdate", "float32")]


def test_concurrent_decodes_do_not_share_buffers():
  # Exact on every CPU: the same traced function on the same batches in one process.
  """Each call writes into buffers of its own (as a server's concurrent requests do):
  two threads decoding different batches at once give each batch's serial output."""
  import threading
  model, _ = random_model()
  rng = np.random.default_rng(8)
  batches = [tf.constant(id_rows(rng, 30, [7, 5, 6])), tf.constant(id_rows(rng, 30, [7, 3, 7]))]
  fn = seq2seq.make_decode_fn(model, create_decode_hparams("beam_size=3,extra_length=6"))
  serial = [fn(b)[0].numpy() for b in batches]
  for _ in range(3):
    results = [None, None]

    def run(k):
      results[k] = [fn(batches[k])[0].numpy() for _ in range(4)]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
    for k in range(2):
      for ids in results[k]:
        np.testing.assert_array_equal(ids, serial[k])


def test_bfloat16_weights_cast_once_decode_bit_identical_to_mixed_precision():
  """Decoding a mixed-bfloat16 model runs a twin whose weights are stored in bfloat16
  (cast once, not at every step): the same logits bit for bit when run op by op, and
  so the same search op by op, exactly on every CPU (the same logits make the same
  choices). In a graph, TensorFlow's optimizer fuses the mixed model's per-use
  casts into its kernels, so the graph decodes are compared by the near-tie rule at
  bfloat16's rounding (tests/support/near_ties.py)."""
  import keras
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model, _ = random_model()
  finally:
    keras.mixed_precision.set_global_policy("float32")
  twin = inference_choices.inference_model(model)
  assert twin is not model
  for v in twin.weights:  # layer norms keep float32 scale and offset, as mixed precision
    want = "float32" if "layer_norm" in v.path else "bfloat16"
    assert v.dtype == want, v.path
  rng = np.random.default_rng(9)
  x = id_rows(rng, 30, [6, 4, 5])
  feats = {"inputs": x, "targets": id_rows(rng, 30, [5, 5, 3])}
  np.testing.assert_array_equal(twin(feats).numpy(), model(feats).numpy())
  dhp = create_decode_hparams("beam_size=3,extra_length=5")
  mixed_fn = functools.partial(seq2seq.decode_ids, model, decode_hp=dhp)
  ours_fn = seq2seq.make_decode_fn(model, dhp)
  tf.config.run_functions_eagerly(True)
  try:
    eager_mixed, eager_ours = mixed_fn(x), ours_fn(tf.constant(x))
  finally:
    tf.config.run_functions_eagerly(False)
  for got, want in zip(eager_ours, eager_mixed):
    np.testing.assert_array_equal(got.numpy(), want.numpy())
  mixed = tf.function(mixed_fn)(x)
  ours = ours_fn(tf.constant(x))
  # eps: bfloat16 keeps 8 significant bits, a relative rounding of 2 ** -9 per cast;
  # fused or not, the two graphs round at different places in each of the model's
  # ~20 layers of ops, so their scores differ from the op-by-op run (the reference)
  # by up to ~20 * 2 ** -9 = 4% relative: 2% of the largest score is used, and
  # checked on every sentence that decodes alike.
  eps = 0.02 * float(np.abs(eager_ours[1].numpy()).max())
  margin_of = near_ties.model_margin_of(twin, x, 3, dhp.alpha, 5, 30)
  near_ties.assert_decodes_equal_or_near_tie(ours, mixed, margin_of, eps,
                                             "bfloat16 twin vs mixed model, graphs")
  near_ties.assert_decodes_equal_or_near_tie(ours, eager_ours, margin_of, eps,
                                             "bfloat16 twin, graph vs op by op")
  float_model, _ = random_model()
  assert inference_choices.inference_model(float_model) is float_model


class _IdEncoder:
  """Text "5 7 9" <-> ids [5, 7, 9]: decoding tests need no vocabulary."""

  def encode(self, text):
    return [int(t) for t in text.split()]

  def decode(self, ids):
    return " ".join(str(i) for i in ids)


def test_text_decoder_of_a_mixed_bfloat16_model_follows_its_weights():
  # Exact on every CPU: both decoders run the same graph on the same bfloat16 twin values in
  # one process.
  """The trainer's BLEU hook keeps one TextDecoder while the model trains: each
  decode_lines must use the weights of that moment, not those of the first call
  (the bfloat16 twin holds a copy)."""
  import keras
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model, _ = random_model()
  finally:
    keras.mixed_precision.set_global_policy("float32")
  encoders = {"inputs": _IdEncoder(), "targets": _IdEncoder()}
  dhp = create_decode_hparams("beam_size=2,extra_length=6")
  lines = ["5 7 9 11", "3 4", "20 21 22"]
  decoder = text_decoder.TextDecoder(model, encoders, dhp, jit_compile=False, log=lambda l: None)
  before = decoder.decode_lines(lines)
  rng = np.random.default_rng(3)
  for v in model.trainable_weights:  # a training step's worth of change, and more
    v.assign(v.numpy() + rng.normal(scale=0.5, size=v.shape).astype(np.float32))
  fresh = text_decoder.TextDecoder(model, encoders, dhp, jit_compile=False, log=lambda l: None)
  want = fresh.decode_lines(lines)
  assert want != before  # the weights' change shows in the output
  assert decoder.decode_lines(lines) == want
