"""Checkpoint averaging (T2T `utils/avg_checkpoints.py`).

Loads each checkpoint into one model, averages every model weight, and writes a
checkpoint of the model alone with step 0 (T2T also reset global_step), which
the decoder and exporter restore like any training checkpoint.

Before anything is loaded every checkpoint is checked: complete, with finite
weights, and with the model's variables in the model's shapes (else one error
naming the variable and both shapes). Checkpoints of different runs (other
directories) are averaged with a warning: their average is not a better model.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from data_gen import file_io
from t2t_keras import checkpoints as checkpoints_lib, errors
from t2t_keras.model import Transformer
from t2t_keras.rundir import settings

# A temporary untouched this long has no live writer, even one on another host.
STALE_SECONDS = 24 * 3600


def last_checkpoints(prefix_dir: str, num_last: int) -> List[str]:
  """The `num_last` newest checkpoints listed in `prefix_dir`'s checkpoint index."""
  if num_last < 1:
    raise ValueError(f"num_last_checkpoints must be >= 1, got {num_last}.")
  state = checkpoints_lib.read_state(prefix_dir)
  # Without a readable state file: the checkpoints present (the trainer rebuilds it).
  paths = (list(state.all_model_checkpoint_paths) if state is not None else
           checkpoints_lib.find_checkpoints(prefix_dir)[::-1])
  if not paths:
    raise FileNotFoundError(f"No checkpoints in {prefix_dir}; train first with "
                            f"t2t_keras_trainer --output_dir={prefix_dir}.")
  return paths[-num_last:]


def check_averageable(model: Transformer, paths: Sequence[str], model_source: str = "the model",
                      log: Optional[Callable[[str], None]] = None) -> None:
  """Checks that the checkpoints `paths` can be averaged into `model`.

  Args:
    model: a built Transformer.
    paths: checkpoint prefixes.
    model_source: where the model's hparams came from, for messages.
    log: receives one WARNING line when the checkpoints come from different runs.
  Raises:
    checkpoints.CheckpointError: a damaged checkpoint, naming the file; or
      (NonFiniteWeightsError) one with NaN or inf weights, naming the variable.
    errors.RunError: two checkpoints, or a checkpoint and the model, differ in a
      variable's shape (naming it and both shapes), or a model variable is missing.
  """
  want = {v.path: [int(d) for d in v.shape] for v in model.variables
          if tf.as_dtype(v.dtype).is_floating}
  first = None
  for path in paths:
    checkpoints_lib.verify_checkpoint(path)
    checkpoints_lib.check_finite_weights(path)
    have = {name: list(shape) for name, (_, shape) in
            checkpoints_lib.model_variables(path).items()}
    if first is None:
      first = (path, have)
    for name, shape in have.items():  # checkpoint against checkpoint: two runs' shapes
      other = first[1].get(name)
      if other is not None and other != shape:
        raise errors.RunError(
            f"cannot average {first[0]} and {path}: {name} has shape {other} in the first "
            f"and {shape} in the second; average checkpoints of one run.")
    for name, shape in want.items():
      if name not in have:
        raise errors.RunError(f"{path} has no variable {name} of {model_source}; average "
                              "checkpoints of the run those hparams come from.")
      if have[name] != shape:
        raise errors.RunError(
            f"{path} does not fit {model_source}: {name} has shape {have[name]} in the "
            f"checkpoint and {shape} in the model; average checkpoints of the run those "
            "hparams come from.")
  _warn_if_several_runs(paths, log)


def _warn_if_several_runs(paths: Sequence[str], log: Optional[Callable[[str], None]]) -> None:
  directories = list(dict.fromkeys(os.path.dirname(os.path.abspath(p)) for p in paths))
  if len(directories) < 2 or log is None:
    return
  files = [_run_files(d) for d in directories]
  differ = sorted({k for f in files[1:] for k in set(f) | set(files[0])
                   if f.get(k) != files[0].get(k)})
  what = f"; their run files differ in {', '.join(differ)}" if differ else ""
  log(f"WARNING: averaging checkpoints of {len(directories)} different runs "
      f"({', '.join(directories)}){what}. Averaging independently trained models does not "
      "give a better model: average the last checkpoints of one run.")


def _run_files(directory: str) -> dict:
  """hparams.json and run.json of `directory`, flat, without the last training's status
  and without the set and overrides recorded (hparams.json holds what they built)."""
  out = {}
  for name in (settings.HPARAMS_FILE, settings.RUN_FILE):
    path = os.path.join(directory, name)
    if tf.io.gfile.exists(path):
      with tf.io.gfile.GFile(path) as f:
        out.update(json.load(f))
  return {k: v for k, v in out.items()
          if k not in settings.STATUS_KEYS + settings.RECIPE_KEYS}


def average_checkpoints(model: Transformer, paths: Sequence[str], output_path: str,
                        model_source: str = "the model",
                        log: Optional[Callable[[str], None]] = None) -> str:
  """Averages the weights of the checkpoints `paths` into `model` and saves it.

  Args:
    model: a built Transformer with the checkpoints' hparams.
    paths: checkpoint prefixes written by the trainer (checked first, see
      `check_averageable`, which raises).
    output_path: prefix of the averaged checkpoint (written atomically, see `_write`).
    model_source, log: see `check_averageable`.
  Returns:
    The path of the written checkpoint.
  """
  if not paths:
    raise ValueError("No checkpoints to average.")
  check_averageable(model, paths, model_source, log)
  checkpoint = tf.train.Checkpoint(model=model)
  total = None
  for path in paths:
    with checkpoints_lib.reading(path):  # a CRC mismatch in a checkpoint too big to verify
      checkpoint.read(path).expect_partial().assert_existing_objects_matched()
    weights = [np.asarray(w, np.float64) for w in model.get_weights()]
    total = weights if total is None else [t + w for t, w in zip(total, weights)]
  model.set_weights([t / len(paths) for t in total])
  return _write(checkpoint, output_path)


def _write(checkpoint: tf.train.Checkpoint, output_path: str) -> str:
  """Writes `checkpoint` at the prefix `output_path`; returns it.

  TF writes a save's shards into `<prefix>_temp/`, which a killed save leaves
  and a rerun does not remove. So a local checkpoint is written in the directory
  `file_io.temp_path(output_path)` (named by host and pid), and its files are
  renamed into place, the index last (a checkpoint is read from its index).
  Before that, what killed averagers left beside it goes: their temporaries
  (`file_io.remove_abandoned`) and the `<output_path>_temp/` of older versions.
  """
  if "://" in output_path:
    tf.io.gfile.makedirs(os.path.dirname(output_path))
    return checkpoint.write(output_path)
  directory = os.path.dirname(os.path.abspath(output_path))
  os.makedirs(directory, exist_ok=True)
  file_io.remove_abandoned(directory, STALE_SECONDS)
  shutil.rmtree(output_path + "_temp", ignore_errors=True)
  tmp = file_io.temp_path(output_path)
  shutil.rmtree(tmp, ignore_errors=True)
  base = os.path.basename(output_path)
  try:
    os.makedirs(tmp)
    checkpoint.write(os.path.join(tmp, base))
    names = [n for n in os.listdir(tmp) if n.startswith(base + ".")]
    for name in sorted(names, key=lambda n: n.endswith(".index")):
      os.replace(os.path.join(tmp, name), os.path.join(directory, name))
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return output_path
