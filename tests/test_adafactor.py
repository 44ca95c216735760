"""T2TAdafactor equals a NumPy port of T2T's AdafactorOptimizer, update by update."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.hparams import HParams
from t2t_keras.training import adafactor
from t2t_keras.training.optimization import T2TLearningRateSchedule, create_optimizer
from tests.support import t2t_numpy_training as t2t_np

SHAPES = [(2, 3, 5), (4, 6), (6,), (3,)]  # rank 3 (factored over the last two), matrix, vectors
STEPS = 3


def _hparams(**overrides) -> HParams:
  base = dict(optimizer="adafactor", learning_rate_schedule="constant*linear_warmup",
              learning_rate_constant=0.05, learning_rate_warmup_steps=2)
  return HParams(**dict(base, **overrides))


def _weights(rng):
  weights = [rng.normal(0.0, 0.5, s).astype(np.float32) for s in SHAPES]
  weights[-1][:] = 0.0  # parameter scale at its floor, epsilon2
  return weights


def _grads(rng, step):
  # Growing, changing gradients, so that later updates meet a smaller second moment.
  return [(rng.normal(0.0, 1.0, s) * 3.0 ** step).astype(np.float32) for s in SHAPES]


def _run(hp: HParams, seed=0):
  """(Keras optimizer, NumPy port, learning rates used) after STEPS updates."""
  rng = np.random.default_rng(seed)
  initial = _weights(rng)
  variables = [tf.Variable(w) for w in initial]
  optimizer = create_optimizer(hp, schedule=T2TLearningRateSchedule(hp, 100), clip=False)
  optimizer.build(variables)
  port = t2t_np.Adafactor(initial, hp.to_dict())
  rates = []
  for step in range(STEPS):
    grads = _grads(rng, step)
    rate = t2t_np.learning_rate(step, hp.to_dict(), 100)
    rates.append(rate)
    port.apply(grads, rate)
    optimizer.apply_gradients(zip([tf.constant(g) for g in grads], variables))
  return optimizer, variables, initial, port, rates


def _assert_matches(optimizer, variables, initial, port):
  for i, (var, w0) in enumerate(zip(variables, initial)):
    got, want = var.numpy() - w0, port.w[i] - w0
    # The change, relative to its size: the weights' own rounding is far smaller.
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max(),
                               err_msg=f"variable {i} {SHAPES[i]}")
    slots = optimizer.slots(var)
    assert sorted(slots) == sorted(port.slots[i]), i
    for name, slot in slots.items():
      np.testing.assert_allclose(slot.numpy(), port.slots[i][name], rtol=1e-5,
                                 atol=1e-5 * np.abs(port.slots[i][name]).max(),
                                 err_msg=f"slot {name} of variable {i}")


CASES = {
    "defaults": {},  # factored, pow decay, parameter scale, clipping at 1, no beta1
    "unfactored": dict(optimizer_adafactor_factored=False),
    "beta1": dict(optimizer_adafactor_beta1=0.9),
    "adam_decay": dict(optimizer_adafactor_decay_type="adam", optimizer_adafactor_beta2=0.9),
    "pow_exponent": dict(optimizer_adafactor_memory_exponent=0.5),
    "absolute_step": dict(optimizer_adafactor_multiply_by_parameter_scale=False),
    "tight_clipping": dict(optimizer_adafactor_clipping_threshold=0.5,
                           optimizer_adafactor_beta1=0.5,
                           optimizer_adafactor_decay_type="adam"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_three_updates_equal_t2t(case):
  """Weights and slots (T2T's m, vr, vc, v) after 3 updates equal the NumPy port
  within 1e-5 of the change's size, for each setting; clipping did act."""
  hp = _hparams(**CASES[case])
  optimizer, variables, initial, port, rates = _run(hp)
  assert isinstance(optimizer, adafactor.T2TAdafactor)
  assert port.clipped > 0  # the clipping branch is exercised in every case
  assert rates[0] == 0.0 and rates[1] > 0.0  # linear warmup from step 0
  _assert_matches(optimizer, variables, initial, port)
  # The settings matter: the defaults' port gives other weights (except for the defaults).
  if CASES[case]:
    other = t2t_np.Adafactor(initial, _hparams().to_dict())
    rng = np.random.default_rng(0)
    _weights(rng)
    for step in range(STEPS):
      other.apply(_grads(rng, step), rates[step])
    assert max(np.abs(a - b).max() for a, b in zip(other.w, port.w)) > 1e-4


def test_legacy_schedule_has_no_adam_correction():
  """T2T multiplies the legacy schedule by 0.002 only for Adam optimizers."""
  adam = _hparams(optimizer="adam", learning_rate_schedule="legacy")
  fact = _hparams(learning_rate_schedule="legacy")
  for step in (0, 5):
    ratio = float(T2TLearningRateSchedule(fact)(step)) / float(T2TLearningRateSchedule(adam)(step))
    assert ratio == pytest.approx(500.0, rel=1e-6)
    assert float(T2TLearningRateSchedule(fact)(step)) == pytest.approx(
        t2t_np.learning_rate(step, fact.to_dict(), 250000), rel=1e-6)


def test_step_offset_restarts_the_decay():
  """With step_offset equal to the updates already counted, the first update's
  decay rate is T2T's first (0: the second moment becomes g^2)."""
  var = tf.Variable(np.ones((3,), np.float32))
  optimizer = adafactor.T2TAdafactor(learning_rate=0.01, step_offset=7)
  optimizer.build([var])
  optimizer.iterations.assign(7)
  grad = np.array([1.0, 2.0, 3.0], np.float32)
  optimizer.apply_gradients([(tf.constant(grad), var)])
  np.testing.assert_allclose(optimizer.slots(var)["v"].numpy(), grad ** 2, rtol=1e-6)


@pytest.mark.parametrize("overrides, message", [
    ("optimizer_adafactor_decay_type=linear", "decay_type must be 'pow' or 'adam'"),
    ("optimizer_adafactor_beta1=1.0", "beta1 must be in"),
    ("optimizer_adafactor_clipping_threshold=0.0", "clipping_threshold must be > 0"),
    ("optimizer_multistep_accumulate_steps=4", "accumulates gradients only in MultistepAdam"),
])
def test_refused_settings(overrides, message):
  with pytest.raises(ValueError, match=message):
    _hparams().parse(overrides)
