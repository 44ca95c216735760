"""perf.process: the commands' process set-up (oneDNN on unless the user chose), applied
explicitly by the command runner before TensorFlow loads; glibc's freed-memory setting
applied once after the first training step."""

import os
import pathlib
import platform
import subprocess
import sys

import pytest

from t2t_keras import perf
from t2t_keras.perf import process
from tests.support.cli import run_cli
from tests.support.tiny_problem import make_tiny_problem

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
X86_64 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.mark.parametrize("machine,preset,want", [
    ("x86_64", None, "1"), ("AMD64", None, "1"),
    ("x86_64", "0", "0"), ("x86_64", "1", "1"),  # the user's choice stands
    ("aarch64", None, None), ("arm64", None, None)])  # TensorFlow's own default there
def test_onednn_is_set_on_x86_64_only_when_the_user_has_not(machine, preset, want):
  environ = {} if preset is None else {process.ONEDNN_ENV: preset}
  changed = process.enable_onednn(environ, machine)
  assert environ.get(process.ONEDNN_ENV) == want
  assert changed is (preset is None and want == "1")


# A command run through the runner; an audit hook records TF_ENABLE_ONEDNN_OPTS at the
# moment `tensorflow` is first imported (TensorFlow reads it then, and only then).
_CHILD = """
import atexit, os, sys
seen = []
def hook(event, args):
  if event == "import" and args[0] == "tensorflow" and not seen:
    seen.append(os.environ.get("TF_ENABLE_ONEDNN_OPTS"))
sys.addaudithook(hook)
atexit.register(lambda: print("at import:", seen[0] if seen else "never"))
from t2t_keras.cli import common_flags
def main(argv):
  from tensorflow.python.util import _pywrap_util_port as port
  print(os.environ.get("TF_ENABLE_ONEDNN_OPTS"), port.IsMklEnabled())
common_flags.run_cli(main)
"""


def _child(env_onednn=None, plain=None):
  """(returncode, stdout lines, stderr) of _CHILD with this environment."""
  env = {k: v for k, v in os.environ.items()
         if k not in (process.ONEDNN_ENV, perf.PLAIN_OPS_ENV)}
  env["PYTHONPATH"] = REPO
  if env_onednn is not None:
    env[process.ONEDNN_ENV] = env_onednn
  if plain is not None:
    env[perf.PLAIN_OPS_ENV] = plain
  res = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=REPO, text=True,
                       capture_output=True, timeout=300)
  return res.returncode, res.stdout.splitlines(), res.stderr


@pytest.mark.skipif(not X86_64, reason="oneDNN is set by the commands on x86-64 only")
def test_the_command_runner_turns_onednn_on_before_tensorflow_loads():
  code, out, err = _child()
  assert code == 0, err
  assert out == ["1 True", "at import: 1"]
  code, out, err = _child("0")  # the opt-out reaches TensorFlow too
  assert code == 0, err
  assert out == ["0 False", "at import: 0"]


def test_plain_ops_leaves_onednn_to_tensorflow():
  code, out, err = _child(plain="1")
  assert code == 0, err
  assert out[-1] == "at import: None"  # unset: TensorFlow's own choice
  assert out[0].startswith("None ")


def test_a_bad_plain_ops_value_is_a_usage_error_before_tensorflow_loads():
  code, out, err = _child(plain="maybe")
  assert code == 2
  assert out == ["at import: never"]
  lines = err.strip().splitlines()
  assert len(lines) == 1, err
  assert lines[0].startswith("-c: error: T2T_KERAS_PLAIN_OPS='maybe': set it to 1"), err


def test_a_command_refuses_a_bad_plain_ops_value_in_one_line(monkeypatch, capsys):
  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "2")
  code, err = run_cli("t2t_keras.cli.avg_checkpoints", ["--output_dir=/nonexistent"], capsys)
  assert code == 2
  assert err.startswith("prog: error: T2T_KERAS_PLAIN_OPS='2'") and err.count("\n") == 1, err


def test_importing_the_commands_changes_nothing_in_the_process():
  code = ("import os, sys\n"
          "before, finders = dict(os.environ), list(sys.meta_path)\n"
          "import t2t_keras.cli\n"
          "import t2t_keras.cli.trainer, t2t_keras.cli.decoder, t2t_keras.cli.exporter\n"
          "import t2t_keras.cli.datagen, t2t_keras.cli.demo, t2t_keras.cli.avg_checkpoints\n"
          # quiet_logs' import hook; not the 0.x paths' finder, installed by
          # `import t2t_keras` itself
          "ours = [f for f in sys.meta_path if f not in finders and\n"
          "        type(f).__module__.startswith('t2t_keras') and\n"
          "        type(f).__module__ != 't2t_keras.old_paths']\n"
          "print(dict(os.environ) == before, ours == [],\n"
          "      'tensorflow' in sys.modules)\n")
  env = {k: v for k, v in os.environ.items()
         if k not in (process.ONEDNN_ENV, "TF_CPP_MIN_LOG_LEVEL", "T2T_KERAS_QUIET_TF")}
  env["PYTHONPATH"] = REPO
  out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, text=True,
                       capture_output=True, check=True, timeout=300).stdout
  assert out.split() == ["True", "True", "False"]


def test_tests_run_with_the_commands_onednn_setting():
  """conftest applies the commands' set-up before TensorFlow loads: same kernels."""
  from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  chosen = os.environ.get(process.ONEDNN_ENV)  # conftest's, or the user's before pytest
  code, out, err = _child(chosen)  # what a command's process sets and gets with that environment
  assert code == 0, err
  assert out[0].split() == [str(chosen), str(_pywrap_util_port.IsMklEnabled())]
  if X86_64:
    assert chosen in ("0", "1")


class _FakeLibc:
  def __init__(self):
    self.calls = []

  def mallopt(self, param, value):
    self.calls.append((param, value))
    return 1


def test_keep_freed_memory_sets_both_thresholds_unless_plain_or_chosen(monkeypatch):
  monkeypatch.delenv(perf.PLAIN_OPS_ENV, raising=False)
  libc = _FakeLibc()
  assert process.keep_freed_memory(libc, environ={})
  assert libc.calls == [(-3, 32 << 20), (-1, 64 << 20)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
  libc = _FakeLibc()
  assert not process.keep_freed_memory(libc, environ={"MALLOC_MMAP_THRESHOLD_": "65536"})
  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "1")
  assert not process.keep_freed_memory(libc, environ={})
  assert libc.calls == []


def test_the_trainer_keeps_freed_memory_once_after_its_first_step(tmp_path, monkeypatch, capsys):
  from t2t_keras.training import trainer
  events = []
  step = trainer.Trainer.train_step

  def counted_step(self, iterator):
    events.append("step")
    return step(self, iterator)

  monkeypatch.setattr(trainer.Trainer, "train_step", counted_step)
  monkeypatch.setattr(process, "keep_freed_memory", lambda: events.append("keep"))
  data_dir = make_tiny_problem(str(tmp_path / "data"), train=100, dev=8)
  code, err = run_cli("t2t_keras.cli.trainer", [
      "--problem=translate_from_files", f"--data_dir={data_dir}",
      f"--output_dir={tmp_path / 'run'}", "--hparams_set=transformer_tiny",
      "--hparams=num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,batch_size=128",
      "--schedule=train", "--train_steps=3", "--local_eval_frequency=100"], capsys)
  assert code in (0, None), err  # app.run's sys.exit(main()) of a main returning None
  assert events == ["step", "keep", "step", "step"]


def test_the_library_never_applies_the_process_set_up():
  """Only the commands (cli/) and the set-up itself (perf/) name perf.process."""
  package = pathlib.Path(REPO, "t2t_keras")
  users = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                 if p.parts[-2] not in ("cli", "perf") and
                 ("perf import process" in p.read_text() or "perf.process" in p.read_text()))
  assert users == []
