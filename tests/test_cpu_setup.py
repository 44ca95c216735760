"""cpu_setup turns TensorFlow's oneDNN kernels on for the commands, unless the user chose."""

import os
import platform
import subprocess
import sys

import pytest

from t2t_keras import cpu_setup

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("machine,preset,want", [
    ("x86_64", None, "1"), ("AMD64", None, "1"),
    ("x86_64", "0", "0"), ("x86_64", "1", "1"),  # the user's choice stands
    ("aarch64", None, None), ("arm64", None, None)])  # TensorFlow's own default there
def test_onednn_is_set_on_x86_64_only_when_the_user_has_not(machine, preset, want):
  environ = {} if preset is None else {cpu_setup.ONEDNN_ENV: preset}
  changed = cpu_setup.enable_onednn(environ, machine)
  assert environ.get(cpu_setup.ONEDNN_ENV) == want
  assert changed is (preset is None and want == "1")


_CHILD = ("import t2t_keras.cli, os\n"
          "from tensorflow.python.util import _pywrap_util_port as port\n"
          "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'), port.IsMklEnabled())\n")


def _child(env_onednn=None):
  env = {k: v for k, v in os.environ.items() if k != cpu_setup.ONEDNN_ENV}
  if env_onednn is not None:
    env[cpu_setup.ONEDNN_ENV] = env_onednn
  out = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=REPO, text=True,
                       capture_output=True, check=True).stdout
  return out.split()[-2:]


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="oneDNN is set by the commands on x86-64 only")
def test_importing_the_commands_turns_onednn_on_in_tensorflow():
  # TensorFlow reads the variable when it loads: it must be set before that.
  assert _child() == ["1", "True"]
  assert _child("0") == ["0", "False"]  # the opt-out reaches TensorFlow too


def test_tests_run_with_the_commands_onednn_setting():
  """conftest applies the commands' set-up before TensorFlow loads: same kernels."""
  from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  chosen = os.environ.get(cpu_setup.ONEDNN_ENV)  # conftest's, or the user's before pytest
  command = _child(chosen)  # what a command's process sets and gets with that environment
  assert [str(chosen), str(_pywrap_util_port.IsMklEnabled())] == command
  if platform.machine().lower() in ("x86_64", "amd64"):
    assert chosen in ("0", "1")
