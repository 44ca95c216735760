"""T2T's Adafactor (`utils/adafactor.py` `AdafactorOptimizer`) as a Keras 3 optimizer.

For each variable with gradient g (float32), learning rate lr (the hparams'
schedule, T2T's `adafactor_optimizer_from_hparams(hparams, lr)`) and decay
rate d at T2T's step number s (the global step before the update, 0 first):

  g2 = g^2 + 1e-30
  factored (optimizer_adafactor_factored and rank >= 2; over the last two dims):
    vr <- d vr + (1 - d) mean(g2, -1);  vc <- d vc + (1 - d) mean(g2, -2)
    x = g / sqrt(vr / mean(vr, -1)) [..., None] / sqrt(vc) [..., None, :]
  otherwise:  v <- d v + (1 - d) g2;  x = g / sqrt(v)
  x /= max(1, rms(x) / clipping_threshold)            (update clipping)
  u = lr * x, times max(rms(w), 1e-3) under multiply_by_parameter_scale
  with beta1 > 0:  m <- beta1 m + (1 - beta1) u;  u = m
  w <- w - u

  d (decay_type pow, `adafactor_decay_rate_pow`) = 1 - (s + 1)^-memory_exponent
  d (decay_type adam, `adafactor_decay_rate_adam`), t = s + 1:
    beta2 (1 - beta2^(t - 1)) / (1 - beta2^t)   (Adam's bias correction folded in)

Both decay rates are 0 at the first update, so the second moment starts at g2.
The parameter scale is taken from the weights before the update. T2T's
`grad_squared_mean * 1e-30` added to d and lr (a device-fusion guard) is left
out: it changes nothing in float32 unless the mean squared gradient nears 1e23.

One difference from T2T remains: T2T split the embedding into
`symbol_modality_num_shards` variables, each with its own parameter scale,
factored moments and clipping; here it is one matrix, so its updates are close
to T2T's but not equal when T2T sharded it (every other variable's are equal).

How this differs from `keras.optimizers.Adafactor`: Keras caps the rate at
1/sqrt(t) and always multiplies by the parameter scale; has no beta1
momentum, no Adam-style decay and no unfactored mode for matrices; keeps a
full-size second moment beside the factors (and placeholders for vectors);
and counts t from `iterations + 1` in its pow decay only. Here every one of
those follows T2T, and the slots are exactly T2T's (`m`, `vr`, `vc`, `v`).
"""

from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf

DECAY_TYPES = ("pow", "adam")
EPSILON1 = 1e-30  # T2T's epsilon1: added to the squared gradient
EPSILON2 = 1e-3   # T2T's epsilon2: the least parameter scale


def _rms(x: tf.Tensor) -> tf.Tensor:
  return tf.sqrt(tf.reduce_mean(tf.square(x)))


def decay_rate(step_num: tf.Tensor, decay_type: str, beta2: float,
               memory_exponent: float) -> tf.Tensor:
  """T2T's second-moment decay rate at step number `step_num` (float32, 0 first).

  `adafactor_decay_rate_pow` or `adafactor_decay_rate_adam`, whose t is
  step_num + 1.
  """
  t = tf.cast(step_num, tf.float32) + 1.0
  if decay_type == "pow":
    return 1.0 - tf.pow(t, -memory_exponent)
  if decay_type == "adam":
    return beta2 * (1.0 - tf.pow(beta2, t - 1.0)) / (1.0 - tf.pow(beta2, t))
  raise ValueError(f"decay_type must be one of {DECAY_TYPES}, got {decay_type!r}.")


class T2TAdafactor(keras.optimizers.Optimizer):
  """T2T's Adafactor (see the module docstring for the update).

  Args:
    learning_rate: a float or a schedule of the update count (T2T's lr: the
      relative step under multiply_by_parameter_scale, else the absolute one).
    beta1: momentum of the update (0: none, and no `m` slot).
    beta2: the Adam-style decay's beta2 (decay_type "adam").
    decay_type: "pow" or "adam".
    memory_exponent: the pow decay's exponent.
    factored: factor the second moment of variables of rank >= 2.
    clipping_threshold: update clipping by RMS (T2T: >= 1).
    multiply_by_parameter_scale: scale updates by max(rms(weights), 1e-3).
    step_offset: updates counted in `iterations` that this optimizer did not
      make (a run imported without its optimizer state): the decay rate reads
      iterations - step_offset as T2T's step number, so that a fresh second
      moment starts at g^2; the learning-rate schedule still reads `iterations`.
    **kwargs: keras.optimizers.Optimizer's (name, global_clipnorm, ...).
  """

  def __init__(self, learning_rate=0.01, beta1: float = 0.0, beta2: float = 0.999,
               decay_type: str = "pow", memory_exponent: float = 0.8,
               factored: bool = True, clipping_threshold: Optional[float] = 1.0,
               multiply_by_parameter_scale: bool = True, step_offset: int = 0,
               name: str = "adafactor", **kwargs):
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    if decay_type not in DECAY_TYPES:
      raise ValueError(f"decay_type must be one of {DECAY_TYPES}, got {decay_type!r}.")
    if step_offset < 0:
      raise ValueError(f"step_offset must be >= 0, got {step_offset}.")
    self.beta1 = float(beta1)
    self.beta2 = float(beta2)
    self.decay_type = decay_type
    self.memory_exponent = float(memory_exponent)
    self.factored = bool(factored)
    self.clipping_threshold = clipping_threshold
    self.multiply_by_parameter_scale = bool(multiply_by_parameter_scale)
    self.step_offset = int(step_offset)

  def is_factored(self, variable) -> bool:
    """T2T's `_should_use_factored_second_moment_estimate`."""
    return self.factored and len(variable.shape) >= 2

  def build(self, var_list):
    """Creates T2T's slots per variable: `m` (beta1 > 0), then `vr` and `vc`
    (factored) or `v`; a slot a variable does not have is None."""
    if self.built:
      return
    super().build(var_list)
    self._m, self._vr, self._vc, self._v = [], [], [], []
    for var in var_list:
      shape = tuple(var.shape)
      self._m.append(self._slot(shape, var, "m")
                     if self.beta1 else None)
      if self.is_factored(var):
        self._vr.append(self._slot(shape[:-1], var, "vr"))
        self._vc.append(self._slot(shape[:-2] + shape[-1:], var, "vc"))
        self._v.append(None)
      else:
        self._vr.append(None)
        self._vc.append(None)
        self._v.append(self._slot(shape, var, "v"))

  def _slot(self, shape, variable, kind: str):
    name = variable.path.replace("/", "_") if hasattr(variable, "path") else variable.name
    return self.add_variable(shape, initializer="zeros", dtype="float32",
                             name=f"{name}_{kind}")

  def slots(self, variable) -> dict:
    """{"m", "vr", "vc", "v"} -> this variable's slot (only those it has)."""
    index = self._get_variable_index(variable)
    found = {"m": self._m[index], "vr": self._vr[index], "vc": self._vc[index],
             "v": self._v[index]}
    return {k: s for k, s in found.items() if s is not None}

  def step_num(self) -> tf.Tensor:
    """T2T's step number of the update being applied (0 for the first), float32."""
    return tf.cast(self.iterations - self.step_offset, tf.float32)

  def update_step(self, gradient, variable, learning_rate):
    slots = self.slots(variable)
    grad = tf.cast(tf.convert_to_tensor(gradient), tf.float32)
    old = tf.cast(tf.convert_to_tensor(variable), tf.float32)
    grad_squared = tf.square(grad) + EPSILON1
    decay = decay_rate(self.step_num(), self.decay_type, self.beta2, self.memory_exponent)
    mixing = 1.0 - decay
    scale = tf.cast(learning_rate, tf.float32)
    if self.multiply_by_parameter_scale:
      scale *= tf.maximum(_rms(old), EPSILON2)
    if "vr" in slots:
      new_vr = decay * slots["vr"] + mixing * tf.reduce_mean(grad_squared, -1)
      new_vc = decay * slots["vc"] + mixing * tf.reduce_mean(grad_squared, -2)
      self.assign(slots["vr"], new_vr)
      self.assign(slots["vc"], new_vc)
      row = tf.math.rsqrt(new_vr / tf.reduce_mean(new_vr, -1, keepdims=True))
      x = grad * tf.expand_dims(row, -1) * tf.expand_dims(tf.math.rsqrt(new_vc), -2)
    else:
      new_v = decay * slots["v"] + mixing * grad_squared
      self.assign(slots["v"], new_v)
      x = grad * tf.math.rsqrt(new_v)
    if self.clipping_threshold is not None:
      x /= tf.maximum(1.0, _rms(x) / self.clipping_threshold)
    update = scale * x
    if "m" in slots:
      update = self.beta1 * slots["m"] + (1.0 - self.beta1) * update
      self.assign(slots["m"], update)
    self.assign(variable, tf.cast(old - update, variable.dtype))

  def get_config(self):
    return dict(super().get_config(), beta1=self.beta1, beta2=self.beta2,
                decay_type=self.decay_type, memory_exponent=self.memory_exponent,
                factored=self.factored, clipping_threshold=self.clipping_threshold,
                multiply_by_parameter_scale=self.multiply_by_parameter_scale,
                step_offset=self.step_offset)


class ReducedAdafactor(T2TAdafactor):
  """T2TAdafactor that trusts its gradients to be all-reduced already (as
  `optimization.ReducedAdam`: the Trainer all-reduces them itself)."""

  def _all_reduce_sum_gradients(self, grads_and_vars):
    return list(grads_and_vars)


def from_hparams(hparams, learning_rate, all_reduced: bool = False,
                 step_offset: int = 0, **kwargs) -> T2TAdafactor:
  """T2T's `adafactor_optimizer_from_hparams(hparams, learning_rate)`.

  Args:
    hparams: HParams (the optimizer_adafactor_* fields).
    learning_rate: a float or schedule (T2T's lr).
    all_reduced: see `optimization.create_optimizer`.
    step_offset: see `T2TAdafactor`.
    **kwargs: keras.optimizers.Optimizer's (global_clipnorm, ...).
  """
  cls = ReducedAdafactor if all_reduced else T2TAdafactor
  return cls(learning_rate=learning_rate, beta1=hparams.optimizer_adafactor_beta1,
             beta2=hparams.optimizer_adafactor_beta2,
             decay_type=hparams.optimizer_adafactor_decay_type,
             memory_exponent=hparams.optimizer_adafactor_memory_exponent,
             factored=hparams.optimizer_adafactor_factored,
             clipping_threshold=hparams.optimizer_adafactor_clipping_threshold,
             multiply_by_parameter_scale=hparams.optimizer_adafactor_multiply_by_parameter_scale,
             step_offset=step_offset, **kwargs)
