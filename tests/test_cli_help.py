"""`--help` of every command, and flags that do not leak from one command to another.

Runs the installed console scripts (every entry of setup.py's CONSOLE_SCRIPTS, found
beside this Python) and `python -m t2t_keras.cli.demo` as subprocesses, several at a
time. The expected flags of a command are read from its module's source: the flags
its code reads (`FLAGS.<name>`), and for the decoder and exporter those that
`common_flags.load_trained_run` reads.
"""

import ast
import concurrent.futures
import inspect
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from absl import flags

from t2t_keras.cli import common_flags

REPO = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
DEMO = "python -m t2t_keras.cli.demo"
SHARED_FLAGFILE_COMMANDS = ("t2t_keras_trainer", "t2t_keras_decoder", "t2t_keras_exporter")
FLAGFILES = sorted((REPO / "flags").glob("*.flags"))


def _console_scripts() -> dict:
  """{script: module} from setup.py's CONSOLE_SCRIPTS (not imported: setup() would run)."""
  tree = ast.parse((REPO / "setup.py").read_text())
  for node in tree.body:
    if isinstance(node, ast.Assign) and node.targets[0].id == "CONSOLE_SCRIPTS":
      entries = ast.literal_eval(node.value)
      return {name.strip(): target.strip().split(":")[0]
              for name, target in (e.split("=") for e in entries)}
  raise AssertionError("setup.py has no CONSOLE_SCRIPTS")


SCRIPTS = _console_scripts()
COMMANDS = {**SCRIPTS, DEMO: "t2t_keras.cli.demo"}


def _argv(command: str, *args: str) -> list:
  if command.startswith("python -m "):
    return [sys.executable, "-m", command.split()[-1], *args]
  return [str(BIN / command), *args]


def _run_all(argvs, env=None) -> list:
  """subprocess results of `argvs`, run four at a time from the repository root."""
  env = dict(os.environ, **(env or {}))
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user's shell has it

  def run(argv):
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)

  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    return list(pool.map(run, argvs))


def _source(module: str) -> str:
  return (REPO / (module.replace(".", "/") + ".py")).read_text()


def _flags_read(source: str) -> set:
  """Flag names the code reads: FLAGS.<name>, and getattr(FLAGS, n) over a tuple of names."""
  names = set(re.findall(r"\bFLAGS\.(\w+)", source))
  loops = re.findall(r"for (\w+) in (\w+|\([^)]*\)):\n\s+if not getattr\(FLAGS, \1\)", source)
  loops += [(v, seq) for v, seq in re.findall(r"getattr\(FLAGS, (\w+)\)[^\n]*? for \1 in (\w+)",
                                              source)]
  for _, seq in loops:
    literal = re.search(rf"^{seq} = (\([^)]*\))", source, re.M) if seq[0] != "(" else None
    names |= set(re.findall(r'"(\w+)"', literal.group(1) if literal else seq))
  return {n for n in names if not hasattr(flags.FlagValues, n)}  # not FLAGS.<method>


def _expected_flags(module: str) -> set:
  source = _source(module)
  names = _flags_read(source)
  if "common_flags.load_trained_run()" in source:
    names |= _flags_read(inspect.getsource(common_flags.load_trained_run))
  return names


def _first_doc_line(module: str) -> str:
  return ast.get_docstring(ast.parse(_source(module))).splitlines()[0]


def _own_section(help_text: str, command: str) -> str:
  """The part of --help that lists the command's own flags."""
  start = help_text.index(f"Flags of {command}:\n")
  end = help_text.index("\n\n", start)
  return help_text[start:end]


def _names(section: str) -> set:
  return set(re.findall(r"^  (?:-\S,)?--(?:\[no\])?(\w+):", section, re.M))


@pytest.fixture(scope="module")
def defined():
  """{command: {flag: help text}} of the flags each command's module registers, each
  module imported alone in a fresh process."""
  code = ("import json, sys\nfrom absl import flags\nimport importlib\n"
          "importlib.import_module(sys.argv[1])\n"
          "print(json.dumps({f.name: f.help for f in "
          "flags.FLAGS.flags_by_module_dict()[sys.argv[1]]}))\n")
  results = _run_all([[sys.executable, "-c", code, m] for m in COMMANDS.values()])
  out = {}
  for command, res in zip(COMMANDS, results):
    assert res.returncode == 0, res.stderr[-2000:]
    out[command] = json.loads(res.stdout)
  return out


@pytest.fixture(scope="module")
def helps():
  """{(command, help flag): result}; --help runs list the modules they import."""
  keys = [(c, h) for c in COMMANDS for h in ("--help", "-h", "--helpshort", "--helpfull")]
  plain = _run_all([_argv(c, h) for c, h in keys if h != "--help"])
  timed = _run_all([_argv(c, "--help") for c in COMMANDS], env={"PYTHONPROFILEIMPORTTIME": "1"})
  return {**dict(zip([k for k in keys if k[1] != "--help"], plain)),
          **{(c, "--help"): r for c, r in zip(COMMANDS, timed)}}


def test_setup_lists_the_commands_and_they_are_installed():
  assert {"t2t_keras_trainer", "t2t_keras_decoder", "t2t_keras_exporter",
          "t2t_keras_avg_checkpoints", "t2t_keras_datagen"} <= set(SCRIPTS)
  for script, module in SCRIPTS.items():
    assert (BIN / script).is_file(), f"{script} is not installed: pip install -e ."
    assert module.startswith("t2t_keras.cli."), module


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_shows_what_it_does_an_example_and_its_own_flags(helps, defined, command):
  module = COMMANDS[command]
  res = helps[(command, "--help")]
  assert res.returncode == 0, res.stdout + res.stderr
  out = res.stdout
  assert out.splitlines()[0] == _first_doc_line(module)
  # An example command line of this command, e.g. "  t2t_keras_bleu --translation=...".
  assert re.search(rf"^\s+{re.escape(command)} --\w+", out, re.M), out
  section = _own_section(out, command)
  expected = _expected_flags(module)
  assert _names(section) == expected
  assert set(defined[command]) == expected
  flat = re.sub(r"\s", "", section)  # absl wraps long words too
  for name, text in defined[command].items():
    assert re.sub(r"\s", "", text) in flat, (name, text)
  if command != "t2t_keras_trainer":
    assert "--train_steps" not in section
  assert "see" in out and "--helpfull" in out
  # --help does not import TensorFlow (python -X importtime lists every import).
  imported = set(re.findall(r"\|\s+([\w.]+)\s*$", res.stderr, re.M))
  assert "absl.flags" in imported  # the listing works
  assert not {m for m in imported if m.split(".")[0] in ("tensorflow", "keras")}
  for flag in ("-h", "--helpshort"):
    other = helps[(command, flag)]
    assert (other.returncode, other.stdout, other.stderr) == (0, out, ""), flag


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_helpfull_adds_absls_flags(helps, command):
  res = helps[(command, "--helpfull")]
  assert res.returncode == 0, res.stderr
  assert res.stdout.startswith(_first_doc_line(COMMANDS[command]))
  assert _own_section(res.stdout, command) == _own_section(helps[(command, "--help")].stdout,
                                                           command)
  for absl_flag in ("--flagfile", "--verbosity", "--helpfull"):
    assert absl_flag in res.stdout


def _foreign(defined, command: str) -> str:
  """A flag of another command that this one lacks (--train_steps where it can)."""
  if command != "t2t_keras_trainer":
    return "train_steps"
  return sorted(set(defined["t2t_keras_decoder"]) - set(defined[command]))[0]


def test_a_foreign_flag_on_the_command_line_is_refused_in_one_line(defined):
  cases = [(c, _foreign(defined, c)) for c in sorted(COMMANDS)]
  results = _run_all([_argv(c, f"--{flag}=1") for c, flag in cases])
  for (command, flag), res in zip(cases, results):
    assert res.returncode == 2, (command, res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1, (command, res.stderr)
    assert lines[0].startswith(f"{command}: error: --{flag} is not a flag of {command}")
    owner = "t2t_keras_trainer" if flag == "train_steps" else "t2t_keras_decoder"
    assert owner in lines[0] and f"see {command} --help" in lines[0], lines[0]
    assert res.stdout == ""


def test_no_command_takes_another_commands_flags_silently():
  # The avg_checkpoints line used to run to the end with the trainer's and decoder's flags.
  results = _run_all([
      _argv("t2t_keras_avg_checkpoints", "--prefix=x", "--num_last_checkpoints=2",
            "--train_steps=5", "--decode_from_file=x", "--schedule=train"),
      _argv("t2t_keras_bleu", "--translation=a", "--reference=b", "--problem=p"),
      _argv("t2t_keras_decoder", "--nostart_over", "--help"),
      [sys.executable, "-m", "t2t_keras.cli.exporter", "--export_dir=e", "--eval_bleu"],
      _argv("t2t_keras_decoder", "--flagfile=flags/demo.flags", "--train_steps=5"),
      _argv("t2t_keras_trainer", "--helpshort", "--no_such_flag"),
  ])
  expected = [("t2t_keras_avg_checkpoints", "--train_steps"), ("t2t_keras_bleu", "--problem"),
              ("t2t_keras_decoder", "--nostart_over"),
              ("t2t_keras_exporter", "--eval_bleu"),  # python -m: still named by its command
              ("t2t_keras_decoder", "--train_steps"), ("t2t_keras_trainer", "--no_such_flag")]
  for (command, flag), res in zip(expected, results):
    assert res.returncode == 2, (command, flag, res.stdout, res.stderr)
    assert res.stderr.startswith(f"{command}: error: {flag} is not a flag of {command}"), (
        res.stderr)
    assert len(res.stderr.splitlines()) == 1


def test_the_shared_flagfiles_work_with_trainer_decoder_and_exporter():
  # --only_check_args (absl's): every flag parsed with its value, then exit 0 before main.
  cases = [(c, f, h) for c in SHARED_FLAGFILE_COMMANDS for f in FLAGFILES
           for h in ("--helpshort", "--only_check_args")]
  results = _run_all([_argv(c, f"--flagfile={f}", h) for c, f, h in cases])
  for (command, flagfile, how), res in zip(cases, results):
    assert res.returncode == 0, (command, flagfile.name, how, res.stderr)
  # Past parsing to the trainer's own check, with everything the flagfile set.
  res, = _run_all([_argv("t2t_keras_trainer", "--flagfile=flags/wmt14_ende_base.flags")])
  assert (res.returncode, res.stderr) == (2, "t2t_keras_trainer: error: --data_dir is "
                                             "required.\n")


def test_a_flagfile_may_not_set_what_no_command_defines(tmp_path):
  flagfile = tmp_path / "typo.flags"
  flagfile.write_text("--problem=translate_ende_wmt32k\n--train_step=5\n")
  results = _run_all([_argv(c, f"--flagfile={flagfile}", "--helpshort")
                      for c in SHARED_FLAGFILE_COMMANDS])
  for command, res in zip(SHARED_FLAGFILE_COMMANDS, results):
    assert res.returncode == 2, res.stdout
    assert res.stderr == (f"{command}: error: --train_step (in {flagfile}) is not a flag of "
                          f"{command}; see {command} --help.\n")


def _demo_commands() -> list:
  """(module, [flags]) of each `_run("t2t_keras.cli.<x>", ...)` in demo.py, values
  replaced by "x" (the shared flagfile by the demo's)."""
  out = []
  for node in ast.walk(ast.parse(_source("t2t_keras.cli.demo"))):
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_run"):
      continue
    module, *args = node.args
    argv = []
    for arg in args:
      if isinstance(arg, ast.Name) and arg.id == "flagfile":
        argv.append("--flagfile=flags/demo.flags")
      for sub in ast.walk(arg):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and (
            sub.value.startswith("--")):
          argv.append(sub.value if sub.value[-1] != "=" else sub.value + "x")
    out.append((module.value, argv))
  return out


def test_the_demo_passes_each_command_only_flags_it_takes():
  commands = _demo_commands()
  assert {m for m, _ in commands} >= {"t2t_keras.cli.datagen", "t2t_keras.cli.trainer",
                                      "t2t_keras.cli.avg_checkpoints", "t2t_keras.cli.decoder",
                                      "t2t_keras.cli.exporter", "t2t_keras.cli.visualize",
                                      "t2t_keras.cli.bleu"}
  results = _run_all([[sys.executable, "-m", m, *argv, "--helpshort"] for m, argv in commands])
  for (module, argv), res in zip(commands, results):
    assert res.returncode == 0, (module, argv, res.stderr)
