"""Importing T2T language-model runs (a problem without inputs: T2T's has_input false).

No checkpoint that T2T itself wrote for a language model is at hand: each test writes a
T2T run (hparams.json, flags.txt, T2T's subword vocabulary, a TF1 checkpoint) whose
variables carry the names T2T's `Transformer.body` gives a model without inputs
(`transformer/body/decoder/layer_<i>/{self_attention,ffn}/...`, no encoder, no
`encdec_attention`, no target-space embedding; `symbol_modality_<vocab>_<hidden>/
{shared,target_emb,softmax}/weights_<i>`), with `tests/support/t2t_checkpoint.py`.
Expectations come from `tests/support/t2t_numpy_lm.py` (T2T's decoder-only forward pass
in NumPy, reading T2T's names) and `tests/support/t2t_numpy_training.py` (TF1's Adam).
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from data_gen import registry
from t2t_keras.lm_model import TransformerLM
from t2t_keras.rundir import model_factory, settings
from t2t_keras.t2t_import import importer, variable_names
from t2t_keras.training import losses, schedules
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support import t2t_numpy_training as t2t_np
from tests.support.cli import run_cli_output
from tests.support.step_utils import one_step
from tests.support.t2t_checkpoint import (LM_BASE, LM_PROBLEM, LM_VOCAB, assert_close,
                                          random_t2t_tensors, t2t_adafactor_slots,
                                          write_t2t_checkpoint, write_t2t_lm_run)
from tests.support.t2t_numpy_lm import T2TNumpyLM

IMPORT = "t2t_keras.cli.import_checkpoint"


def _targets(seed=1, rows=3, length=8):
  """`[rows, length]` target ids ending in EOS; row 1 shorter, 0-padded."""
  targets = np.random.default_rng(seed).integers(2, LM_VOCAB, size=(rows, length))
  targets[:, -1] = 1
  targets[1, 4] = 1
  targets[1, 5:] = 0
  return targets


def _refused(result, *names):
  """Exit status 2 and one error line naming each of `names`."""
  status, _, err = result
  lines = [line for line in err.splitlines() if line.strip()]
  assert status == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
  for name in names:
    assert name in lines[0], (name, lines[0])
  return lines[0]


@pytest.mark.parametrize("overrides", [
    {},  # pre-norm, embedding and softmax shared: symbol_modality_30_8/shared/weights_<i>
    {"layer_preprocess_sequence": "none", "layer_postprocess_sequence": "dan",
     "shared_embedding_and_softmax_weights": False},  # post-norm v1: target_emb and softmax
    {"shared_embedding_and_softmax_weights": False, "shared_embedding": True},  # shared, softmax
], ids=["pre_norm_shared", "post_norm_unshared", "shared_embedding"])
def test_t2t_lm_run_imports_as_a_language_model_whose_logits_equal_numpy_t2t(
    tmp_path, capsys, overrides):
  hp_t2t = dict(LM_BASE, **overrides)
  tensors = write_t2t_lm_run(tmp_path / "t2t", hp_t2t, np.random.default_rng(0), step=40)
  assert not [n for n in tensors if "encoder" in n or "encdec" in n or "target_space" in n
              or "input_emb" in n]
  run = tmp_path / "run"
  status, out, err = run_cli_output(IMPORT, [f"--t2t_output_dir={tmp_path / 't2t'}",
                                             f"--output_dir={run}"], capsys)
  assert status == 0, err[-3000:]
  assert f"problem languagemodel_from_files (T2T's {LM_PROBLEM}), a language model" in err
  assert "docs/language_models.md" in out and "t2t_keras_exporter" not in out
  # run.json: a run without inputs of a registered problem without inputs.
  record = json.loads((run / "run.json").read_text())
  assert record["has_inputs"] is False and record["problem"] == importer.LM_PROBLEM
  problem = registry.problem(record["problem"], str(run))
  assert problem.has_inputs is False
  assert problem.feature_encoders(str(run))["targets"].vocab_size == LM_VOCAB
  assert f"--problem={importer.LM_PROBLEM}" in (run / "trainer_flags.txt").read_text()
  assert json.loads((run / "t2t_import.json").read_text())["t2t_variables"] == len(tensors)
  model, _, _, spec, checkpoint = model_factory.load_trained_model(str(run))
  assert isinstance(model, TransformerLM) and not spec.has_inputs
  assert checkpoint.endswith("ckpt-40")
  targets = _targets()
  got = model({"targets": tf.constant(targets)}, training=False).numpy()
  want = T2TNumpyLM(str(tmp_path / "t2t" / "model.ckpt-40"), hp_t2t, 0).logits(targets)
  assert got.shape == (3, 8, LM_VOCAB) and np.abs(want).max() > 1.0
  # float32 against float64: ~1e-6 apart; a swapped or misplaced tensor moves them by ~1.
  assert_close(got, want)


def _t2t_names(model, reader):
  """Per trainable variable of the LM: its T2T names (the embedding: every shard)."""
  by_id = {id(v): [name] for name, v in variable_names.body_variable_map(model).items()}
  shards = sorted((n for n in reader.get_variable_to_shape_map()
                   if "/shared/weights_" in n and not n.startswith("training/")),
                  key=lambda n: int(n.rsplit("_", 1)[1]))
  by_id[id(model.softmax.weights_var)] = shards
  return [by_id[id(v)] for v in model.trainable_variables]


def _read(reader, names, prefix="", suffix=""):
  return np.concatenate([reader.get_tensor(prefix + n + suffix) for n in names], axis=0)


def test_t2t_lm_adam_slots_land_in_their_variables_and_the_next_two_updates_are_t2t_s(
    tmp_path):
  """T2T's Adam moments (random, every variable) land in the slots of the variables
  of the same T2T names, and the first two updates after the import equal
  tf.train.AdamOptimizer (NumPy) resumed from the checkpoint's slots and beta powers
  at T2T's learning rate of steps 40 and 41."""
  t2t_step = 40
  write_t2t_lm_run(tmp_path / "t2t", LM_BASE, np.random.default_rng(0), step=t2t_step,
                   adam_updates=t2t_step)
  lines, run = [], str(tmp_path / "run")
  importer.import_t2t_run(str(tmp_path / "t2t"), run, log=lines.append)
  assert "Adam state imported" in lines[-1] and "after 40 updates" in lines[-1], lines
  hp, _, spec = settings.load_run_files(run)
  assert settings.adam_step_offset(run) == 0
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=1000)
  config = schedules.RunConfig(output_dir=run, train_steps=1000)
  assert schedules.Experiment(trainer, config, None, None, log=lines.append).restore() == t2t_step

  reader = tf.train.load_checkpoint(str(tmp_path / "t2t" / f"model.ckpt-{t2t_step}"))
  names = _t2t_names(trainer.model, reader)
  assert len({n for group in names for n in group}) == len(
      [n for n in reader.get_variable_to_shape_map() if n.startswith("transformer/")])
  m = [_read(reader, n, "training/", "/Adam") for n in names]
  v = [_read(reader, n, "training/", "/Adam_1") for n in names]
  optimizer = trainer.optimizer
  # Keras' Adam slots, read as the importer assigns them.
  # pylint: disable=protected-access
  for variable, want_m, want_v in zip(trainer.model.trainable_variables, m, v):
    index = optimizer._get_variable_index(variable)
    np.testing.assert_array_equal(optimizer._momentums[index].numpy(), want_m)
    np.testing.assert_array_equal(optimizer._velocities[index].numpy(), want_v)
  # pylint: enable=protected-access

  weights = [_read(reader, n) for n in names]
  reference = t2t_np.Tf1Adam(weights, 0.9, 0.98, 1e-9, m=m, v=v,
                             beta1_power=reader.get_tensor("training/beta1_power"),
                             beta2_power=reader.get_tensor("training/beta2_power"))
  oracle = model_factory.build_model(hp, spec)
  first = None  # (gradients, weights) of the first update
  for update in range(2):
    targets = _targets(seed=10 + update, rows=4, length=7).astype(np.int64)
    batch = {"inputs": targets[:, :0], "targets": targets}
    for variable, w in zip(oracle.trainable_variables, reference.w):
      variable.assign(w.astype(np.float32))
    with tf.GradientTape() as tape:
      num, den = losses.padded_cross_entropy(oracle({"targets": targets}, training=True),
                                             targets, LM_BASE["label_smoothing"])
      loss = num / den
    grads = [tf.convert_to_tensor(g).numpy()
             for g in tape.gradient(loss, oracle.trainable_variables)]
    before = [w.copy() for w in reference.w]
    reference.apply(grads, t2t_np.learning_rate(t2t_step + update, LM_BASE, 1000))
    first = first or (grads, [w.copy() for w in reference.w])
    one_step(trainer, [batch])
    moved = max(np.abs(a - b).max() for a, b in zip(reference.w, before))
    assert moved > 1e-3
    for variable, want in zip(trainer.model.trainable_variables, reference.w):
      np.testing.assert_allclose(variable.numpy(), want, rtol=0, atol=moved * 1e-3 + 3e-7,
                                 err_msg=variable.path)
  # The slots matter: a fresh Adam's first update from the same weights is far off.
  fresh = t2t_np.Tf1Adam(weights, 0.9, 0.98, 1e-9)
  fresh.apply(first[0], t2t_np.learning_rate(t2t_step, LM_BASE, 1000))
  assert max(np.abs(a - b).max() for a, b in zip(fresh.w, first[1])) > 100 * moved * 1e-3


def test_t2t_lm_adafactor_slots_land_in_their_variables(tmp_path):
  """A language model trained with T2T's Adafactor (T2T's LM sets for TPUs): vr/vc of
  matrices and v of vectors land in T2TAdafactor's slots of the variables of the same
  T2T names, the embedding's shards joined (vr concatenated, vc their row-weighted
  mean); the decay continues at T2T's step."""
  rng = np.random.default_rng(0)
  hp_t2t = dict(LM_BASE, optimizer="Adafactor", learning_rate_schedule="rsqrt_decay",
                optimizer_adafactor_beta1=0.0, optimizer_adafactor_factored=True)
  tensors = random_t2t_tensors(hp_t2t, LM_VOCAB, LM_VOCAB, rng, has_inputs=False)
  slots = t2t_adafactor_slots(tensors, rng)
  write_t2t_lm_run(tmp_path / "t2t", hp_t2t, rng, step=50, tensors=tensors,
                   optimizer_state=slots)
  lines, run = [], str(tmp_path / "run")
  importer.import_t2t_run(str(tmp_path / "t2t"), run, log=lines.append)
  assert "Adafactor state imported" in lines[-1], lines
  hp, _, spec = settings.load_run_files(run)
  assert hp.optimizer == "adafactor" and not spec.has_inputs
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=1000)
  config = schedules.RunConfig(output_dir=run, train_steps=1000)
  assert schedules.Experiment(trainer, config, None, None, log=lines.append).restore() == 50
  read = lambda name, i=0: np.float32(slots[f"training/{name}/Adafactor" + (f"_{i}" if i else "")])
  body = variable_names.body_variable_map(trainer.model)
  assert len(body) == len(tensors) - 3  # all but the 3 embedding shards
  for name, variable in body.items():
    have = trainer.optimizer.slots(variable)
    if len(variable.shape) >= 2:
      np.testing.assert_array_equal(have["vr"].numpy(), read(name), err_msg=name)
      np.testing.assert_array_equal(have["vc"].numpy(), read(name, 1), err_msg=name)
    else:
      np.testing.assert_array_equal(have["v"].numpy(), read(name), err_msg=name)
  shards = [f"transformer/symbol_modality_{LM_VOCAB}_8/shared/weights_{i}" for i in range(3)]
  have = trainer.optimizer.slots(trainer.model.softmax.weights_var)
  np.testing.assert_array_equal(have["vr"].numpy(), np.concatenate([read(n) for n in shards]))
  rows = [tensors[n].shape[0] for n in shards]
  np.testing.assert_allclose(have["vc"].numpy(),
                             sum(r * read(n, 1) for r, n in zip(rows, shards)) / sum(rows),
                             rtol=1e-6)


@pytest.mark.parametrize("damage", ["missing", "misshapen"])
def test_t2t_lm_checkpoint_with_a_missing_or_misshapen_variable_is_refused_in_one_line(
    tmp_path, capsys, damage):
  rng = np.random.default_rng(0)
  tensors = random_t2t_tensors(LM_BASE, LM_VOCAB, LM_VOCAB, rng, has_inputs=False)
  name = ("transformer/body/decoder/layer_1/ffn/conv2/bias" if damage == "missing" else
          "transformer/body/decoder/layer_0/self_attention/multihead_attention/v/kernel")
  if damage == "missing":
    del tensors[name]
  else:
    tensors[name] = tensors[name][:, :6]
  write_t2t_lm_run(tmp_path / "t2t", LM_BASE, rng, tensors=tensors)
  line = _refused(run_cli_output(IMPORT, [f"--t2t_output_dir={tmp_path / 't2t'}",
                                          f"--output_dir={tmp_path / 'run'}"], capsys), name)
  assert ("missing from the checkpoint" if damage == "missing" else
          "[8, 6] in the checkpoint, [8, 8] in the model") in line
  assert not (tmp_path / "run").exists()


def test_what_a_t2t_lm_import_cannot_map_is_refused_in_one_line(tmp_path, capsys):
  rng = np.random.default_rng(0)
  t2t_dir = tmp_path / "t2t"
  write_t2t_lm_run(t2t_dir, LM_BASE, rng)
  argv = [f"--t2t_output_dir={t2t_dir}", f"--output_dir={tmp_path / 'run'}"]
  # T2T's token and character vocabularies: no problem here reads them.
  _refused(run_cli_output(IMPORT, argv + ["--problem=languagemodel_ptb10k"], capsys),
           "languagemodel_ptb10k reads a token vocabulary", importer.LM_PROBLEM)
  # A registered problem with inputs for a checkpoint without an encoder.
  _refused(run_cli_output(IMPORT, argv + ["--problem=translate_ende_wmt8k"], capsys),
           "--problem=translate_ende_wmt8k is a problem with inputs", "without inputs")
  # A language model has no target-space embedding.
  _refused(run_cli_output(IMPORT, argv + ["--target_space_id=3"], capsys),
           "--target_space_id=3", "language model")
  # T2T's vocabulary not found.
  os.remove(t2t_dir / f"vocab.{LM_PROBLEM}.8192.subwords")
  _refused(run_cli_output(IMPORT, argv, capsys), f"vocab.{LM_PROBLEM}.<N>.subwords",
           "--vocab_file")
  # A translation checkpoint (an encoder) imported as the language-model problem.
  translation = tmp_path / "translation"
  translation.mkdir()
  hp_t2t = dict(LM_BASE, num_encoder_layers=0, num_decoder_layers=0)
  write_t2t_checkpoint(str(translation / "model.ckpt"),
                       random_t2t_tensors(hp_t2t, LM_VOCAB, LM_VOCAB, rng))
  (translation / "hparams.json").write_text(json.dumps(LM_BASE))
  _refused(run_cli_output(IMPORT, [f"--t2t_output_dir={translation}",
                                   f"--output_dir={tmp_path / 'run'}",
                                   f"--problem={importer.LM_PROBLEM}"], capsys),
           f"--problem={importer.LM_PROBLEM} is a problem without inputs", "an encoder")
  assert sorted(os.listdir(tmp_path)) == ["t2t", "translation"]


def test_t2t_lm_vocabulary_can_be_named_with_vocab_file(tmp_path):
  """A vocabulary under another name (`--vocab_file`) imports as the problem's, its size
  taken from the file when the name gives none."""
  t2t_dir = tmp_path / "t2t"
  write_t2t_lm_run(t2t_dir, LM_BASE, np.random.default_rng(0), problem="my_text2self")
  vocab = tmp_path / "my.vocab"
  os.rename(t2t_dir / "vocab.my_text2self.8192.subwords", vocab)
  result = importer.import_t2t_run(str(t2t_dir), str(tmp_path / "run"), vocab_file=str(vocab),
                                   reset_optimizer=True, log=lambda line: None)
  assert (result["problem"], result["t2t_problem"], result["has_inputs"]) == (
      importer.LM_PROBLEM, "my_text2self", False)
  assert (tmp_path / "run" / f"vocab.{importer.LM_PROBLEM}.{LM_VOCAB}.subwords").read_bytes() \
      == vocab.read_bytes()
