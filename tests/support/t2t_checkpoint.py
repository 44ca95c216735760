"""T2T checkpoints for the import tests: the run T2T itself wrote, and synthetic ones.

The real run (tests/data/t2t_transformer_test_ckpt) is imported with the CLI and
compared with `t2t_numpy_model.T2TNumpyTransformer`, a NumPy forward pass that reads
T2T's tensors by T2T's names. Synthetic checkpoints hold random arrays under T2T's
names and shapes, saved as T2T's TF1 Saver saved them; `write_t2t_lm_run` writes a
whole T2T run of a language model (no T2T-written one is at hand), named as T2T's
`Transformer.body` with has_input false names its variables.
"""

import json
import pathlib
import string
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tests.support.env import ENV, REPO
from tests.support.t2t_numpy_model import T2TNumpyTransformer

# The checkpoint T2T itself wrote (Apache-2.0, Google LLC; see its README.md).
T2T_RUN = pathlib.Path(REPO) / "tests" / "data" / "t2t_transformer_test_ckpt"
VOCAB = "vocab.translate_ende_wmt8k.8192.subwords"
DE_TOK = 8  # T2T's SpaceID.DE_TOK: the only target-space row the T2T step updated
SENTENCES = [("Hello world.", "Hallo Welt."),
             ("The house is small and the cat sees the dog.", "Das Haus ist klein."),
             ("Good morning", "")]


def t2t_hparams():
  """The real run's T2T hparams (its hparams.json)."""
  return json.loads((T2T_RUN / "hparams.json").read_text())


def reference_model():
  """The real run's step-1 checkpoint in NumPy (float64), read by T2T's names."""
  return T2TNumpyTransformer(str(T2T_RUN / "model.ckpt-1"), t2t_hparams(), DE_TOK)


def assert_close(got, want, rtol=1e-5):
  """Equal within rtol relative to the largest magnitude of `want`."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  assert got.shape == want.shape
  scale = max(np.abs(want).max(), 1e-30)
  assert np.abs(got - want).max() <= rtol * scale, (np.abs(got - want).max(), scale)


def import_t2t_run(run_dir):
  """Imports the real run into `run_dir` with the CLI: (run_dir, CLI stdout)."""
  result = subprocess.run([sys.executable, "-m", "t2t_keras.cli.import_checkpoint",
                           f"--t2t_output_dir={T2T_RUN}", f"--output_dir={run_dir}"],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  return run_dir, result.stdout


def open_imported_run(run_dir):
  """(model, hparams, problem name, ModelSpec, encoders) of an imported run."""
  import t2t_keras
  from t2t_keras.rundir import settings as run_dir_lib
  opened = t2t_keras.open_run(run_dir)  # an imported run holds its vocabulary
  spec = run_dir_lib.load_run_files(run_dir)[2]
  return opened.model, opened.hparams, opened.problem.name, spec, opened.encoders


def id_batch(encoders, texts, side="inputs"):
  """`texts` encoded by `encoders[side]`, each + EOS, 0-padded: int32 `[len(texts), L]`."""
  rows = [encoders[side].encode(t) + [1] for t in texts]
  width = max(len(r) for r in rows)
  return np.array([r + [0] * (width - len(r)) for r in rows], np.int32)


def decoder_and_numpy_scores(run_dir, encoders, tmp_path, *flags):
  """(t2t_keras_decoder --score_file of SENTENCES with `flags`, NumPy T2T's log-probs)."""
  score_file = tmp_path / "pairs.tsv"
  score_file.write_text("".join(f"{s}\t{t}\n" for s, t in SENTENCES), encoding="utf-8")
  result = subprocess.run([sys.executable, "-m", "t2t_keras.cli.decoder",
                           f"--output_dir={run_dir}", f"--data_dir={run_dir}",
                           f"--score_file={score_file}", *flags],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  got = [float(line) for line in result.stdout.split()]
  ref = reference_model()
  want = [ref.log_prob(id_batch(encoders, [s]), id_batch(encoders, [t], "targets"))[0]
          for s, t in SENTENCES]
  return got, want


# ---------------------------------------------------------------------------
# Synthetic T2T-named checkpoints (post-norm v1 layout, unshared embeddings).

BASE = {"hidden_size": 8, "filter_size": 12, "num_heads": 2, "num_hidden_layers": 2,
        "num_encoder_layers": 0, "num_decoder_layers": 1, "norm_epsilon": 1e-6,
        "symbol_modality_num_shards": 3, "multiply_embedding_mode": "sqrt_depth",
        "shared_embedding_and_softmax_weights": True, "layer_preprocess_sequence": "n",
        "layer_postprocess_sequence": "da", "daisy_chain_variables": True, "moe_k": 2}


def random_t2t_tensors(hp, vocab_in, vocab_out, rng, has_inputs=True):
  """Random arrays under T2T's names and shapes for T2T hparams `hp`.

  has_inputs False: T2T's model of a problem without inputs (a language model):
  no target-space embedding, no encoder, no `encdec_attention`; the symbol
  modality holds the targets' embedding (`shared` or `target_emb`) and softmax.
  """
  d, f = hp["hidden_size"], hp["filter_size"]
  t = {"transformer/body/target_space_embedding/kernel": rng.normal(size=(32, d))} \
      if has_inputs else {}
  norm_scopes = []
  has_norm = lambda key: hp[key] != "none" and "n" in hp[key]

  def sublayer(scope, body):
    t.update(body)
    if has_norm("layer_preprocess_sequence"):
      norm_scopes.append(f"{scope}/layer_prepostprocess/layer_norm")
    if has_norm("layer_postprocess_sequence"):
      norm_scopes.append(f"{scope}/layer_postprocess/layer_norm")

  attn = lambda s: {f"{s}/multihead_attention/{p}/kernel": rng.normal(size=(d, d)) * d ** -0.5
                    for p in ("q", "k", "v", "output_transform")}
  ffn = lambda s: {f"{s}/conv1/kernel": rng.normal(size=(d, f)) * d ** -0.5,
                   f"{s}/conv1/bias": rng.normal(size=f) * 0.1,
                   f"{s}/conv2/kernel": rng.normal(size=(f, d)) * f ** -0.5,
                   f"{s}/conv2/bias": rng.normal(size=d) * 0.1}
  layers = {"encoder": hp.get("num_encoder_layers") or hp["num_hidden_layers"],
            "decoder": hp.get("num_decoder_layers") or hp["num_hidden_layers"]}
  if not has_inputs:
    del layers["encoder"]
  for stack, count in layers.items():
    for i in range(count):
      scope = f"transformer/body/{stack}/layer_{i}"
      sublayer(f"{scope}/self_attention", attn(f"{scope}/self_attention"))
      if stack == "decoder" and has_inputs:
        sublayer(f"{scope}/encdec_attention", attn(f"{scope}/encdec_attention"))
      sublayer(f"{scope}/ffn", ffn(f"{scope}/ffn"))
    if has_norm("layer_preprocess_sequence"):
      norm_scopes.append(f"transformer/body/{stack}/layer_prepostprocess/layer_norm")
  for scope in norm_scopes:
    t[f"{scope}/layer_norm_scale"] = 1 + 0.3 * rng.normal(size=d)
    t[f"{scope}/layer_norm_bias"] = 0.3 * rng.normal(size=d)
  shards = hp["symbol_modality_num_shards"]
  if hp["shared_embedding_and_softmax_weights"]:
    roles = {"shared": vocab_in if has_inputs else vocab_out}
  elif hp.get("shared_embedding"):  # symbol_bottom and symbol_targets_bottom: "shared"
    roles = {"shared": vocab_in if has_inputs else vocab_out, "softmax": vocab_out}
  else:
    roles = {"input_emb": vocab_in, "target_emb": vocab_out, "softmax": vocab_out}
    if not has_inputs:
      del roles["input_emb"]
  for role, vocab in roles.items():
    for i in range(shards):
      rows = vocab // shards + (1 if i < vocab % shards else 0)
      t[f"transformer/symbol_modality_{vocab}_{d}/{role}/weights_{i}"] = \
          rng.normal(size=(rows, d)) * d ** -0.5
  return t


def t2t_adam_slots(tensors, rng, updates, beta1=0.9, beta2=0.98):
  """T2T's Adam state after `updates` updates of every variable of `tensors`:
  random moments `training/<name>/Adam` (m) and `Adam_1` (v, well above
  epsilon^2), and TF1's `beta1_power`/`beta2_power` (beta^(updates + 1))."""
  slots = {"training/beta1_power": np.float32(beta1 ** (updates + 1)),
           "training/beta2_power": np.float32(beta2 ** (updates + 1))}
  for name, value in tensors.items():
    slots[f"training/{name}/Adam"] = rng.normal(size=np.shape(value)) * 1e-2
    slots[f"training/{name}/Adam_1"] = rng.uniform(1e-4, 1e-3, size=np.shape(value))
  return slots


def t2t_adafactor_slots(tensors, rng):
  """T2T's Adafactor state (beta1 0, factored) of every variable of `tensors`: random
  `training/<name>/Adafactor` (vr: the row means, shape[:-1]) and `Adafactor_1` (vc:
  the column means, shape[:-2] + shape[-1:]) of matrices, `Adafactor` (v) of vectors,
  named by TF1 in T2T's `_create_slots` order."""
  slots = {}
  for name, value in tensors.items():
    shape = np.shape(value)
    parts = [shape[:-1], shape[:-2] + shape[-1:]] if len(shape) >= 2 else [shape]
    for i, part in enumerate(parts):
      slots[f"training/{name}/Adafactor" + (f"_{i}" if i else "")] = rng.uniform(0.5, 2.0, part)
  return slots


def write_t2t_checkpoint(prefix, tensors, step=7, adam=None):
  """A TF1 checkpoint by tf.compat.v1.train.Saver in graph mode, with T2T's extras.

  adam: the optimizer's variables (`t2t_adam_slots`); by default zero Adam slots
  of the first three variables and the beta powers of one update.
  """
  extras = {"global_step": np.int64(step), "training/beta1_power": np.float32(0.9),
            "training/beta2_power": np.float32(0.98)}
  for name in list(tensors)[:3] if adam is None else ():
    extras[f"training/{name}/Adam"] = np.zeros_like(tensors[name])
    if name.endswith("target_space_embedding/kernel"):
      extras[f"training/{name}/Adam"][3] = 1e-3  # T2T's sparse Adam: only row 3 moved
    extras[f"training/{name}/Adam_1"] = np.zeros_like(tensors[name])
  if adam is not None:
    extras = {"global_step": np.int64(step), **adam}
  with tf.Graph().as_default():
    variables = [tf.compat.v1.Variable(np.asarray(v, np.float32) if k != "global_step" else v,
                                       name=k) for k, v in {**tensors, **extras}.items()]
    saver = tf.compat.v1.train.Saver(variables)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return saver.save(session, prefix, global_step=step)


# ---------------------------------------------------------------------------
# A T2T run of a language model (a problem without inputs).

# T2T hparams of a tiny pre-norm language model (hparams.json values).
LM_BASE = {"hidden_size": 8, "filter_size": 12, "num_heads": 2, "num_hidden_layers": 2,
           "norm_epsilon": 1e-6, "symbol_modality_num_shards": 3,
           "multiply_embedding_mode": "sqrt_depth", "shared_embedding_and_softmax_weights": True,
           "layer_preprocess_sequence": "n", "layer_postprocess_sequence": "da",
           "layer_prepostprocess_dropout": 0.0, "attention_dropout": 0.0, "relu_dropout": 0.0,
           "label_smoothing": 0.1, "optimizer": "adam", "optimizer_adam_beta1": 0.9,
           "optimizer_adam_beta2": 0.98, "optimizer_adam_epsilon": 1e-9,
           "learning_rate_schedule": "constant*linear_warmup*rsqrt_decay",
           "learning_rate_constant": 0.5, "learning_rate_warmup_steps": 20,
           "daisy_chain_variables": True}
LM_PROBLEM = "languagemodel_lm1b8k"  # T2T's, not registered in t2t-keras
LM_VOCAB = 30  # the symbol modality's rows: <pad>, <EOS>, "_", a..z, "e_"


def write_subword_vocab(path, size=LM_VOCAB):
  """A T2T subword vocabulary file (quoted subtokens, one a line) of `size` entries."""
  tokens = ["<pad>", "<EOS>", "_", *string.ascii_lowercase, "e_", *string.ascii_uppercase]
  pathlib.Path(path).write_text("".join(f"'{t}'\n" for t in tokens[:size]), encoding="utf-8")


def write_t2t_lm_run(directory, hp, rng, step=40, adam_updates=None, problem=LM_PROBLEM,
                     tensors=None, optimizer_state=None):
  """T2T's --output_dir of a language model of `problem`: hparams.json, flags.txt, the
  vocabulary as T2T names it (vocab.<problem>.8192.subwords, LM_VOCAB entries) and
  model.ckpt-<step> with T2T's names.

  Args:
    hp: T2T's hparams (hparams.json).
    adam_updates: write T2T's Adam state of that many updates (`t2t_adam_slots`);
      None: no optimizer state (the weights and global_step only).
    tensors: the variables to save (default: `random_t2t_tensors` without inputs).
    optimizer_state: another optimizer's variables to save (`t2t_adafactor_slots`).
  Returns:
    {T2T name: array} of the model's variables.
  """
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  if tensors is None:
    tensors = random_t2t_tensors(hp, LM_VOCAB, LM_VOCAB, rng, has_inputs=False)
  (directory / "hparams.json").write_text(json.dumps(hp))
  (directory / "flags.txt").write_text(f"--problem={problem}\n--hparams_set=transformer_base\n"
                                       "--output_dir=/tmp/t2t_lm\n--schedule=train\n")
  write_subword_vocab(directory / f"vocab.{problem}.8192.subwords")
  adam = {} if adam_updates is None else t2t_adam_slots(tensors, rng, adam_updates)
  adam.update(optimizer_state or {})
  write_t2t_checkpoint(str(directory / "model.ckpt"), tensors, step=step, adam=adam)
  return tensors
