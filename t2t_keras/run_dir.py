"""The run directory: what training writes there, and the model rebuilt from it.

`--output_dir` of a training run holds

  hparams.json        `HParams.to_json()`: every model and training hparam (T2T names)
  run.json            the run's identity, written when training starts and
                      checked on resume: `problem` and the `ModelSpec` fields
                      (`input_vocab_size`, `target_vocab_size`, `target_space_id`);
                      and the last training's status, written when it stops:
                      `start_step`, `stop_reason` (one of STOP_REASONS), `stop_step`
  checkpoint, ckpt-<step>.*   `tf.train.CheckpointManager` (experiment.py;
                      damaged ones are set aside by checkpoints.py)
  events.*, eval/     TensorBoard logs

Trainer, decoder, exporter, averager, visualizer and the T2T importer read and
write these files only through this module, and build the model only with
`build_model`, whose layer name `transformer` is part of every checkpoint key.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Optional, Tuple

import tensorflow as tf

from data_gen import file_io
from t2t_keras import checkpoints
from t2t_keras.hparams import HParams

HPARAMS_FILE = "hparams.json"
RUN_FILE = "run.json"
# run.json: the problem's registered name, beside the ModelSpec fields.
PROBLEM_KEY = "problem"
# run.json entries that change from one training invocation to the next.
STATUS_KEYS = ("start_step", "stop_reason", "stop_step")
STOP_REASONS = ("train_steps", "train_seconds", "signal", "diverged")
MODEL_NAME = "transformer"  # the Keras name of the model: the first part of its variable paths


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """What the model needs to know of the problem."""
  input_vocab_size: int
  target_vocab_size: int
  target_space_id: int = 0


def build_model(hparams: HParams, spec: ModelSpec):
  """The Transformer of `hparams` for the problem `spec`, with its variables created.

  Call it inside a strategy's scope to place the variables there.
  """
  from t2t_keras.model import Transformer  # Keras only when a model is built (the demo reads run.json)
  model = Transformer(hparams, spec.input_vocab_size, spec.target_vocab_size,
                      spec.target_space_id, name=MODEL_NAME)
  model.build()
  return model


def _path(output_dir: str, name: str) -> str:
  return os.path.join(output_dir, name)


def _read_json(path: str) -> dict:
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def _write_json(path: str, value: dict) -> None:
  file_io.write_text(path, json.dumps(value, indent=2, sort_keys=True))


def save_or_check_run_files(output_dir: str, hparams: HParams, problem_name: str,
                            spec: ModelSpec) -> None:
  """Writes hparams.json and run.json, or checks them against an existing run.

  The status entries of an existing run.json (STATUS_KEYS) are kept.

  Raises:
    ValueError: when `output_dir` is a file, or holds a run with other hparams
      or problem, naming the differing fields: resuming it silently with new
      values would corrupt it.
  """
  if tf.io.gfile.exists(output_dir) and not tf.io.gfile.isdir(output_dir):
    raise ValueError(f"output_dir {output_dir} is a file, not a directory.")
  run = {PROBLEM_KEY: problem_name, **dataclasses.asdict(spec)}
  hparams_path, run_path = _path(output_dir, HPARAMS_FILE), _path(output_dir, RUN_FILE)
  if tf.io.gfile.exists(hparams_path):
    old = _read_json(hparams_path)
    new = hparams.to_dict()
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
      details = ", ".join(f"{k}: {old.get(k)!r} in the run, {new.get(k)!r} now" for k in diff)
      raise ValueError(
          f"{output_dir} holds a run with different hparams ({details}). Use another "
          "--output_dir, or the same --hparams_set/--hparams to resume it.")
  status = {}
  if tf.io.gfile.exists(run_path):
    old_run = _read_json(run_path)
    status = {k: old_run.pop(k) for k in STATUS_KEYS if k in old_run}
    if old_run != run:
      raise ValueError(f"{output_dir} holds a run of {old_run}, not {run}. Use another "
                       "--output_dir.")
  tf.io.gfile.makedirs(output_dir)
  file_io.write_text(hparams_path, hparams.to_json())
  _write_json(run_path, {**run, **status})


def record_stop(output_dir: str, reason: str, start_step: int, step: int) -> None:
  """Records in run.json from which step the last training ran, to which and why it stopped.

  Raises:
    ValueError: `reason` is not one of STOP_REASONS.
  """
  if reason not in STOP_REASONS:
    raise ValueError(f"reason must be one of {STOP_REASONS}, got {reason!r}.")
  run_path = _path(output_dir, RUN_FILE)
  run = _read_json(run_path) if tf.io.gfile.exists(run_path) else {}
  run.update(start_step=start_step, stop_reason=reason, stop_step=step)
  _write_json(run_path, run)


def last_stop(output_dir: str) -> Tuple[Optional[int], Optional[str]]:
  """(stop_step, stop_reason) of the last training in `output_dir`; None for what is absent."""
  run_path = _path(output_dir, RUN_FILE)
  run = _read_json(run_path) if tf.io.gfile.exists(run_path) else {}
  return run.get("stop_step"), run.get("stop_reason")


def load_run_files(output_dir: str) -> Tuple[HParams, str, ModelSpec]:
  """(HParams, problem name, ModelSpec) saved by a training run in `output_dir`.

  Raises:
    FileNotFoundError: no hparams.json there, naming the trainer command to run.
  """
  hparams_path = _path(output_dir, HPARAMS_FILE)
  if not tf.io.gfile.exists(hparams_path):
    raise FileNotFoundError(
        f"No {HPARAMS_FILE} in {output_dir}: train a model there first with "
        f"t2t_keras_trainer --output_dir={output_dir} ...")
  with tf.io.gfile.GFile(hparams_path) as f:
    hparams = HParams.from_json(f.read())
  run = _read_json(_path(output_dir, RUN_FILE))
  problem = run.pop(PROBLEM_KEY)
  fields = {f.name for f in dataclasses.fields(ModelSpec)}
  return hparams, problem, ModelSpec(**{k: v for k, v in run.items() if k in fields})


def _checkpoint_to_load(output_dir: str, checkpoint_path: Optional[str],
                        log: Optional[Callable[[str], None]]) -> str:
  """The checkpoint prefix `load_trained_model` reads (see its Args)."""
  path = checkpoint_path
  if path and tf.io.gfile.isdir(path):
    directory, path = path, None
  else:
    directory = output_dir
  if path:
    try:
      checkpoints.verify_checkpoint(path)
      checkpoints.check_finite_weights(path)
    except checkpoints.CheckpointError as e:
      raise type(e)(f"Checkpoint {path} is not usable: {e}.") from None
    return path
  path, damaged = checkpoints.newest_loadable(directory)
  if path is None:
    detail = f" ({checkpoints.describe(damaged)})" if damaged else ""
    raise checkpoints.CheckpointError(
        f"No loadable checkpoint in {directory}{detail}: train with t2t_keras_trainer "
        f"--output_dir={output_dir}, or pass --checkpoint_path.")
  if damaged and log is not None:
    log(f"WARNING: skipped damaged, partial or non-finite checkpoint(s): "
        f"{checkpoints.describe(damaged)}; using {path}.")
  return path


def load_trained_model(output_dir: str, checkpoint_path: Optional[str] = None,
                       log: Optional[Callable[[str], None]] = None):
  """Rebuilds the model of a run from hparams.json/run.json and restores weights.

  Args:
    output_dir: the training run directory.
    checkpoint_path: a checkpoint prefix (e.g. an averaged one) or a directory of
      checkpoints; default: the newest loadable checkpoint of `output_dir` whose
      weights are finite.
    log: receives a warning when newer checkpoints were skipped as damaged or
      non-finite.
  Returns:
    (model, hparams, problem_name, spec, checkpoint_path).
  Raises:
    FileNotFoundError: no hparams.json in `output_dir`.
    checkpoints.CheckpointError: no checkpoint, or an explicit one that is
      damaged or partial (naming the file) or holds NaN or inf (naming the variable).
  """
  hparams, problem, spec = load_run_files(output_dir)
  path = _checkpoint_to_load(output_dir, checkpoint_path, log)
  model = build_model(hparams, spec)
  # read(), not restore(): averaged checkpoints hold no save_counter; the
  # optimizer's slots are not needed.
  tf.train.Checkpoint(model=model).read(path).expect_partial() \
      .assert_existing_objects_matched()
  return model, hparams, problem, spec, path
