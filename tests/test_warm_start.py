"""Warm start (T2T's --warm_start_from): a new run begins at step 0 with another model's
weights and a fresh optimizer; another vocabulary is refused, or mapped token by token.

Run A trains 3 steps on a tiny corpus; B, C and the T2T run are new runs warm-started
from A (B on another corpus with A's vocab file, C on a corpus with a vocabulary of its
own) or from the T2T-written checkpoint of tests/data. Dropout is 0, so that A's loss
on B's first batch, computed here, is exactly B's first training loss. A run given
--train_steps=0 trains nothing: the model `train` returns holds its weights at step 0.
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import t2t_keras
from data_gen import text_encoder
from data_gen.translate_from_files import TranslateFromFiles
from t2t_keras import errors
from t2t_keras.rundir import model_factory
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.t2t_import import importer, variable_names
from t2t_keras.training import inputs, losses, warm_start
from t2t_keras.training.optimization import T2TLearningRateSchedule
from t2t_keras.training.trainer import Trainer
from tests.support.cli import run_cli_output
from tests.support.tiny_problem import WORDS

HP = ("num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,batch_size=128,"
      "layer_prepostprocess_dropout=0.0,attention_dropout=0.0,relu_dropout=0.0")
PROBLEM, SET = "translate_from_files", "transformer_tiny"
T2T_DIR = os.path.join(os.path.dirname(__file__), "data", "t2t_transformer_test_ckpt")
T2T_VOCAB = "vocab.translate_ende_wmt8k.8192.subwords"
# Words only C's corpus has: its vocabulary holds tokens A's lacks.
MORE_WORDS = {"sun": "Sonne", "moon": "Mond", "tree": "Baum", "river": "Fluss",
              "bread": "Brot", "window": "Fenster", "garden": "Garten"}


def _corpus(root: str, seed: int, count: int, words: dict) -> dict:
  rng = np.random.default_rng(seed)
  names = sorted(words)
  files = {}
  for split, n in (("train", count), ("dev", 8)):
    en, de = (os.path.join(root, f"{split}.{lang}") for lang in ("en", "de"))
    with open(en, "w", encoding="utf-8") as fe, open(de, "w", encoding="utf-8") as fd:
      for _ in range(n):
        sentence = [names[i] for i in rng.integers(0, len(names), rng.integers(2, 8))]
        fe.write(" ".join(sentence) + "\n")
        fd.write(" ".join(words[w] for w in sentence) + "\n")
    files[split] = (en, de)
  return files


def _datagen(root: str, seed: int, words: dict, vocab_size: int = 200,
             vocab_file: str = None, count: int = 200) -> str:
  """A translate_from_files data dir of a new corpus; with `vocab_file`, that vocabulary
  (copied in under the problem's vocab filename first: datagen then reuses it)."""
  os.makedirs(root)
  files = _corpus(root, seed, count, words)
  problem = TranslateFromFiles(*files["train"], *files["dev"], vocab_size=vocab_size,
                               source_lang="en", target_lang="de")
  data_dir = os.path.join(root, "data")
  if vocab_file:
    os.makedirs(data_dir)
    shutil.copy(vocab_file, os.path.join(data_dir, problem.vocab_filename))
  # One process: worker processes would each load TensorFlow for a few hundred lines.
  problem.generate_data(data_dir, os.path.join(root, "tmp"), num_shards=1, num_workers=1)
  return data_dir


def _vocab_file(data_dir: str) -> str:
  (name,) = [n for n in os.listdir(data_dir) if n.startswith("vocab.")]
  return os.path.join(data_dir, name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("warm_start"))
  data_a = _datagen(os.path.join(root, "a"), 1, WORDS)
  run_a = os.path.join(root, "A")
  t2t_keras.train(PROBLEM, SET, data_a, run_a, hparams=HP, train_steps=3, schedule="train",
                  random_seed=1, log=lambda line: None)
  return {"root": root, "A": run_a, "data_a": data_a,
          "data_b": _datagen(os.path.join(root, "b"), 7, WORDS, vocab_file=_vocab_file(data_a)),
          "data_c": _datagen(os.path.join(root, "c"), 8, {**WORDS, **MORE_WORDS}, 120)}


def _weights(run) -> dict:
  """{variable path: value} of a run directory's newest checkpoint, or of a returned run's
  model (a run given --train_steps=0: its weights at step 0)."""
  model = model_factory.load_trained_model(run)[0] if isinstance(run, str) else run.model
  return {v.path: v.numpy() for v in model.weights}


def test_a_warm_start_begins_at_step_0_with_the_sources_weights_and_a_fresh_optimizer(runs):
  assert _vocab_file(runs["data_b"]).endswith(os.path.basename(_vocab_file(runs["data_a"])))
  run_b, lines, summary = os.path.join(runs["root"], "B"), [], {}
  t2t_keras.train(PROBLEM, SET, runs["data_b"], run_b, hparams=HP, train_steps=1,
                  schedule="train", random_seed=5, warm_start_from=runs["A"],
                  log=lines.append, summary=summary)
  # A's model on B's first batch (the same seed gives the same batch), computed here.
  hp = t2t_keras.create_hparams(SET, HP)
  keras.utils.set_random_seed(5)
  batch = next(iter(inputs.make_dataset(os.path.join(runs["data_b"], f"{PROBLEM}-train*"),
                                        hp, "train", seed=5, deterministic=True)))
  model_a = model_factory.load_trained_model(runs["A"])[0]
  weights = losses.target_weights(batch["targets"], "none", True)
  num, _ = losses.padded_cross_entropy(model_a(batch, training=True), batch["targets"],
                                       hp.label_smoothing, weights)
  expected = float(num / tf.maximum(tf.reduce_sum(weights), 1.0))
  assert summary["final_loss"] == pytest.approx(expected, rel=1e-6, abs=1e-6), lines
  # Fresh optimizer: step 1 (A was at 3), Adam's moments after one update from zero
  # (m = (1-b1) g, v = (1-b2) g^2), the learning rate of a schedule at its step 1.
  spec = ModelSpec(*[json.load(open(os.path.join(run_b, "run.json")))[k] for k in (
      "input_vocab_size", "target_vocab_size", "target_space_id")])
  trainer = Trainer(hp, spec, tf.distribute.get_strategy(), train_steps=1)
  tf.train.Checkpoint(model=trainer.model, optimizer=trainer.optimizer).restore(
      os.path.join(run_b, "ckpt-1")).assert_existing_objects_matched()
  assert trainer.step == 1
  m = np.concatenate([v.numpy().ravel() for v in trainer.optimizer._momentums])
  v = np.concatenate([v.numpy().ravel() for v in trainer.optimizer._velocities])
  seen = v > 1e-20
  ratio = (1 - hp.optimizer_adam_beta1) ** 2 / (1 - hp.optimizer_adam_beta2)
  np.testing.assert_allclose(m[seen] ** 2 / v[seen], ratio, rtol=1e-3)
  lr = float(T2TLearningRateSchedule(hp, 1)(1))
  assert any(f" lr {lr:.3g} " in line for line in lines if line.startswith("step 1/1")), lines
  record = json.load(open(os.path.join(run_b, "run.json")))["warm_start_from"]
  assert record["path"] == runs["A"] and record["step"] == 3 and record["kind"] == "run"
  assert record["checkpoint"] == os.path.join(runs["A"], "ckpt-3")
  # Run again: B resumes from its own checkpoint, and says the warm start is not applied.
  lines.clear()
  t2t_keras.train(output_dir=run_b, train_steps=1, schedule="train", random_seed=5,
                  warm_start_from=runs["A"], log=lines.append)
  assert [line for line in lines if "not applied" in line and "resumes from its own" in line]
  assert any(line.startswith("Restored") and "ckpt-1" in line for line in lines), lines


def test_another_vocabulary_or_shape_is_refused_before_anything_is_written(runs, capsys):
  out = os.path.join(runs["root"], "refused")
  with pytest.raises(errors.ConfigError) as refused:
    t2t_keras.train(PROBLEM, SET, runs["data_c"], out, hparams=HP, train_steps=1,
                    warm_start_from=runs["A"], log=lambda line: None)
  message = str(refused.value)
  assert "\n" not in message and "--warm_start_vocab=map" in message, message
  assert _vocab_file(runs["data_c"]) in message and "t2t_keras_datagen" in message, message
  assert not os.path.exists(out)
  code, stdout, stderr = run_cli_output("t2t_keras.cli.trainer", [
      f"--problem={PROBLEM}", f"--hparams_set={SET}", f"--hparams={HP}",
      f"--data_dir={runs['data_c']}", f"--output_dir={out}", "--train_steps=1",
      f"--warm_start_from={runs['A']}"], capsys)
  said = [line for line in (stdout + stderr).splitlines() if line.strip()]
  assert code == 2 and len(said) == 1 and "--warm_start_vocab=map" in said[0], said
  assert not os.path.exists(out)
  # A T2T checkpoint without its vocab file next to it: its vocabulary cannot be known.
  bare = os.path.join(runs["root"], "t2t_without_vocab")
  shutil.copytree(T2T_DIR, bare, ignore=shutil.ignore_patterns("vocab.*"))
  with pytest.raises(errors.ConfigError, match="vocabulary of this T2T checkpoint is unknown"):
    t2t_keras.train(PROBLEM, SET, runs["data_b"], out, hparams=HP, train_steps=1,
                    warm_start_from=bare, log=lambda line: None)
  assert not os.path.exists(out)
  with pytest.raises(errors.ConfigError) as refused:
    t2t_keras.train(PROBLEM, SET, runs["data_b"], out,
                    hparams=HP.replace("filter_size=32", "filter_size=48"),
                    train_steps=1, warm_start_from=runs["A"], log=lambda line: None)
  message = str(refused.value)
  assert "transformer/encoder/layer_0/ffn/" in message and "(16, 32)" in message, message
  assert "(16, 48)" in message and "\n" not in message, message
  assert not os.path.exists(out)


def test_a_mapped_vocabulary_copies_the_shared_tokens_rows_bit_for_bit(runs):
  run_c = os.path.join(runs["root"], "C")
  started = t2t_keras.train(PROBLEM, SET, runs["data_c"], run_c, hparams=HP, train_steps=0,
                            schedule="train", random_seed=2, warm_start_from=runs["A"],
                            warm_start_vocab="map", log=lambda line: None)
  old_tokens = warm_start.token_strings(text_encoder.SubwordTextEncoder(
      _vocab_file(runs["data_a"])))
  new_tokens = warm_start.token_strings(text_encoder.SubwordTextEncoder(
      _vocab_file(runs["data_c"])))
  reader = tf.train.load_checkpoint(os.path.join(runs["A"], "ckpt-3"))
  (old_key,) = [k for k, s in reader.get_variable_to_shape_map().items()
                if k.startswith("model/") and s == [len(old_tokens), 16]]
  old_table = reader.get_tensor(old_key)
  new = _weights(started)
  table = new.pop("transformer/shared/weights")  # transformer_tiny: embeddings = softmax
  assert table.shape == (len(new_tokens), 16)
  old_index = {t: i for i, t in enumerate(old_tokens)}
  shared = [j for j, t in enumerate(new_tokens) if t in old_index]
  fresh = [j for j, t in enumerate(new_tokens) if t not in old_index]
  assert len(shared) > 20 and len(fresh) > 10, (len(shared), len(fresh))
  for j in shared:
    np.testing.assert_array_equal(table[j], old_table[old_index[new_tokens[j]]],
                                  err_msg=new_tokens[j])
  # New tokens: T2T's symbol-modality initializer, N(0, hidden_size^-0.5).
  rows = table[fresh]
  assert abs(rows.mean()) < 0.05 and rows.std() == pytest.approx(16 ** -0.5, rel=0.2)
  old = _weights(runs["A"])
  del old["transformer/shared/weights"]
  assert sorted(old) == sorted(new)
  for path in old:
    np.testing.assert_array_equal(new[path], old[path], err_msg=path)
  record = json.load(open(os.path.join(run_c, "run.json")))["warm_start_from"]
  assert record["vocab"] == {"mode": "map", "shared_tokens": len(shared),
                             "new_tokens": len(fresh)}


def test_a_warm_start_from_a_t2t_checkpoint_takes_what_the_importer_gives(runs):
  imported = os.path.join(runs["root"], "imported")
  result = importer.import_t2t_run(T2T_DIR, imported, reset_optimizer=True,
                                   log=lambda line: None)
  data_t = _datagen(os.path.join(runs["root"], "t"), 9, WORDS, vocab_size=8192,
                    vocab_file=os.path.join(T2T_DIR, T2T_VOCAB), count=40)
  run_t = os.path.join(runs["root"], "T")
  started = t2t_keras.train(PROBLEM, result["hparams_set"], data_t, run_t,
                            hparams=result["hparams"], train_steps=0, schedule="train",
                            random_seed=3, warm_start_from=T2T_DIR, log=lambda line: None)
  new, given = _weights(started), _weights(imported)
  assert sorted(new) == sorted(given)
  for path in new:
    np.testing.assert_array_equal(new[path], given[path], err_msg=path)
  # ... and what T2T wrote.
  reader = tf.train.load_checkpoint(os.path.join(T2T_DIR, "model.ckpt-1"))
  for name, variable in variable_names.body_variable_map(started.model).items():
    np.testing.assert_array_equal(variable.numpy(), reader.get_tensor(name), err_msg=name)
  record = json.load(open(os.path.join(run_t, "run.json")))["warm_start_from"]
  assert record["kind"] == "t2t" and record["step"] == 1
  assert record["checkpoint"] == os.path.join(T2T_DIR, "model.ckpt-1")


def test_token_strings_takes_subword_and_sentencepiece_encoders():
  class Pieces:  # SentencePieceEncoder's interface
    pieces = ("<pad>", "<EOS>", "▁the")

  assert warm_start.token_strings(Pieces()) == ["<pad>", "<EOS>", "▁the"]
  with pytest.raises(ValueError, match="lists no token strings"):
    warm_start.token_strings(object())
