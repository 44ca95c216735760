"""run_cli turns each user-facing error into one line and its exit status (errors.py)."""

import errno
import subprocess
import sys
import textwrap

import pytest

from t2t_keras import errors

_PROGRAM = textwrap.dedent("""
    import errno, sys
    from t2t_keras import errors
    from t2t_keras.cli import common_flags

    def main(argv):
      kind = KIND
      if kind == "run":
        raise errors.RunError("the run directory is locked")
      if kind == "divergence":
        raise errors.DivergenceError("loss became nan at step 15")
      if kind == "storage":
        raise errors.StorageError("no space left writing ckpt-31")
      if kind == "enospc":
        raise OSError(errno.ENOSPC, "No space left on device", "/data/out.txt")
      if kind == "efbig":
        raise OSError(errno.EFBIG, "File too large", "/data/out.txt")
      raise KeyError("a bug")

    common_flags.run_cli(main)
""")


def _run(kind):
  code = _PROGRAM.replace("KIND", repr(kind))
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=120)


@pytest.mark.parametrize("kind,status,words", [
    ("run", 2, "the run directory is locked"),
    ("divergence", 3, "loss became nan at step 15"),
    ("storage", 4, "no space left writing ckpt-31"),
    ("enospc", 4, "no space left writing /data/out.txt"),
    ("efbig", 4, "no space left writing /data/out.txt"),
])
def test_user_errors_are_one_line_with_their_status(kind, status, words):
  res = _run(kind)
  assert res.returncode == status, res.stderr
  lines = res.stderr.strip().splitlines()
  assert len(lines) == 1, res.stderr
  assert words in lines[0] and ": error: " in lines[0]
  assert "Traceback" not in res.stderr


def test_a_bug_keeps_its_traceback():
  res = _run("bug")
  assert res.returncode == 1
  assert "Traceback" in res.stderr and "KeyError" in res.stderr


def test_storage_errnos():
  assert errors.is_storage_error(OSError(errno.ENOSPC, "full"))
  assert errors.is_storage_error(OSError(errno.EFBIG, "too big"))
  assert not errors.is_storage_error(OSError(errno.ENOENT, "missing"))
  assert not errors.is_storage_error(ValueError("x"))
