"""The library's layout: packages by concept, imported in one direction, each module named.

Read from the modules' own import statements (function-level ones included), so a
new import that closes a loop between packages, or makes `perf/` depend on what
sits above it, fails here before it confuses a reader.
"""

import ast
import pathlib
import re

import pytest

from tests.support.imports import imported_modules, module_name

REPO = pathlib.Path(__file__).resolve().parent.parent
LIBRARY = REPO / "t2t_keras"
# What `perf/`, the bottom layer, may import of the library: itself and the leaf
# modules, which import nothing else of the library.
LEAVES = ("t2t_keras.errors", "t2t_keras.version", "t2t_keras.old_paths", "t2t_keras.hparams")
PERF_MAY_IMPORT = ("t2t_keras.perf",) + LEAVES
# T2T's hparams are one unit: the class (hparams.py), its registered sets
# (hparams_sets.py, which import the class; hparams.py loads them on first use) and
# their checks.
HPARAMS_UNIT = ("t2t_keras.hparams", "t2t_keras.hparams_sets", "t2t_keras.hparams_checks")


def library_files(root: pathlib.Path = LIBRARY):
  return sorted(root.rglob("*.py"))


def unit_of(module: str, repo: pathlib.Path = REPO) -> str:
  """The node of the package graph a module belongs to: its package below t2t_keras
  (`t2t_keras.decoding`), a top-level module (`t2t_keras.model`), or `data_gen`."""
  parts = module.split(".")
  if module in HPARAMS_UNIT:
    return "t2t_keras.hparams"
  if parts[0] != "t2t_keras":
    return parts[0]
  if len(parts) >= 2 and (repo / "t2t_keras" / parts[1]).is_dir():
    return ".".join(parts[:2])
  return module


def package_graph(files, repo: pathlib.Path = REPO):
  """{unit: {unit: [(file, line, module)]}} of the imports between units; the root
  package `t2t_keras` (its lazy public names) is no unit."""
  graph = {}
  for path in files:
    source = unit_of(module_name(path, repo), repo)
    graph.setdefault(source, {})
    for line, name in imported_modules(path, repo):
      if name.split(".")[0] not in ("t2t_keras", "data_gen") or name == "t2t_keras":
        continue
      target = unit_of(name, repo)
      if target != source:
        graph[source].setdefault(target, []).append((str(path.relative_to(repo)), line, name))
  return graph


def loops(graph):
  """The strongly connected groups of more than one unit (Tarjan's algorithm)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for target in graph.get(node, {}):
      if target not in index:
        visit(target)
        low[node] = min(low[node], low[target])
      elif target in on_stack:
        low[node] = min(low[node], index[target])
    if low[node] == index[node]:
      group = []
      while True:
        member = stack.pop()
        on_stack.discard(member)
        group.append(member)
        if member == node:
          break
      if len(group) > 1:
        found.append(sorted(group))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return found


def _describe(graph, group):
  return "\n".join(f"  {source} -> {target}: {path}:{line} imports {name}"
                   for source in group for target in group if target in graph[source]
                   for path, line, name in graph[source][target][:2])


def test_no_import_loop_between_packages():
  files = library_files() + library_files(REPO / "data_gen")
  graph = package_graph(files)
  found = loops(graph)
  assert not found, "Import loops between packages:\n" + "\n".join(
      _describe(graph, group) for group in found)


def test_perf_is_the_bottom_layer():
  """perf/ holds the speed special cases that layers, searches and training call; it
  imports nothing above it."""
  wrong = [f"{path.relative_to(REPO)}:{line}: {name}"
           for path in library_files(LIBRARY / "perf")
           for line, name in imported_modules(path)
           if name.startswith("t2t_keras.") and not name.startswith(PERF_MAY_IMPORT)]
  assert not wrong, "\n".join(wrong)


def test_leaves_import_nothing_else_of_the_library():
  graph = package_graph(library_files() + library_files(REPO / "data_gen"))
  wrong = {leaf: sorted(graph.get(leaf, {})) for leaf in LEAVES if graph.get(leaf)}
  assert not wrong, wrong


def test_data_gen_imports_nothing_of_the_library():
  wrong = [f"{path.relative_to(REPO)}:{line}: {name}"
           for path in library_files(REPO / "data_gen")
           for line, name in imported_modules(path) if name.split(".")[0] == "t2t_keras"]
  assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("files, expected", [
    ({"t2t_keras/a/__init__.py": "", "t2t_keras/a/x.py": "from t2t_keras.b import y\n",
      "t2t_keras/b/__init__.py": "", "t2t_keras/b/y.py": "def f():\n  from t2t_keras.a import x\n"},
     [["t2t_keras.a", "t2t_keras.b"]]),
    ({"t2t_keras/a/__init__.py": "", "t2t_keras/a/x.py": "from t2t_keras import m\n",
      "t2t_keras/m.py": "from t2t_keras.a import x\n"},
     [["t2t_keras.a", "t2t_keras.m"]]),
    ({"t2t_keras/a/__init__.py": "", "t2t_keras/a/x.py": "from t2t_keras.a import z\n",
      "t2t_keras/a/z.py": "from t2t_keras import m\n", "t2t_keras/m.py": ""}, []),
], ids=["function_level_loop", "through_a_top_module", "within_a_package"])
def test_the_loop_check_sees_a_loop(files, expected, tmp_path):
  for name, text in files.items():
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
  (tmp_path / "t2t_keras" / "__init__.py").write_text("")
  graph = package_graph(sorted((tmp_path / "t2t_keras").rglob("*.py")), tmp_path)
  assert loops(graph) == expected


def _function_imports(tree):
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      found.update(n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
  return sorted(found, key=lambda n: n.lineno)


def unexplained_function_imports(path: pathlib.Path):
  """Line numbers of imports inside functions with no comment saying why: on the
  import's own line, or on the comment line above it or above its group of imports."""
  text = path.read_text(encoding="utf-8")
  lines = text.splitlines()
  found = []
  for node in _function_imports(ast.parse(text)):
    if "#" in " ".join(lines[node.lineno - 1:node.end_lineno]):
      continue
    above = node.lineno - 2
    while above >= 0 and re.match(r"\s*(from\s+\S+\s+)?import\s", lines[above]):
      above -= 1  # the group of imports this one belongs to
    if above >= 0 and lines[above].strip().startswith("#"):
      continue
    found.append(node.lineno)
  return found


def test_imports_inside_functions_say_why():
  """Imports stay at the top of a module, but for optional dependencies and what a
  command's --help must not load; each of those says why in a few words."""
  found = [f"{path.relative_to(REPO)}:{line}" for path in library_files()
           for line in unexplained_function_imports(path)]
  assert not found, ("Move these imports to the top of their module, or say why they "
                     "cannot be there:\n" + "\n".join(found))


@pytest.mark.parametrize("source, expected", [
    ("def f():\n  import x\n", [2]),
    ("def f():\n  import x  # optional dependency\n", []),
    ("def f():\n  # TensorFlow: not for --help\n  import x\n  from y import z\n", []),
    ("def f():\n  # a comment about something else\n  a = 1\n  import x\n", [4]),
    ("import x\n", []),
], ids=["bare", "own_line", "group", "comment_elsewhere", "top_level"])
def test_the_import_rule_sees_unexplained_imports(source, expected, tmp_path):
  path = tmp_path / "m.py"
  path.write_text(source)
  assert unexplained_function_imports(path) == expected


def test_architecture_doc_names_every_module():
  """docs/architecture.md lists every package and module with its role."""
  doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
  missing = [str(path.relative_to(REPO)) for path in library_files()
             if path.name != "__init__.py" and
             f"`{path.relative_to(LIBRARY).as_posix()}`" not in doc]
  packages = [p.name + "/" for p in LIBRARY.iterdir()
              if (p / "__init__.py").is_file() and f"`{p.name}/`" not in doc]
  assert not missing and not packages, (
      f"docs/architecture.md does not name: {missing + packages}")
