"""t2t-keras: Tensor2Tensor's Transformer on TensorFlow 2 and Keras 3.

  import t2t_keras
  run = t2t_keras.open_run("work/train")              # a t2t_keras_trainer --output_dir
  print(run.translate(["the house is small", "a cat sees the dog"]))
  print(run.score(["the house is small"], ["das Haus ist klein"]))
  run.export_saved_model()                           # work/train/export/<version>

docs/api.md describes every name below. Importing the package loads no TensorFlow:
each name loads its module when first used, so the commands' --help stays fast.
"""

import importlib

from t2t_keras import old_paths
from t2t_keras.version import __version__

old_paths.install()  # the module paths of 0.x, for one release

# name -> the module that defines it.
_EXPORTS = {
    "RunDir": "t2t_keras.rundir.files",
    "open_run": "t2t_keras.trained_run",
    "TrainedRun": "t2t_keras.trained_run",
    "LanguageModelRun": "t2t_keras.lm_run",
    "train": "t2t_keras.training.runner",
    "generate_data": "data_gen.generate",
    "create_hparams": "t2t_keras.hparams",
    "create_decode_hparams": "t2t_keras.hparams",
    "list_hparams_sets": "t2t_keras.hparams",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
  if name not in _EXPORTS:
    return old_paths.package_getattr(__name__, name)
  value = getattr(importlib.import_module(_EXPORTS[name]), name)
  globals()[name] = value  # later look-ups skip this function
  return value


def __dir__():
  return sorted(set(globals()) | set(__all__))
