"""Problem registry by T2T name, and `import_usr_dir` (T2T's `--t2t_usr_dir`).

    @register_problem
    class TranslateEndeWmt32k(Text2TextProblem): ...   # -> "translate_ende_wmt32k"

    problem("translate_ende_wmt32k", data_dir=...)     # instance
"""

import importlib
import os
import re
import sys
from typing import Callable, Dict, List, Optional, Type, Union

_PROBLEMS: Dict[str, type] = {}
_BUILTINS_LOADED = False


def default_name(cls: type) -> str:
  """T2T's CamelCase → snake_case: TranslateEndeWmt32k → translate_ende_wmt32k."""
  s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", cls.__name__)
  return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def register_problem(name_or_cls: Union[str, type, None] = None) -> Union[type, Callable[[type], type]]:
  """Class decorator: `@register_problem` or `@register_problem("custom_name")`."""

  def decorator(cls: type, name: Optional[str] = None) -> type:
    name = name or default_name(cls)
    existing = _PROBLEMS.get(name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
      raise ValueError("problem name %r is already registered by %s.%s"
                       % (name, existing.__module__, existing.__qualname__))
    cls.registered_name = name
    _PROBLEMS[name] = cls
    return cls

  if isinstance(name_or_cls, type):
    return decorator(name_or_cls)
  return lambda cls: decorator(cls, name_or_cls)


def _load_builtins() -> None:
  global _BUILTINS_LOADED
  if not _BUILTINS_LOADED:
    _BUILTINS_LOADED = True
    importlib.import_module("data_gen.all_problems")


def list_problems() -> List[str]:
  """Sorted names of all registered problems (built-in and user)."""
  _load_builtins()
  return sorted(_PROBLEMS)


def problem_class(name: str) -> type:
  _load_builtins()
  if name not in _PROBLEMS:
    raise ValueError("unknown problem %r; registered problems: %s (user problems need "
                     "--t2t_usr_dir)" % (name, ", ".join(sorted(_PROBLEMS))))
  return _PROBLEMS[name]


def problem(name: str, data_dir: Optional[str] = None):
  """Instance of the problem registered as `name`.

  With `data_dir`, problems configured at datagen time (translate_from_files)
  restore their configuration from the JSON they saved there, and text problems
  their vocabulary's type (subword or SentencePiece) from its manifest.
  """
  instance = problem_class(name).restore(data_dir)
  if data_dir and hasattr(instance, "restore_vocab"):
    instance.restore_vocab(data_dir)
  return instance


def import_usr_dir(usr_dir: Optional[str]) -> None:
  """Imports a user directory as a package so its `@register_problem` classes register.

  The directory must be importable as a package (an `__init__.py` importing its
  modules), as with T2T's `--t2t_usr_dir`.
  """
  if not usr_dir:
    return
  path = os.path.abspath(os.path.expanduser(usr_dir)).rstrip(os.sep)
  if not os.path.isdir(path):
    raise ValueError("t2t_usr_dir %r is not a directory" % (usr_dir,))
  if not os.path.isfile(os.path.join(path, "__init__.py")):
    raise ValueError("t2t_usr_dir %r has no __init__.py; add one that imports your "
                     "problem modules" % (usr_dir,))
  parent, module_name = os.path.split(path)
  sys.path.insert(0, parent)
  try:
    importlib.import_module(module_name)
  finally:
    sys.path.remove(parent)


def _registered() -> Dict[str, Type]:
  """For tests: the raw registry mapping."""
  return _PROBLEMS
