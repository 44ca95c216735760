"""T2T's training maths in NumPy (float64), written from T2T's source, for tests.

Independent of t2t_keras: each function cites the T2T function it ports.
- `learning_rate`: `utils/learning_rate.py` (`learning_rate_schedule`,
  `learning_rate_factor`, `_global_step`, `legacy_learning_rate_schedule`,
  `_learning_rate_decay`, `_learning_rate_warmup`), at T2T's global step.
- `Tf1Adam`: `tf.train.AdamOptimizer` (the `ApplyAdam` kernel) with TF1's
  `beta1_power`/`beta2_power` accumulators, which start at beta1/beta2.
- `MultistepAdam`: `utils/multistep_optimizer.py` `MultistepAdamOptimizer` fed
  what `utils/optimize.py` `optimize` gives it: each micro-batch's gradient
  plus weight decay's (`weight_decay`, biases skipped), clipped by its global
  norm (`optimize_loss(clip_gradients=clip_grad_norm)`).
- `Adafactor`: `utils/adafactor.py` `AdafactorOptimizer._resource_apply_dense`
  with the decay rates `adafactor_decay_rate_pow` / `adafactor_decay_rate_adam`,
  built as `adafactor_optimizer_from_hparams` does.
"""

import math

import numpy as np


def global_step_for_schedule(global_step, accumulate_steps):
  """`learning_rate._global_step`: the global step, divided by n when n is set."""
  if not accumulate_steps:
    return float(global_step)
  return float(global_step) / float(accumulate_steps)


def learning_rate_factor(name, s, hp, train_steps):
  """`learning_rate.learning_rate_factor` at schedule step `s` (T2T >= 1.14)."""
  w = float(hp["learning_rate_warmup_steps"])
  decay_steps = float(hp.get("learning_rate_decay_steps", 1))
  if name == "constant":
    return hp["learning_rate_constant"]
  if name == "linear_warmup":
    return min(1.0, s / w)
  if name == "linear_decay":
    return min(1.0, max(0.0, (train_steps - s) / decay_steps))
  if name == "cosdecay":
    return 1.0 if s <= w else 0.5 * (1 + math.cos(math.pi * s / decay_steps))
  if name == "single_cycle_cos_decay":
    if train_steps <= w:
      raise ValueError("single_cycle_cos_decay needs train_steps > warmup")
    return math.cos((max(s, w) - w) * math.pi / (train_steps - w)) / 2.0 + 0.5
  if name == "multi_cycle_cos_decay":
    return math.cos((max(s, w) - w) * math.pi / decay_steps) / 2.0 + 0.5
  if name == "rsqrt_decay":
    return 1.0 / math.sqrt(max(s, w))
  if name == "rsqrt_normalized_decay":
    return math.sqrt(w) / math.sqrt(max(s, w))
  if name == "exp_decay":
    p = max((s - w) / decay_steps, 0.0)
    if hp.get("learning_rate_decay_staircase"):
      p = math.floor(p)
    return hp["learning_rate_decay_rate"] ** p
  if name == "rsqrt_hidden_size":
    return hp["hidden_size"] ** -0.5
  if name == "legacy":
    return legacy_learning_rate(s, hp)
  raise ValueError(name)


def legacy_learning_rate(s, hp):
  """`learning_rate.legacy_learning_rate_schedule` for the noam and exp schemes."""
  w = float(hp["learning_rate_warmup_steps"])
  scheme = hp["learning_rate_decay_scheme"]
  if scheme == "noam":
    rate = 5000.0 * hp["hidden_size"] ** -0.5 * min((s + 1) * w ** -1.5, (s + 1) ** -0.5)
  elif s < w:  # _learning_rate_warmup, "exp"
    rate = math.exp(math.log(0.01) / w) ** (w - s)
  elif scheme == "exp":  # _learning_rate_decay
    p = (s - w) / hp["learning_rate_decay_steps"]
    if hp.get("learning_rate_decay_staircase"):
      p = math.floor(p)
    rate = hp["learning_rate_decay_rate"] ** p
  else:
    raise ValueError(scheme)
  return rate * (0.002 if "adam" in hp["optimizer"] else 1.0) * hp["learning_rate"]


def learning_rate(global_step, hp, train_steps):
  """`learning_rate.learning_rate_schedule` at T2T's global step (micro-batches)."""
  s = global_step_for_schedule(global_step, hp.get("optimizer_multistep_accumulate_steps"))
  rate = 1.0
  for name in [n.strip() for n in hp["learning_rate_schedule"].split("*") if n.strip()]:
    rate *= learning_rate_factor(name, s, hp, train_steps)
  return rate


class Tf1Adam:
  """tf.train.AdamOptimizer on a list of arrays, with TF1's beta-power accumulators.

  Args:
    weights: the variables' values.
    m, v: the slots (`Adam`, `Adam_1`); zeros when None.
    beta1_power, beta2_power: TF1's accumulators (`beta1_power`, `beta2_power`);
      beta1, beta2 (a fresh optimizer) when None.
  """

  def __init__(self, weights, beta1, beta2, epsilon, m=None, v=None, beta1_power=None,
               beta2_power=None):
    self.w = [np.asarray(x, np.float64) for x in weights]
    self.m = [np.zeros_like(x) for x in self.w] if m is None else \
        [np.asarray(x, np.float64) for x in m]
    self.v = [np.zeros_like(x) for x in self.w] if v is None else \
        [np.asarray(x, np.float64) for x in v]
    self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
    self.beta1_power = beta1 if beta1_power is None else float(beta1_power)
    self.beta2_power = beta2 if beta2_power is None else float(beta2_power)

  def apply(self, grads, lr):
    """One update (`_apply_dense`, then `_finish` multiplies the powers)."""
    lr_t = lr * math.sqrt(1 - self.beta2_power) / (1 - self.beta1_power)
    for i, g in enumerate(grads):
      g = np.asarray(g, np.float64)
      self.m[i] = self.beta1 * self.m[i] + (1 - self.beta1) * g
      self.v[i] = self.beta2 * self.v[i] + (1 - self.beta2) * g * g
      self.w[i] = self.w[i] - lr_t * self.m[i] / (np.sqrt(self.v[i]) + self.epsilon)
    self.beta1_power *= self.beta1
    self.beta2_power *= self.beta2


def clip_by_global_norm(grads, clip_norm):
  """tf.clip_by_global_norm: g * clip / max(norm, clip)."""
  norm = math.sqrt(sum(float(np.sum(np.square(g))) for g in grads))
  return [g * clip_norm / max(norm, clip_norm) for g in grads], norm


class MultistepAdam:
  """T2T's optimize() + MultistepAdamOptimizer(n), one micro-batch per `micro_step`.

  Args:
    weights: the variables' values.
    decayed: per variable, whether `optimize.weight_decay` decays it (not a bias).
    hp: T2T hparams (dict): optimizer_adam_*, weight_decay, clip_grad_norm,
      optimizer_multistep_accumulate_steps and the schedule's fields.
    train_steps: T2T's hparams.train_steps.
  """

  def __init__(self, weights, decayed, hp, train_steps):
    self.adam = Tf1Adam(weights, hp["optimizer_adam_beta1"], hp["optimizer_adam_beta2"],
                        hp["optimizer_adam_epsilon"])
    self.decayed = decayed
    self.hp = hp
    self.train_steps = train_steps
    self.n = max(1, hp.get("optimizer_multistep_accumulate_steps") or 1)
    self.grad_acc = [np.zeros_like(w) for w in self.adam.w]
    self.iter = 0 if self.n == 1 else 1  # `_create_non_slot_variable("iter")`
    self.global_step = 0
    self.norms = []  # the global norm of each micro-batch's gradient, before clipping

  @property
  def weights(self):
    return self.adam.w

  def micro_step(self, loss_grads):
    """One `train_op` run: `loss_grads` is the gradient of the micro-batch's loss."""
    hp = self.hp
    grads = [np.asarray(g, np.float64) + (hp["weight_decay"] * w if d else 0.0)
             for g, w, d in zip(loss_grads, self.adam.w, self.decayed)]
    if hp["clip_grad_norm"]:
      grads, norm = clip_by_global_norm(grads, hp["clip_grad_norm"])
    else:
      norm = math.sqrt(sum(float(np.sum(np.square(g))) for g in grads))
    self.norms.append(norm)
    lr = learning_rate(self.global_step, hp, self.train_steps)
    if self.iter == 0:  # _apply_cond: apply the mean, zero the accumulators
      self.adam.apply([(a + g) / self.n for a, g in zip(self.grad_acc, grads)], lr)
      self.grad_acc = [np.zeros_like(a) for a in self.grad_acc]
    else:
      self.grad_acc = [a + g for a, g in zip(self.grad_acc, grads)]
    self.iter = (self.iter + 1) % self.n  # _finish
    self.global_step += 1  # optimize_loss's global_step
    return lr


def adafactor_decay_rate(step_num, hp):
  """`adafactor_decay_rate_pow` / `adafactor_decay_rate_adam` at the global step
  `step_num` read during the update (TF1 increments it after the update).

  In float32, as T2T's graph computes it: for beta2 near 1, 1 - beta2^t keeps
  only a few digits there (beta2 0.999: about 3e-5 relative at t = 2).
  """
  f32 = np.float32
  t = f32(step_num) + f32(1.0)
  if hp["optimizer_adafactor_decay_type"] == "pow":
    return float(f32(1.0) - np.power(t, f32(-hp["optimizer_adafactor_memory_exponent"])))
  beta2 = f32(hp["optimizer_adafactor_beta2"])
  return float(beta2 * (f32(1.0) - np.power(beta2, t - f32(1.0))) /
               (f32(1.0) - np.power(beta2, t)))


def _rms(x):
  return math.sqrt(float(np.mean(np.square(x))))


class Adafactor:
  """`AdafactorOptimizer` as `adafactor_optimizer_from_hparams(hp, lr)` builds it.

  Slots as `_create_slots`: `m` when beta1 > 0; `vr` (shape[:-1]) and `vc`
  (shape[:-2] + shape[-1:]) for variables of rank >= 2 when factored, else `v`.
  `clipped` counts the updates whose update clipping was active.
  """

  def __init__(self, weights, hp):
    self.w = [np.asarray(x, np.float64) for x in weights]
    self.hp = hp
    self.slots = []
    for w in self.w:
      slots = {}
      if hp["optimizer_adafactor_beta1"]:
        slots["m"] = np.zeros_like(w)
      if hp["optimizer_adafactor_factored"] and w.ndim >= 2:
        slots["vr"] = np.zeros(w.shape[:-1])
        slots["vc"] = np.zeros(w.shape[:-2] + w.shape[-1:])
      else:
        slots["v"] = np.zeros_like(w)
      self.slots.append(slots)
    self.global_step = 0
    self.clipped = 0

  def apply(self, grads, lr):
    """One update of every variable at learning rate `lr` (`_resource_apply_dense`)."""
    hp = self.hp
    decay = adafactor_decay_rate(float(self.global_step), hp)
    for i, g in enumerate(grads):
      g = np.asarray(g, np.float64)
      slots, old = self.slots[i], self.w[i]
      g2 = np.square(g) + 1e-30
      scale = lr
      if hp["optimizer_adafactor_multiply_by_parameter_scale"]:
        scale *= max(_rms(old), 1e-3)
      if "vr" in slots:
        slots["vr"] = decay * slots["vr"] + (1 - decay) * g2.mean(axis=-1)
        slots["vc"] = decay * slots["vc"] + (1 - decay) * g2.mean(axis=-2)
        r = 1 / np.sqrt(slots["vr"] / slots["vr"].mean(axis=-1, keepdims=True))
        x = g * r[..., :, None] * (1 / np.sqrt(slots["vc"]))[..., None, :]
      else:
        slots["v"] = decay * slots["v"] + (1 - decay) * g2
        x = g / np.sqrt(slots["v"])
      denom = max(1.0, _rms(x) / hp["optimizer_adafactor_clipping_threshold"])
      self.clipped += denom > 1.0
      update = scale * x / denom
      if "m" in slots:
        beta1 = hp["optimizer_adafactor_beta1"]
        slots["m"] = beta1 * slots["m"] + (1 - beta1) * update
        update = slots["m"]
      self.w[i] = old - update
    self.global_step += 1
