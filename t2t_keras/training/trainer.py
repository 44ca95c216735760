"""Training with tf.distribute: T2T's loss semantics, accumulation, checkpoints.

One optimizer update ("step") consumes n = `optimizer_multistep_accumulate_steps`
micro-batches (1 if unset) on every replica, as T2T's MultistepAdamOptimizer
(`utils/multistep_optimizer.py`). Each micro-batch's loss is T2T's
(`t2t_model.py`): its summed token losses over all replicas divided by
max(1, its non-pad target tokens over all replicas). As in T2T's
`optimize.py`, weight decay's gradient is added to each micro-batch's gradient,
which is then clipped by its global norm (`clip_grad_norm`); the update applies
the mean of the n clipped gradients. Splitting a micro-batch over replicas
therefore gives the update of one replica on the whole micro-batch; with n > 1
a micro-batch of few tokens weighs as much as one of many (T2T's mean of
means, not one big batch's token mean). Gradients are all-reduced by us, once
per micro-batch, so that each one's global norm is known.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterator, List, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from data_gen.text_encoder import PAD_ID
from t2t_keras import errors
from t2t_keras.hparams import HParams
from t2t_keras.perf import flops as flops_lib
from t2t_keras.rundir import model_factory
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.training import losses, metrics
from t2t_keras.training.optimization import T2TLearningRateSchedule, create_optimizer

# The former name of the error a diverged training raises.
NonFiniteLossError = errors.DivergenceError


def create_strategy(name: Optional[str] = None,
                    num_gpus: Optional[int] = None) -> tf.distribute.Strategy:
  """one_device, mirrored or multi_worker_mirrored; None picks mirrored on >1 GPU.

  multi_worker_mirrored reads TF_CONFIG and must be created before any other op
  initializes the TensorFlow runtime (so it is created before GPUs are listed).

  Args:
    name: the strategy, or None.
    num_gpus: GPUs of this worker to use (T2T's --worker_gpu); default all visible.
  Raises:
    ValueError: an unknown `name`, or more GPUs than are visible.
  """
  if name == "multi_worker_mirrored":
    return tf.distribute.MultiWorkerMirroredStrategy()
  gpus = tf.config.list_logical_devices("GPU")
  count = len(gpus) if num_gpus is None else num_gpus
  if count > len(gpus) and count > 1:
    raise ValueError(f"worker_gpu={count} but only {len(gpus)} GPUs are visible.")
  if name is None:
    name = "mirrored" if count > 1 else "one_device"
  if name == "one_device":
    return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
  if name == "mirrored":  # None: every visible device
    return tf.distribute.MirroredStrategy([d.name for d in gpus[:count]] or None)
  raise ValueError("distribution_strategy must be one_device, mirrored or "
                   f"multi_worker_mirrored, got {name!r}.")


def _on_replica_device(fn: Callable) -> Callable:
  """`fn` called under the device of the replica that calls it.

  A compiled function's call is placed on its own, not in the replica's device
  scope, so under MirroredStrategy every replica's call of one XLA function landed
  on the first device and read the other replicas' variables across devices
  ("Trying to access resource ... located in device CPU:1 from device CPU:0"); an
  XLA cluster must run where its variables live.
  """
  def call(*args):
    ctx = tf.distribute.get_replica_context()
    local = ctx.strategy.extended.worker_devices  # this worker's, one per local replica
    # `ctx.devices` indexes the local devices by the global replica id, which fails on
    # every worker but the first under MultiWorkerMirroredStrategy; the replicas of a
    # worker are numbered consecutively, so the id modulo their count is the local one.
    replica = int(tf.get_static_value(ctx.replica_id_in_sync_group))  # a constant tensor
    with tf.device(local[replica % len(local)]):
      return fn(*args)

  return call


class Trainer:
  """Owns model, optimizer and their train/eval steps under a strategy.

  Args:
    hparams: HParams.
    spec: vocabulary sizes and target space of the problem.
    strategy: a tf.distribute.Strategy (one_device for a single CPU/GPU).
    train_steps: the total number of updates (for schedules that decay to it).
    jit_compile: compile the step functions with XLA.
    adam_step_offset: updates before Adam's first (optimization.FusedAdam):
      non-zero for a T2T run imported without its Adam state.
  """

  def __init__(self, hparams: HParams, spec: ModelSpec, strategy: tf.distribute.Strategy,
               train_steps: int = 250000, jit_compile: bool = False,
               adam_step_offset: int = 0):
    self.hparams = hparams
    self.spec = spec
    self.strategy = strategy
    self.jit_compile = jit_compile
    self.accumulate_steps = max(1, hparams.optimizer_multistep_accumulate_steps)
    self.schedule = T2TLearningRateSchedule(hparams, train_steps)  # the optimizer's too
    with strategy.scope():
      self.model = model_factory.build_model(hparams, spec)
      # We all-reduce and clip the gradients ourselves (see _replica_reduce).
      optimizer = create_optimizer(hparams, schedule=self.schedule, all_reduced=True,
                                   clip=False, adam_step_offset=adam_step_offset)
      if keras.mixed_precision.global_policy().name == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
      self.optimizer = optimizer
      self.optimizer.build(self.model.trainable_variables)
    self._train_fn = None
    self._eval_fn = None
    self._agree_fn = None
    self._finite_fn = None
    self.flops_seen = 0.0  # training FLOPs of the updates run by this object

  @property
  def step(self) -> int:
    return int(self.optimizer.iterations.numpy())

  @property
  def loss_scaled(self) -> bool:
    """True under float16 loss scaling: there a step whose gradients are not
    finite is skipped (weights untouched, loss scale lowered), so a non-finite
    gradient norm alone does not mean divergence."""
    return isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)

  # -- Train step --------------------------------------------------------------

  def _replica_dens(self, *batches):
    """[n]: each micro-batch's non-PAD target tokens over all replicas (>= 1).

    Known from the batches alone, before any forward pass: each replica can
    differentiate a micro-batch's loss, sum / den, directly (T2T's loss), so
    its gradients need no rescaling pass afterwards.
    """
    prepend = self.hparams.prepend_mode
    dens = tf.stack([tf.reduce_sum(losses.target_weights(b["targets"], prepend, True))
                     for b in batches])
    dens = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, dens)
    return tf.maximum(dens, 1.0)

  def _replica_grads(self, batch, den):
    """Gradients of one micro-batch's summed token loss / `den` on one replica."""
    variables = self.model.trainable_variables
    with tf.GradientTape() as tape:
      logits = self.model(batch, training=True)
      weights = losses.target_weights(batch["targets"], self.hparams.prepend_mode, True)
      num, _ = losses.padded_cross_entropy(logits, batch["targets"],
                                           self.hparams.label_smoothing, weights)
      scaled = num / den
      if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
        scaled = self.optimizer.scale_loss(scaled)
    grads = tape.gradient(scaled, variables)
    # A language model's batches hold no (or an empty) "inputs".
    inputs = batch["inputs"] if self.spec.has_inputs else batch["targets"][:, :0]
    tokens = (tf.reduce_sum(tf.cast(inputs != PAD_ID, tf.float32)) +
              tf.reduce_sum(tf.cast(batch["targets"] != PAD_ID, tf.float32)))
    # [non-pad tokens, training FLOPs of the padded batch]: summed like the loss.
    shape = lambda x, i: tf.cast(tf.shape(x)[i], tf.float32)
    flops = flops_lib.training_flops(self.hparams, self.spec.target_vocab_size,
                                     shape(batch["targets"], 0), shape(inputs, 1),
                                     shape(batch["targets"], 1), self.spec.has_inputs)
    return [tf.convert_to_tensor(g) for g in grads], num / den, tf.stack([tokens, flops])

  def _replica_reduce(self, grads, loss):
    """One micro-batch's gradient over all replicas, as T2T hands it to its optimizer.

    All-reduces the gradients and the loss, adds weight decay's gradient and
    clips by the global norm (`clip_grad_norm`), as T2T's optimize_loss does
    for every micro-batch; then divides by n for the mean of the micro-batches.
    Returns (gradients / n, loss / n, the global norm before clipping / n).
    Under float16 loss scaling the gradients stay scaled; norm and clip are of
    the unscaled gradient.
    """
    ctx = tf.distribute.get_replica_context()
    grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    loss = ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss)
    hp = self.hparams
    scale = self._loss_scale()
    if hp.weight_decay:
      # T2T adds weight_decay * l2_loss(v) (gradient weight_decay * v) for all but biases.
      grads = [g if _is_bias(v) else g + tf.cast(hp.weight_decay * scale, g.dtype) * v
               for g, v in zip(grads, self.model.trainable_variables)]
    scaled_norm = tf.linalg.global_norm(grads)
    if hp.clip_grad_norm:
      grads, _ = tf.clip_by_global_norm(grads, hp.clip_grad_norm * scale,
                                        use_norm=scaled_norm)
    share = 1.0 / self.accumulate_steps
    return ([g * tf.cast(share, g.dtype) for g in grads], loss * share,
            scaled_norm / scale * share)

  def _replica_update(self, grads):
    """Applies the step's (already all-reduced, clipped, averaged) gradients."""
    self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))

  def _loss_scale(self) -> tf.Tensor:
    if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
      return tf.cast(self.optimizer.dynamic_scale, tf.float32)
    return tf.constant(1.0)

  def _build_train_fn(self):
    strategy = self.strategy
    replica_grads = self._replica_grads
    replica_reduce, replica_update = self._replica_reduce, self._replica_update
    if self.jit_compile:
      # XLA cannot hold the iterator (IteratorGetNext) nor, portably, the
      # cross-replica all-reduce: compile the forward/backward pass (nearly all
      # of the FLOPs) and, on one device, the reduction and the update; keep
      # the rest outside.
      replica_grads = _on_replica_device(tf.function(replica_grads, jit_compile=True))
      if isinstance(strategy, tf.distribute.OneDeviceStrategy):
        replica_reduce = tf.function(replica_reduce, jit_compile=True)
        replica_update = tf.function(replica_update, jit_compile=True)
    add = lambda a, b: tf.nest.map_structure(tf.add, a, b)

    def step_fn(iterator):
      batches = [next(iterator) for _ in range(self.accumulate_steps)]
      dens = strategy.run(self._replica_dens, args=tuple(batches))
      acc = None  # (gradients, loss, grad norm, [tokens, flops]), summed over micro-batches
      for k, batch in enumerate(batches):  # unrolled: accumulation is exact sums
        den = strategy.run(lambda d, i=k: d[i], args=(dens,))
        grads, loss, counts = strategy.run(replica_grads, args=(batch, den))
        part = strategy.run(replica_reduce, args=(grads, loss)) + (counts,)
        acc = part if acc is None else strategy.run(add, args=(acc, part))
      grads, loss, grad_norm, counts = acc
      strategy.run(replica_update, args=(grads,))
      loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)
      grad_norm = strategy.reduce(tf.distribute.ReduceOp.MEAN, grad_norm, axis=None)
      counts = strategy.reduce(tf.distribute.ReduceOp.SUM, counts, axis=None)
      return {"loss": loss, "grad_norm": grad_norm, "tokens": counts[0], "flops": counts[1]}

    return tf.function(step_fn)

  def train_step(self, iterator: Iterator) -> "StepResult":
    """One update from `accumulate_steps` micro-batches of a distributed iterator:
    its metrics, the step reached and whether the step was finite (`StepResult`)."""
    if self._train_fn is None:
      self._train_fn = self._build_train_fn()
    attempted = self.step + 1  # under float16 loss scaling a skipped update keeps the step
    out = StepResult({k: float(v) for k, v in self._train_fn(iterator).items()})
    out.step, out.attempted_step = self.step, attempted
    out.non_finite = non_finite_metrics(out, self.loss_scaled)
    self.flops_seen += out["flops"]
    return out

  # -- Evaluation ---------------------------------------------------------------

  def _build_eval_fn(self):
    def replica_fn(batch):
      logits = self.model(batch, training=False)  # dropout off; loss unsmoothed
      weights = losses.target_weights(batch["targets"], self.hparams.prepend_mode, False)
      # Packed rows: approx_bleu's n-grams stay within one example.
      return metrics.metric_sums(logits, batch["targets"], weights,
                                 batch.get("targets_segmentation"))

    def eval_fn(batch):
      sums = self.strategy.run(replica_fn, args=(batch,))
      return {k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
              for k, v in sums.items()}

    return tf.function(eval_fn, reduce_retracing=True)

  def evaluate(self, dataset, steps: Optional[int] = None) -> Dict[str, float]:
    """T2T eval metrics over `steps` batches (all when None) of a distributed dataset."""
    if self._eval_fn is None:
      self._eval_fn = self._build_eval_fn()
    totals = {k: 0.0 for k in metrics.SUM_KEYS}
    for i, batch in enumerate(dataset):
      if steps is not None and i >= steps:
        break
      for k, v in self._eval_fn(batch).items():
        totals[k] += float(v)
    return metrics.finalize(totals)

  def learning_rate(self) -> float:
    return float(self.schedule(self.optimizer.iterations))

  def non_finite_weights(self) -> List[Tuple[str, str]]:
    """[(variable path, "NaN" or "inf")] of the model's float variables that are
    not finite, in model order; [] when all are.

    One on-device reduction per variable and a copy of two booleans each, so it
    is cheap enough to run before every checkpoint.
    """
    variables = [v for v in self.model.variables if tf.as_dtype(v.dtype).is_floating]
    if self._finite_fn is None:
      self._finite_fn = tf.function(lambda: tf.stack([
          tf.stack([tf.reduce_all(tf.math.is_finite(v)), tf.reduce_any(tf.math.is_nan(v))])
          for v in variables]))
    flags = self._finite_fn().numpy()
    return [(v.path, "NaN" if nan else "inf")
            for v, (finite, nan) in zip(variables, flags) if not finite]

  # -- Agreement across workers -------------------------------------------------

  def any_worker(self, *flags: bool) -> tuple:
    """Each flag OR-ed over all workers, so that every worker takes the same decision.

    One small all-reduce under MultiWorkerMirroredStrategy (every worker must
    call it at the same point); within one process the flags are already agreed.
    """
    if not isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy):
      return tuple(bool(f) for f in flags)
    if self._agree_fn is None:
      strategy = self.strategy

      def replica_fn(values):
        # Every replica contributes its worker's 0/1 flags: a sum > 0 means "some worker".
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                              tf.identity(values))

      self._agree_fn = tf.function(
          lambda values: strategy.experimental_local_results(
              strategy.run(replica_fn, args=(values,)))[0])
    total = self._agree_fn(tf.constant([float(bool(f)) for f in flags]))
    return tuple(bool(v > 0.5) for v in total.numpy())



class StepResult(dict):
  """A train step's metrics (`loss`, `grad_norm`, `tokens`, `flops`, ...: floats), and

    step: the optimizer's step after it;
    attempted_step: the step it tried to reach (step + 1 before it; a float16
      update skipped for non-finite gradients leaves `step` below it);
    non_finite: what of the loss and gradient norm is not finite ("" when the step
      was finite; `non_finite_metrics`).
  """
  step: int = 0
  attempted_step: int = 0
  non_finite: str = ""

  @property
  def finite(self) -> bool:
    return not self.non_finite


def _is_bias(variable) -> bool:
  name = variable.path if hasattr(variable, "path") else variable.name
  return len(variable.shape) == 1 and (name.endswith("bias") or name.endswith("beta"))


def non_finite_metrics(metrics_: Dict[str, float], loss_scaled: bool = False) -> str:
  """What of a step's `loss` and `grad_norm` is not finite ("" when both are).

  Args:
    metrics_: a train_step result.
    loss_scaled: float16 loss scaling (Trainer.loss_scaled): a non-finite
      gradient norm is then a skipped step, not divergence, and is ignored.
  """
  loss, grad_norm = metrics_["loss"], metrics_["grad_norm"]
  if not np.isfinite(loss):
    return f"the loss became {loss}"
  if not np.isfinite(grad_norm) and not loss_scaled:
    return f"the gradient norm became {grad_norm} (the loss, {loss:.4g}, was finite)"
  return ""


def divergence_error(step: int, what: str, last_checkpoint: Optional[str]
                     ) -> errors.DivergenceError:
  """The one-line error of a training that diverged at `step` because of `what`."""
  kept = (f"the last finite checkpoint is {last_checkpoint}" if last_checkpoint else
          "no checkpoint was saved yet")
  return errors.DivergenceError(
      f"training diverged at step {step}: {what}; that step was not saved and {kept}. "
      "Train again in a new --output_dir with a lower learning rate (--hparams="
      "'learning_rate_constant=...'), gradient clipping ('clip_grad_norm=1.0') or "
      "--mixed_precision=bfloat16 instead of float16.")
