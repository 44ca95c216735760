"""Learning-rate schedules (T2T `utils/learning_rate.py`) and Adam from hparams."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from t2t_keras.hparams import HParams

FACTORS = ("constant", "linear_warmup", "rsqrt_decay", "rsqrt_normalized_decay",
           "rsqrt_hidden_size", "linear_decay", "cosdecay", "legacy")


def _factor(name: str, step: tf.Tensor, hp: HParams, train_steps: int) -> tf.Tensor:
  warmup = float(hp.learning_rate_warmup_steps)
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
    remaining = (train_steps - step) / float(hp.learning_rate_decay_steps)
    return tf.minimum(1.0, tf.maximum(0.0, remaining))
  if name == "cosdecay":
    progress = tf.minimum(1.0, tf.maximum(0.0, step - warmup) / max(train_steps - warmup, 1))
    return 0.5 * (1.0 + tf.cos(math.pi * progress))
  if name == "legacy":
    return legacy_learning_rate(step, hp)
  raise ValueError(f"Unknown learning_rate_schedule factor {name!r}; valid factors: "
                   f"{', '.join(FACTORS)}.")


def legacy_learning_rate(step: tf.Tensor, hp: HParams) -> tf.Tensor:
  """T2T's legacy schedule; only the "noam" scheme (the paper's formula).

  noam: 5000 * hidden^-0.5 * min((s+1) * warmup^-1.5, (s+1)^-0.5), times Adam's
  correction 0.002 and `learning_rate`: with learning_rate 0.1 this is exactly the
  paper's d^-0.5 * min(n^-0.5, n * warmup^-1.5) with n = s + 1.
  """
  if hp.learning_rate_decay_scheme != "noam":
    raise ValueError("learning_rate_schedule='legacy' is implemented for "
                     "learning_rate_decay_scheme='noam' only, got "
                     f"{hp.learning_rate_decay_scheme!r}.")
  n = step + 1.0
  warmup = float(hp.learning_rate_warmup_steps)
  noam = 5000.0 * hp.hidden_size ** -0.5 * tf.minimum(n * warmup ** -1.5, tf.math.rsqrt(n))
  return noam * 0.002 * hp.learning_rate


class T2TLearningRateSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """Product of the "*"-separated factors of `hparams.learning_rate_schedule`.

  The step is the number of optimizer updates applied so far (T2T's global step;
  with gradient accumulation, one update per accumulated batch).
  """

  def __init__(self, hparams: HParams, train_steps: int = 250000):
    self.hparams = hparams
    self.train_steps = train_steps
    self.factors = [f.strip() for f in hparams.learning_rate_schedule.split("*")]
    for name in self.factors:
      if name not in FACTORS:
        raise ValueError(f"Unknown learning_rate_schedule factor {name!r} in "
                         f"{hparams.learning_rate_schedule!r}; valid: {', '.join(FACTORS)}.")

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    rate = tf.constant(1.0, tf.float32)
    for name in self.factors:
      rate *= _factor(name, step, self.hparams, self.train_steps)
    return rate

  def get_config(self):
    return {"hparams": self.hparams.to_dict(), "train_steps": self.train_steps}

  @classmethod
  def from_config(cls, config):
    return cls(HParams(**config["hparams"]), config["train_steps"])


def create_optimizer(hparams: HParams, train_steps: int = 250000) -> keras.optimizers.Adam:
  """Adam with T2T's β1, β2, ε and schedule.

  T2T's `adam` is LazyAdam, whose sparse updates equal dense Adam for the rows a
  batch touches; the shared embedding also serves as the softmax, whose gradient
  is dense, so plain Adam gives the same updates for tied weights.
  Gradient clipping (`clip_grad_norm`) is by global norm, as T2T's optimize_loss.
  """
  return keras.optimizers.Adam(
      learning_rate=T2TLearningRateSchedule(hparams, train_steps),
      beta_1=hparams.optimizer_adam_beta1, beta_2=hparams.optimizer_adam_beta2,
      epsilon=hparams.optimizer_adam_epsilon,
      global_clipnorm=hparams.clip_grad_norm or None)
