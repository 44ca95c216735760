"""The module paths of 0.x keep working for one release, with a DeprecationWarning that
names the new path, and nothing of the project itself uses them."""

import importlib
import inspect
import sys

import pytest

import t2t_keras
from t2t_keras import old_paths
from tests.support.imports import REPO, imported_modules, is_module


def _forget(old):
  """Drops an old path from the import caches, so that importing it runs again."""
  sys.modules.pop(old, None)
  package, _, name = old.rpartition(".")
  vars(sys.modules[package]).pop(name, None) if package in sys.modules else None


def _public_names(module):
  """The names a module defines itself (not those it imports)."""
  return sorted(name for name, value in vars(module).items()
                if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
                and (inspect.isfunction(value) or inspect.isclass(value)))


def test_every_new_module_exists_and_every_old_file_is_gone():
  for old, targets in old_paths.MOVED.items():
    for target in targets:
      assert is_module(target), f"{old} -> {target}: no such module"
    # An old module is gone, or is a package of the same name now.
    assert not (REPO / (old.replace(".", "/") + ".py")).exists(), old


@pytest.mark.parametrize("old", sorted(old_paths.MOVED))
def test_an_old_path_gives_every_name_of_its_new_modules_with_a_warning(old):
  is_package = is_module(old) and (REPO / old.replace(".", "/") / "__init__.py").is_file()
  if not is_package:
    _forget(old)
    with pytest.warns(DeprecationWarning, match=old.replace(".", r"\.") + " is now "):
      module = importlib.import_module(old)
  else:
    module = importlib.import_module(old)
  for target in old_paths.MOVED[old]:
    new = importlib.import_module(target)
    names = _public_names(new)
    assert names, target
    for name in names:
      if is_package and name not in vars(module):
        with pytest.warns(DeprecationWarning, match=f"{target}.{name}"):
          value = getattr(module, name)
      else:
        value = getattr(module, name)
      assert value is getattr(new, name), (old, name)


def test_the_old_package_attribute_and_from_import_forms():
  _forget("t2t_keras.run_dir")
  _forget("t2t_keras.beam_search")
  from t2t_keras.decoding import beam_search
  from t2t_keras.rundir import model_factory
  with pytest.warns(DeprecationWarning, match=r"t2t_keras\.beam_search is now"):
    assert t2t_keras.beam_search is beam_search
  with pytest.warns(DeprecationWarning, match=r"t2t_keras\.run_dir is now"):
    from t2t_keras.run_dir import load_trained_model  # pylint: disable=g-import-not-at-top
  assert load_trained_model is model_factory.load_trained_model
  with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
    t2t_keras.no_such_name  # pylint: disable=pointless-statement


def test_a_new_submodule_gives_no_warning(recwarn):
  from t2t_keras.training import inputs  # a module of the package, not an old name
  from t2t_keras.decoding import beam_search
  assert inputs.__name__ == "t2t_keras.training.inputs"
  assert beam_search.__name__ == "t2t_keras.decoding.beam_search"
  assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)
              and "is now" in str(w.message)]


def test_nothing_in_the_project_imports_an_old_path():
  """The library, tests, benchmarks and scripts use the new paths (an old one would
  warn for every user)."""
  files = [p for folder in ("t2t_keras", "data_gen", "tests", "bench")
           for p in sorted((REPO / folder).rglob("*.py"))
           if p.relative_to(REPO).parts[:2] != ("tests", "data")]
  found = []
  for path in files:
    if path.name in ("old_paths.py", "test_old_paths.py"):
      continue
    for line, name in imported_modules(path):
      package = name.rpartition(".")[0]
      if name in old_paths.MOVED and not is_module(name):
        found.append(f"{path.relative_to(REPO)}:{line}: {name}")
      elif package in old_paths.MOVED and is_module(package) and not is_module(name):
        # from <old module, now a package> import <a name of the old module>
        found.append(f"{path.relative_to(REPO)}:{line}: {name}")
  assert not found, "\n".join(found)
