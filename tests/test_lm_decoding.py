"""Scoring and sampling with a language model (`lm_decoding.py`), against T2T's
algorithm in NumPy (tests/support/t2t_numpy_lm.py) on the same random weights."""

import numpy as np
import pytest

from data_gen.text_encoder import EOS_ID, ByteTextEncoder
from t2t_keras.decoding import lm as lm_lib
from tests.support.random_lm import lm, t2t_tensors, targets_batch
from tests.support.t2t_numpy_lm import T2TNumpyLM, log_softmax

BYTES = 258  # ByteTextEncoder: 2 reserved ids + 256 bytes


def numpy_lm(model):
  return T2TNumpyLM.from_tensors(t2t_tensors(model), model.hparams.to_dict())


def test_score_ids_is_the_sum_of_teacher_forced_log_softmax():
  model = lm("transformer_base", "shared_embedding_and_softmax_weights=false", seed=4)
  targets = targets_batch(seed=5)
  ours = lm_lib.score_ids(model, targets).numpy()
  theirs = numpy_lm(model).log_prob(targets)
  np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)
  assert (ours < 0).all()


def test_score_texts_scores_the_encoded_text_and_its_eos():
  model = lm("transformer_base", "shared_embedding_and_softmax_weights=false", vocab=BYTES,
             seed=6)
  encoder = ByteTextEncoder()
  texts = ["the cat", "a dog runs", "x"]
  reference = numpy_lm(model)
  rows = [encoder.encode(t) + [EOS_ID] for t in texts]
  padded = np.zeros([3, max(map(len, rows))], np.int64)
  for r, row in enumerate(rows):
    padded[r, :len(row)] = row
  want = reference.log_prob(padded)
  got = lm_lib.score_texts(model, encoder, texts, batch_size=2)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
  without_eos = lm_lib.score_texts(model, encoder, texts, include_eos=False)
  # Leaving EOS out drops exactly its log-probability at the end of each text.
  eos_logp = [log_softmax(reference.logits(padded))[r, len(row) - 1, EOS_ID]
              for r, row in enumerate(rows)]
  np.testing.assert_allclose(np.array(got) - np.array(without_eos), eos_logp, rtol=1e-4,
                             atol=1e-4)


def test_greedy_continuation_follows_the_numpy_argmax_after_the_prompt():
  model = lm("transformer_base", "shared_embedding_and_softmax_weights=false", seed=7)
  reference = numpy_lm(model)
  prompts = [[5, 9, 12], [20], []]
  out = lm_lib.sample_ids(model, prompts, max_new_tokens=6, temperature=0.0)
  for prompt, continuation in zip(prompts, out):
    sequence = list(prompt)
    total = 0.0
    for token in continuation.ids + ([EOS_ID] if continuation.ended else []):
      logp = log_softmax(reference.logits(np.array([sequence + [0]]))[0, len(sequence)])
      # The argmax of T2T's float64 logits, up to float32 near-ties.
      assert logp[token] >= logp.max() - 1e-4, (prompt, sequence, token)
      total += logp[token]
      sequence.append(token)
    assert len(continuation.ids) + continuation.ended <= 6
    assert continuation.ended or len(continuation.ids) == 6
    np.testing.assert_allclose(continuation.log_prob, total, rtol=1e-5, atol=1e-4)


def test_sampled_continuation_scores_its_conditional_log_probability():
  model = lm("transformer_base", "", seed=8)
  reference = numpy_lm(model)
  prompts = [[4, 4, 30], [11, 2]]
  first = lm_lib.sample_ids(model, prompts, max_new_tokens=5, temperature=1.0, seed=3)
  again = lm_lib.sample_ids(model, prompts, max_new_tokens=5, temperature=1.0, seed=3)
  assert first == again  # the same seed, the same samples
  for prompt, c in zip(prompts, first):
    new = c.ids + ([EOS_ID] if c.ended else [])
    # log P(continuation | prompt) = log P(prompt + continuation) - log P(prompt).
    joint = reference.log_prob(np.array([list(prompt) + new]))[0]
    prefix = reference.log_prob(np.array([list(prompt)]))[0]
    np.testing.assert_allclose(c.log_prob, joint - prefix, rtol=1e-5, atol=1e-4)
  others = lm_lib.sample_ids(model, [[4, 4, 30]] * 8, max_new_tokens=5, seed=4)
  assert len({tuple(c.ids) for c in others}) > 1  # it samples, not argmax


def test_sample_texts_decodes_and_checks_its_arguments():
  model = lm("transformer_base", "", vocab=BYTES, seed=9)
  encoder = ByteTextEncoder()
  (text, c), = lm_lib.sample_texts(model, encoder, ["ab"], max_new_tokens=4, seed=1)
  assert text == encoder.decode(c.ids) and len(c.ids) <= 4
  with pytest.raises(ValueError, match="max_new_tokens must be an int >= 1"):
    lm_lib.sample_ids(model, [[3]], max_new_tokens=0)
  with pytest.raises(ValueError, match="must not hold EOS"):
    lm_lib.sample_ids(model, [[3, EOS_ID]], max_new_tokens=2)
