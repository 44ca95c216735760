"""The tests' own layout: test modules import helpers from tests/support/, never each other.

Shared helpers, constants and fixture builders live in `tests/support/`; fixtures that
several modules use are in `tests/conftest.py`. A helper or constant kept in a test
module and imported by another is a dependency nothing in the first module shows, so
it gets changed for that module's sake alone; and the importer runs the other module's
import-time code and takes any fixture it imports as one of its own.
"""

import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def is_test_module(name: str) -> bool:
  """Whether the dotted module `name` is a pytest test module (tests/**/test_*.py)."""
  return name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")


def module_name(path: pathlib.Path, repo: pathlib.Path = REPO) -> str:
  """The dotted name a file or package directory under `repo` is imported by."""
  parts = path.relative_to(repo).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str, repo: pathlib.Path = REPO) -> bool:
  """Whether the dotted `name` is a module or package of `repo`."""
  path = repo.joinpath(*name.split("."))
  return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _fallbacks(tree):
  """The import statements in `except ImportError` handlers: other versions' paths."""
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ExceptHandler) and getattr(node.type, "id", "") in (
        "ImportError", "ModuleNotFoundError"):
      found.update(id(n) for statement in node.body for n in ast.walk(statement)
                   if isinstance(n, (ast.Import, ast.ImportFrom)))
  return found


def imported_modules(path: pathlib.Path, repo: pathlib.Path = REPO,
                     fallbacks: bool = True):
  """(line, module) for every import in the file at `path`, function-level ones too;
  without `fallbacks`, not those in an `except ImportError` handler.

  `from package import name` counts as importing `package.name` when that is a module,
  so `from tests import test_x` is seen as importing `tests.test_x`.
  """
  tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
  package = module_name(path if path.name == "__init__.py" else path.parent, repo).split(".")
  skipped = set() if fallbacks else _fallbacks(tree)
  for node in ast.walk(tree):
    if id(node) in skipped:
      continue
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
      names = {f"{base}.{alias.name}" for alias in node.names}
      for name in sorted({full if is_module(full, repo) else base for full in names}):
        yield node.lineno, name


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
