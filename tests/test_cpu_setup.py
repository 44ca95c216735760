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


class _FakeLibc:
  def __init__(self, accepts=True):
    self.calls, self.accepts = [], accepts

  def mallopt(self, param, value):
    self.calls.append((param, value))
    return 1 if self.accepts else 0


def test_keep_freed_memory_sets_glibc_mmap_and_trim_thresholds():
  libc = _FakeLibc()
  assert cpu_setup.keep_freed_memory(libc, environ={})
  # malloc.h: M_MMAP_THRESHOLD is -3, M_TRIM_THRESHOLD -1; 32 MiB is glibc's maximum.
  assert libc.calls == [(-3, 32 * 2**20), (-1, 64 * 2**20)]
  assert not cpu_setup.keep_freed_memory(_FakeLibc(accepts=False), environ={})
  # Tunables that leave malloc alone are not a malloc choice.
  assert cpu_setup.keep_freed_memory(_FakeLibc(), environ={"GLIBC_TUNABLES": "glibc.rtld.nns=2"})


@pytest.mark.parametrize("environ", [
    {"MALLOC_MMAP_THRESHOLD_": "131072"}, {"MALLOC_TRIM_THRESHOLD_": "0"},
    {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=1:glibc.malloc.mmap_threshold=4096"}])
def test_keep_freed_memory_leaves_the_users_malloc_settings(environ):
  libc = _FakeLibc()
  assert not cpu_setup.keep_freed_memory(libc, environ=environ)
  assert libc.calls == []


# The child counts the page faults of allocating, writing and freeing a 2.5 MB
# block (640 pages) through glibc, as oneDNN's matmuls do with their packing
# buffers: at the start, after the training input pipeline's iterator exists
# (tf.data's mallopt), and after the Trainer's first step.
_MALLOC_CHILD = r"""
import ctypes, resource
import numpy as np, tensorflow as tf
from t2t_keras import hparams, run_dir, training
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
SIZE = 2_500_000
def faults_per_block():
  counts = []
  for _ in range(10):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    p = libc.malloc(SIZE)
    ctypes.memset(p, 1, SIZE)
    libc.free(p)
    counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
  return sorted(counts)[5]
start = faults_per_block()
hp = hparams.create_hparams("transformer_tiny", "num_hidden_layers=1,hidden_size=16,"
                            "filter_size=16,num_heads=2")
trainer = training.Trainer(hp, run_dir.ModelSpec(20, 20),
                           tf.distribute.OneDeviceStrategy("/cpu:0"))
batch = {k: np.full((2, 5), 3, np.int64) for k in ("inputs", "targets")}
ds = tf.data.Dataset.from_tensors(batch).repeat()
iterator = iter(trainer.strategy.experimental_distribute_dataset(ds))
with_pipeline = faults_per_block()
trainer.train_step(iterator)
print(start, with_pipeline, faults_per_block())
"""


@pytest.mark.skipif(cpu_setup._glibc() is None, reason="glibc's malloc only")
def test_trainer_keeps_freed_blocks_for_reuse_after_tf_data_fixed_the_threshold():
  env = {k: v for k, v in os.environ.items()
         if k not in cpu_setup.MALLOC_USER_ENV and k != "GLIBC_TUNABLES"}
  out = subprocess.run([sys.executable, "-c", _MALLOC_CHILD], env=env, cwd=REPO, text=True,
                       capture_output=True, check=True).stdout
  start, with_pipeline, after_step = map(int, out.split()[-3:])
  pages = 2_500_000 // 4096
  if sys.version_info >= (3, 11):  # TensorFlow's Python 3.11 memory patch
    assert with_pipeline >= pages, (start, with_pipeline, after_step)
  assert after_step < pages // 20, (start, with_pipeline, after_step)
