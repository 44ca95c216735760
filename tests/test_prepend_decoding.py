"""Prepend-mode decoding (T2T's transformer_prepend sets) as T2T decoded it.

What T2T did, read from its source (tensorflow/tensor2tensor, 1.15):
`problem.preprocess_example_common` (PREDICT mode) and `decoding.py`'s
`_decode_input_tensor_to_features_dict` give `partial_targets = inputs + [0]`
(EOS included); `Transformer._greedy_infer` / `_beam_decode` run `_fast_decode`
(the cached path, for dot-product attention), which forces them through the logits
(0 at the forced id, -1e9 elsewhere), decodes `len(partial_targets) + extra_length`
steps and drops the prefix from the output. tests/support/t2t_numpy_decoding.py
ports that (`partial_targets=`). T2T's searches also ended a hypothesis at the forced
EOS of the inputs, so its outputs were empty (`forced_eos_ends=True`, checked below);
t2t_keras decodes as the port with that one change (`forced_eos_ends=False`).

The models are small and random (weights x3, for varied outputs with few near-ties),
compared with the port on T2T's NumPy forward pass (tests/support/t2t_numpy_model.py)
of the same weights.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import t2t_keras
from data_gen import registry
from t2t_keras.decoding import beam_search, ensemble, seq2seq
from t2t_keras.export import ctranslate2_model
from t2t_keras.hparams import create_decode_hparams, create_hparams
from t2t_keras.hparams_checks import check_decode_for_models
from t2t_keras.rundir import model_factory, settings
from t2t_keras.rundir.settings import ModelSpec
from tests.support import near_ties, random_lm, t2t_numpy_decoding as t2t
from tests.support import t2t_numpy_lm as np_lm
from tests.support.cli import run_cli
from tests.support.t2t_numpy_model import T2TNumpyTransformer
from tests.support.tiny_problem import make_tiny_problem
from tests.support.tolerances import SCORE_EPS

VOCAB = 24
SMALL = "num_hidden_layers=2,hidden_size=32,filter_size=48,num_heads=2"
MODES = ("prepend_inputs_masked_attention", "prepend_inputs_full_attention")
INPUTS = [[5, 9, 1], [7, 3, 12, 4, 1], [2, 8, 1], [11, 6, 14, 20, 17, 1], [3, 1],
          [19, 22, 4, 1]]
EXTRA = 6
DECODES = {  # decode hparams -> the port's stop_early (T2T: top_beams == 1)
    f"beam_size=4,alpha=0.6,extra_length={EXTRA}": True,
    f"beam_size=4,alpha=0.6,extra_length={EXTRA},return_beams=true": False,
    f"beam_size=1,extra_length={EXTRA}": True,
}


def _random(model, seed=3):
  """Sets the model's weights from `seed` (Keras' initializers, times 3)."""
  tf.keras.utils.set_random_seed(seed)
  fresh = model_factory.build_model(model.hparams, ModelSpec(
      model.input_vocab_size, model.target_vocab_size, model.target_space_id))
  model.set_weights([3.0 * w for w in fresh.get_weights()])
  return model


def _model(mode="prepend_inputs_masked_attention", vocab=VOCAB, seed=3):
  hp = create_hparams("transformer_prepend", f"{SMALL},prepend_mode={mode}")
  return _random(model_factory.build_model(hp, ModelSpec(vocab, vocab, 0)), seed)


@pytest.fixture(scope="module")
def models():
  return {mode: _model(mode) for mode in MODES}


def _reference(model):
  """T2T's forward pass (NumPy, float64) of `model`'s weights."""
  return T2TNumpyTransformer.from_tensors(random_lm.t2t_tensors(model),
                                          model.hparams.to_dict(), 0)


def _padded(rows):
  width = max(map(len, rows))
  return np.array([list(r) + [0] * (width - len(r)) for r in rows], np.int32)


def _port(reference, row, decode_hp, stop_early, forced_eos_ends=False, prepend=True):
  """T2T's decode of one sentence (`row`, EOS included): (ids, score) or with
  return_beams (ids [beam, n], scores [beam]); prepend: T2T's partial_targets."""
  dhp = create_decode_hparams(decode_hp)
  fn = reference.logits_fn(row)
  partial = list(row) + [0] if prepend else []
  length = (len(partial) if prepend else len(row)) + dhp.extra_length
  forced = dict(partial_targets=partial, forced_eos_ends=forced_eos_ends)
  if dhp.beam_size == 1:
    ids, score = t2t.t2t_greedy(fn, length, **forced)
    return (ids[None], np.array([score])) if dhp.return_beams else (ids, score)
  ids, scores = t2t.t2t_beam_search(fn, dhp.beam_size, dhp.alpha, length, VOCAB,
                                    stop_early=stop_early, **forced)
  return (ids, scores) if dhp.return_beams else (ids[0], scores[0])


def _margin_of(reference, rows, decode_hp, stop_early, prepend=True):
  dhp = create_decode_hparams(decode_hp)

  def margin_of(i):
    row = list(rows[i])
    partial = row + [0] if prepend else []
    return near_ties.reference_margin(
        reference.logits_fn(row), dhp.beam_size, dhp.alpha,
        (len(partial) if prepend else len(row)) + dhp.extra_length, VOCAB, stop_early,
        partial_targets=partial)

  return margin_of


def _decode(model, rows, decode_hp, use_cache=True):
  fn = seq2seq.make_decode_fn(model, create_decode_hparams(decode_hp), use_cache=use_cache)
  return [t.numpy() for t in fn(tf.constant(_padded(rows)))]


def _assert_decodes_as_port(got, reference, rows, decode_hp, stop_early, prepend=True,
                            what="decodes"):
  want = [_port(reference, row, decode_hp, stop_early, prepend=prepend) for row in rows]
  return near_ties.assert_decodes_equal_or_near_tie(
      got, ([w[0] for w in want], np.array([w[1] for w in want])),
      _margin_of(reference, rows, decode_hp, stop_early, prepend), SCORE_EPS, what,
      # n-best scores sum float32 log-probs over the prefix and the continuation:
      # AVX2-only oneDNN kernels reach 1.2e-4 on a score of 3.2 (a wrong prefix moves
      # it by whole units)
      score_atol=3 * SCORE_EPS)


def test_t2t_as_written_ends_at_the_inputs_eos_and_outputs_nothing(models):
  """T2T's searches finish the forced `inputs` (its EOS) with score 0, which no
  continuation beats (greedy stops there): every output is empty. Why t2t_keras lets
  a forced EOS end nothing."""
  reference = _reference(models[MODES[0]])
  for decode_hp, stop_early in DECODES.items():
    n_best = "return_beams" in decode_hp
    for row in INPUTS:
      ids, scores = _port(reference, row, decode_hp, stop_early, forced_eos_ends=True)
      best, score = (ids[0], scores[0]) if n_best else (ids, scores)
      assert not np.any(best) and score == 0.0, (decode_hp, row, best, score)  # only padding
      fixed, _ = _port(reference, row, decode_hp, stop_early)
      assert np.any(fixed[0] if n_best else fixed), (decode_hp, row)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("decode_hp", list(DECODES))
def test_prepend_decoding_equals_the_t2t_port(models, mode, decode_hp):
  """Beam (top 1 and n-best) and greedy, a batch of inputs of different lengths: each
  sentence's ids and scores are T2T's for it alone (its inputs and a 0 forced, scored
  0, decode_length = that prefix + extra_length, the prefix dropped). Full attention
  decodes causally as T2T's cached decoding did: the same port."""
  model = models[mode]
  got = _decode(model, INPUTS, decode_hp)
  assert got[0].shape[-1] == EXTRA
  ties = _assert_decodes_as_port(got, _reference(model), INPUTS, decode_hp,
                                 DECODES[decode_hp])
  assert ties <= 1, ties


def test_decoding_without_the_forced_prefix_differs_from_t2t(models):
  """Not vacuous: the same weights decoded without the prefix (prepend_mode=none, as
  t2t_keras decoded prepend runs before) give other ids and scores, which the port
  gives without partial_targets, and which the comparison above would refuse."""
  model = models[MODES[0]]
  hp = model.hparams.replace(prepend_mode="none")
  plain = model_factory.build_model(hp, ModelSpec(VOCAB, VOCAB, 0))
  plain.set_weights(model.get_weights())
  reference = _reference(model)
  decode_hp = f"beam_size=4,alpha=0.6,extra_length={EXTRA}"
  with_prefix = _decode(model, INPUTS, decode_hp)
  without = _decode(plain, INPUTS, decode_hp)
  _assert_decodes_as_port(without, reference, INPUTS, decode_hp, True, prepend=False)
  differ = [i for i in range(len(INPUTS))
            if not near_ties.same(with_prefix[0][i], without[0][i])]
  assert len(differ) >= len(INPUTS) - 1, (with_prefix[0], without[0])
  with pytest.raises(AssertionError):
    _assert_decodes_as_port(without, reference, INPUTS, decode_hp, True)


@pytest.mark.parametrize("mode", MODES)
def test_scores_and_uncached_decoding(models, mode):
  """score_targets reads inputs + 0 + output and counts the output, as T2T's NumPy
  model does; masked attention: each greedy score and finished beam's score (times its
  length penalty, the prefix's positions counted) is that log-prob, and uncached
  decoding equals cached. Full attention: uncached decoding attends with the training
  bias (the inputs part whole), the port on that bias."""
  model = models[mode]
  reference = _reference(model)
  x = tf.constant(_padded(INPUTS))
  greedy = f"beam_size=1,extra_length={EXTRA}"
  ids, scores = _decode(model, INPUTS, greedy)
  outputs = [row[:np.count_nonzero(row)] for row in ids]
  targets = _padded([list(o) or [0] for o in outputs])
  logp = seq2seq.score_targets(model, x, tf.constant(targets)).numpy()
  joined = _padded(np_lm.prepend_inputs(INPUTS, [list(o) for o in outputs]))
  shifted = np.pad(joined, [[0, 0], [1, 0]])[:, :-1]
  bias = np_lm.full_attention_bias(joined) if mode == MODES[1] else None
  their = np_lm.log_softmax(reference.decode(shifted, *reference.encode(_padded(INPUTS)),
                                             self_bias=bias))
  picked = np.take_along_axis(their, joined[..., None], -1)[..., 0]
  want = (picked * np_lm.weights_prepend_inputs_to_targets(joined)).sum(-1)
  np.testing.assert_allclose(logp, want, rtol=2e-5, atol=SCORE_EPS)  # float32 of large log-probs
  uncached = _decode(model, INPUTS, greedy, use_cache=False)
  if mode == MODES[1]:
    def full_bias_fn(row):
      encoded = reference.encode(np.asarray(row)[None])

      def fn(prefix):
        targets = np.pad(prefix[:, 1:], [[0, 0], [0, 1]])
        n = prefix.shape[0]
        return reference.decode(prefix, np.repeat(encoded[0], n, 0), np.repeat(encoded[1], n, 0),
                                self_bias=np_lm.full_attention_bias(targets))[:, -1]
      return fn

    margins = [[] for _ in INPUTS]
    want = [t2t.t2t_greedy(full_bias_fn(r), len(r) + 1 + EXTRA, margins=m,
                           partial_targets=list(r) + [0], forced_eos_ends=False)
            for r, m in zip(INPUTS, margins)]
    near_ties.assert_decodes_equal_or_near_tie(
        uncached, ([w[0] for w in want], np.array([w[1] for w in want])),
        lambda i: min(margins[i], default=np.inf), SCORE_EPS, "uncached full attention vs port")
    # ...which is not cached (T2T's causal) decoding: the bias matters here.
    assert not all(near_ties.same(a, b) for a, b in zip(uncached[0], ids))
    return
  np.testing.assert_allclose(scores, logp, rtol=0, atol=SCORE_EPS)
  near_ties.assert_decodes_equal_or_near_tie(
      uncached, (ids, scores), _margin_of(reference, INPUTS, greedy, True), SCORE_EPS,
      "uncached vs cached")
  beam_ids, beam_scores = _decode(model, INPUTS, f"beam_size=4,alpha=0.6,extra_length={EXTRA}")
  for i, row in enumerate(beam_ids):
    out = list(row[:np.count_nonzero(row)])
    logp = seq2seq.score_targets(model, x[i:i + 1], tf.constant([out or [0]])).numpy()[0]
    penalty = (beam_search.length_penalty(len(INPUTS[i]) + 1 + len(out), 0.6).numpy()
               if out and out[-1] == 1 else 1.0)
    assert beam_scores[i] * penalty == pytest.approx(logp, abs=SCORE_EPS), (i, out)


def test_prepend_runs_refuse_what_they_cannot_do(models):
  model = models[MODES[0]]
  x = tf.constant(_padded(INPUTS))
  dhp = create_decode_hparams(f"beam_size=4,extra_length={EXTRA}")
  with pytest.raises(ValueError, match="forced target prefixes: a run with "
                     "hparams.prepend_mode='prepend_inputs_masked_attention'"):
    seq2seq.decode_ids(model, x, dhp, prefix=x)
  with pytest.raises(ValueError, match="decode_hparams.return_alignments: a run with "
                     "prepend_mode='prepend_inputs_masked_attention' has no alignments"):
    check_decode_for_models(dhp.replace(return_alignments=True), [model.hparams], VOCAB)
  plain = model_factory.build_model(model.hparams.replace(prepend_mode="none"),
                                    ModelSpec(VOCAB, VOCAB, 0))
  with pytest.raises(ValueError, match="ensemble members must all prepend their inputs"):
    ensemble.Ensemble([model, plain])
  assert ensemble.Ensemble(list(models.values())).hparams.prepend_mode == MODES[0]
  with pytest.raises(ctranslate2_model.NotConvertibleError,
                     match="prepend_mode='prepend_inputs_masked_attention'"):
    ctranslate2_model.check_convertible(model.hparams)


@pytest.fixture(scope="module")
def prepend_run(tmp_path_factory):
  """A run directory of a random prepend-mode model on the tiny problem (no training:
  what is checked is how it decodes)."""
  root = str(tmp_path_factory.mktemp("prepend_run"))
  data_dir = make_tiny_problem(root, train=200, dev=8)
  problem = registry.problem("translate_from_files", data_dir)
  encoders = problem.feature_encoders(data_dir)
  hp = create_hparams("transformer_prepend", SMALL)
  spec = ModelSpec(encoders["inputs"].vocab_size, encoders["targets"].vocab_size, 0)
  run_dir = os.path.join(root, "run")
  settings.save_or_check_run_files(run_dir, hp, "translate_from_files", spec,
                                   settings.vocab_record(problem, data_dir, encoders),
                                   data_dir=data_dir)
  model = _random(model_factory.build_model(hp, spec), seed=5)
  tf.train.Checkpoint(model=model).write(os.path.join(run_dir, "ckpt-1"))
  return run_dir, data_dir, t2t_keras.open_run(run_dir, data_dir=data_dir)


LINES = ["the big house", "a small cat", "the red dog runs and the cat sees"]


def test_translate_and_the_decoder_cli_decode_as_t2t(prepend_run, tmp_path, capsys):
  run_dir, data_dir, run = prepend_run
  got = run.translate(LINES, beam_size=4, alpha=0.6, extra_length=EXTRA)
  rows = [run.encoders["inputs"].encode(line) + [1] for line in LINES]
  reference = _reference(run.model)
  decode_hp = f"beam_size=4,alpha=0.6,extra_length={EXTRA}"
  want = []
  for row in rows:
    ids, _ = t2t.t2t_beam_search(reference.logits_fn(row), 4, 0.6, len(row) + 1 + EXTRA,
                                 run.model.target_vocab_size, partial_targets=row + [0],
                                 forced_eos_ends=False)
    want.append(run.encoders["targets"].decode(seq2seq.strip_ids(ids[0])))
  vocab = run.model.target_vocab_size
  margins = lambda i: near_ties.reference_margin(
      reference.logits_fn(rows[i]), 4, 0.6, len(rows[i]) + 1 + EXTRA, vocab,
      partial_targets=rows[i] + [0])
  near_ties.assert_equal_or_near_tie(got, want, margins, SCORE_EPS, "translate vs port")
  assert all(got), got  # T2T's own decode gave "" for every line
  with pytest.raises(ValueError, match="forced target prefixes"):
    run.translate(LINES, prefix=["der", "", ""])
  source, output = tmp_path / "in.en", tmp_path / "out.de"
  source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--output_dir={run_dir}", f"--data_dir={data_dir}", f"--decode_from_file={source}",
      f"--decode_hparams={decode_hp}", f"--decode_to_file={output}"], capsys)
  assert code == 0, err[-2000:]
  # Exact on every CPU: the same code, weights and inputs as translate() above.
  assert output.read_text(encoding="utf-8").splitlines() == got
  prefixes = tmp_path / "prefix.de"
  prefixes.write_text("der\n\n\n", encoding="utf-8")
  code, err = run_cli("t2t_keras.cli.decoder", [
      f"--output_dir={run_dir}", f"--data_dir={data_dir}", f"--decode_from_file={source}",
      f"--decode_prefix_file={prefixes}"], capsys)
  assert code == 2 and "forced target prefixes: a run with hparams.prepend_mode=" in err, \
      err[-2000:]


def test_the_saved_model_decodes_as_translate(prepend_run, tmp_path):
  _, _, run = prepend_run
  decode_hp = f"beam_size=4,alpha=0.6,extra_length={EXTRA}"
  version = run.export_saved_model(str(tmp_path / "export"), decode_hp)
  loaded = tf.saved_model.load(version)
  out = loaded.signatures["serving_default"](inputs=tf.constant(LINES))
  served = [o.decode("utf-8") for o in out["outputs"].numpy()]
  want = run.translate(LINES, beam_size=4, alpha=0.6, extra_length=EXTRA)
  reference = _reference(run.model)
  rows = [run.encoders["inputs"].encode(line) + [1] for line in LINES]
  near_ties.assert_equal_or_near_tie(served, want, _margin_of_rows(reference, rows, run),
                                     SCORE_EPS, "SavedModel vs translate")
  beams = loaded.signatures["beam_4"](inputs=tf.constant(LINES), alpha=tf.constant([0.6]),
                                      extra_length=tf.constant([EXTRA]),
                                      n_best=tf.constant([1]))
  first = [o[0].decode("utf-8") for o in beams["outputs"].numpy()]
  near_ties.assert_equal_or_near_tie(first, want, _margin_of_rows(reference, rows, run),
                                     SCORE_EPS, "beam_4 vs translate")


def _margin_of_rows(reference, rows, run):
  vocab = run.model.target_vocab_size
  return lambda i: near_ties.reference_margin(
      reference.logits_fn(rows[i]), 4, 0.6, len(rows[i]) + 1 + EXTRA, vocab,
      partial_targets=rows[i] + [0])
