"""A language model's run opened as a run (`open_run` -> `LanguageModelRun`): its samples
and scores against `t2t_keras.decoding.lm` on the same weights, against T2T's decoding
in NumPy (tests/support/t2t_numpy_lm.py, tests/support/t2t_numpy_decoding.py), and its
refusals. The run is a random-weights LM saved as a trainer saves one
(tests/support/lm_run.py)."""

import math

import numpy as np
import pytest

from data_gen.text_encoder import EOS_ID
import t2t_keras
from t2t_keras.decoding import lm
from t2t_keras.lm_run import LanguageModelRun
from tests.support import t2t_numpy_decoding
from tests.support.lm_run import make_lm_run
from tests.support.random_lm import t2t_tensors
from tests.support.t2t_numpy_lm import T2TNumpyLM

PROMPTS = ["the cat", "a big red dog sees", "", "the house."]
TEXTS = ["the cat sees the dog.", "  a red house  ", "dog dog", ""]


@pytest.fixture(scope="module")
def lm_dirs(tmp_path_factory):
  return make_lm_run(str(tmp_path_factory.mktemp("lm_run")))


@pytest.fixture(scope="module")
def opened(lm_dirs):
  return t2t_keras.open_run(lm_dirs[0])


@pytest.fixture(scope="module")
def reference(opened):
  """T2T's decoder-only Transformer in NumPy, on the run's weights."""
  return T2TNumpyLM.from_tensors(t2t_tensors(opened.model), opened.hparams.to_dict())


def _conditional(reference, prompt, new):
  """NumPy log P(new | prompt) = log P(prompt + new) - log P(prompt)."""
  joint = reference.log_prob(np.array([list(prompt) + list(new)]))[0]
  return joint - (reference.log_prob(np.array([list(prompt)]))[0] if prompt else 0.0)


def test_open_run_gives_the_language_model_run_and_its_attributes(lm_dirs, opened):
  run_dir, data_dir = lm_dirs
  assert isinstance(opened, LanguageModelRun) and isinstance(opened, t2t_keras.LanguageModelRun)
  assert opened.run_dir.path == run_dir and opened.data_dir == data_dir
  assert opened.problem.name == "languagemodel_from_files" and opened.members == []
  assert opened.hparams is opened.model.hparams and opened.checkpoint_path.endswith("ckpt-1")
  assert opened.encoder is opened.encoders["targets"]
  assert opened.vocab_files["targets"].endswith(".subwords")
  # A list of one run is that run; an ensemble with a language model is refused.
  assert isinstance(t2t_keras.open_run([run_dir]), LanguageModelRun)
  with pytest.raises(ValueError, match="is a language model: an ensemble") as error:
    t2t_keras.open_run([run_dir, run_dir])
  assert "\n" not in str(error.value)


def test_translate_is_refused_naming_sample(opened):
  for call in (lambda: opened.translate(["the cat"]), lambda: opened.translate_file("a", "b"),
               lambda: opened.export_ctranslate2()):
    with pytest.raises(TypeError) as error:
      call()
    assert "language model" in str(error.value) and "\n" not in str(error.value)
  with pytest.raises(TypeError, match=r"sample\(prompts\)"):
    opened.translate(["the cat"], beam_size=4)


def test_one_string_and_bad_settings_are_refused(opened):
  with pytest.raises(ValueError, match=r"sample\(\) takes a list of prompts.*pass \['the cat'\]"):
    opened.sample("the cat")
  with pytest.raises(ValueError, match=r"score\(\) takes a list of texts"):
    opened.score("the cat")
  with pytest.raises(ValueError, match=r"prompts\[1\] is None"):
    opened.sample(["a", None])
  for settings, name in ((dict(temperature=-1), "temperature"), (dict(top_k=0), "top_k"),
                         (dict(beam_size=0), "beam_size"), (dict(max_new_tokens=0),
                                                            "max_new_tokens"),
                         (dict(seed="x"), "seed"), (dict(batch_size=0), "batch_size")):
    with pytest.raises(ValueError, match=name):
      opened.sample(["a"], **settings)
  assert opened.sample([], max_new_tokens=3) == [] and opened.score([]) == []


def test_samples_equal_the_lm_functions_on_the_same_weights(opened):
  for settings in (dict(temperature=0.0), dict(temperature=0.8, top_k=20, seed=7)):
    got = opened.sample(PROMPTS, max_new_tokens=6, **settings)
    want = lm.sample_texts(opened.model, opened.encoder, PROMPTS, 6, **settings)
    assert [(s.text, s.ids, s.ended) for s in got] == [
        (text, c.ids, c.ended) for text, c in want]
    np.testing.assert_allclose([s.log_prob for s in got], [c.log_prob for _, c in want],
                               rtol=1e-6)
    assert all(s.text == opened.encoder.decode(s.ids) for s in got)
  # Sampling, not argmax: other seeds give other continuations; a seed gives its own again.
  drawn = {tuple(opened.sample(PROMPTS[:2], max_new_tokens=6, seed=s)[0].ids) for s in range(6)}
  assert len(drawn) > 1
  again = opened.sample(PROMPTS, max_new_tokens=6, temperature=0.8, top_k=20, seed=7)
  assert again == got


def test_scores_equal_the_lm_functions_and_the_numpy_port(opened, reference):
  scores = opened.score(TEXTS)
  assert [s.log_prob for s in scores] == pytest.approx(
      lm.score_texts(opened.model, opened.encoder, TEXTS), rel=1e-6)
  for text, score in zip(TEXTS, scores):
    ids = opened.encoder.encode(text.strip()) + [EOS_ID]  # as trained: stripped, + EOS
    assert score.tokens == len(ids)
    want = reference.log_prob(np.array([ids]))[0]
    assert score.log_prob == pytest.approx(want, rel=1e-5, abs=1e-4)
    assert score.perplexity == pytest.approx(math.exp(-want / len(ids)), rel=1e-4)


def test_greedy_and_sampled_continuations_against_numpy(opened, reference):
  encoded = [opened.encoder.encode(lm.t2t_prompt(p)) for p in PROMPTS]
  # T2T's space after final punctuation: "the house." is continued after ". ".
  assert opened.encoder.decode(encoded[3]) == "the house. "
  for sample, prompt in zip(opened.sample(PROMPTS, max_new_tokens=6, temperature=0), encoded):
    ids, score = t2t_numpy_decoding.t2t_greedy(
        lambda p: reference.decode(p, None, None)[:, -1], len(prompt) + 6,
        partial_targets=prompt)
    assert sample.ids + [EOS_ID] * sample.ended == list(ids), (prompt, sample)
    assert sample.log_prob == pytest.approx(score, rel=1e-5, abs=1e-4)
  # max_input_size (T2T's): a prompt keeps its first max_input_size - 1 subwords.
  (cut,) = opened.sample(PROMPTS[1:2], max_new_tokens=6, temperature=0, max_input_size=3)
  ids, _ = t2t_numpy_decoding.t2t_greedy(
      lambda p: reference.decode(p, None, None)[:, -1], 2 + 6, partial_targets=encoded[1][:2])
  assert len(encoded[1]) > 2 and cut.ids + [EOS_ID] * cut.ended == list(ids)
  for sample, prompt in zip(opened.sample(PROMPTS, max_new_tokens=5, seed=3), encoded):
    new = sample.ids + [EOS_ID] * sample.ended
    assert sample.ended or len(new) == 5
    assert sample.log_prob == pytest.approx(_conditional(reference, prompt, new), rel=1e-5,
                                            abs=1e-4)


def test_beam_search_is_t2ts_over_the_cached_decode_step(opened, reference):
  encoded = [opened.encoder.encode(lm.t2t_prompt(p)) for p in PROMPTS]
  samples = opened.sample(PROMPTS, max_new_tokens=5, beam_size=3, alpha=0.6)
  assert {s.ended for s in samples} == {True, False}  # both kinds of score are checked
  alone = lm.Continuer(opened.model, lm.ContinueSettings(5, beam_size=3, alpha=0.6))
  for prompt, sample in zip(PROMPTS, samples):  # each item stops on its own
    (by_itself,) = lm.continue_texts(alone, opened.encoder, [prompt])
    assert (by_itself.ids, by_itself.ended) == (sample.ids, sample.ended)
    assert by_itself.log_prob == pytest.approx(sample.log_prob, rel=1e-5)
  for sample, prompt in zip(samples, encoded):
    seqs, scores = t2t_numpy_decoding.t2t_beam_search(
        lambda p: reference.decode(p, None, None)[:, -1], 3, 0.6, len(prompt) + 5,
        opened.model.target_vocab_size, partial_targets=prompt)
    best = [int(t) for t in np.trim_zeros(seqs[0], "b")]
    assert sample.ids + [EOS_ID] * sample.ended == best, (prompt, sample)
    new = sample.ids + [EOS_ID] * sample.ended
    # The score T2T reports is log P / ((5 + length) / 6) ** alpha for an ended hypothesis
    # (its length counting the prompt); the sample's log_prob is log P itself.
    penalty = ((5 + len(prompt) + len(new)) / 6) ** 0.6 if sample.ended else 1.0
    assert sample.log_prob == pytest.approx(_conditional(reference, prompt, new), rel=1e-5,
                                            abs=1e-4)
    assert sample.log_prob / penalty == pytest.approx(scores[0], rel=1e-5, abs=1e-4)
