"""pytest plugin: a skipped oracle test fails the session.

Oracle tests compare the port with an independent reference: the checkpoint T2T
itself wrote (test_t2t_import), the NumPy ports of T2T's model and decoding
(test_t2t_import, test_beam_search, test_decoding), EVALB's scoring rules on
hand-scored trees (test_evalb), BLEU by enumeration and sacremoses (test_bleu).
A skip there passes silently while proving nothing, so the session exits
non-zero and names every skipped oracle test with its reason.

The tests of `ORACLE_MODULES` get the `oracle` marker at collection; any other
test can take it with `@pytest.mark.oracle`. Skips elsewhere (a CPU feature
missing on this machine) are left alone. Under pytest-xdist the controller
receives the workers' reports through `pytest_runtest_logreport` and
`pytest_collectreport` and decides there; the workers do not.
"""

import pytest

MARKER = "oracle"
# Test modules (file names under tests/) whose every test is an oracle test.
ORACLE_MODULES = ("test_t2t_import.py", "test_beam_search.py", "test_decoding.py",
                  "test_evalb.py", "test_bleu.py")


def _module(nodeid):
  return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


def _reason(report):
  longrepr = report.longrepr
  if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3:
    return str(longrepr[2])  # (path, line, "Skipped: why")
  return str(longrepr)


class OracleGuard:
  """Collects skipped oracle tests; fails the session if there are any."""

  def __init__(self):
    self.skipped = {}  # nodeid -> reason

  def pytest_collection_modifyitems(self, items):
    for item in items:
      if _module(item.nodeid) in ORACLE_MODULES:
        item.add_marker(MARKER)

  def pytest_collectreport(self, report):
    # A module skipped as a whole (pytest.skip(allow_module_level=True),
    # pytest.importorskip) has no items to carry the marker.
    if report.skipped and _module(report.nodeid) in ORACLE_MODULES:
      self.skipped[report.nodeid] = _reason(report)

  def pytest_runtest_logreport(self, report):
    # xfail is reported as skipped with `wasxfail`: an expected failure, not a skip.
    if report.skipped and MARKER in report.keywords and not hasattr(report, "wasxfail"):
      self.skipped[report.nodeid] = _reason(report)

  def pytest_sessionfinish(self, session):
    if self.skipped and not hasattr(session.config, "workerinput"):
      if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

  @pytest.hookimpl(trylast=True)
  def pytest_terminal_summary(self, terminalreporter, config):
    if not self.skipped or hasattr(config, "workerinput"):
      return
    tr = terminalreporter
    tr.write_sep("=", f"{len(self.skipped)} oracle test(s) skipped: the session fails",
                 red=True, bold=True)
    for nodeid, reason in sorted(self.skipped.items()):
      tr.write_line(f"SKIPPED oracle test {nodeid}: {reason}", red=True)
    tr.write_line("These tests compare with an independent reference; a skip hides a "
                  "failure. Make them run (install or restore what the reason names).")


def pytest_configure(config):
  config.addinivalue_line(
      "markers", f"{MARKER}: compares with an independent reference; the session "
      "fails if such a test is skipped (tests/support/oracle_guard.py)")
  if not config.pluginmanager.has_plugin("oracle_guard_state"):
    config.pluginmanager.register(OracleGuard(), "oracle_guard_state")
