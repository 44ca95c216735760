"""Small language models with random weights, their weights under T2T's names, and
target batches: what the LM tests compare with tests/support/t2t_numpy_lm.py."""

import numpy as np

from t2t_keras.hparams import create_hparams
from t2t_keras.rundir import model_factory
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.t2t_import import variable_names

VOCAB = 37
SMALL = ("num_hidden_layers=2,hidden_size=16,filter_size=24,num_heads=2,"
         "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0")


def lm(hparams_set="transformer_base", overrides="", vocab=VOCAB, seed=0):
  """A built LM (through model_factory.build_model, as trainer and decoder build it) with
  every variable set to random values."""
  hp = create_hparams(hparams_set, SMALL + ("," + overrides if overrides else ""))
  model = model_factory.build_model(hp, ModelSpec(vocab, vocab, 0, has_inputs=False))
  rng = np.random.default_rng(seed)
  for v in model.trainable_variables:
    v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))
  return model


def t2t_tensors(model):
  """The model's weights under T2T's checkpoint names (what T2TNumpyLM reads)."""
  tensors = {name: v.numpy() for name, v in variable_names.body_variable_map(model).items()}
  hp = model.hparams
  roles = ({"shared": model.softmax} if hp.shared_embedding_and_softmax_weights else
           {"target_emb": model.target_modality, "softmax": model.softmax})
  for role, modality in roles.items():
    name = f"symbol_modality_{model.target_vocab_size}_{hp.hidden_size}"
    tensors[f"transformer/{name}/{role}/weights_0"] = \
        modality.weights_var.numpy()
  return tensors


def targets_batch(seed=1, rows=3, length=9, vocab=VOCAB):
  """`[rows, length]` random target ids ending in EOS; row 1 ends early and is padded."""
  rng = np.random.default_rng(seed)
  targets = rng.integers(2, vocab, size=(rows, length))
  targets[:, -1] = 1  # EOS
  targets[1, 5:] = 0  # a shorter row: padding
  targets[1, 4] = 1
  return targets
