"""Learning-rate schedules against their closed-form formulas."""

import math

import keras
import numpy as np
import pytest

from t2t_keras.hparams import create_hparams
from t2t_keras.training.optimization import FusedAdam, T2TLearningRateSchedule, create_optimizer


def test_paper_schedule_at_4000_for_d512():
  schedule = T2TLearningRateSchedule(create_hparams("transformer_paper_base"))
  # Paper: d^-0.5 * min(n^-0.5, n * 4000^-1.5) with n = step + 1 (T2T's legacy noam).
  assert float(schedule(3999)) == pytest.approx(6.99e-4, rel=1e-3)


@pytest.mark.parametrize("step", [0, 1, 100, 3999, 4000, 10000, 100000])
def test_paper_formula(step):
  schedule = T2TLearningRateSchedule(create_hparams("transformer_base_v1"))
  n = step + 1
  want = 512 ** -0.5 * min(n ** -0.5, n * 4000 ** -1.5)
  assert float(schedule(step)) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("step", [1, 500, 7999, 8000, 8001, 50000])
def test_base_v3_schedule(step):
  schedule = T2TLearningRateSchedule(create_hparams("transformer_base"))
  want = 2.0 * min(1.0, step / 8000) / math.sqrt(max(step, 8000)) * 512 ** -0.5
  assert float(schedule(step)) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("step", [1, 16000, 40000])
def test_single_gpu_schedule_has_no_hidden_size_factor(step):
  schedule = T2TLearningRateSchedule(create_hparams("transformer_base_single_gpu"))
  want = 0.1 * min(1.0, step / 16000) / math.sqrt(max(step, 16000))
  assert float(schedule(step)) == pytest.approx(want, rel=1e-5)


def test_v2_legacy_is_twice_the_paper():
  v2 = T2TLearningRateSchedule(create_hparams("transformer_base_v2"))
  n = 8000
  assert float(v2(n - 1)) == pytest.approx(2 * 512 ** -0.5 * n ** -0.5, rel=1e-5)


def test_other_factors():
  hp = create_hparams("transformer_tiny", "learning_rate_schedule=constant*linear_decay,"
                      "learning_rate_constant=0.5,learning_rate_decay_steps=100")
  schedule = T2TLearningRateSchedule(hp, train_steps=1000)
  assert float(schedule(850)) == pytest.approx(0.5 * min(1.0, 150 / 100))
  assert float(schedule(950)) == pytest.approx(0.5 * 50 / 100)
  hp = hp.replace(learning_rate_schedule="rsqrt_normalized_decay",
                  learning_rate_warmup_steps=100)
  assert float(T2TLearningRateSchedule(hp)(400)) == pytest.approx(math.sqrt(100 / 400))


@pytest.mark.parametrize("schedule", ["constant*cosine_magic", "constantt*linear_warmup", ""])
def test_unknown_factor_is_refused_when_hparams_are_built(schedule):
  with pytest.raises(ValueError, match="learning_rate_schedule.*valid factors.*linear_warmup"):
    create_hparams("transformer_tiny", f"learning_rate_schedule={schedule}")


# T2T's legacy schedule (`utils/learning_rate.py:legacy_learning_rate_schedule`)
# written out per scheme, step by step in plain Python: exponential warmup from
# 1% over w steps, then the scheme's decay; times Adam's 0.002 and learning_rate.
def _legacy_reference(scheme, s, w=100, lr=0.5, decay_rate=0.5, decay_steps=40, cycle=300):
  if s < w:
    rate = 0.01 ** ((w - s) / w)
  elif scheme == "none":
    rate = 1.0
  elif scheme == "exp":
    rate = decay_rate ** ((s - w) / decay_steps)
  elif scheme == "sqrt":
    rate = 500.0 / math.sqrt(max(s - w, 1))
  elif scheme == "cosine":
    position = s % (2 * cycle)
    if position > cycle:  # Back up during the second half of each 2C period.
      position = 2 * cycle - position
    rate = (1 + math.cos(math.pi * position / cycle)) / 2
  elif scheme == "cyclelinear10x":
    fraction = (s % (2 * w)) / w  # 0..2: up to 3.3 at w, down to 0.3 at 2w.
    rate = 0.3 + 3.0 * (fraction if fraction <= 1 else 2 - fraction)
  return rate * 0.002 * lr


@pytest.mark.parametrize("scheme", ["none", "exp", "sqrt", "cosine", "cyclelinear10x"])
def test_legacy_schemes_match_t2t(scheme):
  hp = create_hparams("transformer_tiny", f"learning_rate_schedule=legacy,"
                      f"learning_rate_decay_scheme={scheme},learning_rate_warmup_steps=100,"
                      "learning_rate=0.5,learning_rate_decay_rate=0.5,"
                      "learning_rate_decay_steps=40,learning_rate_cosine_cycle_steps=300")
  schedule = T2TLearningRateSchedule(hp)
  steps = [0, 50, 99, 100, 101, 140, 250, 300, 400, 450, 700, 1000]
  got = [float(schedule(s)) for s in steps]
  want = [_legacy_reference(scheme, s) for s in steps]
  np.testing.assert_allclose(got, want, rtol=2e-5)


def test_legacy_hand_values():
  hp = create_hparams("transformer_tiny", "learning_rate_schedule=legacy,"
                      "learning_rate_decay_scheme=exp,learning_rate_warmup_steps=100,"
                      "learning_rate=1.0,learning_rate_decay_rate=0.5,"
                      "learning_rate_decay_steps=40")
  schedule = T2TLearningRateSchedule(hp)
  assert float(schedule(0)) == pytest.approx(0.01 * 0.002)  # Warmup starts at 1%.
  assert float(schedule(50)) == pytest.approx(0.1 * 0.002)  # Half way: 10%.
  assert float(schedule(180)) == pytest.approx(0.25 * 0.002)  # Two decay periods.
  cosine = T2TLearningRateSchedule(hp.replace(learning_rate_decay_scheme="cosine",
                                              learning_rate_cosine_cycle_steps=1000))
  assert float(cosine(500)) == pytest.approx(0.5 * 0.002)
  assert float(cosine(1000)) == pytest.approx(0.0, abs=1e-9)
  assert float(cosine(2000)) == pytest.approx(0.002)


@pytest.mark.parametrize("scheme", ["piecewise", "exp10k", "noamm"])
def test_unimplemented_legacy_schemes_are_refused(scheme):
  with pytest.raises(ValueError, match=f"learning_rate_decay_scheme.*noam.*{scheme}"):
    create_hparams("transformer_base_v1", f"learning_rate_decay_scheme={scheme}")
  # A scheme the schedule never reads is not checked (as in T2T).
  create_hparams("transformer_base", f"learning_rate_decay_scheme={scheme}")


def test_decay_factors_match_t2t():
  hp = create_hparams("transformer_tiny", "learning_rate_warmup_steps=100,"
                      "learning_rate_decay_steps=400,learning_rate_decay_rate=0.1")
  at = lambda schedule, step: float(T2TLearningRateSchedule(
      hp.replace(learning_rate_schedule=schedule))(step))
  # exp_decay: rate^max(0, (s - w) / decay_steps).
  assert at("exp_decay", 50) == pytest.approx(1.0)
  assert at("exp_decay", 300) == pytest.approx(0.1 ** 0.5)
  assert at("exp_decay", 900) == pytest.approx(0.01)
  # cosdecay (OpenAI GPT): 1 through warmup, then 0.5 * (1 + cos(pi * s / decay_steps)).
  assert at("cosdecay", 100) == pytest.approx(1.0)
  assert at("cosdecay", 200) == pytest.approx(0.5)
  assert at("cosdecay", 400) == pytest.approx(0.0, abs=1e-7)
  # multi_cycle_cos_decay: 1 at the end of warmup, 0 decay_steps later, 1 again after as many.
  assert at("multi_cycle_cos_decay", 30) == pytest.approx(1.0)
  assert at("multi_cycle_cos_decay", 300) == pytest.approx(0.5)
  assert at("multi_cycle_cos_decay", 500) == pytest.approx(0.0, abs=1e-7)
  assert at("multi_cycle_cos_decay", 900) == pytest.approx(1.0)
  # single_cycle_cos_decay (T2T >= 1.14): 1 at the end of warmup, 0 at train_steps (250000).
  assert at("single_cycle_cos_decay", 30) == pytest.approx(1.0)
  assert at("single_cycle_cos_decay", 100 + (250000 - 100) / 2) == pytest.approx(0.5)
  assert at("single_cycle_cos_decay", 249999) == pytest.approx(0.0, abs=1e-7)


# Every factor, with and without accumulation, at the steps T2T users read off
# their logs; NumPy port of T2T's learning_rate.py (tests/support/t2t_numpy_training.py).
_SCHEDULES = {
    "transformer_base": "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size",
    "linear_decay": "constant*linear_warmup*linear_decay",
    "cosdecay": "constant*linear_warmup*cosdecay",
    "single_cycle_cos_decay": "constant*linear_warmup*single_cycle_cos_decay",
    "multi_cycle_cos_decay": "constant*linear_warmup*multi_cycle_cos_decay",
    "rsqrt_normalized_decay": "constant*linear_warmup*rsqrt_normalized_decay",
    "exp_decay": "constant*linear_warmup*exp_decay",
    "legacy_noam": "legacy",
}


@pytest.mark.parametrize("staircase", [False, True], ids=["smooth", "staircase"])
@pytest.mark.parametrize("accumulate", [0, 8], ids=["one_batch", "multistep8"])
@pytest.mark.parametrize("name", sorted(_SCHEDULES))
def test_schedule_is_t2t_at_its_step(name, accumulate, staircase):
  """The rate of update k equals T2T's at the global step MultistepAdam applies it:
  k without accumulation, (k + 1) * n - 1 with n micro-batches (read divided by n)."""
  from tests.support import t2t_numpy_training as t2t_np
  train_steps = 20000
  hp = create_hparams("transformer_base", f"learning_rate_schedule={_SCHEDULES[name]},"
                      f"optimizer_multistep_accumulate_steps={accumulate},"
                      "learning_rate_decay_steps=3000,learning_rate_decay_rate=0.5,"
                      f"learning_rate_decay_staircase={staircase}")
  schedule = T2TLearningRateSchedule(hp, train_steps=train_steps)
  n = max(1, accumulate)
  updates = (1, 100, 10000, train_steps - 1)
  want = [t2t_np.learning_rate((k + 1) * n - 1 if accumulate else k, hp.to_dict(), train_steps)
          for k in updates]
  # float32 carries the cosines' argument to 2^-24 relative, ~1e-6 of the peak rate.
  np.testing.assert_allclose([float(schedule(k)) for k in updates], want, rtol=2e-6,
                             atol=1e-6 * max(want))


@pytest.mark.parametrize("scheme", ["exp_decay", "legacy"])
def test_staircase_decays_in_whole_periods(scheme):
  """learning_rate_decay_staircase floors the elapsed decay periods (T2T's exp_decay and
  the legacy "exp" scheme): constant within a period, decay_rate lower in the next."""
  hp = create_hparams("transformer_tiny", f"learning_rate_schedule={scheme},"
                      "learning_rate_decay_scheme=exp,learning_rate_warmup_steps=100,"
                      "learning_rate_decay_steps=40,learning_rate_decay_rate=0.5,"
                      "learning_rate_decay_staircase=true")
  at = lambda step: float(T2TLearningRateSchedule(hp)(step))
  assert at(100) == pytest.approx(at(139), rel=1e-6)
  assert at(140) == pytest.approx(0.5 * at(139), rel=1e-6)
  assert at(219) == pytest.approx(0.25 * at(100), rel=1e-6)
  smooth = T2TLearningRateSchedule(hp.replace(learning_rate_decay_staircase=False))
  assert float(smooth(120)) == pytest.approx(0.5 ** 0.5 * at(120), rel=1e-6)


def test_single_cycle_cos_decay_needs_train_steps_beyond_warmup():
  hp = create_hparams("transformer_tiny", "learning_rate_schedule=constant*"
                      "single_cycle_cos_decay,learning_rate_warmup_steps=100")
  with pytest.raises(ValueError, match="train_steps \\(100\\) > learning_rate_warmup_steps"):
    T2TLearningRateSchedule(hp, train_steps=100)


def test_zero_warmup_is_refused_where_it_divides():
  with pytest.raises(ValueError, match="learning_rate_warmup_steps must be > 0.*linear_warmup"):
    create_hparams("transformer_base", "learning_rate_warmup_steps=0")
  hp = create_hparams("transformer_tiny", "learning_rate_schedule=legacy,"
                      "learning_rate_decay_scheme=none,learning_rate_warmup_steps=0")
  assert float(T2TLearningRateSchedule(hp)(0)) == pytest.approx(0.002 * hp.learning_rate)


def test_adam_from_hparams():
  opt = create_optimizer(create_hparams("transformer_big", "clip_grad_norm=1.5"))
  assert (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.997, 1e-9)
  assert opt.global_clipnorm == 1.5
  opt = create_optimizer(create_hparams("transformer_paper_base"))
  assert opt.beta_2 == 0.98 and opt.global_clipnorm is None


def test_trainer_optimizer_shares_the_schedule_and_skips_the_replica_sum():
  from t2t_keras.training.optimization import ReducedAdam
  hp = create_hparams("transformer_tiny", "clip_grad_norm=2.0")
  schedule = T2TLearningRateSchedule(hp, train_steps=10)
  opt = create_optimizer(hp, schedule=schedule, all_reduced=True)
  assert isinstance(opt, ReducedAdam) and opt.global_clipnorm == 2.0
  opt.iterations.assign(7)
  assert float(opt.learning_rate) == pytest.approx(float(schedule(7)))
  assert type(create_optimizer(hp)) is FusedAdam  # Keras sums over replicas


def _t2t_adam_numpy(w, grads, lr, beta1, beta2, eps):
  """tf.train.AdamOptimizer's update (T2T's), step t = 1, 2, ..., in float64."""
  w = w.astype(np.float64)
  m = np.zeros_like(w)
  v = np.zeros_like(w)
  for t, g in enumerate(grads, start=1):
    lr_t = lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    w = w - lr_t * m / (np.sqrt(v) + eps)
  return w


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
def test_fused_adam_is_t2t_adam_in_place(compiled):
  """FusedAdam = T2T's Adam (NumPy port); it runs one ResourceApplyAdam per variable."""
  import tensorflow as tf
  rng = np.random.default_rng(0)
  shapes = [(5, 7), (3,)]
  start = [rng.normal(size=s).astype(np.float32) for s in shapes]
  grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(4)]
  variables = [keras.Variable(w) for w in start]
  opt = FusedAdam(learning_rate=0.01, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
  opt.build(variables)
  step = lambda g: opt.apply_gradients(zip(g, variables))
  if compiled:
    step = tf.function(step)
    ops = step.get_concrete_function(
        [tf.TensorSpec(s, tf.float32) for s in shapes]).graph.get_operations()
    assert [op.type for op in ops].count("ResourceApplyAdam") == len(shapes)
  for g in grads:
    step([tf.constant(x) for x in g])
  for i, w in enumerate(start):
    want = _t2t_adam_numpy(w, [g[i] for g in grads], 0.01, 0.9, 0.98, 1e-9)
    assert np.abs(want - start[i]).max() > 0.02  # the update is far above rounding
    np.testing.assert_allclose(variables[i].numpy(), want, rtol=0, atol=1e-6)


def test_a_run_ending_inside_the_warmup_is_warned_of_with_the_rate_it_reached():
  """transformer_tiny warms up linearly over 8000 steps (rate ~ s / 8000 before):
  50 steps end at 50 / 8000 = 0.625% of the peak; the legacy noam schedule rises as
  (s + 1) / warmup. Schedules without a rising warmup, and runs past it, say nothing."""
  from t2t_keras.training.optimization import unfinished_warmup
  tiny = create_hparams("transformer_tiny")
  assert tiny.learning_rate_warmup_steps == 8000
  line = unfinished_warmup(tiny, 50)
  assert "\n" not in line and line.startswith("warning: --train_steps=50 ends before")
  assert "learning_rate_warmup_steps=8000" in line and "0.6% of the rate" in line
  assert "--hparams=learning_rate_warmup_steps=5 " in line
  noam = create_hparams("transformer_base", "learning_rate_schedule=legacy,"
                        "learning_rate_decay_scheme=noam,learning_rate_warmup_steps=4000")
  assert f"{1001 / 4000:.1%} of the rate" in unfinished_warmup(noam, 1000)
  assert unfinished_warmup(tiny, 8000) == unfinished_warmup(tiny, 20000) == ""
  assert unfinished_warmup(create_hparams("transformer_tiny", "learning_rate_schedule="
                                          "constant*rsqrt_decay"), 50) == ""
