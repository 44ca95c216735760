"""Helpers to compare single training steps exactly."""

import numpy as np
import tensorflow as tf

from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.t2t_import import variable_names
from t2t_keras.training import losses

# Dropout off, and Adam with epsilon far above sqrt(v): the first update is then
# lr * g / epsilon, linear in the gradient, so equal weights mean equal gradients
# (plain Adam's first step is about lr * sign(g) and would hide a wrong scale).
LINEAR_ADAM = ("layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0,"
               "learning_rate_schedule=constant,learning_rate_constant=10,"
               "optimizer_adam_epsilon=10")

# A model for `batches`' default vocabulary (target space 3).
SPEC = ModelSpec(40, 40, 3)


def batches(count, seed, vocab=40, shapes=None):
  """`count` batches of different sizes and lengths, with padding.

  With `shapes`, batch k has the shape of batch k % shapes (a compiled step then
  compiles `shapes` times, as for batches padded to a few buckets).
  """
  rng = np.random.default_rng(seed)
  out = []
  for k in range(count):
    j = k if shapes is None else k % shapes
    n, li, lt = 2 + j, 5 + 2 * j, 4 + j
    inputs = rng.integers(2, vocab, size=(n, li))
    targets = rng.integers(2, vocab, size=(n, lt))
    inputs[0, li - 2:] = 0
    targets[-1, lt - 2:] = 0
    out.append({"inputs": inputs.astype(np.int64), "targets": targets.astype(np.int64)})
  return out


def concat(parts):
  """One batch holding all rows of `parts`, 0-padded to the longest."""
  out = {}
  for key in ("inputs", "targets"):
    length = max(p[key].shape[1] for p in parts)
    out[key] = np.concatenate([np.pad(p[key], [[0, 0], [0, length - p[key].shape[1]]])
                               for p in parts])
  return out


def one_step(trainer, parts):
  """Feeds `parts` in order (replica by replica, micro-batch by micro-batch)."""
  def gen():
    yield from parts
  spec = {k: tf.TensorSpec([None, None], tf.int64) for k in ("inputs", "targets")}
  ds = tf.data.Dataset.from_generator(gen, output_signature=spec)
  dist = trainer.strategy.distribute_datasets_from_function(lambda ctx: ds)
  return trainer.train_step(iter(dist))


def assert_same_training(want, got, start, steps):
  """Weights `got` equal `want` after `steps` updates from `start`, up to the order of
  float32 sums (~1e-7 relative per gradient, a few ulps of a weight per step); a wrong
  split or scale shows as a difference of the order of the update itself."""
  moved = max(np.abs(w - s).max() for w, s in zip(want, start))
  diff = max(np.abs(w - g).max() for w, g in zip(want, got))
  print(f"MOVED {moved:.3e} DIFF {diff:.3e}")
  ulps = steps * 4 * max(np.spacing(np.abs(w).max()) for w in want)
  assert moved > 100 * ulps
  assert diff <= 1e-3 * moved + ulps, (diff, moved)


def split_rows(batch, count):
  """`batch` cut into `count` consecutive row blocks (replica or worker r gets block r)."""
  return [{k: np.array_split(v, count)[r] for k, v in batch.items()} for r in range(count)]


def run_steps(trainer, parts, steps):
  """`steps` train steps fed `parts` in order; returns each step's metrics."""
  def gen():
    yield from parts
  spec = {k: tf.TensorSpec([None, None], tf.int64) for k in ("inputs", "targets")}
  ds = tf.data.Dataset.from_generator(gen, output_signature=spec)
  iterator = iter(trainer.strategy.distribute_datasets_from_function(lambda ctx: ds))
  return [trainer.train_step(iterator) for _ in range(steps)]


def t2t_decayed(model):
  """Per trainable variable: does T2T's `optimize.weight_decay` decay it?

  T2T skips variables that are 1-D and whose name ends with "bias" (by T2T's
  names: layer-norm offsets and the feed-forward biases; layer-norm scales and
  the embedding shards are decayed).
  """
  t2t_names = {id(v): name for name, v in variable_names.body_variable_map(model).items()}
  return [not (len(v.shape) == 1 and t2t_names.get(id(v), "weights").endswith("bias"))
          for v in model.trainable_variables]


def t2t_loss_grads(oracle, weights, batch, label_smoothing):
  """Gradient of one micro-batch's T2T loss, sum / max(1, non-pad targets), at `weights`."""
  for v, w in zip(oracle.trainable_variables, weights):
    v.assign(np.asarray(w, np.float32))
  batch = {k: tf.constant(v) for k, v in batch.items()}
  with tf.GradientTape() as tape:
    num, den = losses.padded_cross_entropy(oracle(batch, training=True), batch["targets"],
                                           label_smoothing)
    loss = num / tf.maximum(den, 1.0)
  return float(loss), [tf.convert_to_tensor(g).numpy()
                       for g in tape.gradient(loss, oracle.trainable_variables)]
