"""A training run: T2T's schedules over a Trainer, with checkpoints and summaries.

`output_dir` holds what a run needs to resume and what decoder and exporter read:
`rundir.files.RunDir` lists its files. Training writes the checkpoints
`ckpt-<step>` through `tf.train.CheckpointManager` and TensorBoard logs (train
in `output_dir`, evaluation in `output_dir/eval`).

TF writes each checkpoint completely before it updates the `checkpoint` state
file, so a kill at any moment leaves a loadable one. Files damaged or lost
afterwards are handled on start (see `checkpoints.py`): the newest checkpoint
that verifies is restored; damaged newer ones are named and moved to
`output_dir/damaged/`; a lost state file is rebuilt from the checkpoints present;
and a run never falls back to step 0 while checkpoints exist unless asked to
(`start_over`, which moves them to `output_dir/replaced-<time>/`). No checkpoint
file that this run did not write is overwritten. The `ckpt-<step>_temp/` left by
a killed save is removed on start; a save that fails (a full disk) removes what
it wrote and raises `errors.StorageError`. Experiment takes no lock: the trainer
CLI holds `rundir.lock.RunLock` on `output_dir` around it.

Training stops with `errors.DivergenceError` (exit status 3) at the first step
whose loss or gradient norm is not finite (under float16 loss scaling, whose
loss is not: a non-finite gradient only skips that step) or, checked before
each checkpoint, whose model weights are not; nothing is saved then, so every
checkpoint a run writes is finite (a resume skips non-finite ones written
before, like damaged ones). Otherwise training stops at `train_steps`, after
`train_seconds` of training wall time
(a resumed run gets a fresh budget), when the dev metric has plateaued
(`early_stopping.py`, which also keeps best/) or on a stop request (SIGTERM, Ctrl-C);
each stop saves a checkpoint (a signal with no step unsaved exits at once,
see `stopping.py`), and `run.json` records `start_step`,
`stop_reason` and `stop_step`. Under MultiWorkerMirroredStrategy the stop decision is all-reduced
every step, so all workers stop after the same step, and each worker's input
pipeline reads its own part of the records (`worker_dataset`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Dict, Optional

import tensorflow as tf

from t2t_keras import checkpoints, errors, perf
from t2t_keras.rundir import settings
from t2t_keras.rundir.files import RunDir
from t2t_keras.training import SCHEDULES, inputs as inputs_lib, trainer as trainer_lib
from t2t_keras.training.trainer import Trainer


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Options of a run (T2T's trainer flags, plus `train_seconds` and `start_over`).

  Raises:
    ValueError: naming the option, for a value out of range.
  """
  output_dir: str
  train_steps: int = 250000
  eval_steps: int = 100  # 0: the whole dev set
  local_eval_frequency: int = 1000
  keep_checkpoint_max: int = 20  # 0: keep all
  random_seed: Optional[int] = None
  log_every_steps: int = 100
  log_every_secs: float = 30.0
  eval_timeout_secs: float = 0.0  # continuous_eval: stop when no new checkpoint for this long
  train_seconds: float = 0.0  # > 0: also stop after this much training wall time
  start_over: bool = False  # set existing checkpoints aside and train from step 0

  def __post_init__(self):
    minimum = {"train_steps": 0, "eval_steps": 0, "local_eval_frequency": 1,
               "keep_checkpoint_max": 0, "log_every_steps": 1, "log_every_secs": 0,
               "eval_timeout_secs": 0, "train_seconds": 0}
    for name, low in minimum.items():
      value = getattr(self, name)
      if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}.")
    if not self.output_dir:
      raise ValueError("output_dir is required.")


class Experiment:
  """Runs a T2T schedule.

  Args:
    trainer: the Trainer (model, optimizer, strategy).
    config: RunConfig.
    train_pattern / eval_pattern: TFRecord globs of the train and dev splits.
    log: a function taking one line of progress text.
    eval_hook: optional callable(step) -> dict of extra eval scalars (e.g. BLEU).
    stop_signals: optional object whose `requested` attribute becomes true to
      stop training after the current step; its `unsaved` attribute is set
      while steps have run since the last checkpoint (see stopping.StopSignals).
    clock: seconds, monotonic; measures `train_seconds` (tests pass a fake one).
    after_first_step: optional callable() run once, after the first training
      step, when the input pipeline's kernels exist. The trainer command passes
      the process set-up's `keep_freed_memory` (it must follow tf.data's own
      malloc setting, made by the first of those kernels); the library holds no
      process set-up of its own.
    packed_length: the problem's `packed_length` (its `*_packed` twin): batches of
      rows packing several examples each (`inputs.make_dataset`); None: as
      `hparams.pack_dataset` says.
    tracker: optional `early_stopping.MetricTracker`: after each evaluation of
      training it keeps best/ and may stop the run ("early_stopping").
  """

  _last_finite: Optional[str] = None  # the newest checkpoint restored or saved (all finite)

  def __init__(self, trainer: Trainer, config: RunConfig, train_pattern: Optional[str],
               eval_pattern: Optional[str], log: Callable[[str], None] = print,
               eval_hook: Optional[Callable[[int], Dict[str, float]]] = None,
               stop_signals=None, clock: Callable[[], float] = time.monotonic,
               after_first_step: Optional[Callable[[], None]] = None,
               packed_length: Optional[int] = None, tracker=None):
    self.trainer = trainer
    self.tracker = tracker
    self.packed_length = packed_length
    self.config = config
    self.train_pattern = train_pattern
    self.eval_pattern = eval_pattern
    self.log = log
    self.eval_hook = eval_hook
    self.stop_signals = stop_signals
    self.clock = clock
    self._after_first_step = after_first_step
    strategy = trainer.strategy
    self.is_chief = is_chief(strategy)
    self.checkpoint = tf.train.Checkpoint(model=trainer.model, optimizer=trainer.optimizer)
    self.paths = RunDir(config.output_dir)
    self.ckpt_dir = self.paths.checkpoint_dir if self.is_chief else self.paths.worker_dir(
        strategy.cluster_resolver.task_id)
    self._manager = None  # created after restore() has repaired the state file
    self._written = set()  # checkpoint prefixes this run saved
    self._writers = {}  # created when first written: a refused resume writes no events file
    # Training drops examples longer than max_length, as T2T did; count them.
    self.dropped = tf.Variable(0, dtype=tf.int64, trainable=False, name="dropped_examples")

  @property
  def train_writer(self):
    return self._writer(self.config.output_dir if self.is_chief else
                        os.path.join(self.ckpt_dir, "logs"))

  @property
  def eval_writer(self):
    return self._writer(self.paths.eval_dir)

  def _writer(self, log_dir: str):
    if log_dir not in self._writers:
      self._writers[log_dir] = tf.summary.create_file_writer(log_dir)
    return self._writers[log_dir]

  # -- State -------------------------------------------------------------------

  @property
  def manager(self) -> tf.train.CheckpointManager:
    if self._manager is None:
      self._manager = tf.train.CheckpointManager(
          self.checkpoint, self.ckpt_dir, max_to_keep=self.config.keep_checkpoint_max or None)
    return self._manager

  def restore(self, repair: bool = False) -> int:
    """Restores the newest checkpoint that verifies, if any; returns its step.

    Args:
      repair: (training) move damaged checkpoints to `output_dir/damaged/`,
        rebuild a lost `checkpoint` state file, apply `start_over`. Only the
        chief writes; evaluation never does.
    Raises:
      checkpoints.CheckpointError: when checkpoints exist but none loads (and
        not `start_over`), naming each damaged file.
    """
    directory = self.config.output_dir
    if repair and self.is_chief:
      self._remove_temp_dirs()
    if repair and self.config.start_over:
      if self.is_chief:
        checkpoints.set_aside_all(directory, self.log)
      return self.trainer.step
    latest, damaged = checkpoints.newest_loadable(directory)
    if damaged and latest is None:
      raise checkpoints.CheckpointError(
          f"{directory} holds checkpoints but none is loadable: "
          f"{checkpoints.describe(damaged)}. Restore the files, or pass --start_over to "
          f"train from step 0 (existing checkpoints are then moved to {directory}/replaced-"
          "<time>/), or use another --output_dir.")
    if damaged:
      self.log(f"WARNING: damaged, partial or non-finite checkpoint(s): "
               f"{checkpoints.describe(damaged)}. Falling back to {latest}, the newest "
               "loadable one.")
    if repair and self.is_chief and latest:
      checkpoints.repair(directory, latest, damaged, self.log)
    if latest:
      try:
        with checkpoints.reading(latest):  # a CRC mismatch in a checkpoint too big to verify
          self.checkpoint.restore(latest).assert_existing_objects_matched()
      except checkpoints.CheckpointError as e:
        raise checkpoints.CheckpointError(
            f"{e}. Restore the file, or move the files of {latest} aside to resume from an "
            "older checkpoint, or pass --start_over to train from step 0.") from None
      self.log(f"Restored {latest} at step {self.trainer.step}.")
    self._last_finite = latest
    return self.trainer.step

  def save(self) -> None:
    """Saves a checkpoint of the current step.

    Raises:
      errors.StorageError: the disk filled up (or a file size limit was hit)
        during the save; the files it wrote are removed and the `checkpoint`
        state file still names the previous checkpoint.
    """
    step = self.trainer.step
    prefix = os.path.join(self.ckpt_dir, f"ckpt-{step}")
    if self.is_chief:
      if prefix not in self._written and checkpoints.checkpoint_files(prefix):
        target = self.paths.superseded_dir
        checkpoints.move_aside(prefix, target)
        self.log(f"WARNING: {prefix} exists but was not written by this run; moved its "
                 f"files to {target} before saving step {step}.")
    try:
      with checkpoints.undo_failed_save(prefix):
        path = self.manager.save(checkpoint_number=step)
    except Exception as e:  # pylint: disable=broad-except
      self._manager = None  # its list may name the checkpoint just removed
      storage = errors.storage_failure(e)
      if storage is None:
        raise
      raise errors.StorageError(self._no_space_message(prefix, storage[0])) from None
    self._written.add(path)
    if self.is_chief:
      self.log(f"Saved {path}.")
    else:  # Workers must take part in saving, but keep nothing.
      tf.io.gfile.rmtree(os.path.dirname(path))

  def _no_space_message(self, prefix: str, reason: str) -> str:
    state = checkpoints.read_state(self.ckpt_dir)
    resume = (f"training resumes from {state.model_checkpoint_path}, the last good "
              "checkpoint" if state else "no checkpoint was saved yet: training starts at step 0")
    return (f"saving {prefix} failed: {reason}; its partial files were removed. Free some "
            f"space in {self.ckpt_dir} and run the same command again: {resume}.")

  def _remove_temp_dirs(self) -> None:
    removed = checkpoints.remove_temp_dirs(self.ckpt_dir)
    if removed:
      self.log(f"Removed {', '.join(removed)} from {self.ckpt_dir}: the temporary "
               "directory of a save that was killed (its checkpoint was never complete).")

  # -- Data --------------------------------------------------------------------

  _checked = frozenset()  # (pattern, mode) of the splits checked by _check_data

  def _check_data(self, pattern: Optional[str], mode: str) -> None:
    """Refuses a split of which `mode` keeps no example, before its pipeline waits for ever.

    Cheap: reading stops at the first kept example (see inputs.check_examples_kept).
    Raises:
      errors.RunError: naming max_length and the number of examples dropped.
    """
    if pattern and (pattern, mode) not in self._checked:
      inputs_lib.check_examples_kept(pattern, self.trainer.hparams, mode)
      self._checked = self._checked | {(pattern, mode)}

  def _distributed(self, pattern: str, mode: str):
    hp = self.trainer.hparams
    seed = self.config.random_seed

    pad_to_bucket = perf.step_compiles_per_shape(self.trainer.jit_compile)

    def dataset_fn(ctx: tf.distribute.InputContext):
      return worker_dataset(pattern, hp, mode, ctx, seed,
                            drop_counter=self.dropped if mode == "train" else None,
                            pad_to_bucket=pad_to_bucket, packed_length=self.packed_length)

    return self.trainer.strategy.distribute_datasets_from_function(dataset_fn)

  # -- Schedules ---------------------------------------------------------------

  def train(self, eval_every: bool = False) -> Dict[str, float]:
    """Trains until `train_steps`, `train_seconds` or a stop request, checkpointing as T2T.

    Returns:
      A summary: steps, tokens, wall_time_s, final_loss, flops and stop_reason
      (one of `rundir.settings.STOP_REASONS`; empty when there was nothing to train).
    """
    cfg = self.config
    self._check_data(self.train_pattern, "train")
    if eval_every:
      self._check_data(self.eval_pattern, "eval")
    step = self.restore(repair=True)
    if self.tracker is not None:
      self.tracker.start(step, cfg.start_over)
    if step >= cfg.train_steps:
      self.log(f"Step {step} >= --train_steps={cfg.train_steps}: nothing to train.")
      return {}
    iterator = iter(self._distributed(self.train_pattern, "train"))
    start_step, start_time, budget_start = step, time.time(), self.clock()
    self._budget_start = budget_start
    self._log_state = (start_time, step, 0.0)  # time, step and tokens of the last log line
    tokens, last, reason = 0.0, {}, ""
    while not reason:
      last = self.trainer.train_step(iterator)
      if self._after_first_step is not None:
        self._after_first_step()
        self._after_first_step = None  # once per process run
      self._mark_unsaved(True)
      step = last.step
      if not last.finite:  # named at the step it attempted (a skipped update stays below)
        self._stop_if_diverged(start_step, last.attempted_step, last.non_finite)
      tokens += last["tokens"]
      reason = self._stop_reason(step, budget_start)
      self._log_progress(step, last, force=bool(reason))
      if reason or step % cfg.local_eval_frequency == 0:
        self._stop_if_diverged(start_step, step, _describe_weights(
            self.trainer.non_finite_weights()))
        self.save()
        self._mark_unsaved(False)
        self._last_finite = self.paths.checkpoint(step)
        if eval_every and reason != "signal":  # a signalled job may have seconds left
          results = self.evaluate()
          if self.tracker is not None:  # every worker takes the same decision
            stop = self.tracker.update(step, results, self.paths.checkpoint(step))
            reason = reason or ("early_stopping" if self.trainer.any_worker(stop)[0] else "")
    if self.is_chief:
      settings.record_stop(cfg.output_dir, reason, start_step, step)
    wall = time.time() - start_time
    summary = {"steps": step - start_step, "tokens": tokens, "wall_time_s": wall,
               "final_loss": last.get("loss", float("nan")), "stop_reason": reason}
    flops = summary["flops"] = self.trainer.flops_seen
    if self.tracker is not None:
      summary["best"] = self.tracker.summary()
    why = {"train_steps": f"--train_steps={cfg.train_steps} reached",
           "train_seconds": f"--train_seconds={cfg.train_seconds:g} used up",
           "signal": f"stop requested by {getattr(self.stop_signals, 'name', '') or 'a signal'}",
           "early_stopping": self.tracker and self.tracker.stop_description()}
    self.log(f"Stopped at step {step} ({why[reason]}). Trained {summary['steps']} steps, "
             f"{tokens:,.0f} tokens (source + target, non-pad) in {_hms(wall)}; final loss "
             f"{summary['final_loss']:.4f}; estimated training FLOPs {flops:.3e} (matmuls of "
             f"the padded batches, forward + backward); {int(self.dropped.numpy())} training "
             f"examples longer than max_length={self.trainer.hparams.max_length} dropped.")
    return summary

  def _mark_unsaved(self, unsaved: bool) -> None:
    # With nothing unsaved, a stop signal need not wait for the step in flight.
    if self.stop_signals is not None:
      self.stop_signals.unsaved = unsaved

  def _stop_if_diverged(self, start_step: int, step: int, what: str) -> None:
    """Records and raises a divergence at `step` when `what` (non-finite) is not ""."""
    if not what:
      return
    if self.is_chief:
      settings.record_stop(self.config.output_dir, "diverged", start_step, step)
    raise trainer_lib.divergence_error(step, what, self._last_finite)

  def _stop_reason(self, step: int, budget_start: float) -> str:
    """Why training stops after `step` ("" to go on), the same on every worker."""
    cfg = self.config
    if step >= cfg.train_steps:
      return "train_steps"
    signalled = bool(self.stop_signals is not None and self.stop_signals.requested)
    timed_out = bool(cfg.train_seconds and self.clock() - budget_start >= cfg.train_seconds)
    signalled, timed_out = self.trainer.any_worker(signalled, timed_out)
    return "signal" if signalled else "train_seconds" if timed_out else ""

  def _log_progress(self, step: int, last: Dict[str, float], force: bool) -> None:
    cfg = self.config
    last_time, last_step, window_tokens = self._log_state
    window_tokens += last["tokens"]
    now = time.time()
    if not (force or step - last_step >= cfg.log_every_steps or
            now - last_time >= cfg.log_every_secs):
      self._log_state = (last_time, last_step, window_tokens)
      return
    rate = window_tokens / max(now - last_time, 1e-9)
    steps_per_sec = (step - last_step) / max(now - last_time, 1e-9)
    eta = (cfg.train_steps - step) / max(steps_per_sec, 1e-9)
    if cfg.train_seconds:  # whichever limit comes first
      eta = min(eta, max(0.0, cfg.train_seconds - (self.clock() - self._budget_start)))
    lr = self.trainer.learning_rate()
    self.log(f"step {step}/{cfg.train_steps} loss {last['loss']:.4f} lr {lr:.3g} "
             f"tokens/s {rate:,.0f} grad_norm {last['grad_norm']:.3f} ETA {_hms(eta)}")
    with self.train_writer.as_default(step=step):
      tf.summary.scalar("loss", last["loss"])
      tf.summary.scalar("learning_rate", lr)
      tf.summary.scalar("tokens_per_sec", rate)
      tf.summary.scalar("grad_norm", last["grad_norm"])
    self._log_state = (now, step, 0.0)

  def evaluate(self) -> Dict[str, float]:
    """Evaluates the current model on `eval_steps` dev batches; logs to eval/."""
    if not self.eval_pattern:
      return {}
    self._check_data(self.eval_pattern, "eval")
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
      try:
        checkpoints.verify_checkpoint(path)
        checkpoints.check_finite_weights(path)
      except checkpoints.CheckpointError as e:
        self.log(f"WARNING: skipping checkpoint {path}: {e}.")
        continue
      self.checkpoint.restore(path).expect_partial()
      self.evaluate()
      if self.trainer.step >= self.config.train_steps:
        return

  def run(self, schedule: str) -> Dict[str, float]:
    """Runs `schedule`; returns the training summary (or {} when not training)."""
    if schedule not in SCHEDULES:
      raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}.")
    if schedule == "train":
      return self.train()
    if schedule == "evaluate":
      self.restore()
      self.evaluate()
    elif schedule == "continuous_eval":
      self.continuous_eval()
    else:  # train_and_evaluate, continuous_train_and_eval: evaluate at every checkpoint.
      return self.train(eval_every=True)
    return {}


def worker_dataset(pattern: str, hparams, mode: str, ctx: tf.distribute.InputContext,
                   seed: Optional[int], drop_counter: Optional[tf.Variable] = None,
                   repeat: Optional[bool] = None, pad_to_bucket: bool = False,
                   packed_length: Optional[int] = None) -> tf.data.Dataset:
  """The batches of input pipeline `ctx.input_pipeline_id` (one per worker).

  Each pipeline reads its own part of the records, split before any shuffle
  (`inputs.shard_files`), then shuffles, batches and (in training) repeats it, so
  that with or without a seed the workers' epochs are disjoint and together hold
  every example once; evaluation thus sees each example once over all workers.
  `repeat` overrides make_dataset's default (tests read one epoch);
  `pad_to_bucket` is make_dataset's (for steps that compile per shape), and so is
  `packed_length` (a problem's rows of packed examples).
  """
  return inputs_lib.make_dataset(pattern, hparams, mode, seed=seed,
                                 deterministic=seed is not None, repeat=repeat,
                                 drop_counter=drop_counter,
                                 num_shards=ctx.num_input_pipelines,
                                 shard_index=ctx.input_pipeline_id,
                                 pad_to_bucket=pad_to_bucket, packed_length=packed_length)


def is_chief(strategy) -> bool:
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.task_type:
    return True
  return resolver.task_type == "chief" or (resolver.task_type == "worker" and
                                           resolver.task_id == 0 and
                                           "chief" not in resolver.cluster_spec().as_dict())


def _describe_weights(bad) -> str:
  """The non-finite weights of Trainer.non_finite_weights in words ("" for none)."""
  if not bad:
    return ""
  (name, kind), more = bad[0], len(bad) - 1
  others = f" (and {more} other variable{'s' if more > 1 else ''})" if more else ""
  return f"the weight {name} became {kind}{others} while the loss was finite"


def _hms(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"
