"""A language model's run directory without training: `languagemodel_from_files` on a
tiny grammar's text and a small `TransformerLM` with random weights, saved as the
trainer saves a run (hparams.json, run.json with its vocabulary, a checkpoint).

Random weights give continuations that differ from prompt to prompt and seed to
seed, which is what the tests of `open_run`, the decoder and the export compare.
"""

import os
import random

import numpy as np
import tensorflow as tf

from data_gen import registry
from data_gen.generate import generate_data
from t2t_keras.hparams import create_hparams
from t2t_keras.rundir import model_factory, settings

NAME = "languagemodel_from_files"
WORDS = ("the", "a", "big", "small", "red", "cat", "dog", "house", "sees", "likes", "finds")
SMALL = ("num_hidden_layers=2,hidden_size=16,filter_size=24,num_heads=2,"
         "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0")


def write_text(path: str, count: int, seed: int) -> None:
  rng = random.Random(seed)
  with open(path, "w", encoding="utf-8") as f:
    for _ in range(count):
      f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) + ".\n")


def make_lm_run(root: str, seed: int = 0, overrides: str = "", scale: float = 0.5,
                eos_scale: float = 2.5):
  """Writes data/ (vocabulary, shards) and run/ (an untrained LM's run) under `root`.

  Args:
    seed: of the weights, drawn from N(0, scale).
    overrides: more hparams (after SMALL), e.g. "pos=emb".
    eos_scale: EOS's softmax row is scaled by it, so that some continuations end
      before their last new token and others do not.
  Returns:
    (run_dir, data_dir).
  """
  data_dir, run_dir = os.path.join(root, "data"), os.path.join(root, "run")
  write_text(os.path.join(root, "train.txt"), 200, seed=1)
  write_text(os.path.join(root, "dev.txt"), 10, seed=2)
  generate_data(NAME, data_dir, tmp_dir=os.path.join(root, "tmp"), vocab_size=60,
                train_text=os.path.join(root, "train.txt"),
                dev_text=os.path.join(root, "dev.txt"))
  problem = registry.problem(NAME, data_dir)
  encoders = problem.feature_encoders(data_dir)
  vocab = encoders["targets"].vocab_size
  spec = settings.ModelSpec(vocab, vocab, 0, has_inputs=False)
  hp = create_hparams("transformer_base", SMALL + ("," + overrides if overrides else ""))
  settings.save_or_check_run_files(run_dir, hp, NAME, spec,
                                   settings.vocab_record(problem, data_dir, encoders),
                                   data_dir=data_dir)
  model = model_factory.build_model(hp, spec)
  rng = np.random.default_rng(seed)
  for v in model.trainable_variables:
    v.assign(rng.normal(0.0, scale, v.shape).astype(np.float32))
  weights = model.softmax.weights_var  # [vocab, hidden]
  weights.assign(tf.tensor_scatter_nd_update(weights, [[1]], weights[1:2] * eos_scale))
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model), run_dir, 1).save(1)
  return run_dir, data_dir
