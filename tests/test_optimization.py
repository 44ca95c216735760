"""Learning-rate schedules against their closed-form formulas."""

import math

import numpy as np
import pytest

from t2t_keras.hparams import create_hparams
from t2t_keras.optimization import T2TLearningRateSchedule, create_optimizer


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


def test_unknown_factor_is_a_clear_error():
  hp = create_hparams("transformer_tiny", "learning_rate_schedule=constant*cosine_magic")
  with pytest.raises(ValueError, match="cosine_magic.*valid"):
    T2TLearningRateSchedule(hp)


def test_adam_from_hparams():
  opt = create_optimizer(create_hparams("transformer_big", "clip_grad_norm=1.5"))
  assert (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.997, 1e-9)
  assert opt.global_clipnorm == 1.5
  opt = create_optimizer(create_hparams("transformer_paper_base"))
  assert opt.beta_2 == 0.98 and opt.global_clipnorm is None
