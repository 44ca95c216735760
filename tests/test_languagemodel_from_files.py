"""languagemodel_from_files (T2T's Text2SelfProblem on the user's text) through
`t2t_keras_datagen` and `t2t_keras_trainer`: records of targets only, a
decoder-only run whose evaluation perplexity falls, and the trained model's
scores and samples."""

import json
import math
import os
import random
import re

import numpy as np
import pytest
import tensorflow as tf

from data_gen import registry
from data_gen.text_encoder import EOS_ID
import t2t_keras
from t2t_keras.decoding import lm
from t2t_keras.lm_model import TransformerLM
from t2t_keras.rundir import model_factory
from tests.support.cli import run_cli_output, run_datagen_in_process

NAME = "languagemodel_from_files"
DETERMINERS, ADJECTIVES = ("the", "a"), ("big", "small", "red", "old")
NOUNS, VERBS = ("cat", "dog", "house", "bird"), ("sees", "likes", "finds")


def sentence(rng):
  """A sentence of a tiny grammar: det adj noun verb det adj noun."""
  pick = lambda words: rng.choice(words)
  return " ".join([pick(DETERMINERS), pick(ADJECTIVES), pick(NOUNS), pick(VERBS),
                   pick(DETERMINERS), pick(ADJECTIVES), pick(NOUNS)])


def write_text(path, count, seed, blank_every=0):
  rng = random.Random(seed)
  with open(path, "w", encoding="utf-8") as f:
    for i in range(count):
      f.write(sentence(rng) + "\n")
      if blank_every and i % blank_every == 0:
        f.write("\n")  # paragraph breaks are skipped


def _datagen(tmp_path, capsys):
  write_text(tmp_path / "train.txt", 600, seed=1, blank_every=50)
  write_text(tmp_path / "dev.txt", 40, seed=2)
  data_dir = tmp_path / "data"
  code, _, err = run_datagen_in_process(
      capsys, f"--problem={NAME}", f"--data_dir={data_dir}", f"--tmp_dir={tmp_path / 'tmp'}",
      f"--train_text={tmp_path / 'train.txt'}", f"--dev_text={tmp_path / 'dev.txt'}",
      "--vocab_size=50", "--num_shards=2")
  assert code == 0, err
  return data_dir


def test_datagen_trainer_and_the_trained_language_model(tmp_path, capsys):
  data_dir = _datagen(tmp_path, capsys)
  problem = registry.problem(NAME, str(data_dir))
  encoder = problem.feature_encoders(str(data_dir))["targets"]
  # Each non-empty line is one record of "targets" only: its ids + EOS.
  records = [tf.train.Example.FromString(r.numpy())
             for r in tf.data.TFRecordDataset(problem.shard_paths(str(data_dir), "dev"))]
  with open(tmp_path / "dev.txt", encoding="utf-8") as f:
    lines = [line.strip() for line in f if line.strip()]
  assert len(records) == 40 and all(set(r.features.feature) == {"targets"} for r in records)
  decoded = sorted(encoder.decode(list(r.features.feature["targets"].int64_list.value)[:-1])
                   for r in records)
  assert decoded == sorted(lines)
  assert all(r.features.feature["targets"].int64_list.value[-1] == EOS_ID for r in records)
  with open(problem.text_file(str(data_dir), "dev", "targets"), encoding="utf-8") as f:
    assert f.read().splitlines() == lines
  train_examples = sum(1 for _ in tf.data.TFRecordDataset(
      problem.shard_paths(str(data_dir), "train", num_shards=2)))
  assert train_examples == 600

  output_dir = tmp_path / "run"
  evals = []
  for steps, every in ((2, 2), (400, 100)):  # then resumed: the run records has_inputs
    code, out, err = run_cli_output("t2t_keras.cli.trainer", [
        f"--problem={NAME}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
        "--hparams_set=transformer_tiny",
        "--hparams=num_hidden_layers=1,hidden_size=32,filter_size=64,num_heads=2,"
        "batch_size=512,learning_rate_warmup_steps=50,learning_rate_constant=2,"
        "label_smoothing=0,layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0",
        "--schedule=train_and_evaluate", f"--train_steps={steps}",
        f"--local_eval_frequency={every}", "--random_seed=1"], capsys)
    assert code == 0, err
    evals += [(int(step), dict(zip(text.split()[::2], map(float, text.split()[1::2]))))
              for step, text in re.findall(r"eval step (\d+): (.*)", out)]
  assert [s for s, _ in evals] == [2, 100, 200, 300, 400], evals
  for _, metrics in evals:  # rounded to 4 decimals in the log
    assert math.isclose(metrics["perplexity"], math.exp(metrics["loss"]), rel_tol=1e-3)
  first, last = evals[0][1]["perplexity"], evals[-1][1]["perplexity"]
  # The grammar's words are independent and uniform at each of the 7 positions (2,
  # 4, 4, 3, 2, 4, 4 choices) and EOS is certain: the true model's perplexity of the
  # dev text is exp(40 sentences x ln(2*4*4*3*2*4*4) / the dev tokens, EOS included).
  # After 2 steps the model is near uniform over the ~50 ids.
  tokens = sum(len(encoder.encode(line)) + 1 for line in lines)
  floor = math.exp(40 * math.log(2 * 4 * 4 * 3 * 2 * 4 * 4) / tokens)
  assert first > 0.5 * encoder.vocab_size
  assert last < evals[1][1]["perplexity"] and last < 1.25 * floor, (floor, evals)
  with open(output_dir / "run.json") as f:
    assert json.load(f)["has_inputs"] is False

  model, _, _, spec, _ = model_factory.load_trained_model(str(output_dir))
  assert isinstance(model, TransformerLM) and not spec.has_inputs
  rng = random.Random(5)
  good = [sentence(rng) for _ in range(8)]
  shuffled = [" ".join(random.Random(i).sample(s.split(), 7)) for i, s in enumerate(good)]
  good_scores = lm.score_texts(model, encoder, good)
  assert np.mean(good_scores) > np.mean(lm.score_texts(model, encoder, shuffled))
  # Perplexity of the dev text is exp(-log P / tokens), the evaluation's figure.
  dev_scores = lm.score_texts(model, encoder, lines)
  assert math.isclose(math.exp(-sum(dev_scores) / tokens), last, rel_tol=1e-3)
  (text, continuation), = lm.sample_texts(model, encoder, ["the big"],
                                                   max_new_tokens=20, temperature=0.0)
  assert continuation.ended and text.split()[0] in NOUNS, text
  # The run opens as a language model: the same continuation; translate() names sample().
  run = t2t_keras.open_run(str(output_dir))
  assert run.sample(["the big"], max_new_tokens=20, temperature=0)[0].text == text
  assert math.isclose(math.exp(-sum(s.log_prob for s in run.score(lines)) / tokens), last,
                      rel_tol=1e-3)
  with pytest.raises(TypeError, match=r"sample\(prompts\)"):
    run.translate(["the big"])
