"""What a Python file imports, read from its syntax tree: for the layout tests."""

import ast
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]


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
