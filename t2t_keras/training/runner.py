"""`train(...) -> TrainedRun`: training as a library call; `t2t_keras_trainer` is its CLI.

  import t2t_keras
  run = t2t_keras.train("translate_ende_ding_bible8k", "transformer_tiny", "work/data",
                        "work/train", hparams="learning_rate_warmup_steps=100",
                        train_steps=300, random_seed=1)
  run.translate(["the house is small"])

Arguments are the trainer's flags, under the same names and defaults. Every
setting and input is checked before anything is written to `output_dir`; the
run directory is locked while the chief trains; calling it again on the same
`output_dir` resumes from the newest checkpoint, as running the command again does.
A resume needs only `output_dir`: problem, hparams_set, hparams and data_dir default
to those the run recorded (`rundir.settings.resolve_run_settings`); given ones must agree.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Dict, Optional, Union

import keras
import tensorflow as tf

from data_gen import registry
from t2t_keras import errors
from t2t_keras.hparams import create_decode_hparams
from t2t_keras.perf import precision
from t2t_keras.rundir import lock, settings as settings_lib
from t2t_keras.scoring import bleu
from t2t_keras.lm_run import LanguageModelRun
from t2t_keras.trained_run import TrainedRun
from t2t_keras.training import warm_start
from t2t_keras.training import (TRAINING_SCHEDULES, bleu_hook, early_stopping,
                                inputs as inputs_lib, optimization, schedules,
                                trainer as trainer_lib)


def train(problem: Optional[str] = None, hparams_set: Optional[str] = None,
          data_dir: Optional[str] = None, output_dir: Optional[str] = None, hparams: str = "",
          train_steps: int = 250000, train_seconds: float = 0.0,
          strategy=None,
          worker_gpu: Optional[int] = None, schedule: str = "continuous_train_and_eval",
          eval_steps: int = 100, local_eval_frequency: int = 1000,
          keep_checkpoint_max: int = 20, random_seed: Optional[int] = None,
          log_every_steps: int = 100, start_over: bool = False, jit_compile: bool = False,
          mixed_precision: Optional[str] = None, allow_tf32: Optional[bool] = None,
          decode_hparams: str = "",
          eval_bleu: bool = False, eval_bleu_max_lines: int = 200,
          decode_from_file: Optional[str] = None, decode_reference: Optional[str] = None,
          warm_start_from: Optional[str] = None, warm_start_vocab: Optional[str] = None,
          t2t_usr_dir: Optional[str] = None,
          eval_early_stopping_steps: Optional[int] = None,
          eval_early_stopping_metric: str = "loss",
          eval_early_stopping_metric_delta: float = 0.1,
          eval_early_stopping_metric_minimize: Optional[bool] = None,
          keep_best_checkpoints: int = 0, stop_signals=None,
          after_first_step: Optional[Callable[[], None]] = None,
          log: Callable[[str], None] = lambda line: print(line, flush=True),
          summary: Optional[Dict] = None) -> Union[TrainedRun, LanguageModelRun, None]:
  """Trains (or resumes) the run `output_dir`; returns it opened (`open_run`).

  Args:
    problem, hparams_set, hparams, data_dir, output_dir, train_steps, ...: as the
      trainer's flags (`t2t_keras_trainer --help`). Resuming the run in `output_dir`,
      problem, hparams_set and hparams may be omitted (None / ""): the run's are used,
      and given ones must be the run's; data_dir defaults to the one the run recorded.
    strategy: "one_device", "mirrored", "multi_worker_mirrored", a
      `tf.distribute.Strategy`, or None (mirrored on several GPUs, else one device).
    mixed_precision: "none", "bfloat16" or "float16"; None: hparams.activation_dtype's.
    allow_tf32: TensorFloat-32 in float32 on GPUs that have it; None: TensorFlow's
      default (on); False: exact float32, as T2T (`precision.set_tf32`).
    eval_early_stopping_steps, eval_early_stopping_metric, ..._delta, ..._minimize,
      keep_best_checkpoints: early stopping on a dev metric (T2T's plateau rule) and
      the best checkpoints by it in `output_dir/best/` (`early_stopping.py`);
      `..._minimize` None: as the metric says (larger is better for BLEU, accuracy).
    warm_start_from: a run directory, checkpoint prefix or T2T checkpoint whose weights a
      new run starts from (step 0, fresh optimizer; `warm_start.py`); not applied when
      `output_dir` holds checkpoints. warm_start_vocab: "map" takes another vocabulary
      (shared tokens' rows copied); None or "check": the same one is required.
    stop_signals: a `stopping.StopSignals` whose SIGTERM / Ctrl-C stop training with
      a checkpoint saved; None: none are caught.
    after_first_step: called once, after the first training step (the trainer
      command passes its malloc set-up, `keep_freed_memory`).
    log: receives the progress lines.
    summary: a dict that receives the schedule's summary (`stop_reason`, `step`, the
      last losses), for the trainer command, which exits by the stop reason.
  Returns:
    the `TrainedRun` of `output_dir` (a `LanguageModelRun` for a problem without
    inputs; None for the evaluation-only schedules and on non-chief workers, which
    write no checkpoint of their own).
  Raises:
    errors.ConfigError (a ValueError): a bad setting, missing data, or an
      `output_dir` holding another run; nothing has been written.
    errors.RunError: another trainer holds `output_dir`, a damaged run file.
    errors.DivergenceError: the loss, a gradient or a weight became non-finite.
  """
  if not isinstance(strategy, tf.distribute.Strategy):
    try:  # multi_worker_mirrored must come before any other TensorFlow op
      strategy = trainer_lib.create_strategy(strategy, worker_gpu)
    except ValueError as e:  # more worker_gpu than GPUs
      raise errors.ConfigError(str(e)) from None
  if stop_signals is not None:
    stop_signals.install()  # again: multi_worker_mirrored replaces SIGTERM's handler
  if random_seed is not None:
    keras.utils.set_random_seed(random_seed)
  try:  # Every setting is checked before anything is written to output_dir.
    if not output_dir:
      raise ValueError("--output_dir is required.")
    registry.import_usr_dir(t2t_usr_dir)
    # The run's problem and hparams when resuming; checks the schedule too.
    settings = settings_lib.resolve_run_settings(output_dir, problem, hparams_set, hparams)
    problem, hparams_set, hp = settings.problem, settings.hparams_set, settings.hparams
    data_dir = data_dir or (settings_lib.recorded_data_dir(output_dir) if settings.resuming else None)
    if not data_dir:
      raise ValueError(f"--data_dir is required: {output_dir} records no data_dir that "
                       "still exists." if settings.resuming else "--data_dir is required.")
    # hparams.activation_dtype may select the policy; set before any model is built.
    precision.set_mixed_precision(precision.mode_for(
        hp.activation_dtype, mixed_precision or "none", mixed_precision is not None))
    precision.set_tf32(allow_tf32)
    config = schedules.RunConfig(
        output_dir=output_dir, train_steps=train_steps, eval_steps=eval_steps,
        local_eval_frequency=local_eval_frequency, keep_checkpoint_max=keep_checkpoint_max,
        random_seed=random_seed, log_every_steps=log_every_steps,
        train_seconds=train_seconds, start_over=start_over)
    decode_hp = create_decode_hparams(decode_hparams)
    prob = registry.problem(problem, data_dir)
    try:
      prob.check_data_dir(data_dir)  # ValueError naming datagen if it did not finish
    except ValueError:
      # A damaged vocabulary fails the manifest's check too ("changed"); what is wrong
      # with it is said by reading it (datagen, which the check names, refuses it too).
      if all(os.path.isfile(p) for p in prob.vocab_paths(data_dir).values()):
        prob.feature_encoders(data_dir)
      raise
    encoders = prob.feature_encoders(data_dir)
    vocab = settings_lib.check_vocab(output_dir, data_dir, log, prob, resuming=True)
    has_inputs = getattr(prob, "has_inputs", True)
    _check_language_model(prob.name, has_inputs, hp, bool(eval_bleu or decode_from_file))
    # A *_packed problem's rows: refuses what packing does not implement (prepend_mode).
    inputs_lib.packed_row_length(hp, "train", getattr(prob, "packed_length", None))
    bleu_files = _bleu_files(prob, data_dir, eval_bleu, decode_from_file, decode_reference)
    paper = bleu.paper_language(prob.target_lang) if bleu_files else None
    stopping = early_stopping.check_settings(
        eval_early_stopping_steps, eval_early_stopping_metric, eval_early_stopping_metric_delta,
        eval_early_stopping_metric_minimize, keep_best_checkpoints, problem=prob.name,
        schedule=schedule, output_dir=output_dir, start_over=start_over,
        hook_metrics=("bleu", "bleu_tokenized") if paper else ("bleu",) if bleu_files else (),
        has_dev=bool(tf.io.gfile.glob(prob.filepattern(data_dir, "dev"))))
    spec = settings_lib.ModelSpec(encoders["inputs"].vocab_size,
                                  encoders["targets"].vocab_size, prob.target_space_id, has_inputs)
    # A new run's first weights from another model (T2T's --warm_start_from), read now.
    warm = warm_start.prepare(warm_start_from, warm_start_vocab, output_dir,
                              schedule in TRAINING_SCHEDULES, start_over, hp, spec, prob,
                              data_dir, encoders, log)
  except ValueError as e:
    raise errors.ConfigError(str(e)) from None
  chief = schedules.is_chief(strategy)
  with _run_dir_lock(output_dir, schedule, chief, log):  # before anything is written
    trainer = trainer_lib.Trainer(hp, spec, strategy, train_steps, jit_compile,
                               adam_step_offset=settings_lib.adam_step_offset(output_dir))
    eval_hook = None
    if bleu_files:
      eval_hook = bleu_hook.make_bleu_hook(
          trainer.model, encoders, decode_hp, *bleu_files, max_lines=eval_bleu_max_lines,
          # the paper's tokenized BLEU too, where Moses knows the language
          paper_language=bleu.paper_language(prob.target_lang))
      if bleu.paper_language(prob.target_lang) is None:
        log("eval BLEU: " + bleu.paper_not_computed(prob.target_lang))
    try:
      settings_lib.save_or_check_run_files(output_dir, hp, prob.name, spec, vocab,
                                      data_dir=data_dir, hparams_set=hparams_set,
                                      overrides=settings.overrides)
    except ValueError as e:  # another run's hparams or problem in output_dir
      raise errors.ConfigError(str(e)) from None
    if warm is not None:
      warm_start.apply(warm, trainer.model)
      if chief:
        settings_lib.record_warm_start(output_dir, warm.record())
      log(warm.describe())
    eval_pattern = prob.filepattern(data_dir, "dev")
    if not tf.io.gfile.glob(eval_pattern):
      eval_pattern = None
    warning = optimization.unfinished_warmup(hp, train_steps)
    if warning and schedule in TRAINING_SCHEDULES:
      log(warning)
    log(f"{problem} / {hparams_set or settings_lib.HPARAMS_FILE}: "
        f"{trainer.model.count_params():,} parameters, "
        f"{strategy.num_replicas_in_sync} replica(s), policy "
        f"{keras.mixed_precision.global_policy().name}.")
    run = schedules.Experiment(trainer, config, prob.filepattern(data_dir, "train"),
                                eval_pattern, log=log, eval_hook=eval_hook,
                                stop_signals=stop_signals,
                                after_first_step=after_first_step,
                                packed_length=getattr(prob, "packed_length", None),
                                tracker=stopping and early_stopping.MetricTracker(
                                    stopping, output_dir, chief, log))
    result = run.run(schedule)
  if summary is not None:
    summary.update(result, step=trainer.step)
  if schedule not in TRAINING_SCHEDULES or not chief:
    return None
  if not has_inputs:  # a language model's run: it samples and scores text
    return LanguageModelRun(output_dir, data_dir, prob, trainer.model,
                            tf.train.latest_checkpoint(output_dir), log)
  return TrainedRun(output_dir, data_dir, prob, trainer.model,
                    tf.train.latest_checkpoint(output_dir), log)


def _check_language_model(problem: str, has_inputs: bool, hp, bleu: bool) -> None:
  """Refuses what a problem without inputs (a language model) cannot do.

  Raises:
    ValueError: prepend_mode (T2T prepends a problem's inputs) or BLEU in evaluation.
  """
  if has_inputs:
    return
  if hp.prepend_mode != "none":
    raise ValueError(f"hparams.prepend_mode={hp.prepend_mode!r} prepends a problem's inputs "
                     f"to its targets, and {problem} has no inputs; use prepend_mode=none.")
  if bleu:
    raise ValueError(f"--eval_bleu/--decode_from_file translate inputs, and {problem} (a "
                     "language model) has none; its evaluation reports perplexity.")


def _bleu_files(problem, data_dir: str, eval_bleu: bool, decode_from_file: Optional[str],
                decode_reference: Optional[str]):
  """(source, reference) decoded for BLEU at each evaluation (T2T's decode hook), or None.

  Raises:
    ValueError: a file is missing, or decode_from_file has no decode_reference.
  """
  if not (eval_bleu or decode_from_file):
    return None
  if decode_from_file:
    if not decode_reference:
      raise ValueError("--decode_from_file needs --decode_reference for BLEU in evaluation.")
    return decode_from_file, decode_reference
  files = tuple(problem.text_file(data_dir, "dev", side) for side in ("inputs", "targets"))
  for path in files:
    if not os.path.isfile(path):
      raise ValueError(f"--eval_bleu decodes the dev text of --data_dir={data_dir}, "
                       f"but {path} is missing; give --decode_from_file=FILE and "
                       "--decode_reference=FILE instead.")
  return files


def _run_dir_lock(output_dir: str, schedule: str, chief: bool, log):
  """output_dir's lock (`rundir.lock`) when this process trains as the chief, else a no-op.

  Workers of a multi-worker job write only their tmp_worker_N; evaluation alone
  writes no checkpoint.
  """
  if schedule not in TRAINING_SCHEDULES or not chief:
    return contextlib.nullcontext()
  return lock.RunLock(output_dir, log=log)
