"""`RunDir`: every path of a training run directory, named in one place.

A run directory (`t2t_keras_trainer --output_dir`) holds

  hparams.json            every model and training hparam (`settings.py` writes it)
  run.json                the run's identity and its last stop (`settings.py`)
  checkpoint, ckpt-<N>.*  the checkpoints (`training/schedules.py`; a checkpoint directory's
                          own layout, damaged/ and replaced-*/ included, is
                          `checkpoints.py`'s, as it holds for any such directory)
  events.*, eval/         TensorBoard logs of training and of evaluation
  superseded/             checkpoint files found in the way of a save, moved aside
  tmp_worker_<N>/         a non-chief worker's own checkpoints and logs
  .trainer.lock           one trainer at a time (`lock.py`)
  t2t_import.json, trainer_flags.txt   a run imported from T2T (`t2t_import/importer.py`)
  best/                   the best checkpoints by a dev metric (`--keep_best_checkpoints`):
                          ckpt-<N>.* copies, best.json (step and value of each) and a
                          `checkpoint` state file naming the best (`best.py`)
  evaluations.json        the dev metrics of each evaluation while early stopping or
                          keeping the best (`training/early_stopping.py`)
  averaged/               averaged checkpoints (`t2t_keras_avg_checkpoints`):
                          from-step-<N>/averaged.ckpt averages checkpoints up to step N
  export/<version>/       SavedModels for TF Serving (`t2t_keras_exporter`)
  export_ctranslate2/     the CTranslate2 model directory
  plots/                  `t2t_keras_visualize`'s figures

This table is the one description of a run directory: every module asks a `RunDir`
for these paths rather than joining names itself.
No TensorFlow here: paths only, so a CLI's `--help` stays fast.
"""

from __future__ import annotations

import dataclasses
import os

HPARAMS_FILE = "hparams.json"
RUN_FILE = "run.json"
BEST_INDEX = "best.json"  # in best/: the kept checkpoints, their steps and metric values


@dataclasses.dataclass(frozen=True)
class RunDir:
  """The paths of the run directory `path` (a local path or a gfile URL)."""
  path: str

  def _join(self, *names: str) -> str:
    return os.path.join(self.path, *names)

  @property
  def hparams_file(self) -> str:
    return self._join(HPARAMS_FILE)

  @property
  def run_file(self) -> str:
    return self._join(RUN_FILE)

  @property
  def checkpoint_dir(self) -> str:
    """The chief's checkpoints and the `checkpoint` state file."""
    return self.path

  @property
  def checkpoint_state_file(self) -> str:
    """`checkpoint`: the CheckpointManager's list of the chief's checkpoints."""
    return self._join("checkpoint")

  def checkpoint(self, step: int) -> str:
    """The prefix of the checkpoint of `step` (`tf.train.CheckpointManager`'s name)."""
    return self._join(f"ckpt-{step}")

  @property
  def eval_dir(self) -> str:
    return self._join("eval")

  @property
  def superseded_dir(self) -> str:
    return self._join("superseded")

  def worker_dir(self, task_id: int) -> str:
    """A non-chief worker's checkpoint directory; its logs go to `logs/` in it."""
    return self._join(f"tmp_worker_{task_id}")

  @property
  def lock_file(self) -> str:
    return self._join(".trainer.lock")

  @property
  def import_record(self) -> str:
    """t2t_import.json: where an imported run came from and its Adam step offset."""
    return self._join("t2t_import.json")

  @property
  def trainer_flags(self) -> str:
    """trainer_flags.txt of an imported run: for t2t_keras_trainer --flagfile."""
    return self._join("trainer_flags.txt")

  @property
  def best_dir(self) -> str:
    """The best checkpoints by a dev metric, apart from the rotating newest ones."""
    return self._join("best")

  @property
  def evaluations_file(self) -> str:
    """evaluations.json: each evaluation's step and metrics, kept across resumes."""
    return self._join("evaluations.json")

  @property
  def averaged_dir(self) -> str:
    return self._join("averaged")

  def averaged_checkpoint(self, newest_step: int) -> str:
    """The prefix of an average of checkpoints whose newest is of `newest_step`."""
    return os.path.join(self.averaged_dir, f"from-step-{newest_step}", "averaged.ckpt")

  @property
  def export_dir(self) -> str:
    """The SavedModel base path (TF Serving's --model_base_path)."""
    return self._join("export")

  @property
  def ctranslate2_dir(self) -> str:
    return self._join("export_ctranslate2")

  @property
  def plots_dir(self) -> str:
    return self._join("plots")
