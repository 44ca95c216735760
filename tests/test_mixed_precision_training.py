"""Mixed-precision training steps against float32, and float16 loss scaling.

bfloat16 (`mixed_bfloat16`): weights stay float32, the layers compute in
bfloat16; one step must give float32's loss and update up to bfloat16 rounding.
float16 (`mixed_float16`): the Trainer wraps Adam in Keras' LossScaleOptimizer;
a step whose scaled gradients overflow is skipped and the scale lowered, and
that scale is part of the checkpoint the experiment saves and restores.
"""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.hparams import create_hparams
from t2t_keras.perf import precision
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.training import schedules
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support.step_utils import batches, concat, one_step

SPEC = ModelSpec(40, 40, 3)
LR = 1e-3
HPARAMS = ("num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,"
           "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0,"
           f"learning_rate_schedule=constant,learning_rate_constant={LR}")
U = 2.0 ** -9  # bfloat16's unit roundoff: 8 significand bits, round to nearest
UNIT_ROUNDOFF = {"bfloat16": U, "float16": 2.0 ** -11}  # float16: 11 significand bits
# bfloat16 roundings on a path from the weights to the logits of this 1+1-layer
# model: the casts of embedding and kernels, and per sublayer the layer norm,
# the projections, the attention logits, softmax and weighted sum, the FFN's two
# matmuls and ReLU, the residual add; about 12 per sublayer, 3 sublayers, plus
# the embedding and the softmax projection: fewer than K.
K = 40


@pytest.fixture
def policy_reset(monkeypatch):
  monkeypatch.setattr(precision, "_warned_slow_bfloat16", False)
  yield precision
  precision.set_mixed_precision("none")


def _trainer(**changes):
  return Trainer(create_hparams("transformer_tiny", HPARAMS).replace(**changes), SPEC,
                 create_strategy("one_device"))


def _grads(trainer, batch):
  """The gradients of the step's loss as the Trainer computes them (float32)."""
  strategy = trainer.strategy
  batch = {k: tf.constant(v) for k, v in batch.items()}
  dens = strategy.run(trainer._replica_dens, args=(batch,))
  grads, _, _ = strategy.run(trainer._replica_grads, args=(batch, dens[0]))
  return [g.numpy() for g in grads]


def _bfloat16_step(changes=None, copy=True, mode="bfloat16"):
  """(float32 trainer, `mode` trainer, start weights, batch, float32 logits): the
  mixed-precision trainer has hparams `changes` and, if `copy`, float32's weights."""
  batch = concat(batches(3, seed=1))
  tf.keras.utils.set_random_seed(0)
  f32 = _trainer()
  start = [np.array(w) for w in f32.model.get_weights()]
  logits = f32.model({k: tf.constant(v) for k, v in batch.items()}, training=False).numpy()
  precision.set_mixed_precision(mode)
  bf16 = _trainer(**(changes or {}))
  if copy:
    bf16.model.set_weights(start)
  return f32, bf16, start, batch, logits


def _check_against_float32(f32, bf16, start, batch, logits, U=U):  # pylint: disable=invalid-name
  g32 = _grads(f32, batch)
  g16 = _grads(bf16, batch)  # float16: scaled by the loss scale, a power of 2 (signs kept)
  out32, out16 = one_step(f32, [batch]), one_step(bf16, [batch])
  assert abs(out16["loss"] - out32["loss"]) <= 2 * K * U * np.abs(logits).max()
  hp = f32.hparams
  eps_hat = hp.optimizer_adam_epsilon / np.sqrt(1 - hp.optimizer_adam_beta2)
  compared = total = 0
  for v, g, h, w0, w32, w16 in zip(f32.model.trainable_variables, g32, g16, start,
                                   f32.model.get_weights(), bf16.model.get_weights()):
    d32, d16 = w32 - w0, np.asarray(w16, np.float32) - w0
    assert np.abs(d16).max() <= LR * (1 + 1e-3), v.path  # Adam's first step: |update| <= lr
    # Where float32's |g| exceeds bfloat16's gradient error, both steps go the same way.
    big = np.abs(g) > 2 * K * U * np.abs(g).max()
    if "conv1" in v.path:
      # Into a ReLU: where a pre-activation is within rounding of 0 the ReLU's
      # derivative itself flips, outside any first-order bound; most agree.
      big &= np.sign(h) == np.sign(g)
      assert big.sum() >= 0.9 * (np.abs(g) > 2 * K * U * np.abs(g).max()).sum(), v.path
    assert np.all(np.sign(h[big]) == np.sign(g[big])), v.path
    # There both updates are lr * |g| / (|g| + eps') * sign(g), eps' = eps /
    # sqrt(1 - beta2), up to float32's rounding of w - update (2 ulps of the
    # weight) and of the update itself (a few ulps of lr).
    tol = (4 * 2.0 ** -24 * np.abs(w0).max() +
           LR * (8 * 2.0 ** -24 + eps_hat / np.abs(g[big])))
    off = np.abs(d16[big] - d32[big]) - tol
    assert off.max() <= 0, f"{v.path}: updates differ by {off.max():.3g} beyond the bound"
    assert np.abs(d32[big]).min() > 0.99 * LR, v.path
    compared += big.sum()
    total += g.size
  assert compared > total / 4, f"only {compared} of {total} updates compared"


def test_bfloat16_step_matches_float32_within_rounding(policy_reset):
  """One mixed_bfloat16 step against float32 from the same weights and batch.

  Bound on the loss: bfloat16 rounds each op's result with relative error at most
  U = 2^-9. With at most K roundings on any path from the weights to a logit z,
  first-order errors add, so |dz| <= K U max|z|. The loss is a mean over tokens
  of the cross-entropy, whose gradient in z is softmax(z) - targets (L1 norm
  <= 2), so |d loss| <= 2 K U max|z|, max|z| read off the float32 model. The loss
  itself is computed in float32 from the logits (model.py casts them).

  Bound on the update: the gradient is the transposed path, so its error is at
  most about 2 K U max|g| per variable (forward and backward roundings). Adam's
  first update is lr * g / (|g| + eps) = lr * sign(g) for |g| >> eps = 1e-9. So,
  where float32's |g| exceeds 2 K U max|g| (most elements), bfloat16's gradient
  has the same sign (but for the ReLU's inputs, see below) and the two updates are equal up to float32's rounding of
  w - update; everywhere, |update| <= lr.
  """
  _check_against_float32(*_bfloat16_step())


def test_float16_step_matches_float32_within_rounding(policy_reset):
  """One mixed_float16 step (dynamic loss scaling) against float32: the bfloat16
  test's bounds with float16's unit roundoff 2^-11. The loss scale is a power of 2,
  so scaling and unscaling the gradients round nothing (no overflow at this size:
  the step is applied, checked below)."""
  f32, f16, start, batch, logits = _bfloat16_step(mode="float16")
  _check_against_float32(f32, f16, start, batch, logits, U=UNIT_ROUNDOFF["float16"])
  assert f16.step == 1  # not skipped for an overflow


@pytest.mark.parametrize("changes, copy", [({"learning_rate_constant": 2 * LR}, True),
                                           ({}, False)], ids=["wrong_lr", "other_weights"])
def test_the_bfloat16_check_fails_on_a_wrong_step(policy_reset, changes, copy):
  """The comparison can fail: a doubled learning rate, or other initial weights."""
  with pytest.raises(AssertionError):
    _check_against_float32(*_bfloat16_step(changes, copy))


def _state(trainer):
  return ([np.array(w) for w in trainer.model.get_weights()],
          [v.numpy() for v in trainer.optimizer.inner_optimizer.variables])


def test_float16_overflow_is_skipped_and_the_loss_scale_is_checkpointed(policy_reset, tmp_path):
  """A float16 step whose scaled gradients overflow changes no weight and no Adam
  slot; Keras then leaves `iterations` (the inner Adam's) where it was, and halves
  the dynamic loss scale. Experiment.save writes that scale (and its growth
  counter) and Experiment.restore reads them back. Steps then run, skipped and
  halving, until the scale fits float16; the first finite one updates the weights.
  """
  precision.set_mixed_precision("float16")
  batch = concat(batches(3, seed=1))
  trainer = _trainer()
  opt = trainer.optimizer
  huge = 2.0 ** 40  # loss gradients ~1e-4 times this exceed float16's 65504
  opt.dynamic_scale.assign(huge)
  before = _state(trainer)
  out = one_step(trainer, [batch])
  assert np.isfinite(out["loss"]) and not np.isfinite(out["grad_norm"])
  after = _state(trainer)
  for a, b in zip(before[0] + before[1], after[0] + after[1]):
    np.testing.assert_array_equal(a, b)
  assert trainer.step == 0 and int(opt.inner_optimizer.iterations.numpy()) == 0
  assert float(opt.dynamic_scale.numpy()) == huge / 2
  assert int(opt.step_counter.numpy()) == 0

  config = schedules.RunConfig(output_dir=str(tmp_path), train_steps=10)
  schedules.Experiment(trainer, config, None, None, log=lambda line: None).save()
  restored = _trainer()
  assert float(restored.optimizer.dynamic_scale.numpy()) == 2.0 ** 15  # Keras' initial scale
  schedules.Experiment(restored, config, None, None, log=lambda line: None).restore()
  assert float(restored.optimizer.dynamic_scale.numpy()) == huge / 2
  for a, b in zip(after[0] + after[1], _state(restored)[0] + _state(restored)[1]):
    np.testing.assert_array_equal(a, b)

  skipped = 1
  start = _state(restored)[0]
  while True:
    out = one_step(restored, [batch])
    if np.isfinite(out["grad_norm"]):
      break
    skipped += 1
    assert restored.step == 0 and skipped < 40
  assert restored.step == 1
  assert float(restored.optimizer.dynamic_scale.numpy()) == huge / 2 ** skipped
  assert int(restored.optimizer.step_counter.numpy()) == 1
  moved = [np.abs(a - b).max() for a, b in zip(_state(restored)[0], start)]
  assert min(moved) > 0.5 * LR, moved  # Adam's first step: about lr on every variable


def test_allow_tf32_sets_tensorflows_switch_and_unset_keeps_it():
  """--allow_tf32 (`precision.set_tf32`): false gives exact float32 matmuls on GPUs
  with TensorFloat-32 (T2T's float32), true allows TF32, unset keeps TensorFlow's."""
  import tensorflow as tf

  from t2t_keras.perf import precision
  before = tf.config.experimental.tensor_float_32_execution_enabled()
  try:
    precision.set_tf32(False)
    assert not tf.config.experimental.tensor_float_32_execution_enabled()
    precision.set_tf32(None)
    assert not tf.config.experimental.tensor_float_32_execution_enabled()
    precision.set_tf32(True)
    assert tf.config.experimental.tensor_float_32_execution_enabled()
  finally:
    tf.config.experimental.enable_tensor_float_32_execution(before)
