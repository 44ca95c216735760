"""The Makefile checks the interpreter against setup.py's python_requires before installing."""

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Under `make test` the outer make's settings would reach the inner one (and print
# "make[1]: Entering directory ...").
ENV = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}


def _make_variable(name: str) -> str:
  out = subprocess.run(["make", "--no-print-directory", "-pn", "-f", "Makefile"], cwd=REPO,
                       env=ENV, capture_output=True, text=True, check=False).stdout
  match = re.search(r"^%s := (.*)$" % name, out, re.MULTILINE)
  assert match, f"{name} not in the Makefile's database"
  return match.group(1)


def _python_requires():
  with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
    lo, hi = re.search(r'python_requires=">=([\d.]+),<([\d.]+)"', f.read()).groups()
  return tuple(map(int, lo.split("."))), tuple(map(int, hi.split(".")))


def _check(version):
  """Runs the Makefile's check as if the interpreter were `version`."""
  code = f"import sys; sys.version_info = {tuple(version) + (0, 'final', 0)!r}; " + \
      _make_variable("PY_RANGE_CHECK")
  return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                        text=True, check=False)


def test_supported_range_is_310_to_313():
  assert _python_requires() == ((3, 10), (3, 14))


@pytest.mark.parametrize("version", [(3, 10), (3, 11), (3, 12), (3, 13)])
def test_supported_pythons_pass_silently(version):
  res = _check(version)
  assert (res.returncode, res.stdout, res.stderr) == (0, "", "")


@pytest.mark.parametrize("version", [(3, 9), (3, 14), (2, 7)])
def test_other_pythons_get_one_line_naming_how_to_pick_another(version):
  res = _check(version)
  assert res.returncode == 1
  lines = res.stdout.splitlines()
  assert len(lines) == 1, res.stdout
  assert f"is Python {version[0]}.{version[1]};" in lines[0]
  assert ">=3.10,<3.14" in lines[0] and "make PYTHON=python3.12" in lines[0]


def test_a_missing_interpreter_is_one_line_before_any_install(tmp_path):
  res = subprocess.run(["make", "--no-print-directory", "install", "PYTHON=no-such-python3",
                        f"VENV={tmp_path}/v"], cwd=REPO, env=ENV, capture_output=True,
                       text=True, check=False)
  assert res.returncode != 0
  assert res.stdout.strip().splitlines() == [
      "make: PYTHON=no-such-python3 is not a command. Pick an installed interpreter: "
      "make PYTHON=python3.12 (or a full path)."]
  assert not (tmp_path / "v").exists()
