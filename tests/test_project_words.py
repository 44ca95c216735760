"""The project's text names no tracker issue, working session or private path.

Users see the README, docs/, the code and the tests, not the tracker where the work
was planned nor the machines it was done on, so "issue 14", "the issue", "earlier
sessions", `../shared/...` or `/work/...` mean nothing to them. T2T's own GitHub
issues are cited as `tensorflow/tensor2tensor#NNN` or by URL, which these rules allow.
"""

import os
import re
from typing import Iterator, List, Tuple

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THIS_FILE = os.path.abspath(__file__)
SCANNED = ("README.md", "docs", "t2t_keras", "data_gen", "flags", "bench", "setup.py",
           "Makefile", "tests")
TEXT_SUFFIXES = (".py", ".md", ".flags", ".sh", ".txt", ".ini", ".cfg", ".toml", ".yaml")
# tests/data holds files written by others (T2T's checkpoint and its README) and trees.
SKIPPED_DIRS = {os.path.join(REPO, "tests", "data"), os.path.join(REPO, ".venv")}

ISSUE = re.compile(r"\bissues?\s*#?\d+|\b(?:the|this|that)\s+issue(?:'s)?\b", re.I)
SESSION = re.compile(r"\bsessions?\b", re.I)
PRIVATE_PATH = re.compile(r"\.\./(?:shared|mg-venv|before)\b|/work/|/tmp/pytest-")
# Allowed before matching: links to GitHub (T2T's issues among them) and TF1's
# `tf.compat.v1.Session` / "TF1 Session", the API's own name.
ALLOWED = re.compile(r"https?://github\.com/\S+|tf\.compat\.v1\.Session\b|\bTF1 Session\b")
RULES = (("a tracker issue", ISSUE), ("a working session", SESSION),
         ("a private path", PRIVATE_PATH))


def rules_for(path: str) -> Tuple[Tuple[str, "re.Pattern[str]"], ...]:
  """All rules; under tests/, pytest's and TF1's own "session" (fixture scope, session
  hooks, `session.run`) is the API's word, so only issues and paths are checked there."""
  if path.startswith(os.path.join(REPO, "tests") + os.sep):
    return tuple(rule for rule in RULES if rule[1] is not SESSION)
  return RULES


def hits_in(text: str, rules=RULES) -> List[Tuple[int, str, str]]:
  """(line number, rule name, matched text) for every forbidden word in `text`."""
  found = []
  for number, line in enumerate(text.splitlines(), 1):
    line = ALLOWED.sub(" ", line)
    for name, pattern in rules:
      found.extend((number, name, m.group(0)) for m in pattern.finditer(line))
  return found


def scanned_files() -> Iterator[str]:
  for entry in SCANNED:
    path = os.path.join(REPO, entry)
    if os.path.isfile(path):
      yield path
      continue
    for root, dirs, files in os.walk(path):
      dirs[:] = sorted(d for d in dirs if d != "__pycache__"
                       and os.path.join(root, d) not in SKIPPED_DIRS)
      for name in sorted(files):
        if name.endswith(TEXT_SUFFIXES) and os.path.join(root, name) != THIS_FILE:
          yield os.path.join(root, name)


@pytest.mark.parametrize("line", [
    "as issue 14 asked", "see Issue #15", "the Zen 4 of the issue", "the issue's target",
    "in earlier sessions", "one session", "--mg_python=../mg-venv/bin/python",
    "../shared/anchors", "--before_repo=../before", "/work/main/.venv",
    "/tmp/pytest-of-user/x"])
def test_rules_catch_each_kind_of_word(line):
  assert hits_in(line), line


@pytest.mark.parametrize("line", [
    "T2T's authors said so (tensorflow/tensor2tensor#61)",
    "https://github.com/tensorflow/tensor2tensor/issues/317",
    "the loader uses a TF1 Session", "tf.compat.v1.Session()", "--data_dir=work/data",
    "a worktree of each commit", "a tissue of 14 cells"])
def test_rules_allow_what_users_can_read(line):
  assert not hits_in(line), line


def test_no_tracker_issue_session_or_private_path_in_the_project():
  files = list(scanned_files())
  assert any(f.endswith("README.md") for f in files) and len(files) > 50
  hits = []
  for path in files:
    with open(path, encoding="utf-8") as f:
      text = f.read()
    hits.extend(f"{os.path.relpath(path, REPO)}:{n}: {name}: {word!r}"
                for n, name, word in hits_in(text, rules_for(path)))
  assert not hits, ("Words users cannot follow; cite T2T's issues as "
                    "tensorflow/tensor2tensor#NNN and use placeholders for paths:\n"
                    + "\n".join(hits))
