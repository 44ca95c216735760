"""Importing T2T runs: the real T2T checkpoint and synthetic T2T-named ones vs NumPy.

Expectations come from `tests/t2t_numpy_model.py`, a NumPy forward pass that
reads T2T's tensors by T2T's names, and from T2T's serving client convention
(a hand-built `tf.train.Example` with int64 `inputs` = ids + EOS).
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

from tests.t2t_numpy_model import T2TNumpyTransformer
from t2t_keras import t2t_import

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
# The checkpoint T2T itself wrote (Apache-2.0, Google LLC; see its README.md).
T2T_RUN = pathlib.Path(__file__).resolve().parent / "data" / "t2t_transformer_test_ckpt"
VOCAB = "vocab.translate_ende_wmt8k.8192.subwords"
DE_TOK = 8  # T2T's SpaceID.DE_TOK: the only target-space row the T2T step updated
SENTENCES = [("Hello world.", "Hallo Welt."),
             ("The house is small and the cat sees the dog.", "Das Haus ist klein."),
             ("Good morning", "")]


def _t2t_hparams():
  return json.loads((T2T_RUN / "hparams.json").read_text())


def _reference():
  return T2TNumpyTransformer(str(T2T_RUN / "model.ckpt-1"), _t2t_hparams(), DE_TOK)


def _assert_close(got, want, rtol=1e-5):
  """Equal within rtol relative to the largest magnitude of `want`."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  assert got.shape == want.shape
  scale = max(np.abs(want).max(), 1e-30)
  assert np.abs(got - want).max() <= rtol * scale, (np.abs(got - want).max(), scale)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
  """The real T2T run imported with the CLI: (run_dir, CLI stdout)."""
  run_dir = str(tmp_path_factory.mktemp("import") / "run")
  result = subprocess.run([sys.executable, "-m", "t2t_keras.cli.import_checkpoint",
                           f"--t2t_output_dir={T2T_RUN}", f"--output_dir={run_dir}"],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  return run_dir, result.stdout


@pytest.fixture(scope="module")
def loaded(imported):
  from t2t_keras import run_dir
  from data_gen import registry
  model, hp, problem_name, spec, _ = run_dir.load_trained_model(imported[0])
  encoders = registry.problem(problem_name, imported[0]).feature_encoders(imported[0])
  return model, hp, problem_name, spec, encoders


def _ids(encoders, texts, side="inputs"):
  rows = [encoders[side].encode(t) + [1] for t in texts]
  width = max(len(r) for r in rows)
  return np.array([r + [0] * (width - len(r)) for r in rows], np.int32)


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
  assert t2t_import.trained_target_spaces(str(T2T_RUN / "model.ckpt-1")) == [DE_TOK]
  assert os.path.exists(os.path.join(run_dir, VOCAB)) and "t2t_keras_decoder" in stdout
  inputs = _ids(encoders, [s for s, _ in SENTENCES])
  targets = _ids(encoders, [t for _, t in SENTENCES], "targets")
  got = model({"inputs": inputs, "targets": targets}, training=False).numpy()
  _assert_close(got, _reference().logits(inputs, targets))


def test_decoder_score_file_equals_numpy_log_probs(imported, loaded, tmp_path):
  run_dir = imported[0]
  encoders = loaded[4]
  score_file = tmp_path / "pairs.tsv"
  score_file.write_text("".join(f"{s}\t{t}\n" for s, t in SENTENCES), encoding="utf-8")
  result = subprocess.run([sys.executable, "-m", "t2t_keras.cli.decoder",
                           f"--output_dir={run_dir}", f"--data_dir={run_dir}",
                           f"--score_file={score_file}"],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  got = [float(line) for line in result.stdout.split()]
  ref = _reference()
  want = [ref.log_prob(_ids(encoders, [s]), _ids(encoders, [t], "targets"))[0]
          for s, t in SENTENCES]
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_exported_beam_search_equals_numpy_t2t_beam_search_per_sentence(imported, loaded,
                                                                         tmp_path):
  """Beam 4 through the SavedModel, each sentence alone == the NumPy port of T2T's
  beam search on the NumPy T2T model; T2T's serving client builds the Example."""
  import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)
  from t2t_keras import export
  from t2t_keras.hparams import create_decode_hparams
  from tests.t2t_numpy_decoding import t2t_beam_search
  run_dir = imported[0]
  model, hp, _, _, encoders = loaded
  extra_length = 3
  decode_hp = create_decode_hparams(f"beam_size=4,alpha=0.6,extra_length={extra_length}")
  vocab = {side: os.path.join(run_dir, VOCAB) for side in ("inputs", "targets")}
  version = export.export_saved_model(model, hp, decode_hp, vocab, str(tmp_path / "export"),
                                      encoders)
  served = tf.saved_model.load(version)
  ref = _reference()
  for source, _ in SENTENCES[:2]:
    # T2T's serving client (serving_utils._make_example): ids + EOS, int64 "inputs".
    ids = encoders["inputs"].encode(source) + [1]
    example = tf.train.Example(features=tf.train.Features(feature={
        "inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=ids))}))
    out = served.signatures["serialized_example"](
        input=tf.constant([example.SerializeToString()]))
    seqs, scores = t2t_beam_search(ref.logits_fn(ids), 4, 0.6, len(ids) + extra_length,
                                   8190, eos_id=1, stop_early=True)
    got = np.trim_zeros(out["outputs"].numpy()[0], "b")
    np.testing.assert_array_equal(got, np.trim_zeros(seqs[0], "b"))
    np.testing.assert_allclose(out["scores"].numpy()[0], scores[0], rtol=1e-5)
    text = served.signatures["serving_default"](inputs=tf.constant([source]))
    want = encoders["targets"].decode([int(i) for i in got if i not in (0, 1)])
    assert text["outputs"].numpy()[0].decode() == want


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

BASE = {"hidden_size": 8, "filter_size": 12, "num_heads": 2, "num_hidden_layers": 2,
        "num_encoder_layers": 0, "num_decoder_layers": 1, "norm_epsilon": 1e-6,
        "symbol_modality_num_shards": 3, "multiply_embedding_mode": "sqrt_depth",
        "shared_embedding_and_softmax_weights": True, "layer_preprocess_sequence": "n",
        "layer_postprocess_sequence": "da", "daisy_chain_variables": True, "moe_k": 2}


def _t2t_tensors(hp, vocab_in, vocab_out, rng):
  """Random arrays under T2T's names and shapes for T2T hparams `hp`."""
  d, f = hp["hidden_size"], hp["filter_size"]
  t = {"transformer/body/target_space_embedding/kernel": rng.normal(size=(32, d))}
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
  layers = {"encoder": hp["num_encoder_layers"] or hp["num_hidden_layers"],
            "decoder": hp["num_decoder_layers"] or hp["num_hidden_layers"]}
  for stack, count in layers.items():
    for i in range(count):
      scope = f"transformer/body/{stack}/layer_{i}"
      sublayer(f"{scope}/self_attention", attn(f"{scope}/self_attention"))
      if stack == "decoder":
        sublayer(f"{scope}/encdec_attention", attn(f"{scope}/encdec_attention"))
      sublayer(f"{scope}/ffn", ffn(f"{scope}/ffn"))
    if has_norm("layer_preprocess_sequence"):
      norm_scopes.append(f"transformer/body/{stack}/layer_prepostprocess/layer_norm")
  for scope in norm_scopes:
    t[f"{scope}/layer_norm_scale"] = 1 + 0.3 * rng.normal(size=d)
    t[f"{scope}/layer_norm_bias"] = 0.3 * rng.normal(size=d)
  shards = hp["symbol_modality_num_shards"]
  roles = ({"shared": vocab_in} if hp["shared_embedding_and_softmax_weights"] else
           {"input_emb": vocab_in, "target_emb": vocab_out, "softmax": vocab_out})
  for role, vocab in roles.items():
    for i in range(shards):
      rows = vocab // shards + (1 if i < vocab % shards else 0)
      t[f"transformer/symbol_modality_{vocab}_{d}/{role}/weights_{i}"] = \
          rng.normal(size=(rows, d)) * d ** -0.5
  return t


def _write_t2t_checkpoint(prefix, tensors, step=7):
  """A TF1 checkpoint by tf.compat.v1.train.Saver in graph mode, with T2T's extras."""
  extras = {"global_step": np.int64(step), "training/beta1_power": np.float32(0.9),
            "training/beta2_power": np.float32(0.98)}
  for name in list(tensors)[:3]:
    extras[f"training/{name}/Adam"] = np.zeros_like(tensors[name])
    if name.endswith("target_space_embedding/kernel"):
      extras[f"training/{name}/Adam"][3] = 1e-3  # T2T's sparse Adam: only row 3 moved
    extras[f"training/{name}/Adam_1"] = np.zeros_like(tensors[name])
  with tf.Graph().as_default():
    variables = [tf.compat.v1.Variable(np.asarray(v, np.float32) if k != "global_step" else v,
                                       name=k) for k, v in {**tensors, **extras}.items()]
    saver = tf.compat.v1.train.Saver(variables)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return saver.save(session, prefix, global_step=step)


def _import_synthetic(tmp_path, hp_t2t, vocab_in, vocab_out, seed=0):
  from t2t_keras.model import Transformer
  tensors = _t2t_tensors(hp_t2t, vocab_in, vocab_out, np.random.default_rng(seed))
  path = _write_t2t_checkpoint(str(tmp_path / "model.ckpt"), tensors)
  hp = t2t_import.hparams_from_t2t(hp_t2t)
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
  loaded = t2t_import.load_t2t_weights(model, path)
  assert loaded == {"global_step": 7, "assigned": len(tensors)}
  assert t2t_import.trained_target_spaces(path) == [3]
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
  _assert_close(got, want)


def test_missing_and_unexpected_variables_are_listed(tmp_path):
  from t2t_keras.model import Transformer
  tensors = _t2t_tensors(BASE, 20, 20, np.random.default_rng(0))
  gone = "transformer/body/decoder/layer_0/ffn/conv2/bias"
  del tensors[gone]
  tensors["transformer/body/decoder/layer_0/ffn/conv3/kernel"] = np.zeros((8, 8))
  path = _write_t2t_checkpoint(str(tmp_path / "model.ckpt"), tensors)
  model = Transformer(t2t_import.hparams_from_t2t(BASE), 20, 20)
  model.build()
  before = [w.copy() for w in model.get_weights()]
  with pytest.raises(ValueError) as error:
    t2t_import.load_t2t_weights(model, path)
  message = str(error.value)
  assert gone in message and "ffn/conv3/kernel" in message
  assert "Adam" not in message and "global_step" not in message
  assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_unimplemented_t2t_hparams_are_refused_by_name_and_value(tmp_path):
  with pytest.raises(ValueError, match=r"proximity_bias=True.*\n.*weird_knob=3"):
    t2t_import.hparams_from_t2t(dict(BASE, proximity_bias=True, weird_knob=3))
  with pytest.raises(ValueError, match=r"layer_postprocess_sequence='daz'"):
    t2t_import.hparams_from_t2t(dict(BASE, layer_postprocess_sequence="daz"))
  assert t2t_import.hparams_from_t2t(
      dict(BASE, activation_dtype="bfloat16"), ignore=["activation_dtype"]).hidden_size == 8
  # T2T kept the sampling settings among the model hparams; here they are decode
  # hparams: T2T's defaults import, another value is refused with the way to keep it.
  defaults = dict(BASE, sampling_method="argmax", sampling_temp=1.0, sampling_keep_top_k=-1)
  assert t2t_import.hparams_from_t2t(defaults).hidden_size == 8
  with pytest.raises(ValueError, match=r"sampling_temp=0\.5 is a decoding setting.*"
                                       r"--decode_hparams=sampling_temp=0\.5"):
    t2t_import.hparams_from_t2t(dict(defaults, sampling_temp=0.5))
  # The CLI leaves nothing behind when the run cannot be imported.
  t2t_dir = tmp_path / "t2t"
  shutil.copytree(T2T_RUN, t2t_dir)
  os.chmod(t2t_dir / "hparams.json", 0o644)
  (t2t_dir / "hparams.json").write_text(json.dumps(dict(_t2t_hparams(), pos="rope")))
  with pytest.raises(ValueError, match=r"hparams.pos.*'rope'"):
    t2t_import.import_t2t_run(str(t2t_dir), str(tmp_path / "out"), log=lambda line: None)
  assert sorted(os.listdir(tmp_path)) == ["t2t"]
