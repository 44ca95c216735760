"""Flags of the commands: definitions shared by several, and the parsing of all.

Each command defines the flags it reads and no others (its module's DEFINE_*,
`define_once` and `define_experiment_flags` calls; nothing is defined when this
module is imported), and runs through `run_cli`, which parses them:

* `--help` (`-h`, `--helpshort`) prints the command module's docstring (what it
  does, examples) and the command's own flags, and exits 0; `--helpfull` adds
  absl's flags (--flagfile, --verbosity, ...).
* `--version` prints `<command> <version>` and exits 0.
* `--flagfile=NAME` also finds the experiment flagfiles installed with the package
  (flags/ of the repository; `--flagfile=demo.flags` or `--flagfile=demo`) when NAME
  is not a file.
* A flag the command does not define is refused in one line naming the command
  (and the commands that take it), exit status 2; so is a --flagfile that is
  missing, not text, or holds a line that is no flag (a wrong file given).

The experiment flags (EXPERIMENT_FLAGS, one definition like T2T's
`utils/flags.py`) are what a flagfile in flags/ sets: one flagfile serves
t2t_keras_trainer, t2t_keras_decoder and t2t_keras_exporter (as T2T's decoder
took the trainer's flags). Each of the three defines the experiment flags it
reads; one it does not read (the decoder and --train_steps) is ignored when it
comes from a --flagfile, and refused when typed on the command line.
"""

import importlib
from importlib import metadata
import importlib.util
import os
import sys

from absl import app, flags

from data_gen import registry
from t2t_keras import errors, training
from t2t_keras.cli import quiet_logs
from t2t_keras.hparams import create_hparams
from t2t_keras.perf import process
from t2t_keras.rundir.files import BEST_INDEX
from t2t_keras.version import __version__

# name: (kind, default, help[, enum values]).
_EXPERIMENT = {
    # Problem, model and run directory.
    "problem": ("string", None, "Registered problem, e.g. translate_ende_ding_bible8k."),
    "model": ("string", "transformer", "Model name; only 'transformer'."),
    "hparams_set": ("string", None, "Named hyperparameter set (T2T's names), e.g. "
                    "transformer_base. T2T's sets not built here are refused by name, "
                    "with the reason (docs/hparams_sets.md lists all)."),
    "hparams": ("string", "", "Overrides in T2T syntax, e.g. 'batch_size=2048,num_heads=16'."),
    "data_dir": ("string", None, "Directory of the problem's TFRecords and vocabulary."),
    "output_dir": ("string", None, "Run directory: checkpoints, hparams.json, TensorBoard."),
    "t2t_usr_dir": ("string", None, "A directory of modules registering user problems."),
    # Training.
    "train_steps": ("integer", 250000, "Total optimizer updates to reach."),
    "eval_steps": ("integer", 100, "Dev batches per evaluation (0: the whole dev set)."),
    "local_eval_frequency": ("integer", 1000, "Checkpoint (and evaluate) every N steps."),
    "train_seconds": ("float", 0.0,
                      "Also stop after this many seconds of training wall time (0: no limit), "
                      "saving and evaluating as at --train_steps. A resumed run gets a fresh "
                      "budget."),
    "start_over": ("bool", False,
                   "Train from step 0 although --output_dir holds checkpoints: they are moved "
                   "to <output_dir>/replaced-<time>/ (nothing is deleted)."),
    "schedule": ("enum", "continuous_train_and_eval", "What the trainer runs.",
                 list(training.SCHEDULES)),
    "keep_checkpoint_max": ("integer", 20, "Checkpoints to keep."),
    "worker_gpu": ("integer", None, "GPUs to use on this worker (default: all visible)."),
    "random_seed": ("integer", None, "Seed of initialization, dropout and data order (the "
                    "trainer); of sampling (the decoder and exporter on a language model)."),
    "distribution_strategy": ("enum", None,
                              "Default: mirrored when several GPUs are used, else one_device.",
                              ["one_device", "mirrored", "multi_worker_mirrored"]),
    "mixed_precision": ("enum", "none", "Mixed precision (float16 uses loss scaling).",
                        ["none", "bfloat16", "float16"]),
    "allow_tf32": ("bool", None,
                   "TensorFloat-32 for float32 matmuls on GPUs that have it (A100, H100). "
                   "Unset: TensorFlow's default, on. T2T's float32 was exact: "
                   "--allow_tf32=false."),
    "jit_compile": ("bool", False,
                    "Compile the train step with XLA. Off by default: on every CPU measured "
                    "(docs/performance.md) XLA's train step was slower than the default graph "
                    "with oneDNN."),
    # Decoding (the trainer uses them for BLEU in evaluation).
    "decode_hparams": ("string", "", "e.g. 'beam_size=4,alpha=0.6,extra_length=50'."),
    "decode_from_file": ("string", None, "Source sentences, one per line."),
    "decode_to_file": ("string", None, "Where the decoder writes translations."),
    "decode_reference": ("string", None,
                         "Reference translations: BLEU is printed/logged (parsing problems: "
                         "gold trees, one per line: EVALB F1 is printed)."),
    "eval_bleu": ("bool", False, "Decode the dev source at each evaluation and log sacreBLEU "
                  "(T2T's decode hook)."),
    "eval_bleu_max_lines": ("integer", 200, "Dev lines decoded for BLEU (--eval_bleu)."),
    # Early stopping and the best checkpoints (T2T's names and defaults; early_stopping.py).
    "eval_early_stopping_steps": ("integer", None,
                                  "Stop when --eval_early_stopping_metric has not improved by "
                                  "--eval_early_stopping_metric_delta over this many steps "
                                  "(T2T's plateau rule); unset: no early stopping."),
    "eval_early_stopping_metric": ("string", "loss",
                                   "The dev metric to stop on and keep the best by: loss, "
                                   "neg_log_perplexity, perplexity, accuracy, accuracy_top5, "
                                   "accuracy_per_sequence, approx_bleu, bleu, bleu_tokenized "
                                   "(bleu: needs --eval_bleu), or T2T's tag "
                                   "metrics-<problem>/targets/<name>."),
    "eval_early_stopping_metric_delta": ("float", 0.1,
                                         "The change that counts as an improvement."),
    "eval_early_stopping_metric_minimize": ("bool", True,
                                            "Whether smaller is better. Unset with a metric "
                                            "where larger is better (bleu, approx_bleu, "
                                            "accuracy*, neg_log_perplexity): false."),
    "keep_best_checkpoints": ("integer", 0,
                              "Keep the N best checkpoints by --eval_early_stopping_metric in "
                              "<output_dir>/best/ (0: off); decode or export the best with "
                              "--checkpoint_path=<output_dir>/best."),
    "checkpoint_path": ("string", None, "Checkpoint prefix (default: latest in output_dir), "
                        "or a directory (<output_dir>/best: the best checkpoint); "
                        "A,B,... decodes the ensemble of these runs (directories) or "
                        "checkpoints: the mean of their log-probabilities at every step."),
}
EXPERIMENT_FLAGS = tuple(_EXPERIMENT)
# The flags load_trained_run reads (the decoder and the exporter define them).
TRAINED_RUN_FLAGS = ("problem", "model", "hparams_set", "hparams", "data_dir", "output_dir",
                     "t2t_usr_dir", "mixed_precision", "checkpoint_path")
# absl's own flags (--verbosity, --helpfull, ...) are every command's.
_ABSL_MODULES = ("absl.app", "absl.logging", "absl.flags")
_HELP = ("help", "h", "?", "helpshort")
# Modules (absl's names) that defined experiment flags: their flagfiles may set others.
_EXPERIMENT_COMMANDS = set()


def _calling_module() -> str:
  """absl's name of the nearest module up the stack that is not this one."""
  frame = sys._getframe(1)
  while frame.f_globals.get("__name__") == __name__:
    frame = frame.f_back
  return _absl_module_name(frame.f_globals.get("__name__", ""))


def _absl_module_name(name: str) -> str:
  return sys.argv[0] if name == "__main__" else name  # as absl names the main module


def define_once(kind: str, name: str, default, help_text: str, enum_values=None,
                module_name=None) -> None:
  """Defines a flag of the calling command (`module_name`: absl's name of its module).

  When another command imported in this process (tests) defined it already, the
  calling command takes that definition as its own flag too.
  """
  module_name = module_name or _calling_module()
  if name not in flags.FLAGS:
    if kind == "enum":
      flags.DEFINE_enum(name, default, enum_values, help_text, module_name=module_name)
    else:
      getattr(flags, "DEFINE_" + kind)(name, default, help_text, module_name=module_name)
  flag = flags.FLAGS[name]
  if not any(f is flag for f in flags.FLAGS.flags_by_module_dict().get(module_name, [])):
    flags.FLAGS.register_flag_by_module(module_name, flag)


def define_experiment_flags(names=EXPERIMENT_FLAGS) -> None:
  """Defines these experiment flags as the calling command's (default: all of them).

  A flagfile given to the command may also set the experiment flags it does not
  define (they are ignored).
  """
  module_name = _calling_module()
  for name in names:
    kind, default, help_text, *enum_values = _EXPERIMENT[name]
    define_once(kind, name, default, help_text, *enum_values, module_name=module_name)
  _EXPERIMENT_COMMANDS.add(module_name)


def load_trained_run():
  """The `TrainedRun` of --output_dir (`trained_run.open_run`) for decoder and exporter.

  The model computes in --mixed_precision (e.g. bfloat16 decoding).

  The model is rebuilt from the run's hparams.json; --hparams_set/--hparams and
  --problem, when given (e.g. by a flagfile), must agree with the run.
  """
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras import trained_run
  FLAGS = flags.FLAGS
  members = (FLAGS.checkpoint_path or "").split(",")
  # An ensemble names its runs in --checkpoint_path; --output_dir is then optional.
  for name in ("data_dir",) + (("output_dir",) if len(members) == 1 else ()):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  if FLAGS.model != "transformer":
    raise app.UsageError(f"--model={FLAGS.model}: only 'transformer' is implemented.")
  registry.import_usr_dir(FLAGS.t2t_usr_dir)
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.perf import precision

  # The model computes in the precision asked for (weights stay float32 either way).
  precision.set_mixed_precision(FLAGS.mixed_precision)
  log = lambda line: print(line, file=sys.stderr, flush=True)
  try:
    if len(members) > 1:  # an ensemble: each a run directory or a checkpoint
      run = trained_run.open_run(members, data_dir=FLAGS.data_dir, log=log,
                                 default_run=FLAGS.output_dir)
    else:
      run = trained_run.open_run(FLAGS.output_dir, FLAGS.checkpoint_path, FLAGS.data_dir,
                                 log=log)
  except FileNotFoundError as e:  # no hparams.json / run.json: not a training run
    raise app.UsageError(str(e)) from None
  except trained_run.EnsembleError as e:
    raise app.UsageError(f"--checkpoint_path={FLAGS.checkpoint_path}: {e}") from None
  if FLAGS.hparams_set:
    wanted = create_hparams(FLAGS.hparams_set, FLAGS.hparams)
    if wanted != run.hparams:
      diff = sorted(k for k, v in wanted.to_dict().items() if run.hparams.to_dict()[k] != v)
      raise app.UsageError(f"--hparams_set/--hparams differ from {FLAGS.output_dir}/"
                           f"hparams.json in: {', '.join(diff)}. Omit them to use the run's.")
  if FLAGS.problem and FLAGS.problem != run.problem.name:
    raise app.UsageError(f"--problem={FLAGS.problem}, but {FLAGS.output_dir} was trained on "
                         f"{run.problem.name}.")
  print(f"Loaded {run.checkpoint_path} ({run.problem.name}).", file=sys.stderr, flush=True)
  return run


def resolve_path_flags(*names: str) -> None:
  """Makes each of these flags, when set, an absolute local path, once, at the start.

  `~` is expanded; a remote path (`gs://bucket/run`) is left as it is. Every
  later use (checkpoint paths, messages, the state file) then sees one spelling
  of each directory, whatever the working directory. An empty member of an
  ensemble's --checkpoint_path (`A,`) is refused: it would resolve to the working
  directory.
  """
  def resolve(path):
    return path if "://" in path else os.path.abspath(os.path.expanduser(path))

  for name in names:
    value = getattr(flags.FLAGS, name)
    if value:  # --checkpoint_path may list an ensemble's members: A,B
      parts = value.split(",") if name == "checkpoint_path" else [value]
      empty = [i + 1 for i, p in enumerate(parts) if not p.strip()]
      if len(parts) > 1 and empty:
        raise app.UsageError(f"--{name}={value}: member {empty[0]} of the ensemble is empty; "
                             "give its runs or checkpoints separated by single commas.")
      setattr(flags.FLAGS, name, ",".join(resolve(p) for p in parts))
  # --checkpoint_path=<run>/best alone: the run is best/'s parent.
  best = flags.FLAGS.checkpoint_path if "checkpoint_path" in names else None
  if best and "output_dir" in names and not flags.FLAGS.output_dir and os.path.isfile(
      os.path.join(best, BEST_INDEX)):
    flags.FLAGS.output_dir = os.path.dirname(best.rstrip("/"))


def is_language_model_run() -> bool:
  """Whether --output_dir holds a language model's run (a problem without inputs), read
  from its run files before any model is built. Files that cannot be read, and
  ensembles (--checkpoint_path=A,B), are left for load_trained_run to report."""
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.rundir import settings
  FLAGS = flags.FLAGS
  if not FLAGS.output_dir or "," in (FLAGS.checkpoint_path or ""):
    return False
  try:
    return not settings.load_run_files(FLAGS.output_dir)[2].has_inputs
  except Exception:  # pylint: disable=broad-except
    return False


def check_decode_hparams(decode_hp) -> None:
  """Refuses, from the run files alone (no model built yet), decode hparams that the
  run of --output_dir, or each run of an ensemble's --checkpoint_path, cannot honour
  (`trained_run.check_decode_hparams`: alignment layer and heads, top-k)."""
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras import trained_run
  FLAGS = flags.FLAGS
  members = (FLAGS.checkpoint_path or "").split(",")
  path = members if len(members) > 1 else FLAGS.output_dir
  if not path:
    return  # --output_dir missing: load_trained_run says so
  try:
    trained_run.check_decode_hparams(path, decode_hp, default_run=FLAGS.output_dir)
  except ValueError as e:
    raise app.UsageError(f"--decode_hparams / --hparams: {e}") from None


def check_output_file(flag: str, path: str) -> None:
  """Refuses, before any work, an output file path that cannot be written.

  Raises:
    app.UsageError: `path` is a directory, or its nearest existing parent is not a
      writable directory.
  """
  if os.path.isdir(path):
    raise app.UsageError(f"--{flag}={path} is a directory; give a file path.")
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise app.UsageError(f"--{flag}={path}: {parent} is a file, not a directory.")
  if not os.access(parent, os.W_OK | os.X_OK):
    raise app.UsageError(f"--{flag}={path}: {parent} is not writable.")


def run_cli(main) -> None:
  """app.run(main) with `parse_flags` (see the module docstring); a user error
  (app.UsageError, a damaged checkpoint, an output path that is a directory, an
  `errors.RunError`, a full disk) prints one line `<program>: error: <message>` and
  exits with the status of errors.py, without the usage text or a traceback; other
  exceptions keep their traceback (they are bugs).

  First, before anything imports TensorFlow (the commands import it inside
  `main`), it calls `set_up_process`."""
  set_up_process()
  module = sys.modules[main.__module__]

  def wrapped(argv):
    try:
      return main(argv)
    except Exception as e:  # pylint: disable=broad-except
      # A CheckpointError can only come from t2t_keras.checkpoints once it is loaded
      # (importing it here would load TensorFlow before --help); an OutputPathError (a
      # directory given as an output file) only from data_gen.file_io once loaded.
      checkpoints = sys.modules.get("t2t_keras.checkpoints")
      file_io = sys.modules.get("data_gen.file_io")
      if isinstance(e, app.UsageError) or (
          checkpoints is not None and isinstance(e, checkpoints.CheckpointError)) or (
          file_io is not None and isinstance(e, file_io.OutputPathError)):
        _exit_with_error(str(e))
      if isinstance(e, errors.RunError):
        _exit_with_error(str(e), e.exit_status)
      storage = errors.storage_failure(e)  # an OSError, or TensorFlow's on a full disk
      if storage:
        why, path = storage
        where = f" writing {path}" if path else ""
        _exit_with_error(f"no space left{where} ({why}); free some space and run the "
                         "same command again: nothing written before is lost.",
                         errors.STORAGE_STATUS)
      raise

  app.run(wrapped, flags_parser=lambda argv: parse_flags(argv, module))


def set_up_process() -> None:
  """What every command applies before TensorFlow loads: `perf.process.configure_process`
  (oneDNN kernels; TensorFlow reads its variable only when it loads) and
  `quiet_logs.install`. A bad T2T_KERAS_PLAIN_OPS prints one line and exits 2.
  """
  try:
    process.configure_process()
  except ValueError as e:  # a bad T2T_KERAS_PLAIN_OPS
    _exit_with_error(str(e))
  quiet_logs.install()


def program_name() -> str:
  """The command's name for messages: the console script, even under `python -m`."""
  name = os.path.basename(sys.argv[0])
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  if name.endswith(".py") and spec is not None:  # python -m t2t_keras.cli.<module>
    return dict((m, c) for c, m in _commands()).get(spec.name, f"python -m {spec.name}")
  return name


def _exit_with_error(message: str, status: int = errors.USAGE_STATUS) -> None:
  print(f"{program_name()}: error: {message}", file=sys.stderr, flush=True)
  sys.exit(status)


def parse_flags(argv, module) -> list:
  """Parses `argv` as the command of `module` does; returns the arguments left.

  Flagfiles are read here: an experiment flag in one that the command does not
  define is dropped. `--help` and `--helpfull` print help and exit 0; an error
  prints one line and exits 2.
  """
  program = program_name()
  module_name = _absl_module_name(module.__name__)
  own = _flags_of(module_name)
  try:
    args = _expand_flagfiles(argv[1:])
  except flags.Error as e:  # e.g. a --flagfile that cannot be read
    _exit_with_error(str(e).replace("ERROR:: ", ""))
  tolerated = set()  # --undefok: absl ignores these names when undefined
  for arg, _ in args:
    if arg.lstrip("-").startswith("undefok="):
      tolerated.update(arg.split("=", 1)[1].split(","))
  kept, wanted_help = [argv[0]], None
  i = 0
  while i < len(args):
    arg, source = args[i]
    i += 1
    if arg == "--":
      kept.extend(a for a, _ in args[i - 1:])
      break
    if not arg.startswith("-") or arg == "-":
      if source is not None:  # absl passes on a line that is no flag: a wrong file?
        _exit_with_error(f"--flagfile={source}: line {arg[:60]!r} is not a flag; a flagfile "
                         "holds --name=value lines.")
      kept.append(arg)
      continue
    name, has_value, _ = (arg[2:] if arg.startswith("--") else arg[1:]).partition("=")
    if source is None and name in _HELP + ("helpfull",):
      wanted_help = name
      continue
    if source is None and name == "version" and not has_value and _lookup(own, name) is None:
      print(f"{program} {__version__}", flush=True)
      sys.exit(0)
    flag = _lookup(own, name)
    if flag is not None:
      kept.append(arg)
      if not has_value and not flag.boolean and i < len(args) and args[i][1] == source:
        kept.append(args[i][0])  # --name value
        i += 1
      continue
    base = name[2:] if name.startswith("no") else name
    if source is not None and module_name in _EXPERIMENT_COMMANDS and (
        name in _EXPERIMENT or base in _EXPERIMENT):
      continue  # an experiment flag of another command, in a shared flagfile
    if name in tolerated or base in tolerated:
      continue
    where = f" (in {source})" if source else ""
    owners = _owners(name, module)
    belongs = f" (it is a flag of {', '.join(owners)})" if owners else ""
    _exit_with_error(f"--{name}{where} is not a flag of {program}{belongs}; "
                     f"see {program} --help.")
  if wanted_help:
    sys.stdout.write(help_text(module, full=wanted_help == "helpfull"))
    sys.stdout.flush()
    sys.exit(0)
  try:
    return flags.FLAGS(kept)
  except flags.Error as e:
    _exit_with_error(f"{' '.join(str(e).split())}; see {program} --help.")


def help_text(module, full: bool = False) -> str:
  """The module's docstring and its command's flags (`full`: absl's flags too)."""
  program = program_name()
  doc = (module.__doc__ or f"{program} [flags]\n").strip("\n")
  own = flags.FlagValues()
  for flag in flags.FLAGS.flags_by_module_dict().get(_absl_module_name(module.__name__), []):
    own[flag.name] = flag
    own.register_flag_by_module(f"Flags of {program}", flag)
  text = f"{doc}\n{own.get_help(include_special_flags=False)}\n"
  if full:
    return f"{text}\nAll flags, absl's included:\n{flags.FLAGS.get_help()}\n"
  return f"{text}\nabsl's flags (--flagfile, --verbosity, ...): see {program} --helpfull.\n"


def _flags_of(module_name: str, absl_flags: bool = True) -> dict:
  """name (and short name) -> Flag, for the command's flags (and absl's)."""
  by_module = flags.FLAGS.flags_by_module_dict()
  out = {}
  for module in (module_name,) + (_ABSL_MODULES if absl_flags else ()):
    for flag in by_module.get(module, []):
      out[flag.name] = flag
      if flag.short_name:
        out[flag.short_name] = flag
  return out


def _lookup(own: dict, name: str):
  """The flag `--name` sets (`--noname` a boolean one), or None."""
  if name in own:
    return own[name]
  if name.startswith("no") and name[2:] in own and own[name[2:]].boolean:
    return own[name[2:]]
  if name == "undefok":
    return flags.FLAGS["undefok"] if "undefok" in flags.FLAGS else _UNDEFOK
  return None


class _Undefok:
  boolean = False


_UNDEFOK = _Undefok()


def _expand_flagfiles(args) -> list:
  """[(argument, flagfile it came from or None)], every --flagfile read (nested too)."""
  out = []
  i = 0
  while i < len(args):
    arg = args[i]
    i += 1
    if arg == "--":
      out.extend((a, None) for a in args[i - 1:])
      break
    if arg in ("--flagfile", "-flagfile"):
      if i == len(args):
        raise flags.Error("--flagfile with no argument")
      path, i = args[i], i + 1
    elif arg.startswith(("--flagfile=", "-flagfile=")):
      path = arg.split("=", 1)[1]
    else:
      out.append((arg, None))
      continue
    path = find_flagfile(path)
    try:
      lines = flags.FLAGS.read_flags_from_files([f"--flagfile={path}"])
    except UnicodeDecodeError as e:  # a binary file; absl's error names none
      raise flags.Error(f"--flagfile={path}{_included_text(path)} is not a text file of flags "
                        f"({e.reason} at byte {e.start}); a flagfile holds --name=value "
                        "lines.") from None
    out.extend((line, path) for line in lines)
  return out


def _included_text(path: str) -> str:
  """Where to look when absl could not decode flagfile `path`: in a flagfile it
  includes when `path` itself is UTF-8 text."""
  try:
    with open(path, "rb") as f:
      f.read().decode("utf-8")
  except (OSError, UnicodeDecodeError):
    return ""
  return " (or a flagfile it includes)"


def packaged_flagfiles_dir():
  """The directory of the flagfiles installed with the package (the repository's flags/:
  the data package t2t_keras.flagfiles in a wheel, flags/ beside t2t_keras/ when the
  repository is installed in editable mode or used in place), or None."""
  try:
    spec = importlib.util.find_spec("t2t_keras.flagfiles")
  except ImportError:
    spec = None
  for directory in list(getattr(spec, "submodule_search_locations", None) or ()) + [
      os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.pardir,
                   "flags")]:
    if os.path.isdir(directory) and any(n.endswith(".flags") for n in os.listdir(directory)):
      return os.path.normpath(directory)
  return None


def find_flagfile(path: str) -> str:
  """`path` if it is a file; else the packaged flagfile it names (`demo`, `demo.flags`,
  or `flags/demo.flags` typed outside the repository); else `path` (absl reports it)."""
  if os.path.exists(path) or os.path.dirname(path) not in ("", "flags"):
    return path
  directory = packaged_flagfiles_dir()
  if directory is None:
    return path
  name = os.path.basename(path)
  for candidate in (name, f"{name}.flags"):
    if os.path.isfile(os.path.join(directory, candidate)):
      return os.path.join(directory, candidate)
  packaged = sorted(n[:-len(".flags")] for n in os.listdir(directory) if n.endswith(".flags"))
  raise flags.Error(f"--flagfile={path}: no such file, and no flagfile of that name is "
                    f"installed with t2t-keras (installed: {', '.join(packaged)}).")


def _commands() -> list:
  """(name, module) of every command: the console scripts, and the demo."""
  found = {e.name: e.module for e in metadata.entry_points(group="console_scripts")
           if e.module.startswith("t2t_keras.cli.")}
  found["python -m t2t_keras.cli.demo"] = "t2t_keras.cli.demo"
  return sorted(found.items())


def _owners(name: str, module) -> list:
  """The other commands that define --name (their modules are imported to see)."""
  main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  skip = {module.__name__, getattr(main_spec, "name", None)}
  owners = []
  for command, module_name in _commands():
    if module_name in skip:
      continue
    try:
      importlib.import_module(module_name)
    except Exception:  # pylint: disable=broad-except  (a hint only)
      continue
    if _lookup(_flags_of(module_name, absl_flags=False), name) not in (None, _UNDEFOK):
      owners.append(command)
  return owners
