"""Learning-rate schedules (T2T `utils/learning_rate.py`) and the optimizer from hparams."""

from __future__ import annotations

import math
from typing import Optional

import keras
import tensorflow as tf

from t2t_keras.hparams import ADAM_OPTIMIZERS, HParams
from t2t_keras.hparams_checks import (LEARNING_RATE_FACTORS, LEGACY_DECAY_SCHEMES,
                                      schedule_factors)
from t2t_keras.perf import adam
from t2t_keras.training import adafactor

FACTORS = LEARNING_RATE_FACTORS


def _factor(name: str, step: tf.Tensor, hp: HParams, train_steps: int) -> tf.Tensor:
  """One factor of T2T's `learning_rate_factor` at T2T's step `step` (float32)."""
  warmup = float(hp.learning_rate_warmup_steps)
  decay_steps = float(hp.learning_rate_decay_steps)
  if name == "constant":
    return tf.constant(hp.learning_rate_constant, tf.float32)
  if name == "linear_warmup":
    return tf.minimum(1.0, step / warmup)
  if name == "rsqrt_decay":
    return tf.math.rsqrt(tf.maximum(step, warmup))
  if name == "rsqrt_normalized_decay":
    return math.sqrt(warmup) * tf.math.rsqrt(tf.maximum(step, warmup))
  if name == "rsqrt_hidden_size":
    return tf.constant(hp.hidden_size ** -0.5, tf.float32)
  if name == "linear_decay":
    return tf.minimum(1.0, tf.maximum(0.0, (train_steps - step) / decay_steps))
  if name == "cosdecay":  # 1 up to the end of warmup, then cos over decay_steps from step 0.
    return tf.where(step <= warmup, 1.0, _half_cosine(step / decay_steps))
  if name == "single_cycle_cos_decay":  # T2T >= 1.14: from 1 after warmup to 0 at train_steps.
    return _half_cosine((tf.maximum(step, warmup) - warmup) / (train_steps - warmup))
  if name == "multi_cycle_cos_decay":  # 1 after warmup, 0 decay_steps later, 1 again...
    return _half_cosine((tf.maximum(step, warmup) - warmup) / decay_steps)
  if name == "exp_decay":
    return tf.pow(tf.constant(hp.learning_rate_decay_rate, tf.float32),
                  _decay_progress(tf.maximum(0.0, (step - warmup) / decay_steps), hp))
  if name == "legacy":
    return legacy_learning_rate(step, hp)
  raise ValueError(f"Unknown learning_rate_schedule factor {name!r}; valid factors: "
                   f"{', '.join(FACTORS)}.")


def _half_cosine(fraction: tf.Tensor) -> tf.Tensor:
  """T2T's 0.5 * (1 + cos(pi * fraction)), as cos(pi * fraction / 2)^2: the same
  value, without float32's cancellation near 0 (the last steps of a decay)."""
  return tf.square(tf.cos(0.5 * math.pi * fraction))


def _decay_progress(progress: tf.Tensor, hp: HParams) -> tf.Tensor:
  """Decay periods elapsed: whole periods only under `learning_rate_decay_staircase`."""
  return tf.floor(progress) if hp.learning_rate_decay_staircase else progress


def t2t_step(updates, accumulate_steps: int) -> tf.Tensor:
  """T2T's schedule step (`learning_rate._global_step`) when update `updates` is applied.

  T2T's global step counts micro-batches and its schedule reads it divided by
  `optimizer_multistep_accumulate_steps` n: MultistepAdam applies update k
  (0-based) at global step (k + 1)n - 1, so it reads the schedule at
  k + 1 - 1/n. Without accumulation (n = 0 or 1) the step is k.
  """
  updates = tf.cast(updates, tf.float32)
  if accumulate_steps > 1:
    return updates + 1.0 - 1.0 / accumulate_steps
  return updates


def legacy_learning_rate(step: tf.Tensor, hp: HParams) -> tf.Tensor:
  """T2T's `legacy_learning_rate_schedule` at global step `step`.

  noam: 5000 * hidden^-0.5 * min((s+1) * warmup^-1.5, (s+1)^-0.5): with
  learning_rate 0.1 this is exactly the paper's d^-0.5 * min(n^-0.5, n * warmup^-1.5)
  with n = s + 1. Every other scheme warms up exponentially from 1% over
  `learning_rate_warmup_steps` w (0.01^((w - s) / w) while s < w) and then decays:
    none: 1;  exp: decay_rate^((s - w) / decay_steps), floored under
      learning_rate_decay_staircase;  sqrt: 500 / sqrt(max(s - w, 1));
    cosine: 0.5 * (1 + cos(pi * c / C)), c = C - |C - s mod 2C|, C = cosine_cycle_steps
      (down to 0 over C steps, back up over the next C);
    cyclelinear10x: 3 * (1.1 - |s mod 2w - w| / w), from 0.3 to 3.3 and back every 2w.
  The result is multiplied by `learning_rate` and, for the Adam optimizers,
  T2T's correction 0.002 (1 for Adafactor).
  """
  scheme = hp.learning_rate_decay_scheme
  if scheme not in LEGACY_DECAY_SCHEMES:
    raise ValueError("learning_rate_decay_scheme: the legacy schedule implements "
                     f"{', '.join(LEGACY_DECAY_SCHEMES)}; got {scheme!r}.")
  warmup = float(hp.learning_rate_warmup_steps)
  if scheme == "noam":
    n = step + 1.0
    rate = 5000.0 * hp.hidden_size ** -0.5 * tf.minimum(n * warmup ** -1.5, tf.math.rsqrt(n))
  else:
    if warmup:
      warmup_rate = tf.pow(0.01, (warmup - step) / warmup)
    else:
      warmup_rate = tf.constant(1.0)
    rate = tf.where(step < warmup, warmup_rate, _legacy_decay(scheme, step, hp))
  correction = 0.002 if hp.optimizer.lower() in ADAM_OPTIMIZERS else 1.0
  return rate * correction * hp.learning_rate


def _legacy_decay(scheme: str, step: tf.Tensor, hp: HParams) -> tf.Tensor:
  """T2T's `_learning_rate_decay` after warmup (legacy schedule)."""
  warmup = float(hp.learning_rate_warmup_steps)
  if scheme == "none":
    return tf.ones_like(step)
  if scheme == "exp":  # No floor at 0: inside warmup the warmup rate is used.
    return tf.pow(tf.constant(hp.learning_rate_decay_rate, tf.float32),
                  _decay_progress((step - warmup) / float(hp.learning_rate_decay_steps), hp))
  if scheme == "sqrt":
    return 500.0 / tf.sqrt(tf.maximum(step - warmup, 1.0))
  if scheme == "cosine":
    cycle = float(hp.learning_rate_cosine_cycle_steps)
    position = cycle - tf.abs(cycle - tf.math.floormod(step, 2.0 * cycle))
    return 0.5 * (1.0 + tf.cos(math.pi * position / cycle))
  if scheme == "cyclelinear10x":
    position = 1.0 - tf.abs((tf.math.floormod(step, 2.0 * warmup) - warmup) / warmup)
    return (position + 0.1) * 3.0
  raise ValueError(f"learning_rate_decay_scheme {scheme!r} has no decay.")


def unfinished_warmup(hparams: HParams, train_steps: int) -> str:
  """One warning line when training ends while the learning rate still warms up.

  T2T's sets keep warmups of 4,000-16,000 steps (transformer_tiny: 8,000); a short
  CPU run (--train_steps=50) then ends at a rate a hundred times below the peak and
  learns next to nothing, silently. "" when the schedule has no rising warmup
  (linear_warmup, or the legacy schedule, whose every scheme warms up) or when
  `train_steps` reaches its end.
  """
  warmup = hparams.learning_rate_warmup_steps
  factors = schedule_factors(hparams.learning_rate_schedule)
  if not ("linear_warmup" in factors or "legacy" in factors) or train_steps >= warmup:
    return ""

  def rate(step):  # T2T's rate at T2T step `step` (the schedule's product of factors)
    value = 1.0
    for name in factors:
      value *= float(_factor(name, tf.constant(float(step)), hparams, train_steps))
    return value

  fraction = rate(train_steps) / rate(warmup)
  return (f"warning: --train_steps={train_steps} ends before the learning-rate warmup "
          f"(hparams learning_rate_warmup_steps={warmup}): the last step's rate is "
          f"{fraction:.1%} of the rate at the end of warmup, too low to learn much; set "
          f"--hparams=learning_rate_warmup_steps={max(1, train_steps // 10)} (a tenth of "
          "the steps) or train longer.")


class T2TLearningRateSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """Product of the "*"-separated factors of `hparams.learning_rate_schedule`.

  Called with the number of optimizer updates applied so far (Keras'
  `iterations`), it evaluates T2T's factors at T2T's step for that update
  (`t2t_step`): the update count itself, or under gradient accumulation the
  step MultistepAdam's update is applied at, divided by the accumulation.
  `train_steps` counts updates (T2T's --train_steps counts micro-batches).
  """

  def __init__(self, hparams: HParams, train_steps: int = 250000):
    self.hparams = hparams
    self.train_steps = train_steps
    self.accumulate_steps = hparams.optimizer_multistep_accumulate_steps
    self.factors = schedule_factors(hparams.learning_rate_schedule)
    for name in self.factors:
      if name not in FACTORS:
        raise ValueError(f"Unknown learning_rate_schedule factor {name!r} in "
                         f"{hparams.learning_rate_schedule!r}; valid: {', '.join(FACTORS)}.")
    if "single_cycle_cos_decay" in self.factors and \
        train_steps <= hparams.learning_rate_warmup_steps:
      raise ValueError(
          f"learning_rate_schedule single_cycle_cos_decay decays from the end of warmup to "
          f"--train_steps: it needs train_steps ({train_steps}) > learning_rate_warmup_steps "
          f"({hparams.learning_rate_warmup_steps}); raise --train_steps or lower the warmup.")

  def __call__(self, step):
    step = t2t_step(step, self.accumulate_steps)
    rate = tf.constant(1.0, tf.float32)
    for name in self.factors:
      rate *= _factor(name, step, self.hparams, self.train_steps)
    return rate

  def get_config(self):
    return {"hparams": self.hparams.to_dict(), "train_steps": self.train_steps}

  @classmethod
  def from_config(cls, config):
    return cls(HParams(**config["hparams"]), config["train_steps"])


class FusedAdam(keras.optimizers.Adam):
  """Keras' Adam whose per-variable update is TensorFlow's fused ApplyAdam kernel
  (`t2t_keras.perf.adam`), the kernel T2T's `tf.train.AdamOptimizer` ran.

  Args:
    adam_step_offset: updates counted in `iterations` that Adam did not make
      (a T2T run imported without its Adam state): Adam's t, the exponent of
      its bias correction, is iterations + 1 - adam_step_offset, while the
      learning-rate schedule still reads `iterations`.
    **kwargs: keras.optimizers.Adam's.
  """

  def __init__(self, *args, adam_step_offset: int = 0, **kwargs):
    super().__init__(*args, **kwargs)
    if adam_step_offset < 0:
      raise ValueError(f"adam_step_offset must be >= 0, got {adam_step_offset}.")
    self.adam_step_offset = int(adam_step_offset)

  def adam_step(self):
    """Adam's t of the update being applied (1 for its first), as a float32 tensor."""
    step = tf.cast(self.iterations + 1 - self.adam_step_offset, tf.float32)
    return tf.maximum(step, 1.0)

  def update_step(self, gradient, variable, learning_rate):
    step = self.adam_step()
    if adam.fused_adam_update(self, gradient, variable, learning_rate, step):
      return
    if not self.adam_step_offset or self.amsgrad:
      super().update_step(gradient, variable, learning_rate)
      return
    # Keras' update with Adam's own t (Keras' reads `iterations`).
    dtype = variable.dtype
    lr = tf.cast(learning_rate, dtype)
    gradient = tf.cast(tf.convert_to_tensor(gradient), dtype)
    step = tf.cast(step, dtype)
    beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
    index = self._get_variable_index(variable)
    m, v = self._momentums[index], self._velocities[index]
    alpha = lr * tf.sqrt(1 - tf.pow(beta_2, step)) / (1 - tf.pow(beta_1, step))
    self.assign_add(m, (gradient - m) * (1 - beta_1))
    self.assign_add(v, (tf.square(gradient) - v) * (1 - beta_2))
    self.assign_sub(variable, m * alpha / (tf.sqrt(v) + tf.cast(self.epsilon, dtype)))

  def get_config(self):
    return dict(super().get_config(), adam_step_offset=self.adam_step_offset)


class ReducedAdam(FusedAdam):
  """Adam that trusts its gradients to be all-reduced already.

  Keras sums gradients across replicas inside `apply_gradients`; the Trainer
  all-reduces them itself first (to know the global norm once), so the
  optimizer's own reduction is skipped. Covered by the MirroredStrategy test.
  """

  def _all_reduce_sum_gradients(self, grads_and_vars):
    return list(grads_and_vars)


def create_optimizer(hparams: HParams, train_steps: int = 250000,
                     schedule: Optional[keras.optimizers.schedules.LearningRateSchedule] = None,
                     all_reduced: bool = False, clip: bool = True,
                     adam_step_offset: int = 0) -> keras.optimizers.Optimizer:
  """T2T's optimizer of `hparams.optimizer` with its schedule: Adam with T2T's
  β1, β2, ε, or T2T's Adafactor (`adafactor.T2TAdafactor`, optimizer=adafactor).

  T2T's `adam` is LazyAdam, whose sparse updates equal dense Adam for the rows a
  batch touches; the shared embedding also serves as the softmax, whose gradient
  is dense, so plain Adam gives the same updates for tied weights.
  Gradient clipping (`clip_grad_norm`) is by global norm, as T2T's optimize_loss.

  Args:
    hparams: HParams (optimizer_adam_*, clip_grad_norm, the schedule's fields).
    train_steps: the total number of updates (for schedules that decay to it).
    schedule: the learning rate; default `T2TLearningRateSchedule(hparams,
      train_steps)`. A caller that also reports the rate passes its own, so that
      there is one schedule object.
    all_reduced: the caller passes gradients already summed over replicas
      (the Trainer does): a `ReducedAdam`, which does not sum them again.
    clip: the optimizer clips by `clip_grad_norm`; False where the caller
      clips (the Trainer clips each micro-batch's gradient, as T2T).
    adam_step_offset: see `FusedAdam` (Adafactor's `step_offset`).

  Returns:
    a `FusedAdam` (Keras's Adam, updated by TensorFlow's fused kernel), or a
    `T2TAdafactor`.
  """
  learning_rate = schedule or T2TLearningRateSchedule(hparams, train_steps)
  clipnorm = (hparams.clip_grad_norm or None) if clip else None
  if hparams.optimizer.lower() == "adafactor":
    return adafactor.from_hparams(hparams, learning_rate, all_reduced=all_reduced,
                                  step_offset=adam_step_offset, global_clipnorm=clipnorm)
  cls = ReducedAdam if all_reduced else FusedAdam
  return cls(
      learning_rate=learning_rate,
      beta_1=hparams.optimizer_adam_beta1, beta_2=hparams.optimizer_adam_beta2,
      epsilon=hparams.optimizer_adam_epsilon, global_clipnorm=clipnorm,
      adam_step_offset=adam_step_offset)
