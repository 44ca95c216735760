"""Importing T2T runs: the real T2T checkpoint and synthetic T2T-named ones vs NumPy.

Expectations come from `tests/support/t2t_numpy_model.py`, a NumPy forward pass that
reads T2T's tensors by T2T's names, and from T2T's serving client convention
(a hand-built `tf.train.Example` with int64 `inputs` = ids + EOS). The checkpoints and
the `imported`/`loaded` fixtures' builders are in `tests/support/t2t_checkpoint.py`.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.rundir import model_factory, settings as run_dir_lib
from t2t_keras.t2t_import import importer, variable_names
from tests.support.env import ENV, REPO
from tests.support.step_utils import one_step
from tests.support.t2t_checkpoint import (BASE, DE_TOK, SENTENCES, T2T_RUN, VOCAB, assert_close,
                                          decoder_and_numpy_scores, id_batch, random_t2t_tensors,
                                          reference_model, t2t_hparams, write_t2t_checkpoint)
from tests.support.t2t_numpy_model import T2TNumpyTransformer
from tests.support.tolerances import SCORE_EPS

# ---------------------------------------------------------------------------
# The real T2T checkpoint.


def test_imported_run_layout_and_logits_equal_numpy_t2t(imported, loaded):
  run_dir, stdout = imported
  model, hp, problem_name, spec, encoders = loaded
  assert problem_name == "translate_ende_wmt8k"
  assert (spec.input_vocab_size, spec.target_vocab_size, spec.target_space_id) == (
      8190, 8190, DE_TOK)
  assert (hp.hidden_size, hp.filter_size, hp.num_heads, hp.num_hidden_layers) == (16, 8, 2, 2)
  assert (hp.layer_preprocess_sequence, hp.layer_postprocess_sequence) == ("n", "da")
  assert tf.train.latest_checkpoint(run_dir).endswith("ckpt-1")  # T2T's global step
  # The registered target space is the row T2T's Adam updated.
  assert importer.trained_target_spaces(str(T2T_RUN / "model.ckpt-1")) == [DE_TOK]
  assert os.path.exists(os.path.join(run_dir, VOCAB)) and "t2t_keras_decoder" in stdout
  inputs = id_batch(encoders, [s for s, _ in SENTENCES])
  targets = id_batch(encoders, [t for _, t in SENTENCES], "targets")
  got = model({"inputs": inputs, "targets": targets}, training=False).numpy()
  assert_close(got, reference_model().logits(inputs, targets))


def test_decoder_score_file_equals_numpy_log_probs(imported, loaded, tmp_path):
  got, want = decoder_and_numpy_scores(imported[0], loaded[4], tmp_path)
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_exported_beam_search_equals_numpy_t2t_beam_search_per_sentence(imported, loaded,
                                                                         tmp_path):
  """Beam 4 through the SavedModel, each sentence alone == the NumPy port of T2T's
  beam search on the NumPy T2T model; T2T's serving client builds the Example."""
  import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

  from t2t_keras.export import saved_model
  from t2t_keras.hparams import create_decode_hparams
  from tests.support.t2t_numpy_decoding import t2t_beam_search
  run_dir = imported[0]
  model, hp, _, _, encoders = loaded
  extra_length = 3
  decode_hp = create_decode_hparams(f"beam_size=4,alpha=0.6,extra_length={extra_length}")
  vocab = {side: os.path.join(run_dir, VOCAB) for side in ("inputs", "targets")}
  version = saved_model.export_saved_model(model, hp, decode_hp, vocab, str(tmp_path / "export"),
                                      encoders)
  served = tf.saved_model.load(version)
  ref = reference_model()
  # eps of the near-tie rule (tests/support/near_ties.py): the float32 model's log-probs of
  # these sentences' beams differ from this float64 NumPy model's by < 4e-6 (a few
  # float32 ulps of sums near -90, ulp 7.6e-6), and its cached decode's from its full
  # pass by less than SCORE_EPS (1e-4, tests/test_decoding.py); SCORE_EPS bounds both
  # with room. So the served ids are the port's, or the port made a choice by a margin
  # <= 2 * SCORE_EPS, where the CPU's rounding picks the side (at most one of two).
  # (This port's margins here are 1.2e-3 and 4.2e-3: no tie today.)
  ties = 0
  for source, _ in SENTENCES[:2]:
    # T2T's serving client (serving_utils._make_example): ids + EOS, int64 "inputs".
    ids = encoders["inputs"].encode(source) + [1]
    example = tf.train.Example(features=tf.train.Features(feature={
        "inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=ids))}))
    out = served.signatures["serialized_example"](
        input=tf.constant([example.SerializeToString()]))
    margins = []
    seqs, scores = t2t_beam_search(ref.logits_fn(ids), 4, 0.6, len(ids) + extra_length,
                                   8190, eos_id=1, stop_early=True, margins=margins)
    got = np.trim_zeros(out["outputs"].numpy()[0], "b")
    if not np.array_equal(got, np.trim_zeros(seqs[0], "b")):
      assert min(margins) <= 2 * SCORE_EPS, (source, got, seqs[0], min(margins))
      ties += 1
    else:
      np.testing.assert_allclose(out["scores"].numpy()[0], scores[0], rtol=1e-5)
    text = served.signatures["serving_default"](inputs=tf.constant([source]))
    want = encoders["targets"].decode([int(i) for i in got if i not in (0, 1)])
    assert text["outputs"].numpy()[0].decode() == want  # same decode, same shape: exact
  assert ties <= 1, ties


def _write_tfrecord(path, pairs):
  with tf.io.TFRecordWriter(path) as writer:
    for inputs, targets in pairs:
      feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                 for k, v in (("inputs", inputs), ("targets", targets))}
      writer.write(tf.train.Example(
          features=tf.train.Features(feature=feature)).SerializeToString())


def test_trainer_fine_tunes_the_imported_run_from_t2t_step(imported, tmp_path):
  src = str(tmp_path / "run")
  shutil.copytree(imported[0], src)
  flagfile = os.path.join(src, "trainer_flags.txt")
  text = pathlib.Path(flagfile).read_text()
  pathlib.Path(flagfile).write_text(text.replace(imported[0], src))
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  shutil.copy(os.path.join(src, VOCAB), data_dir)
  rng = np.random.default_rng(0)
  pairs = [(list(rng.integers(2, 8190, rng.integers(2, 8))) + [1],
            list(rng.integers(2, 8190, rng.integers(2, 8))) + [1]) for _ in range(16)]
  shards = {split: str(data_dir / f"translate_ende_wmt8k-{split}-00000-of-00001")
            for split in ("train", "dev")}
  for path in shards.values():
    _write_tfrecord(path, pairs)
  from data_gen import manifest
  manifest.write_manifest(str(data_dir), "translate_ende_wmt8k", [str(data_dir / VOCAB)],
                          {split: ([path], []) for split, path in shards.items()})
  result = subprocess.run([sys.executable, "-m", "t2t_keras.cli.trainer",
                           f"--flagfile={flagfile}", f"--data_dir={data_dir}",
                           "--train_steps=2", "--schedule=train", "--local_eval_frequency=1",
                           "--log_every_steps=1"],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=300)
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  assert "at step 1." in result.stdout  # restored T2T's global step
  steps = sorted(int(p.split("-")[1].split(".")[0]) for p in os.listdir(src)
                 if p.startswith("ckpt-") and p.endswith(".index"))
  assert steps == [1, 2]


# ---------------------------------------------------------------------------
# Synthetic T2T-named checkpoints (post-norm v1 layout, unshared embeddings).


def _import_synthetic(tmp_path, hp_t2t, vocab_in, vocab_out, seed=0):
  from t2t_keras.model import Transformer
  tensors = random_t2t_tensors(hp_t2t, vocab_in, vocab_out, np.random.default_rng(seed))
  path = write_t2t_checkpoint(str(tmp_path / "model.ckpt"), tensors)
  hp = importer.hparams_from_t2t(hp_t2t)
  model = Transformer(hp, vocab_in, vocab_out, target_space_id=3)
  model.build()
  return model, path, tensors


@pytest.mark.parametrize("overrides,vocab_out", [
    ({"layer_preprocess_sequence": "none", "layer_postprocess_sequence": "dan"}, 20),
    ({"shared_embedding_and_softmax_weights": False}, 23),
], ids=["post_norm_v1", "unshared_embeddings"])
def test_synthetic_t2t_checkpoint_imports_and_equals_numpy(tmp_path, overrides, vocab_out):
  hp_t2t = dict(BASE, **overrides)
  model, path, tensors = _import_synthetic(tmp_path, hp_t2t, 20, vocab_out)
  loaded = importer.load_t2t_weights(model, path)
  assert loaded == {"global_step": 7, "assigned": len(tensors)}
  assert importer.trained_target_spaces(path) == [3]
  if overrides.get("layer_postprocess_sequence") == "dan":
    assert not any("/encoder/layer_prepostprocess" in n for n in tensors)
  else:
    assert any("/input_emb/" in n for n in tensors) and any("/softmax/" in n for n in tensors)
  rng = np.random.default_rng(1)
  inputs = rng.integers(2, 20, size=(2, 6))
  inputs[1, 4:] = 0
  targets = rng.integers(2, vocab_out, size=(2, 5))
  targets[0, 3:] = 0
  got = model({"inputs": inputs, "targets": targets}, training=False).numpy()
  want = T2TNumpyTransformer(path, hp_t2t, 3).logits(inputs, targets)
  assert_close(got, want)


def test_missing_and_unexpected_variables_are_listed(tmp_path):
  from t2t_keras.model import Transformer
  tensors = random_t2t_tensors(BASE, 20, 20, np.random.default_rng(0))
  gone = "transformer/body/decoder/layer_0/ffn/conv2/bias"
  del tensors[gone]
  tensors["transformer/body/decoder/layer_0/ffn/conv3/kernel"] = np.zeros((8, 8))
  path = write_t2t_checkpoint(str(tmp_path / "model.ckpt"), tensors)
  model = Transformer(importer.hparams_from_t2t(BASE), 20, 20)
  model.build()
  before = [w.copy() for w in model.get_weights()]
  with pytest.raises(ValueError) as error:
    importer.load_t2t_weights(model, path)
  message = str(error.value)
  assert gone in message and "ffn/conv3/kernel" in message
  assert "Adam" not in message and "global_step" not in message
  assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_unimplemented_t2t_hparams_are_refused_by_name_and_value(tmp_path):
  with pytest.raises(ValueError, match=r"proximity_bias=True.*\n.*weird_knob=3"):
    importer.hparams_from_t2t(dict(BASE, proximity_bias=True, weird_knob=3))
  with pytest.raises(ValueError, match=r"layer_postprocess_sequence='daz'"):
    importer.hparams_from_t2t(dict(BASE, layer_postprocess_sequence="daz"))
  assert importer.hparams_from_t2t(
      dict(BASE, activation_dtype="bfloat16"), ignore=["activation_dtype"]).hidden_size == 8
  # T2T kept the sampling settings among the model hparams; here they are decode
  # hparams: T2T's defaults import, another value is refused with the way to keep it.
  defaults = dict(BASE, sampling_method="argmax", sampling_temp=1.0, sampling_keep_top_k=-1)
  assert importer.hparams_from_t2t(defaults).hidden_size == 8
  with pytest.raises(ValueError, match=r"sampling_temp=0\.5 is a decoding setting.*"
                                       r"--decode_hparams=sampling_temp=0\.5"):
    importer.hparams_from_t2t(dict(defaults, sampling_temp=0.5))
  # The CLI leaves nothing behind when the run cannot be imported.
  t2t_dir = tmp_path / "t2t"
  shutil.copytree(T2T_RUN, t2t_dir)
  os.chmod(t2t_dir / "hparams.json", 0o644)
  (t2t_dir / "hparams.json").write_text(json.dumps(dict(t2t_hparams(), pos="rope")))
  with pytest.raises(ValueError, match=r"hparams.pos.*'rope'"):
    importer.import_t2t_run(str(t2t_dir), str(tmp_path / "out"), log=lambda line: None)
  assert sorted(os.listdir(tmp_path)) == ["t2t"]


# ---------------------------------------------------------------------------
# Fine-tuning continues T2T's Adam (the real checkpoint holds its slots).

# Dropout off so that updates are deterministic; a learning rate 500x T2T's so
# that its updates (~7e-4 at T2T's step 1) stand far above float32 rounding.
_FINE_TUNE = "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0,learning_rate=100"


def _t2t_by_variable(model, reader):
  """Per trainable variable of `model`: T2T's checkpoint names (modality: all shards)."""
  by_id = {id(v): [name] for name, v in variable_names.body_variable_map(model).items()}
  shards = sorted((n for n in reader.get_variable_to_shape_map()
                   if "/shared/weights_" in n and not n.startswith("training/")),
                  key=lambda n: int(n.rsplit("_", 1)[1]))
  by_id[id(model.softmax.weights_var)] = shards
  return [by_id[id(v)] for v in model.trainable_variables]


def _read(reader, names, suffix=""):
  return np.concatenate([reader.get_tensor(n + suffix) for n in names], axis=0)


def _strip_optimizer_state(tmp_path, step):
  """A copy of the T2T run whose checkpoint holds only weights and global_step=`step`."""
  out = tmp_path / "t2t_weights_only"
  out.mkdir()
  for name in ("hparams.json", "flags.txt", VOCAB):
    shutil.copy(T2T_RUN / name, out / name)
  reader = tf.train.load_checkpoint(str(T2T_RUN / "model.ckpt-1"))
  with tf.Graph().as_default():
    variables = [tf.compat.v1.Variable(np.int64(step) if n == "global_step" else
                                       reader.get_tensor(n), name=n)
                 for n in reader.get_variable_to_shape_map()
                 if n == "global_step" or n.startswith("transformer/")]
    saver = tf.compat.v1.train.Saver(variables)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      saver.save(session, str(out / "model.ckpt"), global_step=step)
  return out


@pytest.mark.parametrize("source", ["adam_slots", "reset_optimizer", "no_optimizer_state"])
def test_fine_tuning_takes_t2t_adams_next_two_updates(tmp_path, source):
  """The first two updates after import equal T2T resuming (tf.train.AdamOptimizer,
  NumPy, with the checkpoint's Adam/Adam_1 slots and beta powers, at T2T's global
  steps), or, without Adam state, a fresh TF1 Adam whose bias correction starts at
  the import while the learning rate continues at T2T's step."""
  from t2t_keras.rundir import settings as run_dir
  from t2t_keras.training import losses, schedules
  from t2t_keras.training.trainer import Trainer, create_strategy
  from tests.support import t2t_numpy_training as t2t_np
  t2t_step = 1 if source != "no_optimizer_state" else 120
  t2t_dir = T2T_RUN if source != "no_optimizer_state" else _strip_optimizer_state(tmp_path,
                                                                                   t2t_step)
  lines = []
  run = str(tmp_path / "run")
  importer.import_t2t_run(str(t2t_dir), run, hparams_overrides=_FINE_TUNE,
                            reset_optimizer=source == "reset_optimizer", log=lines.append)
  fresh = source != "adam_slots"
  assert ("Adam starts fresh" in lines[-1]) == fresh, lines
  hp, _, spec = run_dir.load_run_files(run)
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=100000,
                    adam_step_offset=run_dir.adam_step_offset(run))
  config = schedules.RunConfig(output_dir=run, train_steps=100000)
  assert schedules.Experiment(trainer, config, None, None, log=lines.append).restore() == t2t_step

  t2t_hp = dict(t2t_hparams(), learning_rate_schedule="legacy", learning_rate=100.0)
  reader = tf.train.load_checkpoint(str(T2T_RUN / "model.ckpt-1"))
  names = _t2t_by_variable(trainer.model, reader)
  weights = [_read(reader, n) for n in names]
  slots = {} if fresh else dict(
      m=[_read(reader, ["training/" + x for x in n], "/Adam") for n in names],
      v=[_read(reader, ["training/" + x for x in n], "/Adam_1") for n in names],
      beta1_power=reader.get_tensor("training/beta1_power"),
      beta2_power=reader.get_tensor("training/beta2_power"))
  reference = t2t_np.Tf1Adam(weights, t2t_hp["optimizer_adam_beta1"],
                             t2t_hp["optimizer_adam_beta2"], t2t_hp["optimizer_adam_epsilon"],
                             **slots)
  oracle = model_factory.build_model(hp, spec)
  rng = np.random.default_rng(0)
  for update in range(2):
    batch = {k: rng.integers(2, 8190, size=(3, 7)).astype(np.int64)
             for k in ("inputs", "targets")}
    batch["targets"][0, 5:] = 0
    for v, w in zip(oracle.trainable_variables, reference.w):
      v.assign(w.astype(np.float32))
    with tf.GradientTape() as tape:
      num, den = losses.padded_cross_entropy(oracle(batch, training=True), batch["targets"],
                                             t2t_hp["label_smoothing"])
      loss = num / den
    grads = tape.gradient(loss, oracle.trainable_variables)
    before = [w.copy() for w in reference.w]
    reference.apply([tf.convert_to_tensor(g).numpy() for g in grads],
                    t2t_np.learning_rate(t2t_step + update, t2t_hp, 100000))
    one_step(trainer, [batch])
    moved = max(np.abs(a - b).max() for a, b in zip(reference.w, before))
    for v, want, second in zip(trainer.model.trainable_variables, reference.w, reference.v):
      # Where sqrt(v) is near epsilon (1e-9) the update lr * m / (sqrt(v) + eps) turns
      # on float32 noise of a near-zero gradient: there only |update| <= lr holds.
      steady = (np.sqrt(second) > 1e-8) | (second == 0)  # untouched rows: no update
      assert steady.mean() > 0.9, v.path
      got = v.numpy()
      np.testing.assert_allclose(got[steady], want[steady], rtol=0,
                                 atol=moved * 1e-3 + 3e-7, err_msg=v.path)
      assert np.all(np.abs(got - want)[~steady] <= 2.01 * moved), v.path
    assert moved > 1e-4
  if not fresh:  # Adam restarted at T2T's step would be far off: the slots matter.
    restarted = t2t_np.Tf1Adam(weights, 0.9, 0.98, 1e-9, beta1_power=0.81, beta2_power=0.9604)
    restarted.apply([tf.convert_to_tensor(g).numpy() for g in grads], 1e-3)
    assert max(np.abs(a - b).max() for a, b in zip(restarted.w, weights)) > 0


def _adafactor_run(tmp_path, step, with_slots, skip=None):
  """A T2T Adafactor run (default settings: factored, no beta1) at global step
  `step`, with random Adafactor slots for every variable but `skip` when asked."""
  t2t_dir = _strip_optimizer_state(tmp_path, step)
  hparams = json.loads((t2t_dir / "hparams.json").read_text())
  hparams.update(optimizer="Adafactor", learning_rate_schedule="rsqrt_decay",
                 optimizer_adafactor_beta1=0.0, optimizer_adafactor_factored=True)
  (t2t_dir / "hparams.json").write_text(json.dumps(hparams))
  reader = tf.train.load_checkpoint(str(t2t_dir / f"model.ckpt-{step}"))
  tensors = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}
  rng = np.random.default_rng(0)
  for name in [n for n in tensors if n.startswith("transformer/") and n != skip]:
    if not with_slots:
      continue
    shape = tensors[name].shape
    # TF1 names the slots <var>/Adafactor, <var>/Adafactor_1 in _create_slots order.
    parts = [shape[:-1], shape[:-2] + shape[-1:]] if len(shape) >= 2 else [shape]
    for i, part in enumerate(parts):
      suffix = "Adafactor" + (f"_{i}" if i else "")
      tensors[f"training/{name}/{suffix}"] = rng.uniform(0.5, 2.0, part).astype(np.float32)
  with tf.Graph().as_default():
    variables = [tf.compat.v1.Variable(v, name=n) for n, v in tensors.items()]
    saver = tf.compat.v1.train.Saver(variables)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      saver.save(session, str(t2t_dir / "model.ckpt"), global_step=step)
  return t2t_dir, tensors


def test_adafactor_run_imports_with_its_adafactor_slots(tmp_path):
  # Exact on every CPU: slots are compared with the tensors written to the checkpoint (a file
  # round trip).
  """T2T's Adafactor slots (vr/vc of matrices, v of vectors) land in T2TAdafactor's
  slots of the imported run's checkpoint, the row shards of the embedding joined
  (vr concatenated, vc their row-weighted mean); the decay continues at T2T's step."""
  from t2t_keras.rundir import settings as run_dir
  from t2t_keras.training import schedules
  from t2t_keras.training.trainer import Trainer, create_strategy
  t2t_dir, tensors = _adafactor_run(tmp_path, 50, with_slots=True)
  lines, run = [], str(tmp_path / "run")
  importer.import_t2t_run(str(t2t_dir), run, log=lines.append)
  assert "Adafactor state imported" in lines[-1], lines
  assert run_dir.adam_step_offset(run) == 0
  hp, _, spec = run_dir.load_run_files(run)
  assert hp.optimizer == "adafactor"
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=1000)
  config = schedules.RunConfig(output_dir=run, train_steps=1000)
  assert schedules.Experiment(trainer, config, None, None, log=lines.append).restore() == 50
  optimizer = trainer.optimizer
  for name, variable in variable_names.body_variable_map(trainer.model).items():
    slots = optimizer.slots(variable)
    if len(variable.shape) >= 2:
      np.testing.assert_array_equal(slots["vr"].numpy(), tensors[f"training/{name}/Adafactor"])
      np.testing.assert_array_equal(slots["vc"].numpy(),
                                    tensors[f"training/{name}/Adafactor_1"])
    else:
      np.testing.assert_array_equal(slots["v"].numpy(), tensors[f"training/{name}/Adafactor"])
  shards = sorted((n for n in tensors if "/shared/weights_" in n and "training/" not in n),
                  key=lambda n: int(n.rsplit("_", 1)[1]))
  assert len(shards) > 1
  slots = optimizer.slots(trainer.model.softmax.weights_var)
  np.testing.assert_array_equal(
      slots["vr"].numpy(), np.concatenate([tensors[f"training/{n}/Adafactor"] for n in shards]))
  rows = np.array([tensors[n].shape[0] for n in shards], np.float64)
  vc = sum(r * tensors[f"training/{n}/Adafactor_1"] for r, n in zip(rows, shards)) / rows.sum()
  np.testing.assert_allclose(slots["vc"].numpy(), vc, rtol=1e-6)


def test_adafactor_import_without_or_with_partial_slots(tmp_path):
  """Without Adafactor state the import starts a fresh Adafactor (its decay counted
  from the import); with slots missing for a variable it fails naming the slot."""
  t2t_dir, _ = _adafactor_run(tmp_path, 50, with_slots=False)
  lines = []
  importer.import_t2t_run(str(t2t_dir), str(tmp_path / "run"), log=lines.append)
  assert "Adafactor starts fresh (the checkpoint has no optimizer state)" in lines[-1]
  assert run_dir_lib.adam_step_offset(str(tmp_path / "run")) == 50
  kernel = "transformer/body/encoder/layer_0/ffn/conv1/kernel"
  partial = tmp_path / "partial"
  partial.mkdir()
  t2t_dir, _ = _adafactor_run(partial, 50, with_slots=True, skip=kernel)
  with pytest.raises(ValueError, match=f"(?s)lacks these Adafactor slots.*--reset_optimizer.*"
                     f"{kernel}/Adafactor \\(vr\\)"):
    importer.import_t2t_run(str(t2t_dir), str(tmp_path / "refused"), log=lambda line: None)
  assert not (tmp_path / "refused").exists()


def test_momentum_run_is_refused_by_name(tmp_path):
  """Optimizers other than Adam and Adafactor are refused, naming the way out."""
  t2t_dir = _strip_optimizer_state(tmp_path, 50)
  hparams = json.loads((t2t_dir / "hparams.json").read_text())
  hparams.update(optimizer="momentum")
  (t2t_dir / "hparams.json").write_text(json.dumps(hparams))
  with pytest.raises(ValueError, match="optimizer='momentum'.*--ignore_t2t_hparams=optimizer "
                     "--reset_optimizer"):
    importer.import_t2t_run(str(t2t_dir), str(tmp_path / "refused"), log=lambda line: None)


def test_multistep_run_imports_at_its_update_count(tmp_path):
  """Under MultistepAdam T2T's global step counts micro-batches: global step 13 with
  4-step accumulation is update 3 here, and the micro-batch in flight is named."""
  t2t_dir = _strip_optimizer_state(tmp_path, 13)
  hparams = json.loads((t2t_dir / "hparams.json").read_text())
  hparams.update(optimizer="multistep_adam", optimizer_multistep_accumulate_steps=4)
  (t2t_dir / "hparams.json").write_text(json.dumps(hparams))
  lines = []
  result = importer.import_t2t_run(str(t2t_dir), str(tmp_path / "run"), log=lines.append)
  assert (result["global_step"], result["t2t_global_step"]) == (3, 13)
  assert result["checkpoint"].endswith("ckpt-3")
  assert any("13 is 1 micro-batch(es) into an accumulation of 4" in line for line in lines)
  assert run_dir_lib.adam_step_offset(str(tmp_path / "run")) == 3  # no Adam state: fresh
