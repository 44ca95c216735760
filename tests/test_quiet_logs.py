"""The commands keep TensorFlow's C++ start-up lines out of their output unless asked.

The end-to-end tests run a command's module in a fresh process (TensorFlow can be
imported only once per process) with TF_CPP_MIN_LOG_LEVEL removed from the
environment, as a user's shell would have it.
"""

import os
import pathlib
import subprocess
import sys

import pytest

from t2t_keras.cli import quiet_logs

REPO = pathlib.Path(__file__).resolve().parent.parent
# What TensorFlow 2.21 prints on a CPU machine when it starts (each line seen there).
START_UP_LINES = ("All log messages before absl::InitializeLog()", "Could not find cuda drivers",
                  "cpu_feature_guard", "cuInit", "oneDNN custom operations")
# Imports a command's module and applies its runner's set-up (as `python -m
# t2t_keras.cli.avg_checkpoints` does first), then imports TensorFlow, logs a
# TensorFlow Python INFO line, runs an op and reports the level TensorFlow was given.
_CHILD = """
import os, sys
import t2t_keras.cli.avg_checkpoints
t2t_keras.cli.common_flags.set_up_process()
import logging
import tensorflow as tf
logging.getLogger().setLevel(logging.INFO)  # as absl's app.run does
tf.get_logger().info("TensorFlow Python INFO line")
from absl import logging as absl_logging
absl_logging.set_verbosity(absl_logging.INFO)  # absl's default in a command
import tempfile
tf.train.Checkpoint(v=tf.Variable(1.0)).write(tempfile.mkdtemp() + "/ckpt")  # absl INFO inside TF
absl_logging.info("absl INFO line of our own")
print("sum", int(tf.reduce_sum(tf.ones([3]))))
print("level", os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
print("python stderr kept", file=sys.stderr)
"""


def _run_child(extra_env=None, args=()):
  env = {k: v for k, v in os.environ.items()
         if k not in (quiet_logs.LEVEL_VAR, quiet_logs.MARKER_VAR)}
  env.update(PYTHONPATH=str(REPO), **(extra_env or {}))
  return subprocess.Popen([sys.executable, "-c", _CHILD, *args], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def children():
  """Two processes run side by side: default, and the user's TF_CPP_MIN_LOG_LEVEL=0.

  (--verbosity reaches the same code through `requested_level`, tested below.)
  """
  procs = {"default": _run_child(), "env0": _run_child({"TF_CPP_MIN_LOG_LEVEL": "0"})}
  out = {}
  for name, proc in procs.items():
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    out[name] = (stdout, stderr)
  return out


def test_a_command_prints_no_tensorflow_start_up_lines(children):
  stdout, stderr = children["default"]
  assert "sum 3" in stdout  # TensorFlow was imported and ran.
  assert "level 2" in stdout
  assert [line for line in stderr.splitlines()
          if any(s in line for s in START_UP_LINES)] == [], stderr
  assert "python stderr kept" in stderr  # stderr itself is not swallowed
  assert "TensorFlow Python INFO line" not in stderr
  # TensorFlow's INFO lines through absl (one per checkpoint saved) are dropped too;
  # our own absl INFO lines are not.
  assert "Sharding callback duration" not in stderr, stderr
  assert "absl INFO line of our own" in stderr


def test_the_users_choice_wins(children):
  stdout, stderr = children["env0"]
  assert "sum 3" in stdout
  assert "level 0" in stdout  # TensorFlow gets the user's level
  # With every level shown, TensorFlow's own start-up lines are back.
  assert any(s in stderr for s in START_UP_LINES), stderr
  assert "TensorFlow Python INFO line" in stderr
  assert "Sharding callback duration" in stderr


def test_filter_noise_drops_only_start_up_lines():
  text = ("WARNING: All log messages before absl::InitializeLog() is called are written to "
          "STDERR\n"
          "I0000 00:00:1.2 7029 cudart_stub.cc:31] Could not find cuda drivers on your machine.\n"
          "I0000 00:00:1.3 7029 cpu_feature_guard.cc:227] This TensorFlow binary is optimized\n"
          "To enable the following instructions: AVX2 FMA, in other operations, rebuild.\n"
          "E0000 00:00:1.4 7029 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR\n"
          "Traceback (most recent call last):\n"
          "W0000 00:00:1.5 7029 op_kernel.cc:1] OUT_OF_RANGE: real warning\n"
          "ValueError: --data_dir is required.\n")
  assert quiet_logs.filter_noise(text) == (
      "Traceback (most recent call last):\n"
      "W0000 00:00:1.5 7029 op_kernel.cc:1] OUT_OF_RANGE: real warning\n"
      "ValueError: --data_dir is required.\n")


@pytest.mark.parametrize("argv,level", [
    (["prog"], None), (["prog", "--verbosity=0"], "0"), (["prog", "-v", "1"], "0"),
    (["prog", "--verbosity=-1"], "1"), (["prog", "--v=-2"], "2"), (["prog", "-v=-9"], "3"),
    (["prog", "--verbosity", "-3"], "3"), (["prog", "--", "--verbosity=0"], None),
    (["prog", "--verbose_decode=1"], None)])
def test_requested_level_from_absl_verbosity(argv, level):
  assert quiet_logs.requested_level(argv) == level


def test_install_respects_the_user_and_marks_its_own_setting():
  env = {}
  quiet_logs.install(env, ["prog"])
  assert env == {"TF_CPP_MIN_LOG_LEVEL": "2", "T2T_KERAS_QUIET_TF": "2"}
  assert quiet_logs.active(env) and not quiet_logs.user_chose(env)
  # A child of a quieted command stays quiet; its own --verbosity sets the level.
  child = dict(env)
  quiet_logs.install(child, ["prog", "--verbosity=-1"])
  assert child == {"TF_CPP_MIN_LOG_LEVEL": "1", "T2T_KERAS_QUIET_TF": "1"}
  quiet_logs.install(child, ["prog", "-v", "0"])
  assert child == {"TF_CPP_MIN_LOG_LEVEL": "0"} and not quiet_logs.active(child)
  # The user's own variable wins over everything, --verbosity included.
  user = {"TF_CPP_MIN_LOG_LEVEL": "3"}
  quiet_logs.install(user, ["prog", "--verbosity=0"])
  assert user == {"TF_CPP_MIN_LOG_LEVEL": "3"} and not quiet_logs.active(user)
