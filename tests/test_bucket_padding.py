"""Batches padded to their bucket's length: at most one XLA compilation per bucket.

A train step holding XLA (the fused layer norm and cross-entropy, or
`--jit_compile`) compiles once per batch shape on each device; padded to their
longest example, as T2T, the batches take as many shapes as (rows, input length,
target length) triples met. Checked here: the padded length against a brute-force
walk of T2T's bucket series, the padded batches against the unpadded ones (same
examples, only zeros added, the token budget kept), the loss and gradients
unchanged by the padding, and the trainer's compilations over an epoch (counted
by XLA's own module dumps in a fresh process) against the number of buckets.
"""

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from data_gen import generator_utils as gu
from t2t_keras import perf
from t2t_keras.hparams import create_hparams
from t2t_keras.model import Transformer
from t2t_keras.training import inputs, losses

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _hparams(**kw):
  base = dict(batch_size=256, max_length=64, min_length_bucket=8, length_bucket_step=1.1,
              use_fixed_batch_size=False, eval_drop_long_sequences=False,
              batch_shuffle_size=0, max_input_seq_length=0, max_target_seq_length=0)
  base.update(kw)
  return types.SimpleNamespace(**base)


def _expected_length(width, max_length, dropped_long):
  """Brute force: walk T2T's series x -> max(x + 1, int(1.1 x)) from 8 past `width`."""
  x = 8
  while x <= width:
    x = max(x + 1, int(x * 1.1))
  upper = x - 1  # the bucket [previous, x) holds lengths up to x - 1
  return min(upper, max_length) if dropped_long else upper


@pytest.mark.parametrize("max_length, dropped_long", [(64, True), (256, True), (64, False)])
def test_padded_length_is_the_bucket_upper_length(max_length, dropped_long):
  boundaries = inputs.bucket_boundaries(max_length)
  widths = range(1, max_length + 1) if dropped_long else range(1, 4 * max_length)
  got = [int(inputs.bucket_padded_length(tf.constant(w), boundaries,
                                         max_length if dropped_long else None))
         for w in widths]
  want = [_expected_length(w, max_length, dropped_long) for w in widths]
  assert got == want
  assert all(g >= w for g, w in zip(got, widths))
  if dropped_long:  # one length per bucket
    assert len(set(got)) == len(boundaries) + 1


def _write(tmp_path, rng, n=500, max_len=70, lm=False):
  examples = []
  for _ in range(n):
    ex = {"targets": rng.integers(2, 50, int(rng.integers(1, max_len))).tolist() + [1]}
    if not lm:
      ex["inputs"] = rng.integers(2, 50, int(rng.integers(1, max_len))).tolist() + [1]
    examples.append(ex)
  paths = gu.shard_filepaths(str(tmp_path), "lm" if lm else "fake", "train", 2)
  gu.generate_files(iter(examples), paths)
  return str(tmp_path / (("lm" if lm else "fake") + "-train*"))


@pytest.mark.parametrize("mode, lm", [("train", False), ("eval", False), ("train", True)])
def test_padded_batches_hold_the_same_examples(tmp_path, mode, lm):
  pattern = _write(tmp_path, np.random.default_rng(1), lm=lm)
  hp = _hparams()
  read = lambda pad: [{k: v.numpy() for k, v in b.items()} for b in inputs.make_dataset(
      pattern, hp, mode, repeat=False, deterministic=True, seed=2, pad_to_bucket=pad)]
  plain, padded = read(False), read(True)
  assert len(plain) == len(padded) > 10
  boundaries = inputs.bucket_boundaries(hp.max_length)
  lengths = set()
  for a, b in zip(plain, padded):
    width = max(v.shape[1] for v in a.values())
    length = _expected_length(width, hp.max_length, mode == "train")
    for key, value in a.items():
      if value.shape[1] == 0:  # a language model's empty inputs stay empty
        assert lm and key == "inputs" and b[key].shape == value.shape
        continue
      assert b[key].shape == (value.shape[0], length)
      np.testing.assert_array_equal(b[key][:, :value.shape[1]], value)
      assert not b[key][:, value.shape[1]:].any()
    if mode == "train":
      assert b["targets"].size <= hp.batch_size  # T2T's token budget holds padded
    lengths.add(length)
  if mode == "train":
    assert len(lengths) <= len(boundaries) + 1


def test_padding_changes_neither_loss_nor_gradients():
  """The training loss and its gradients, with the fused (XLA) layer norm and xent."""
  assert not perf.plain_ops()
  tf.keras.utils.set_random_seed(0)
  hp = create_hparams("transformer_tiny", "layer_prepostprocess_dropout=0,attention_dropout=0,"
                      "relu_dropout=0,label_smoothing=0.1")
  model = Transformer(hp, 40, target_space_id=3)
  model.build()
  rng = np.random.default_rng(3)
  inputs_ = rng.integers(2, 40, size=(4, 9))
  targets = rng.integers(2, 40, size=(4, 11))
  inputs_[1, 6:] = 0
  targets[2, 4:] = 0

  def loss_and_grads(batch):
    with tf.GradientTape() as tape:
      logits = model(batch, training=True)
      num, den = losses.padded_cross_entropy(logits, batch["targets"], hp.label_smoothing)
      loss = num / den
    return loss, tape.gradient(loss, model.trainable_variables)

  base_loss, base_grads = loss_and_grads({"inputs": tf.constant(inputs_),
                                          "targets": tf.constant(targets)})
  pad_loss, pad_grads = loss_and_grads({"inputs": tf.constant(np.pad(inputs_, [[0, 0], [0, 10]])),
                                        "targets": tf.constant(np.pad(targets, [[0, 0], [0, 8]]))})
  np.testing.assert_allclose(float(pad_loss), float(base_loss), rtol=1e-6)
  for g, h in zip(base_grads, pad_grads):
    g, h = tf.convert_to_tensor(g).numpy(), tf.convert_to_tensor(h).numpy()
    np.testing.assert_allclose(h, g, rtol=1e-4, atol=1e-6 * np.abs(g).max())


def test_trainer_compiles_at_most_once_per_bucket_over_an_epoch(tmp_path):
  out = tmp_path / "out.json"
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  env.pop(perf.PLAIN_OPS_ENV, None)
  subprocess.run([sys.executable, os.path.join(REPO, "tests", "scripts", "count_compilations.py"),
                  REPO, str(tmp_path), str(out)], check=True, env=env, timeout=600,
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  got = json.loads(out.read_text())
  # The corpus discriminates: padded to the longest, its epoch has more shapes than buckets.
  assert got["shapes_longest"] > got["buckets"] >= got["shapes_bucket"]
  # Each XLA function of the step (layer norm and cross-entropy, forward and backward).
  assert len(got["compilations"]) == 4, got
  assert 1 < max(got["compilations"].values()) <= got["buckets"], got
