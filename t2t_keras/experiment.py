"""A training run: T2T's schedules over a Trainer, with checkpoints and summaries.

`output_dir` holds what a run needs to resume and what decoder and exporter read:
`hparams.json`, `run.json` (problem name, vocabulary sizes, target space),
checkpoints `ckpt-<step>` kept by `tf.train.CheckpointManager` (TF writes each
checkpoint completely before it updates the `checkpoint` index, so a kill at
any moment leaves the index pointing at a loadable one), and TensorBoard logs
(train in `output_dir`, evaluation in `output_dir/eval`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable, Dict, Optional

import tensorflow as tf

from t2t_keras import inputs as inputs_lib
from t2t_keras.hparams import HParams
from t2t_keras.training import ModelSpec, Trainer, check_finite

SCHEDULES = ("train", "evaluate", "train_and_evaluate", "continuous_train_and_eval",
             "continuous_eval")


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Options of a run (T2T's trainer flags)."""
  output_dir: str
  train_steps: int = 250000
  eval_steps: int = 100
  local_eval_frequency: int = 1000
  keep_checkpoint_max: int = 20
  random_seed: Optional[int] = None
  log_every_steps: int = 100
  log_every_secs: float = 30.0
  eval_timeout_secs: float = 0.0  # continuous_eval: stop when no new checkpoint for this long


def write_atomic(path: str, text: str) -> None:
  tmp = f"{path}.tmp-{os.getpid()}"
  with tf.io.gfile.GFile(tmp, "w") as f:
    f.write(text)
  tf.io.gfile.rename(tmp, path, overwrite=True)


def save_or_check_run_files(output_dir: str, hparams: HParams, problem_name: str,
                            spec: ModelSpec) -> None:
  """Writes hparams.json and run.json, or checks them against an existing run.

  Raises:
    ValueError: when `output_dir` holds a run with other hparams or problem, naming
      the differing fields: resuming it silently with new values would corrupt it.
  """
  tf.io.gfile.makedirs(output_dir)
  run = {"problem": problem_name, **dataclasses.asdict(spec)}
  hparams_path = os.path.join(output_dir, "hparams.json")
  run_path = os.path.join(output_dir, "run.json")
  if tf.io.gfile.exists(hparams_path):
    with tf.io.gfile.GFile(hparams_path) as f:
      old = json.load(f)
    new = hparams.to_dict()
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
      details = ", ".join(f"{k}: {old.get(k)!r} in the run, {new.get(k)!r} now" for k in diff)
      raise ValueError(
          f"{output_dir} holds a run with different hparams ({details}). Use another "
          "--output_dir, or the same --hparams_set/--hparams to resume it.")
  if tf.io.gfile.exists(run_path):
    with tf.io.gfile.GFile(run_path) as f:
      old_run = json.load(f)
    if old_run != run:
      raise ValueError(f"{output_dir} holds a run of {old_run}, not {run}. Use another "
                       "--output_dir.")
  write_atomic(hparams_path, hparams.to_json())
  write_atomic(run_path, json.dumps(run, indent=2, sort_keys=True))


def load_run_files(output_dir: str):
  """(HParams, problem name, ModelSpec) saved by a training run in `output_dir`."""
  hparams_path = os.path.join(output_dir, "hparams.json")
  if not tf.io.gfile.exists(hparams_path):
    raise FileNotFoundError(
        f"No hparams.json in {output_dir}: train a model there first with "
        f"t2t_keras_trainer --output_dir={output_dir} ...")
  with tf.io.gfile.GFile(hparams_path) as f:
    hparams = HParams.from_json(f.read())
  with tf.io.gfile.GFile(os.path.join(output_dir, "run.json")) as f:
    run = json.load(f)
  problem = run.pop("problem")
  return hparams, problem, ModelSpec(**run)


class Experiment:
  """Runs a T2T schedule.

  Args:
    trainer: the Trainer (model, optimizer, strategy).
    config: RunConfig.
    train_pattern / eval_pattern: TFRecord globs of the train and dev splits.
    log: a function taking one line of progress text.
    eval_hook: optional callable(step) -> dict of extra eval scalars (e.g. BLEU).
  """

  def __init__(self, trainer: Trainer, config: RunConfig, train_pattern: Optional[str],
               eval_pattern: Optional[str], log: Callable[[str], None] = print,
               eval_hook: Optional[Callable[[int], Dict[str, float]]] = None):
    self.trainer = trainer
    self.config = config
    self.train_pattern = train_pattern
    self.eval_pattern = eval_pattern
    self.log = log
    self.eval_hook = eval_hook
    strategy = trainer.strategy
    self.is_chief = _is_chief(strategy)
    self.checkpoint = tf.train.Checkpoint(model=trainer.model, optimizer=trainer.optimizer)
    ckpt_dir = config.output_dir if self.is_chief else os.path.join(
        config.output_dir, "tmp_worker_%d" % strategy.cluster_resolver.task_id)
    self.manager = tf.train.CheckpointManager(self.checkpoint, ckpt_dir,
                                              max_to_keep=config.keep_checkpoint_max)
    self.train_writer = tf.summary.create_file_writer(
        config.output_dir if self.is_chief else os.path.join(ckpt_dir, "logs"))
    self.eval_writer = tf.summary.create_file_writer(os.path.join(config.output_dir, "eval"))
    # Training drops examples longer than max_length, as T2T did; count them.
    self.dropped = tf.Variable(0, dtype=tf.int64, trainable=False, name="dropped_examples")

  # -- State -------------------------------------------------------------------

  def restore(self) -> int:
    """Restores the latest complete checkpoint, if any; returns its step."""
    latest = tf.train.latest_checkpoint(self.config.output_dir)
    if latest:
      self.checkpoint.restore(latest).assert_existing_objects_matched()
      self.log(f"Restored {latest} at step {self.trainer.step}.")
    return self.trainer.step

  def save(self) -> None:
    path = self.manager.save(checkpoint_number=self.trainer.step)
    if self.is_chief:
      self.log(f"Saved {path}.")
    else:  # Workers must take part in saving, but keep nothing.
      tf.io.gfile.rmtree(os.path.dirname(path))

  # -- Data --------------------------------------------------------------------

  def _distributed(self, pattern: str, mode: str):
    hp = self.trainer.hparams
    seed = self.config.random_seed

    def dataset_fn(ctx: tf.distribute.InputContext):
      ds = inputs_lib.make_dataset(pattern, hp, mode, seed=seed,
                                   deterministic=seed is not None,
                                   drop_counter=self.dropped if mode == "train" else None)
      if ctx.num_input_pipelines > 1:
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      return ds

    return self.trainer.strategy.distribute_datasets_from_function(dataset_fn)

  # -- Schedules ---------------------------------------------------------------

  def train(self, eval_every: bool = False) -> Dict[str, float]:
    """Trains until `train_steps` updates in total, checkpointing as T2T did."""
    cfg = self.config
    step = self.restore()
    if step >= cfg.train_steps:
      self.log(f"Step {step} >= --train_steps={cfg.train_steps}: nothing to train.")
      return {}
    iterator = iter(self._distributed(self.train_pattern, "train"))
    start_step, start_time = step, time.time()
    last_log_time, last_log_step, tokens, window_tokens = start_time, step, 0.0, 0.0
    last = {}
    while step < cfg.train_steps:
      last = self.trainer.train_step(iterator)
      step = self.trainer.step
      check_finite(last, step)
      tokens += last["tokens"]
      window_tokens += last["tokens"]
      now = time.time()
      if (step - last_log_step >= cfg.log_every_steps or now - last_log_time >= cfg.log_every_secs
          or step == cfg.train_steps):
        rate = window_tokens / max(now - last_log_time, 1e-9)
        steps_per_sec = (step - last_log_step) / max(now - last_log_time, 1e-9)
        eta = (cfg.train_steps - step) / max(steps_per_sec, 1e-9)
        lr = self.trainer.learning_rate()
        self.log(f"step {step}/{cfg.train_steps} loss {last['loss']:.4f} lr {lr:.3g} "
                 f"tokens/s {rate:,.0f} grad_norm {last['grad_norm']:.3f} ETA {_hms(eta)}")
        with self.train_writer.as_default(step=step):
          tf.summary.scalar("loss", last["loss"])
          tf.summary.scalar("learning_rate", lr)
          tf.summary.scalar("tokens_per_sec", rate)
          tf.summary.scalar("grad_norm", last["grad_norm"])
        last_log_time, last_log_step, window_tokens = now, step, 0.0
      if step % cfg.local_eval_frequency == 0 or step == cfg.train_steps:
        self.save()
        if eval_every:
          self.evaluate()
    wall = time.time() - start_time
    summary = {"steps": step - start_step, "tokens": tokens, "wall_time_s": wall,
               "final_loss": last.get("loss", float("nan"))}
    flops = summary["flops"] = self.trainer.flops_seen
    self.log(f"Trained {summary['steps']} steps ({step} in total), {tokens:,.0f} tokens "
             f"(source + target, non-pad) in {_hms(wall)}; final loss {summary['final_loss']:.4f}; "
             f"estimated training FLOPs {flops:.3e} (matmuls of the padded batches, "
             f"forward + backward); {int(self.dropped.numpy())} training examples longer than "
             f"max_length={self.trainer.hparams.max_length} dropped.")
    return summary

  def evaluate(self) -> Dict[str, float]:
    """Evaluates the current model on `eval_steps` dev batches; logs to eval/."""
    if not self.eval_pattern:
      return {}
    results = self.trainer.evaluate(self._distributed(self.eval_pattern, "eval"),
                                    self.config.eval_steps or None)
    if self.eval_hook is not None:
      results.update(self.eval_hook(self.trainer.step))
    step = self.trainer.step
    with self.eval_writer.as_default(step=step):
      for name, value in results.items():
        tf.summary.scalar(name, value)
    self.log(f"eval step {step}: " + " ".join(f"{k} {v:.4f}" for k, v in sorted(results.items())))
    return results

  def continuous_eval(self) -> None:
    """Evaluates each new checkpoint until one at `train_steps` is seen."""
    timeout = self.config.eval_timeout_secs or None
    for path in tf.train.checkpoints_iterator(self.config.output_dir, timeout=timeout):
      self.checkpoint.restore(path).expect_partial()
      self.evaluate()
      if self.trainer.step >= self.config.train_steps:
        return

  def run(self, schedule: str) -> None:
    if schedule not in SCHEDULES:
      raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}.")
    if schedule == "train":
      self.train()
    elif schedule == "evaluate":
      self.restore()
      self.evaluate()
    elif schedule == "continuous_eval":
      self.continuous_eval()
    else:  # train_and_evaluate, continuous_train_and_eval: evaluate at every checkpoint.
      self.train(eval_every=True)


def _is_chief(strategy) -> bool:
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.task_type:
    return True
  return resolver.task_type == "chief" or (resolver.task_type == "worker" and
                                           resolver.task_id == 0 and
                                           "chief" not in resolver.cluster_spec().as_dict())


def _hms(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


def load_trained_model(output_dir: str, checkpoint_path: Optional[str] = None):
  """Rebuilds the model of a run from hparams.json/run.json and restores weights.

  Args:
    output_dir: the training run directory.
    checkpoint_path: a checkpoint prefix (e.g. an averaged one); default latest.
  Returns:
    (model, hparams, problem_name, spec, checkpoint_path).
  """
  from t2t_keras.model import Transformer
  hparams, problem, spec = load_run_files(output_dir)
  path = checkpoint_path or tf.train.latest_checkpoint(output_dir)
  if not path:
    raise FileNotFoundError(
        f"No checkpoint in {output_dir}: train with t2t_keras_trainer --output_dir="
        f"{output_dir}, or pass --checkpoint_path.")
  if not tf.io.gfile.exists(path + ".index"):
    raise FileNotFoundError(f"Checkpoint {path} does not exist (no {path}.index).")
  model = Transformer(hparams, spec.input_vocab_size, spec.target_vocab_size,
                      spec.target_space_id, name="transformer")
  model.build()
  tf.train.Checkpoint(model=model).read(path).expect_partial() \
      .assert_existing_objects_matched()
  return model, hparams, problem, spec, path
