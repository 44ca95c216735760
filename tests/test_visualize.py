"""Attention maps are the forward pass's; pictures are valid PNGs of the right size."""

import json
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.decoding import visualize
from t2t_keras.hparams import create_hparams
from t2t_keras.model import Transformer
from tests.support.tiny_problem import make_tiny_problem
from tests.support.tolerances import SCORE_EPS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
SMALL = "hidden_size=32,filter_size=64,num_heads=4"
VARIANTS = {
    "pre_norm": SMALL + ",num_hidden_layers=2",
    # Post-norm, learned positions, no target-space embedding, separate vocabularies.
    "post_norm": SMALL + ",num_hidden_layers=2,layer_preprocess_sequence=none,"
                 "layer_postprocess_sequence=dan,pos=emb,use_target_space_embedding=false,"
                 "shared_embedding_and_softmax_weights=false",
}
# One sentence with trailing padding, and a target that ends with EOS.
INPUTS = np.array([7, 12, 3, 25, 1, 0, 0])
TARGETS = np.array([9, 4, 30, 1])
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def model(request):
  tf.keras.utils.set_random_seed(3)
  hp = create_hparams("transformer_tiny", VARIANTS[request.param])
  target_vocab = 40 if hp.shared_embedding_and_softmax_weights else 45
  m = Transformer(hp, 40, target_vocab, target_space_id=3)
  m.build()
  return m


@pytest.fixture(scope="module")
def maps(model):
  return visualize.attention_maps(model, INPUTS, TARGETS)


# -- Faithfulness of attention_maps ----------------------------------------------

def test_shapes_and_rows_are_distributions(model, maps):
  hp = model.hparams
  want = {"encoder": (len(INPUTS), len(INPUTS)), "decoder": (len(TARGETS), len(TARGETS)),
          "encdec": (len(TARGETS), len(INPUTS))}
  for kind, (lq, lk) in want.items():
    assert len(maps[kind]) == 2
    for w in maps[kind]:
      assert w.shape == (hp.num_heads, lq, lk) and w.dtype == np.float32
      assert (w >= 0).all()
      np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)


def test_decoder_self_attention_is_causal(maps):
  for w in maps["decoder"]:
    assert (np.triu(w, k=1) == 0).all()
    assert (np.diagonal(w, axis1=1, axis2=2) > 0).all()
  # Position 0 can only see itself.
  for w in maps["decoder"]:
    np.testing.assert_allclose(w[:, 0, 0], 1.0, rtol=1e-6)


def test_padded_keys_get_no_attention(maps):
  pad = INPUTS == 0
  for kind in ("encoder", "encdec"):
    for w in maps[kind]:
      assert (w[..., pad] == 0).all()
      assert (w[..., ~pad] > 0).all()


def _attend(attention, weights, memory):
  """Attention output from given weights `[heads, Lq, Lk]`, memory `[Lk, depth]`."""
  v = np.asarray(attention.v(memory[None]))[0]  # [Lk, value_channels]
  heads = weights.shape[0]
  v = v.reshape(v.shape[0], heads, -1).transpose(1, 0, 2)  # [heads, Lk, depth/heads]
  out = np.matmul(weights, v).transpose(1, 0, 2).reshape(weights.shape[1], -1)
  return np.asarray(attention.output_transform(out[None]))  # [1, Lq, hidden]


def _forward_with_weights(model, maps):
  """The teacher-forced logits, every attention taken from `maps`."""
  hp = model.hparams
  table = np.asarray(model.input_modality.weights_var)
  x = table[INPUTS] * hp.hidden_size ** 0.5 * (INPUTS != 0)[:, None]
  if hp.use_target_space_embedding:
    x = x + np.asarray(model.target_space_embedding.embeddings)[3]
  x = model.inputs_position(tf.constant(x[None], tf.float32))
  for layer, w in zip(model.encoder.layers_, maps["encoder"]):
    x = layer.post(x, _attend(layer.self_attention, w, np.asarray(layer.pre(None, x))[0]))
    x = layer.ffn_post(x, layer.ffn(layer.ffn_pre(None, x)))
  memory = np.asarray(model.encoder.final(None, x))[0]
  table = np.asarray(model.target_modality.weights_var)
  shifted = np.concatenate([[0], TARGETS[:-1]])
  y = table[shifted] * hp.hidden_size ** 0.5 * (shifted != 0)[:, None]
  y = model.targets_position(tf.constant(y[None], tf.float32))
  for layer, w_self, w_encdec in zip(model.decoder.layers_, maps["decoder"], maps["encdec"]):
    y = layer.post(y, _attend(layer.self_attention, w_self, np.asarray(layer.pre(None, y))[0]))
    y = layer.encdec_post(y, _attend(layer.encdec_attention, w_encdec, memory))
    y = layer.ffn_post(y, layer.ffn(layer.ffn_pre(None, y)))
  return np.asarray(model.softmax.logits(model.decoder.final(None, y)))


def test_weights_reproduce_the_forward_pass(model, maps):
  want = np.asarray(model({"inputs": INPUTS[None], "targets": TARGETS[None]}, training=False))
  got = _forward_with_weights(model, maps)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  # The check is sensitive: other (still valid) weights change the logits.
  for kind in ("encoder", "decoder", "encdec"):
    swapped = dict(maps, **{kind: maps[kind][::-1]})
    assert np.abs(_forward_with_weights(model, swapped) - want).max() > 1e-3, kind


def test_greedy_decode_is_the_argmax_of_the_teacher_forced_logits(model):
  cap = 5 + 3  # input length (EOS included) + extra_length
  ids = visualize.greedy_decode(model, INPUTS[:5], extra_length=3)
  assert 1 <= len(ids) <= cap
  assert visualize.EOS_ID not in ids[:-1]
  # It stops at its first EOS or at its cap, without EOS (T2T's greedy loop).
  assert ids[-1] == visualize.EOS_ID or len(ids) == cap
  logits = np.asarray(model({"inputs": INPUTS[None, :5], "targets": np.array([ids])},
                            training=False))[0]
  # Nothing is forced: every id, the last one included, is the argmax, up to rounding.
  # Greedy takes the argmax of the cached decode's log-probs, which lie within
  # SCORE_EPS (1e-4, tests/test_decoding.py) of this full pass's; at one step a
  # difference of log-probs is one of logits, so the chosen id's logit here is at
  # least the largest minus 2 * SCORE_EPS (a near-tie may go either way by CPU).
  chosen = logits[np.arange(len(ids)), ids]
  assert np.all(chosen >= logits.max(-1) - 2 * SCORE_EPS), (ids, logits.argmax(-1),
                                                             logits.max(-1) - chosen)


def test_bad_ids_and_selection_are_errors(model, maps):
  with pytest.raises(ValueError, match=r"input_ids must be one non-empty sentence.*\(2, 3\)"):
    visualize.attention_maps(model, np.ones([2, 3], np.int64), TARGETS)
  with pytest.raises(ValueError, match=r"target_ids must be ids in \[0, 4[05]\).*\[3, -1\]"):
    visualize.attention_maps(model, INPUTS, [3, -1])
  with pytest.raises(ValueError, match=r"input_ids must be ids in \[0, 40\).*\[3, 40\]"):
    visualize.attention_maps(model, [3, 40], TARGETS)
  with pytest.raises(ValueError, match=r"layer must be in \[0, 2\).*got 2"):
    visualize.write_attention_plots(maps, ["a"] * 7, ["b"] * 4, "/nonexistent", layer=2)
  with pytest.raises(ValueError, match=r"head must be in \[0, 4\).*got -1"):
    visualize.write_attention_plots(maps, ["a"] * 7, ["b"] * 4, "/nonexistent", head=-1)
  with pytest.raises(ValueError, match="kind must be one of"):
    visualize.write_attention_plots(maps, ["a"] * 7, ["b"] * 4, "/nonexistent",
                                    kinds=["self"])
  with pytest.raises(ValueError, match="need 7 query and 7 key tokens, got 6 and 6"):
    visualize.plot_attention(maps["encoder"][0][0], ["a"] * 6, ["a"] * 6, "t", "/x.png")


# -- Pictures --------------------------------------------------------------------

def _png_size(path):
  """(width, height) from the PNG's IHDR chunk, after checking the signature."""
  with open(path, "rb") as f:
    head = f.read(24)
  assert head[:8] == PNG_SIGNATURE, path
  assert head[12:16] == b"IHDR"
  return struct.unpack(">II", head[16:24])


def _check_png(path, size):
  from PIL import Image
  assert _png_size(path) == size
  with Image.open(path) as image:
    image.verify()  # Reads every chunk and its CRC.
  with Image.open(path) as image:
    pixels = np.asarray(image.convert("RGB"))
  assert pixels.shape == (size[1], size[0], 3)
  assert pixels.std() > 1.0  # Not a blank canvas.
  return pixels


def test_heatmap_png_has_the_requested_size_and_shows_the_weights(tmp_path):
  path = visualize.plot_attention(np.eye(5), list("abcde"), list("vwxyz"), "identity",
                                  str(tmp_path / "sub" / "eye.png"), size=(333, 251))
  pixels = _check_png(path, (333, 251))
  # viridis(1.0) is yellow (253, 231, 37): the diagonal cells must appear.
  yellow = np.all(np.abs(pixels.astype(int) - [253, 231, 37]) < 12, axis=-1)
  assert yellow.sum() > 5 * 20
  assert os.listdir(tmp_path / "sub") == ["eye.png"]  # no temporary left behind


@pytest.mark.parametrize("heads", [1, 5])
def test_grid_lays_out_every_head(tmp_path, heads):
  rows, cols = visualize.grid_shape(heads)
  assert rows * cols >= heads > (rows - 1) * cols and rows <= cols
  assert visualize.grid_size(heads) == (300 * cols + 100, 300 * rows + 100)
  weights = np.random.default_rng(0).dirichlet(np.ones(4), size=(heads, 3))
  path = visualize.plot_attention_heads(weights, list("xyz"), list("abcd"), "grid",
                                        str(tmp_path / "grid.png"), dpi=50)
  _check_png(path, visualize.grid_size(heads))


def _event(step, tag, value, wall_time):
  return tf.compat.v1.Event(step=step, wall_time=wall_time, summary=tf.compat.v1.Summary(
      value=[tf.compat.v1.Summary.Value(tag=tag, simple_value=value)]))


def test_read_scalars_handles_tensor_and_simple_values(tmp_path):
  log_dir = str(tmp_path)
  writer = tf.summary.create_file_writer(log_dir, filename_suffix=".a")
  with writer.as_default():
    for step, loss in ((1, 5.0), (2, 4.0), (3, 3.5)):
      tf.summary.scalar("loss", loss, step=step)
    tf.summary.text("note", "not a scalar", step=1)
    tf.summary.histogram("weights", [1.0, 2.0], step=1)
  writer.close()
  # A resumed run (later wall time) re-logs step 3 as a TF1 simple_value, then the
  # file is cut in the middle of a record.
  path = os.path.join(log_dir, "events.out.tfevents.9999999999.host.b")
  with tf.io.TFRecordWriter(path) as f:
    f.write(_event(3, "loss", 3.25, 4e9).SerializeToString())
    f.write(_event(4, "bleu", 12.5, 4e9).SerializeToString())
  with open(path, "ab") as f:
    f.write(b"\x10\x00\x00\x00")
  scalars = visualize.read_scalars(log_dir)
  assert sorted(scalars) == ["bleu", "loss"]
  np.testing.assert_array_equal(scalars["loss"][0], [1, 2, 3])
  np.testing.assert_allclose(scalars["loss"][1], [5.0, 4.0, 3.25])
  np.testing.assert_allclose(scalars["bleu"][1], [12.5])


def test_curves_without_loss_are_an_error(tmp_path):
  with pytest.raises(ValueError, match="No 'loss' scalars"):
    visualize.plot_training_curves(str(tmp_path), str(tmp_path / "c.png"))


# -- From a tiny trained run, through the CLI ---------------------------------------

@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
  from data_gen import registry
  from t2t_keras.rundir.settings import ModelSpec, save_or_check_run_files, vocab_record
  from t2t_keras.training import schedules
  from t2t_keras.training.trainer import Trainer, create_strategy
  root = tmp_path_factory.mktemp("viz")
  data_dir = make_tiny_problem(str(root), train=300, dev=16)
  problem = registry.problem("translate_from_files", data_dir)
  enc = problem.feature_encoders(data_dir)
  spec = ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size,
                   problem.target_space_id)
  # One layer keeps the traced train and eval steps quick.
  hp = create_hparams("transformer_tiny", SMALL + ",num_hidden_layers=1,batch_size=256")
  output_dir = str(root / "run")
  save_or_check_run_files(output_dir, hp, problem.name, spec,
                          vocab_record(problem, data_dir, enc))
  config = schedules.RunConfig(output_dir=output_dir, train_steps=2, eval_steps=1,
                                local_eval_frequency=2, log_every_steps=1)
  # A stand-in for the decoding BLEU hook: the curve reader needs some `bleu` scalar.
  run = schedules.Experiment(Trainer(hp, spec, create_strategy("one_device"), 2), config,
                              problem.filepattern(data_dir, "train"),
                              problem.filepattern(data_dir, "dev"), log=lambda line: None,
                              eval_hook=lambda step: {"bleu": 2.0 * step})
  run.run("train_and_evaluate")
  return output_dir, data_dir


def _pngs(stdout):
  return [line for line in stdout.splitlines() if line.endswith(".png")]


def test_cli_writes_every_picture(trained_run):
  output_dir, data_dir = trained_run
  out = subprocess.run([sys.executable, "-m", "t2t_keras.cli.visualize",
                        f"--output_dir={output_dir}", f"--data_dir={data_dir}",
                        "--sentence=the big house", "--kind=all", "--all_heads", "--curves"],
                       env=ENV, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  assert "Greedy translation:" in out.stdout
  paths = _pngs(out.stdout)
  names = sorted(os.path.basename(p) for p in paths)
  assert names == sorted([f"{k}_layer0_heads.png" for k in visualize.KINDS]
                         + ["training_curves.png"])
  for path in paths:
    assert os.path.dirname(path) == os.path.join(output_dir, "plots")
    want = (1200, 500) if path.endswith("curves.png") else (700, 700)  # 2x2 grid of heads
    _check_png(path, want)


# Calls main() several times in one process (one TensorFlow start-up for all cases).
DRIVER = """
import json, sys
from absl import app, flags
from t2t_keras.cli import visualize
for argv in json.loads(sys.argv[1]):
  flags.FLAGS.unparse_flags()
  try:
    visualize.main(flags.FLAGS(["t2t_keras_visualize"] + argv))
    print("RESULT ok", flush=True)
  except app.UsageError as e:
    print(f"RESULT usage error: {e}", flush=True)
"""


def test_cli_one_head_and_clear_errors(trained_run, tmp_path):
  output_dir, data_dir = trained_run
  plot_dir = str(tmp_path / "plots")
  common = [f"--output_dir={output_dir}", f"--data_dir={data_dir}", "--sentence=a red cat"]
  cases = [common + ["--target=ein rot Katze", "--kind=encdec", "--layer=0", "--head=2",
                     f"--plot_dir={plot_dir}", f"--checkpoint_path={output_dir}/ckpt-2"],
           common + ["--layer=1"],
           common + ["--kind=decoder", "--head=4"],
           common + ["--head=1", "--all_heads"],
           [f"--output_dir={tmp_path}", f"--data_dir={data_dir}", "--sentence=the cat"],
           [f"--output_dir={tmp_path}", "--curves"],
           common + [f"--checkpoint_path={tmp_path}/ckpt-5"]]
  out = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], env=ENV,
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  results = re.split(r"^RESULT (.*)$", out.stdout, flags=re.M)
  printed, results = results[0:-1:2], results[1::2]
  assert len(results) == len(cases), out.stdout
  assert results[0] == "ok"
  assert _pngs(printed[0]) == [os.path.join(plot_dir, "encdec_layer0_head2.png")]
  _check_png(_pngs(printed[0])[0], (640, 640))
  assert re.fullmatch(r"usage error: layer must be in \[0, 1\) .*got 1\.", results[1])
  assert re.fullmatch(r"usage error: head must be in \[0, 4\) .*got 4\.", results[2])
  assert results[3] == "usage error: Give --head or --all_heads, not both."
  assert results[4].startswith(f"usage error: No hparams.json in {tmp_path}")
  assert results[5].startswith("usage error: No 'loss' scalars")
  assert results[6].startswith(f"usage error: --checkpoint_path={tmp_path}/ckpt-5 is not a "
                               "checkpoint")
