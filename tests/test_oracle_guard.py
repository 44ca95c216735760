"""tests/support/oracle_guard.py: a skipped oracle test fails the session (xdist or not).

Each case runs a small pytest session in a fresh directory whose conftest loads the
guard, in a subprocess (as `make test` runs pytest), and checks its exit status and
output.
"""

import pathlib

import pytest

from tests.support import oracle_guard

pytest_plugins = ["pytester"]

REPO = pathlib.Path(__file__).resolve().parents[1]

CONFTEST = 'pytest_plugins = ["tests.support.oracle_guard"]\n'
ORACLE_SKIPPED = """
import pytest

@pytest.mark.oracle
def test_compares_with_reference():
  pytest.skip("reference data absent")

def test_other():
  pass
"""
PLATFORM_SKIP = """
import pytest

@pytest.mark.skipif(True, reason="needs a CPU feature this machine lacks")
def test_cpu_feature():
  pass

@pytest.mark.oracle
def test_compares_with_reference():
  pass
"""
# A module of ORACLE_MODULES: its tests are oracle tests without a marker.
LISTED_MODULE_SKIPPED_IN_FIXTURE = """
import pytest

@pytest.fixture
def reference():
  pytest.skip("checkpoint absent")

def test_logits(reference):
  pass

def test_hparams():
  pass
"""
LISTED_MODULE_SKIPPED_WHOLE = """
import pytest

pytest.skip("sacremoses absent", allow_module_level=True)

def test_bleu():
  pass
"""


@pytest.fixture
def run(pytester, monkeypatch):
  """Writes the files, runs pytest on them in a subprocess: (RunResult, output)."""
  # The inner conftest imports tests.support.oracle_guard.
  monkeypatch.setenv("PYTHONPATH", str(REPO))

  def _run(files, *args):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**files)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", *args)
    return result, "\n".join(result.outlines + result.errlines)
  return _run


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_skipped_oracle_test_fails_the_session_and_is_named(run, xdist):
  result, output = run({"test_inner": ORACLE_SKIPPED}, *xdist)
  assert result.ret == pytest.ExitCode.TESTS_FAILED, output
  result.assert_outcomes(passed=1, skipped=1)
  assert "1 oracle test(s) skipped: the session fails" in output
  assert ("SKIPPED oracle test test_inner.py::test_compares_with_reference: "
          "Skipped: reference data absent") in output
  if xdist:
    assert "2 workers" in output  # the reports did come from xdist workers


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_listed_oracle_modules_fail_when_skipped_in_a_fixture_or_whole(run, xdist):
  files = {"test_t2t_import": LISTED_MODULE_SKIPPED_IN_FIXTURE,
           "test_bleu": LISTED_MODULE_SKIPPED_WHOLE}
  result, output = run(files, *xdist)
  assert result.ret == pytest.ExitCode.TESTS_FAILED, output
  assert "2 oracle test(s) skipped: the session fails" in output
  assert "SKIPPED oracle test test_bleu.py: Skipped: sacremoses absent" in output
  assert ("SKIPPED oracle test test_t2t_import.py::test_logits: Skipped: checkpoint absent"
          in output)
  assert "test_hparams" not in output.split("oracle test(s) skipped")[1]


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_other_skips_and_passing_oracle_tests_keep_the_session_green(run, xdist):
  result, output = run({"test_inner": PLATFORM_SKIP}, *xdist)
  assert result.ret == pytest.ExitCode.OK, output
  result.assert_outcomes(passed=1, skipped=1)
  assert "oracle test(s) skipped" not in output
  assert "needs a CPU feature this machine lacks" in output  # an ordinary skip, shown


def test_a_failure_keeps_its_exit_status(run):
  files = {"test_inner": ORACLE_SKIPPED + "\ndef test_broken():\n  assert False\n"}
  result, output = run(files)
  assert result.ret == pytest.ExitCode.TESTS_FAILED, output
  assert "1 oracle test(s) skipped" in output


def test_oracle_modules_exist_and_the_marker_is_registered(request):
  """A renamed module would silently leave the guard; --strict-markers accepts `oracle`."""
  for name in oracle_guard.ORACLE_MODULES:
    assert (REPO / "tests" / name).is_file(), name
  assert any(m.startswith("oracle:") for m in request.config.getini("markers"))
