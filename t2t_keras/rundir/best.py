"""`best/`: the best checkpoints of a run by a dev metric, apart from the rotating newest.

`--keep_best_checkpoints=N` keeps, in `<output_dir>/best/`, the N checkpoints whose
evaluation scored best by `--eval_early_stopping_metric` (lowest when minimized,
highest otherwise; of equal values the earlier step stays). The directory holds

  ckpt-<step>.*   the kept checkpoints, hard links to (or copies of) the run's files
  best.json       {"metric", "minimize", "checkpoints": [{"step", "value", "name"}]},
                  best first: what is kept and why (the one record trusted)
  checkpoint      TF's state file, naming the best as its newest, so that
                  `tf.train.latest_checkpoint(best_dir)` gives the best one

Every file is written under a temporary name and renamed into place: files of a
newly kept checkpoint first, then best.json, then the state file; the files of a
checkpoint that dropped out go last. A kill at any moment leaves best.json naming
complete checkpoints only; `load` removes what no entry names. A hard link is
safe: TF never rewrites a checkpoint file, it writes new ones and deletes old ones.

`loadable(directory)` is how the decoder, exporter and `open_run` read a directory
given as the checkpoint: for a best/ directory, the best entry that verifies.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from typing import Callable, List, Optional, Tuple

import tensorflow as tf
from tensorflow.python.util import deprecation

from data_gen import file_io
from t2t_keras import checkpoints
from t2t_keras.rundir.files import BEST_INDEX


@dataclasses.dataclass(frozen=True)
class Entry:
  """A kept checkpoint: its step, the metric's value and its prefix's base name."""
  step: int
  value: float
  name: str


def index_path(directory: str) -> str:
  return os.path.join(directory, BEST_INDEX)


def is_best_dir(directory: str) -> bool:
  """Whether `directory` is a best/ directory (holds best.json)."""
  return tf.io.gfile.exists(index_path(directory))


def read_index(directory: str) -> Optional[dict]:
  """best.json of `directory`, or None when absent.

  Raises:
    ValueError: the file is not best.json's JSON (naming it).
  """
  path = index_path(directory)
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      index = json.load(f)
    entries = [Entry(int(e["step"]), float(e["value"]), str(e["name"]))
               for e in index["checkpoints"]]
    return {"metric": str(index["metric"]), "minimize": bool(index["minimize"]),
            "checkpoints": entries}
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"{path} is damaged ({type(e).__name__}: {e}); move {directory} "
                     "aside to start keeping the best checkpoints afresh.") from None


def rank_key(entry: Entry, minimize: bool) -> Tuple[float, int]:
  """Sort key, best first: the value in the metric's direction, then the earlier step."""
  return (entry.value if minimize else -entry.value, entry.step)


class BestCheckpoints:
  """The best/ directory of one metric, kept up to date as evaluations come in.

  Args:
    directory: the best/ directory (created at the first kept checkpoint).
    keep: how many to keep (>= 1).
    metric, minimize: the metric and its direction (recorded in best.json).
    log: receives one line per change.
  """

  def __init__(self, directory: str, keep: int, metric: str, minimize: bool,
               log: Callable[[str], None] = print):
    self.directory = directory
    self.keep = keep
    self.metric = metric
    self.minimize = minimize
    self.log = log
    self.entries: List[Entry] = []

  def load(self) -> List[Entry]:
    """Reads best.json back (a resume never forgets an earlier best); drops entries
    whose files are gone and removes files no entry names (a save killed midway)."""
    index = read_index(self.directory)
    entries = index["checkpoints"] if index else []
    present = [e for e in entries if checkpoints.checkpoint_files(self._prefix(e))]
    for e in entries:
      if e not in present:
        self.log(f"WARNING: {self._prefix(e)} (best {self.metric} {e.value:g} at step "
                 f"{e.step}) has no files left; it is no longer kept.")
    self.entries = sorted(present, key=lambda e: rank_key(e, self.minimize))
    if tf.io.gfile.isdir(self.directory):
      self._remove_unnamed()
    if self.entries and (len(self.entries) > self.keep or present != entries):
      self._commit(self.entries[:self.keep])
    return list(self.entries)

  def offer(self, step: int, value: float, prefix: str) -> bool:
    """Keeps checkpoint `prefix` of `step` if its `value` ranks among the `keep` best.

    Returns:
      whether it was kept. A NaN or infinite value never is.
    """
    if not math.isfinite(value):
      return False
    entry = Entry(step, float(value), os.path.basename(prefix))
    others = [e for e in self.entries if e.step != step]  # a re-evaluated step: the new value
    ranked = sorted(others + [entry], key=lambda e: rank_key(e, self.minimize))[:self.keep]
    if entry not in ranked:
      return False
    tf.io.gfile.makedirs(self.directory)
    self._copy_in(prefix)  # again for a step re-trained after a resume from an older one
    self._commit(ranked)
    place = ranked.index(entry) + 1
    self.log(f"Kept {os.path.join(self.directory, entry.name)} in the best {self.keep} by "
             f"{self.metric} ({value:.4f}, rank {place}).")
    return True

  def _prefix(self, entry: Entry) -> str:
    return os.path.join(self.directory, entry.name)

  def _copy_in(self, prefix: str) -> None:
    """Links (else copies) the files of `prefix` into the directory, data before index."""
    files = sorted(checkpoints.checkpoint_files(prefix), key=lambda p: p.endswith(".index"))
    for path in files:
      target = os.path.join(self.directory, os.path.basename(path))
      tmp = file_io.temp_path(target)
      file_io.remove_quietly([tmp])
      try:
        if "://" in target:
          raise OSError("a remote file system: copy")
        os.link(path, tmp)
      except OSError:  # another device, a remote path, links not allowed: copy
        tf.io.gfile.copy(path, tmp, overwrite=True)
      tf.io.gfile.rename(tmp, target, overwrite=True)

  def _commit(self, ranked: List[Entry]) -> None:
    """Writes best.json and the state file for `ranked` (best first), then removes the
    files of checkpoints no longer kept."""
    index = {"metric": self.metric, "minimize": self.minimize,
             "checkpoints": [dataclasses.asdict(e) for e in ranked]}
    file_io.write_text(index_path(self.directory), json.dumps(index, indent=2) + "\n")
    # The state file lists oldest first and names its last as the newest: worst to best.
    # TF's writer of the state file warns of its deprecation; not news to a user.
    with deprecation.silence():
      checkpoints.write_state(self.directory, [self._prefix(e) for e in reversed(ranked)])
    self.entries = list(ranked)
    self._remove_unnamed()

  def _remove_unnamed(self) -> None:
    kept = {e.name for e in self.entries}
    for prefix in checkpoints.find_checkpoints(self.directory):
      if os.path.basename(prefix) not in kept:
        file_io.remove_quietly(checkpoints.checkpoint_files(prefix))
    for path in tf.io.gfile.glob(os.path.join(self.directory, "*")):
      if file_io.is_temporary(path):
        file_io.remove_quietly([path])

  def set_aside(self, target_dir: str) -> None:
    """Moves the directory into `target_dir` (--start_over: a new training, a new best)."""
    if tf.io.gfile.isdir(self.directory):
      tf.io.gfile.makedirs(target_dir)
      target = os.path.join(target_dir, os.path.basename(self.directory))
      if "://" in target:
        tf.io.gfile.rename(self.directory, target, overwrite=True)
      else:
        shutil.move(self.directory, target)
    self.entries = []


def loadable(directory: str) -> Tuple[Optional[str], List[checkpoints.Candidate]]:
  """The checkpoint to read when `directory` is given as the checkpoint.

  A best/ directory: its best entry that verifies and has finite weights, and the
  better ones that failed. Any other directory: its newest loadable checkpoint
  (`checkpoints.newest_loadable`).
  """
  index = read_index(directory) if is_best_dir(directory) else None
  if index is None:
    return checkpoints.newest_loadable(directory)
  damaged = []
  for entry in sorted(index["checkpoints"], key=lambda e: rank_key(e, index["minimize"])):
    prefix = os.path.join(directory, entry.name)
    try:
      checkpoints.verify_checkpoint(prefix)
      checkpoints.check_finite_weights(prefix)
    except checkpoints.CheckpointError as e:
      damaged.append(checkpoints.Candidate(prefix, entry.step, str(e)))
      continue
    return prefix, damaged
  return None, damaged
