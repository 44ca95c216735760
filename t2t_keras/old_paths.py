"""The module paths of t2t-keras 0.x, kept working for one release with a DeprecationWarning.

The library's modules moved into packages by concept (`rundir`, `training`,
`decoding`, `export`, `scoring`, `t2t_import`; docs/architecture.md). A name
imported through its old path, `from t2t_keras.run_dir import load_trained_model`
or `t2t_keras.decoding.greedy_decode`, still resolves, to the very object at its
new path, and warns (a DeprecationWarning naming the new path) at each import of an old path.
The next release removes this module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings

# old module -> the modules that hold its names now (two where one was split).
MOVED = {
    "t2t_keras.adafactor": ("t2t_keras.training.adafactor",),
    "t2t_keras.alignments": ("t2t_keras.decoding.alignments",),
    "t2t_keras.avg_checkpoints": ("t2t_keras.rundir.averaging",),
    "t2t_keras.beam_search": ("t2t_keras.decoding.beam_search",),
    "t2t_keras.bleu": ("t2t_keras.scoring.bleu",),
    "t2t_keras.cpu_info": ("t2t_keras.perf.cpu_info",),
    "t2t_keras.ctranslate2_decode": ("t2t_keras.export.ctranslate2_decoder",),
    "t2t_keras.ctranslate2_export": ("t2t_keras.export.ctranslate2_model",),
    "t2t_keras.decode_text": ("t2t_keras.decoding.text_decoder",
                              "t2t_keras.decoding.text_rules",
                              "t2t_keras.training.bleu_hook"),
    "t2t_keras.decoding": ("t2t_keras.decoding.seq2seq",),
    "t2t_keras.ensemble": ("t2t_keras.decoding.ensemble",),
    "t2t_keras.evalb": ("t2t_keras.scoring.evalb",),
    "t2t_keras.experiment": ("t2t_keras.training.schedules",),
    "t2t_keras.export": ("t2t_keras.export.saved_model",),
    "t2t_keras.flops": ("t2t_keras.perf.flops",),
    "t2t_keras.inputs": ("t2t_keras.training.inputs",),
    "t2t_keras.lm_decoding": ("t2t_keras.decoding.lm",),
    "t2t_keras.losses": ("t2t_keras.training.losses",),
    "t2t_keras.metrics": ("t2t_keras.training.metrics",),
    "t2t_keras.optimization": ("t2t_keras.training.optimization",),
    "t2t_keras.perf.inference": ("t2t_keras.decoding.inference_choices",),
    "t2t_keras.precision": ("t2t_keras.perf.precision",),
    "t2t_keras.run_dir": ("t2t_keras.rundir.settings", "t2t_keras.rundir.model_factory"),
    "t2t_keras.run_layout": ("t2t_keras.rundir.files",),
    "t2t_keras.run_lock": ("t2t_keras.rundir.lock",),
    "t2t_keras.run_training": ("t2t_keras.training.runner",),
    "t2t_keras.sampling": ("t2t_keras.decoding.sampling",),
    "t2t_keras.search_utils": ("t2t_keras.decoding.search_utils",),
    "t2t_keras.stopping": ("t2t_keras.training.stopping",),
    "t2t_keras.t2t_import": ("t2t_keras.t2t_import.importer",),
    "t2t_keras.t2t_import_hparams": ("t2t_keras.t2t_import.t2t_hparams",),
    "t2t_keras.text_args": ("t2t_keras.decoding.text_args",),
    "t2t_keras.training": ("t2t_keras.training.trainer",),
    "t2t_keras.visualize": ("t2t_keras.decoding.visualize",),
}

def _warn(old: str, new: str) -> None:
  """Warns at the user's line: the first frame outside this module and the packages'
  `__getattr__` (`warnings` skips the import system's own frames)."""
  level, frame = 1, sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None and (frame.f_code.co_filename == __file__ or
                               frame.f_code.co_name == "__getattr__" or
                               "importlib" in frame.f_code.co_filename):
    level += "importlib" not in frame.f_code.co_filename
    frame = frame.f_back
  warnings.warn(f"{old} is now {new}; the old path goes away in the next release.",
                DeprecationWarning, stacklevel=level + 1)


def _is_submodule(package: str, name: str) -> bool:
  """Whether a file of `package` is the module `name` (old paths do not count)."""
  paths = getattr(sys.modules.get(package), "__path__", None)
  return paths is not None and importlib.machinery.PathFinder.find_spec(
      f"{package}.{name}", paths) is not None


def old_module(old: str) -> types.ModuleType:
  """The module standing for the old module `old`: its new module, or one that looks
  through the new modules in turn when the old one was split."""
  targets = MOVED[old]
  _warn(old, " and ".join(targets))
  if len(targets) == 1:
    return importlib.import_module(targets[0])
  merged = types.ModuleType(old, f"{old}, now {' and '.join(targets)}.")

  def look_up(name):
    for target in targets:
      module = importlib.import_module(target)
      if hasattr(module, name):
        return getattr(module, name)
    raise AttributeError(f"module {old!r} has no attribute {name!r}")

  merged.__getattr__ = look_up
  return merged


def package_getattr(package: str, name: str):
  """`package.name` where `package` (t2t_keras, or a package that was a module) lacks it:
  an old module moved out of `package`, or a name of the old module `package`."""
  if name.startswith("__"):
    raise AttributeError(name)
  old = f"{package}.{name}"
  if _is_submodule(package, name):  # a module of the package, not imported yet
    return importlib.import_module(old)
  if old in MOVED:
    module = old_module(old)
    setattr(sys.modules[package], name, module)  # one warning per name
    return module
  if package in MOVED:
    value = getattr(importlib.import_module(MOVED[package][0]), name, _MISSING)
    if value is not _MISSING:
      _warn(f"{package}.{name}", f"{MOVED[package][0]}.{name}")
      setattr(sys.modules[package], name, value)  # one warning per name
      return value
  raise AttributeError(f"module {package!r} has no attribute {name!r}")


_MISSING = object()


class _OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Imports an old module path (`import t2t_keras.run_dir`) as `old_module` gives it."""

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if fullname not in MOVED:
      return None
    return importlib.util.spec_from_loader(fullname, self)

  def create_module(self, spec):
    return None  # a plain module; exec_module puts the real one in its place

  def exec_module(self, module):
    # The import system returns what sys.modules holds once this returns.
    sys.modules[module.__name__] = old_module(module.__name__)


def install() -> None:
  """Lets `import <old path>` work; after the standard finders, so only for paths no
  file answers."""
  if not any(isinstance(finder, _OldPathFinder) for finder in sys.meta_path):
    sys.meta_path.append(_OldPathFinder())
