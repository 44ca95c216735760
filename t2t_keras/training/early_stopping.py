"""Early stopping on a dev metric, and the best checkpoints by it, under T2T's flag names.

`--eval_early_stopping_steps=N` (unset: off, as in T2T) stops training when the
metric `--eval_early_stopping_metric` (T2T's default "loss") has plateaued: T2T's
rule (`utils/metrics_hook.has_metric_plateaued`, run by its `EarlyStoppingHook`),
restated in `plateaued`. `--keep_best_checkpoints=K` keeps the K best checkpoints
by the same metric in `<output_dir>/best/` (`rundir/best.py`), with or without
early stopping.

Metrics are the evaluation's (`metrics.finalize`: loss, neg_log_perplexity,
perplexity, accuracy, accuracy_top5, accuracy_per_sequence, approx_bleu) and the
BLEU hook's (bleu, bleu_tokenized). T2T's names are taken too: `approx_bleu_score`
and the full tags `metrics-<problem>/targets/<name>`. Where larger is better and
`minimize` is left unset, the metric is maximized (T2T needed
`--eval_early_stopping_metric_minimize=false`, and minimizing BLEU would stop a
run that is improving); a direction given against the metric's is refused.

Where this differs from T2T: the check runs right after each evaluation of
training (T2T's hook ran every `local_eval_frequency` steps over the evaluation
events written so far, by a separate evaluator under `--schedule=train`); so it
needs a schedule that evaluates while training (train_and_evaluate,
continuous_train_and_eval), and refuses `--schedule=train`. The history the rule
reads (T2T's event files) is `evaluations.json`, kept across resumes; it starts
when these flags are first given.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from data_gen import file_io
from t2t_keras.rundir import best as best_lib
from t2t_keras.rundir.files import RunDir

# The metrics to stop on or rank by, and whether larger is better.
LARGER_IS_BETTER = {"loss": False, "perplexity": False, "neg_log_perplexity": True,
                    "accuracy": True, "accuracy_top5": True, "accuracy_per_sequence": True,
                    "approx_bleu": True, "bleu": True, "bleu_tokenized": True}
HOOK_METRICS = ("bleu", "bleu_tokenized")  # decoded by the BLEU hook, not the metric sums
_ALIASES = {"approx_bleu_score": "approx_bleu"}  # T2T's name of approx_bleu
_T2T_TAG = re.compile(r"^metrics-(?P<problem>[^/]+)/targets/(?P<name>[^/]+)$")
# The schedules that evaluate while they train.
EVALUATING_SCHEDULES = ("train_and_evaluate", "continuous_train_and_eval")


@dataclasses.dataclass(frozen=True)
class Settings:
  """The checked settings (`check_settings`)."""
  steps: Optional[int]  # None: no early stopping
  metric: str  # the evaluation's key
  delta: float
  minimize: bool
  keep_best: int
  by_metric_direction: bool = False  # minimize was unset and taken from the metric


def metric_key(name: str, problem: str) -> str:
  """The evaluation's key of metric `name` (ours, T2T's, or T2T's full tag).

  Raises:
    ValueError: an unknown name, or a tag of another problem.
  """
  tag = _T2T_TAG.match(name)
  if tag:
    if tag.group("problem") != problem:
      raise ValueError(f"--eval_early_stopping_metric={name} names problem "
                       f"{tag.group('problem')}, but the run trains {problem}; give "
                       f"metrics-{problem}/targets/{tag.group('name')} or just "
                       f"{tag.group('name')}.")
    name = tag.group("name")
  name = _ALIASES.get(name, name)
  if name not in LARGER_IS_BETTER:
    raise ValueError(f"--eval_early_stopping_metric={name} is not a metric of the evaluation; "
                     f"give one of {', '.join(LARGER_IS_BETTER)} (or T2T's tag "
                     f"metrics-{problem}/targets/<name>).")
  return name


def check_settings(steps: Optional[int], metric: str, delta: float, minimize: Optional[bool],
                   keep_best: int, *, problem: str, schedule: str, hook_metrics: Sequence[str],
                   has_dev: bool, output_dir: str, start_over: bool = False
                   ) -> Optional[Settings]:
  """Checks the flags before anything is written; None when neither is on.

  Args:
    steps, metric, delta, minimize, keep_best: the flags (`minimize` None: unset).
    problem, schedule: the run's.
    hook_metrics: the metrics the run's BLEU hook reports (none without it).
    has_dev: whether the dev split's records exist.
    output_dir: the run (its best/ must be of the same metric, unless `start_over`
      sets it aside).
  Raises:
    ValueError: one line saying what is wrong and how to fix it.
  """
  if steps is not None and steps < 1:
    raise ValueError(f"--eval_early_stopping_steps={steps}: give a number of steps >= 1, or "
                     "leave it unset for no early stopping.")
  if keep_best < 0:
    raise ValueError(f"--keep_best_checkpoints={keep_best}: give a count >= 0 (0: off).")
  if steps is None and not keep_best:
    return None
  what = "--eval_early_stopping_steps" if steps is not None else "--keep_best_checkpoints"
  if steps is not None and not delta > 0:
    raise ValueError(f"--eval_early_stopping_metric_delta={delta}: T2T's plateau rule never "
                     "stops with a delta <= 0; give a positive change, e.g. 0.1.")
  if schedule not in EVALUATING_SCHEDULES:
    raise ValueError(f"{what} acts on the evaluations made while training, and "
                     f"--schedule={schedule} makes none; use --schedule="
                     f"{' or '.join(EVALUATING_SCHEDULES)}.")
  if not has_dev:
    raise ValueError(f"{what} needs the dev split's records in --data_dir (none found); "
                     "run t2t_keras_datagen for the problem.")
  key = metric_key(metric, problem)
  if key in HOOK_METRICS and key not in hook_metrics:
    how = ("add --eval_bleu (or --decode_from_file with --decode_reference)" if key == "bleu"
           or not hook_metrics else "use bleu: the tokenized BLEU needs a target "
           "language Moses tokenizes")
    raise ValueError(f"--eval_early_stopping_metric={metric} is the BLEU of decoding the dev "
                     f"set at each evaluation, which this run does not compute; {how}.")
  natural = not LARGER_IS_BETTER[key]
  if minimize is not None and minimize != natural:
    raise ValueError(f"--eval_early_stopping_metric_minimize={str(minimize).lower()} with "
                     f"{key}, where {'smaller' if natural else 'larger'} is better, would "
                     f"keep and wait for the worst values; leave it unset (or "
                     f"{str(natural).lower()}).")
  settings = Settings(steps, key, float(delta), natural, keep_best,
                      by_metric_direction=minimize is None and not natural)
  if keep_best and not start_over:
    best_dir = RunDir(output_dir).best_dir
    index = best_lib.read_index(best_dir) if best_lib.is_best_dir(best_dir) else None
    if index and (index["metric"], index["minimize"]) != (key, natural):
      raise ValueError(f"{best_dir} keeps the best checkpoints by {index['metric']}; resume "
                       f"with --eval_early_stopping_metric={index['metric']}, or move "
                       f"{best_dir} aside to keep the best by {key}.")
  return settings


def plateaued(history: Sequence[Tuple[int, float]], num_steps: int, delta: float,
              minimize: bool) -> bool:
  """T2T's plateau rule over (step, value) evaluations, oldest first.

  The anchor is the newest evaluation at least `num_steps` before the newest one;
  the metric has plateaued when no evaluation from the anchor on has improved on
  the anchor's value by `delta` or more (a worse value counts as no improvement).
  With fewer than two evaluations, or none old enough, it has not.
  """
  if len(history) < 2:
    return False
  newest = history[-1][0]
  old_enough = [i for i, (step, _) in enumerate(history) if step <= newest - num_steps]
  if not old_enough:
    return False
  anchor = history[old_enough[-1]][1]
  gains = [(anchor - v) if minimize else (v - anchor) for _, v in history[old_enough[-1]:]]
  return all(gain < delta for gain in gains)


class MetricTracker:
  """Follows the metric over a run's evaluations: keeps best/ and decides the stop.

  Args:
    settings: from `check_settings`.
    output_dir: the run directory.
    chief: whether this process writes (best/, evaluations.json); every worker
      reads the history and takes the same decision.
    log: receives one-line messages.
  """

  def __init__(self, settings: Settings, output_dir: str, chief: bool = True,
               log: Callable[[str], None] = print):
    self.settings = settings
    self.paths = RunDir(output_dir)
    self.chief = chief
    self.log = log
    self.history: List[Dict] = []  # {"step": int, "metrics": {name: value}}, by step
    self.best = (best_lib.BestCheckpoints(self.paths.best_dir, settings.keep_best,
                                          settings.metric, settings.minimize, log)
                 if settings.keep_best else None)

  def start(self, step: int, start_over: bool = False) -> None:
    """Reads the history and best/ back before training from `step` (--start_over:
    moves both to `replaced-<UTC time>/`, as the checkpoints)."""
    s = self.settings
    if s.by_metric_direction:
      self.log(f"--eval_early_stopping_metric={s.metric}: larger is better, so it is "
               "maximized (T2T needed --eval_early_stopping_metric_minimize=false).")
    if start_over:
      if self.chief:
        self._set_aside()
      self.history = []
      return
    self.history = [e for e in self._read_history() if e["step"] <= step]
    if self.best is not None and self.chief:
      self.best.load()

  def update(self, step: int, results: Dict[str, float], prefix: str) -> bool:
    """Records the evaluation of checkpoint `prefix` at `step`; returns whether to stop."""
    s = self.settings
    value = results.get(s.metric)
    if value is None:
      self.log(f"WARNING: the evaluation at step {step} has no {s.metric}; nothing to rank "
               "or stop on.")
      return False
    entry = {"step": step, "metrics": {k: float(v) for k, v in results.items()}}
    self.history = [e for e in self.history if e["step"] != step] + [entry]
    self.history.sort(key=lambda e: e["step"])
    if self.chief:
      file_io.write_text(self.paths.evaluations_file,
                         json.dumps({"evaluations": self.history}, indent=1) + "\n")
      if self.best is not None:
        self.best.offer(step, float(value), prefix)
    if s.steps is None:
      return False
    return plateaued(self._series(), s.steps, s.delta, s.minimize)

  def _series(self) -> List[Tuple[int, float]]:
    return [(e["step"], e["metrics"][self.settings.metric]) for e in self.history
            if self.settings.metric in e["metrics"]]

  def best_so_far(self) -> Optional[Tuple[int, float]]:
    """(step, value) of the best evaluation recorded (of equal ones the earliest)."""
    series = [(step, v) for step, v in self._series() if math.isfinite(v)]
    if not series:
      return None
    sign = 1.0 if self.settings.minimize else -1.0
    return min(series, key=lambda sv: (sign * sv[1], sv[0]))

  def summary(self) -> Dict:
    """{"metric", "best_value", "best_step"} for the trainer's summary."""
    best = self.best_so_far()
    return {"metric": self.settings.metric, "best_value": best[1] if best else None,
            "best_step": best[0] if best else None}

  def stop_description(self) -> str:
    """Why training stopped early, in words (the trainer's last line)."""
    s, best = self.settings, self.best_so_far()
    where = f"; best {best[1]:.4f} at step {best[0]}" if best else ""
    kept = f" (kept in {self.paths.best_dir})" if self.best is not None and best else ""
    return (f"early stopping: {s.metric} improved by less than {s.delta:g} over the last "
            f"{s.steps} steps{where}{kept}")

  def _read_history(self) -> List[Dict]:
    path = self.paths.evaluations_file
    if not tf.io.gfile.exists(path):
      return []
    try:
      with tf.io.gfile.GFile(path) as f:
        found = json.load(f)["evaluations"]
      return sorted(({"step": int(e["step"]), "metrics": dict(e["metrics"])} for e in found),
                    key=lambda e: e["step"])
    except (ValueError, KeyError, TypeError) as e:
      self.log(f"WARNING: {path} is damaged ({e}); the history of evaluations starts anew.")
      return []

  def _set_aside(self) -> None:
    target = os.path.join(self.paths.path,
                          time.strftime("replaced-%Y%m%d-%H%M%S", time.gmtime()))
    moved = []
    if tf.io.gfile.exists(self.paths.evaluations_file):
      tf.io.gfile.makedirs(target)
      tf.io.gfile.rename(self.paths.evaluations_file,
                         os.path.join(target, os.path.basename(self.paths.evaluations_file)),
                         overwrite=True)
      moved.append("evaluations.json")
    if self.best is not None and tf.io.gfile.isdir(self.paths.best_dir):
      self.best.set_aside(target)
      moved.append("best/")
    if moved:
      self.log(f"--start_over: moved {' and '.join(moved)} to {target}.")
