"""Checkpoint averaging (T2T `utils/avg_checkpoints.py`).

Loads each checkpoint into one model, averages every model weight, and writes a
checkpoint of the model alone with step 0 (T2T also reset global_step), which
the decoder and exporter restore like any training checkpoint.
"""

from __future__ import annotations

import os
from typing import List, Sequence

import numpy as np
import tensorflow as tf

from t2t_keras import checkpoints as checkpoints_lib
from t2t_keras.model import Transformer


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


def average_checkpoints(model: Transformer, paths: Sequence[str], output_path: str) -> str:
  """Averages the weights of the checkpoints `paths` into `model` and saves it.

  Args:
    model: a built Transformer with the checkpoints' hparams.
    paths: checkpoint prefixes written by the trainer (each verified first).
    output_path: prefix of the averaged checkpoint (written atomically by TF).
  Returns:
    The path of the written checkpoint.
  """
  if not paths:
    raise ValueError("No checkpoints to average.")
  checkpoint = tf.train.Checkpoint(model=model)
  total = None
  for path in paths:
    checkpoints_lib.verify_checkpoint(path)  # CheckpointError naming a damaged file
    checkpoint.read(path).expect_partial().assert_existing_objects_matched()
    weights = [np.asarray(w, np.float64) for w in model.get_weights()]
    total = weights if total is None else [t + w for t, w in zip(total, weights)]
  model.set_weights([t / len(paths) for t in total])
  tf.io.gfile.makedirs(os.path.dirname(output_path) or ".")
  written = checkpoint.write(output_path)
  return written
