"""The package a user installs: the wheel's contents and metadata, `--version`, and
the flagfiles found by name once installed.

`test_wheel_installs_and_runs_outside_the_repository` builds the wheel as `pip install .`
does, installs it (without dependencies) in a fresh virtualenv and runs its console
script from a directory that holds no checkout; the dependencies (TensorFlow, absl) come
from this test's interpreter through PYTHONPATH, which holds no t2t_keras (an editable
install is a .pth file, which PYTHONPATH does not read).
"""

import ast
import concurrent.futures
import email.parser
import os
import pathlib
import re
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from t2t_keras.cli import common_flags

REPO = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
VERSION = re.search(r'^__version__ = "([^"]+)"',
                    (REPO / "t2t_keras" / "version.py").read_text(), re.M).group(1)
FLAGFILES = sorted(p.name for p in (REPO / "flags").glob("*.flags"))


def _console_scripts() -> list:
  tree = ast.parse((REPO / "setup.py").read_text())
  for node in tree.body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CONSOLE_SCRIPTS":
      return [e.split("=")[0].strip() for e in ast.literal_eval(node.value)]
  raise AssertionError("setup.py has no CONSOLE_SCRIPTS")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
  out = tmp_path_factory.mktemp("wheel")
  result = subprocess.run(
      [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(REPO)],
      capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stdout + result.stderr
  (path,) = out.glob("t2t_keras-*.whl")
  return path


def test_the_version_is_set_in_one_place():
  import t2t_keras
  assert t2t_keras.__version__ == VERSION
  assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
  setup = (REPO / "setup.py").read_text()
  assert not re.search(r"version\s*=\s*[\"']", setup), "setup.py must read t2t_keras/version.py"
  changelog = (REPO / "CHANGELOG.md").read_text()
  assert re.search(rf"^## {re.escape(VERSION)}\b", changelog, re.M), "CHANGELOG.md lacks it"


def test_every_command_prints_its_version_without_tensorflow():
  commands = _console_scripts()

  def run(name):
    return subprocess.run([str(BIN / name), "--version"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONVERBOSE="1"))

  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    results = dict(zip(commands, pool.map(run, commands)))
  for name, result in results.items():
    assert result.returncode == 0, (name, result.stderr[-2000:])
    assert result.stdout == f"{name} {VERSION}\n", name
    # PYTHONVERBOSE lists every module imported: TensorFlow is not among them.
    assert not re.search(r"^import 'tensorflow'", result.stderr, re.M), name


def test_wheel_holds_the_layout_the_licence_and_the_flagfiles(wheel):
  with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    dist_info = f"t2t_keras-{VERSION}.dist-info"
    top = {n.split("/")[0] for n in names}
    assert top == {"t2t_keras", "data_gen", dist_info}, top
    packaged = sorted(n.split("/")[-1] for n in names if n.startswith("t2t_keras/flagfiles/"))
    assert packaged == FLAGFILES
    for name in FLAGFILES:
      assert z.read(f"t2t_keras/flagfiles/{name}") == (REPO / "flags" / name).read_bytes()
    meta = email.parser.Parser().parsestr(z.read(f"{dist_info}/METADATA").decode())
    assert meta["Version"] == VERSION
    assert "Apache-2.0" in (meta.get("License-Expression"), meta.get("License")), meta.items()
    for licence in ("LICENSE", "NOTICE"):
      (found,) = [n for n in names if n.startswith(dist_info) and n.endswith("/" + licence)]
      assert z.read(found) == (REPO / licence).read_bytes()
    entry_points = z.read(f"{dist_info}/entry_points.txt").decode()
    scripts = re.findall(r"^(\w+) = ", entry_points.split("[console_scripts]")[1], re.M)
    assert sorted(scripts) == sorted(_console_scripts())
  assert "Apache License" in (REPO / "LICENSE").read_text()
  assert "Version 2.0" in (REPO / "LICENSE").read_text()


def test_wheel_installs_and_runs_outside_the_repository(wheel, tmp_path):
  venv = tmp_path / "fresh"
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
  python = venv / "bin" / "python"
  result = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                           str(wheel)], capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stdout + result.stderr
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  env = dict(os.environ, PYTHONPATH=sysconfig.get_paths()["purelib"])
  trainer = str(venv / "bin" / "t2t_keras_trainer")

  def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, cwd=elsewhere, env=env,
                          timeout=300)

  where = run(str(python), "-c", "import t2t_keras; print(t2t_keras.__file__)")
  assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
  assert run(trainer, "--version").stdout == f"t2t_keras_trainer {VERSION}\n"
  # The packaged flagfile is read by its name: the problem it sets reaches the trainer's
  # check of the data directory, which names it.
  for name in ("demo", "demo.flags", "flags/demo.flags"):
    result = run(trainer, f"--flagfile={name}", f"--data_dir={tmp_path / 'no_data'}",
                 f"--output_dir={tmp_path / 'run'}")
    assert result.returncode != 0
    assert "has no data of problem translate_ende_ding_bible8k" in result.stderr, result.stderr
  missing = run(trainer, "--flagfile=no_such_setup")
  assert missing.returncode == 2
  message = missing.stderr.strip().splitlines()
  assert len(message) == 1 and "installed: demo, " in message[0], missing.stderr


def test_a_file_of_that_name_comes_before_the_packaged_flagfile(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert common_flags.find_flagfile("demo") == str(REPO / "flags" / "demo.flags")
  (tmp_path / "demo").write_text("--problem=mine\n")
  assert common_flags.find_flagfile("demo") == "demo"
  # A path into another directory is the user's: never replaced by a packaged file.
  assert common_flags.find_flagfile("other/demo.flags") == "other/demo.flags"


def test_library_files_and_readme_keep_the_size_rules():
  """STYLE's small modules: no library file over 600 lines; the README at most 450."""
  sizes = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines())
           for top in ("t2t_keras", "data_gen") for p in (REPO / top).rglob("*.py")}
  assert len(sizes) > 40
  assert not {f: n for f, n in sizes.items() if n > 600}, "split these modules"
  assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 450
