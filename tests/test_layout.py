"""The tests' own layout: test modules import helpers from tests/support/, never each other.

Shared helpers, constants and fixture builders live in `tests/support/`; fixtures that
several modules use are in `tests/conftest.py`. A helper or constant kept in a test
module and imported by another is a dependency nothing in the first module shows, so
it gets changed for that module's sake alone; and the importer runs the other module's
import-time code and takes any fixture it imports as one of its own.
"""

import pathlib

import pytest

from tests.support.imports import imported_modules, is_module

REPO = pathlib.Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def is_test_module(name: str) -> bool:
  """Whether the dotted module `name` is a pytest test module (tests/**/test_*.py)."""
  return name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")


def python_files(repo: pathlib.Path = REPO):
  """Every .py file under tests/ but tests/data (files written by others, never imported)."""
  return sorted(p for p in (repo / "tests").rglob("*.py")
                if p.relative_to(repo).parts[1] != "data")


def imports_of_test_modules(paths, repo: pathlib.Path = REPO):
  """(importer, line, imported) for every import of a test module in the files `paths`."""
  return [(str(path.relative_to(repo)), line, name) for path in paths
          for line, name in imported_modules(path, repo) if is_test_module(name)]


def test_no_test_module_imports_another():
  """Nothing under tests/ (test modules, support, scripts, conftest) imports a test module."""
  found = imports_of_test_modules(python_files())
  assert not found, ("Move what these import to tests/support/ (fixtures to "
                     "tests/conftest.py):\n" +
                     "\n".join(f"{path}:{line}: imports {name}" for path, line, name in found))


def test_every_tests_import_names_an_existing_module():
  """A helper moved or renamed without its importers fails here, before any test runs.

  Imports in an `except ImportError` handler are left out: a script run on an older
  commit falls back to that commit's paths there."""
  missing = [f"{path.relative_to(REPO)}:{line}: {name}"
             for path in python_files() + sorted((REPO / "bench").rglob("*.py"))
             for line, name in imported_modules(path, fallbacks=False)
             if name.split(".")[0] == "tests" and not is_module(name)]
  assert not missing, "\n".join(missing)


def test_support_holds_no_test_modules():
  """tests/support/ holds helpers only: pytest would collect a test_*.py there."""
  assert (TESTS / "support" / "__init__.py").is_file()
  assert not sorted((TESTS / "support").rglob("test_*.py"))


@pytest.mark.parametrize("source, expected", [
    ("from tests import test_x as built\n", ["tests.test_x"]),
    ("from tests.test_x import HP\n", ["tests.test_x"]),
    ("import tests.test_x\n", ["tests.test_x"]),
    ("from . import test_x\n", ["tests.test_x"]),
    ("def f():\n  from .test_x import wait_for\n", ["tests.test_x"]),
    ("from tests.support import env\nimport os\n", []),
], ids=["from_package", "from_module", "import", "relative", "in_a_function", "support_only"])
def test_the_rule_sees_every_form_of_import(source, expected, tmp_path):
  tests = tmp_path / "tests"
  (tests / "support").mkdir(parents=True)
  for name in ("__init__.py", "test_x.py", "support/__init__.py", "support/env.py"):
    (tests / name).write_text("")
  (tests / "test_y.py").write_text(source)
  found = imports_of_test_modules(python_files(tmp_path), tmp_path)
  assert [name for _, _, name in found] == expected


def test_an_import_in_an_import_error_handler_is_a_fallback(tmp_path):
  tests = tmp_path / "tests"
  tests.mkdir()
  (tests / "__init__.py").write_text("")
  script = tests / "script.py"
  script.write_text("try:\n  from tests.new import f\nexcept ImportError:\n"
                    "  from tests.old import f\n")
  assert sorted(name for _, name in imported_modules(script, tmp_path)) == [
      "tests.new", "tests.old"]
  assert [name for _, name in imported_modules(script, tmp_path, fallbacks=False)] == [
      "tests.new"]
