"""The model of a run: built from its hparams and problem, and restored from its checkpoints.

The Keras name of the model, `MODEL_NAME`, is the first part of every variable's
path in a checkpoint, so every model of a run is built here.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import tensorflow as tf

from t2t_keras import checkpoints
from t2t_keras.hparams import HParams
from t2t_keras.lm_model import build_language_model
from t2t_keras.model import Transformer
from t2t_keras.rundir import best
from t2t_keras.rundir.settings import ModelSpec, load_run_files

MODEL_NAME = "transformer"  # the Keras name of the model: the first part of its variable paths


def build_model(hparams: HParams, spec: ModelSpec, dtype: Optional[str] = None,
                name: str = MODEL_NAME):
  """The Transformer of `hparams` for the problem `spec`, with its variables created.

  Call it inside a strategy's scope to place the variables there. `dtype`: a
  Keras dtype policy name; None takes the global policy (`precision.py`).
  Decoding builds its bfloat16 twin this way (`decoding.inference_choices`).
  """
  if not spec.has_inputs:
    return build_language_model(hparams, spec.target_vocab_size, dtype=dtype, name=name)
  model = Transformer(hparams, spec.input_vocab_size, spec.target_vocab_size,
                      spec.target_space_id, name=name, dtype=dtype)
  model.build()
  return model


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
  path, damaged = best.loadable(directory)  # a best/ directory: its best checkpoint
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
      checkpoints (its newest; a run's best/: the best, `best.py`); default: the newest loadable checkpoint of `output_dir` whose
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
  _restore(model, path, output_dir)
  return model, hparams, problem, spec, path


def _restore(model, path: str, output_dir: str) -> None:
  """Reads the model's weights from checkpoint `path`.

  Raises:
    checkpoints.CheckpointError: `path` holds another model (other hparams or
      vocab), naming a variable and both shapes, or one the checkpoint lacks.
  """
  fix = (f"give a checkpoint of the run in {output_dir} (same hparams.json and vocab), "
         "or the --output_dir of the run that wrote it.")
  try:
    # read(), not restore(): averaged checkpoints hold no save_counter; the
    # optimizer's slots are not needed.
    with checkpoints.reading(path):
      tf.train.Checkpoint(model=model).read(path).expect_partial() \
          .assert_existing_objects_matched()
  except checkpoints.CheckpointError:
    raise
  except ValueError as e:
    checkpoints.silence_unrestored_warnings(e)
    # Shapes print with spaces: "(76, 16)".
    match = re.search(r"incompatible tensor with shape (\(.*?\)) when attempting to restore "
                      r"variable with shape (\(.*?\)) and name (\S+?)(?::0)?\.", str(e))
    if match is None:
      if "incompatible" not in str(e):
        raise
      raise checkpoints.CheckpointError(
          f"Checkpoint {path} holds another model ({' '.join(str(e).split())[:300]}); "
          f"{fix}") from None
    raise checkpoints.CheckpointError(
        f"Checkpoint {path} holds another model: variable {match.group(3)} has shape "
        f"{match.group(1)} there but {match.group(2)} in this run's model; {fix}") from None
  except AssertionError as e:
    checkpoints.silence_unrestored_warnings(e)
    count = re.search(r"Found (\d+) Python objects", str(e))
    first = re.search(r"path=(\S+), shape=(\(.*?\))", str(e))
    what = (f"variable {first.group(1)} of shape {first.group(2)}" if first else
            " ".join(str(e).split())[:200])
    more = f" and {int(count.group(1)) - 1} more" if count and first else ""
    raise checkpoints.CheckpointError(
        f"Checkpoint {path} holds another model: it has no value for {what}{more} of "
        f"this run's model; {fix}") from None
