"""What a run directory records: its hparams and run.json, and what they are checked against.

`hparams.json` holds `HParams.to_json()`: every model and training hparam (T2T names).
`run.json` holds the run's identity, written when training starts and checked on
resume: `problem` and the `ModelSpec` fields (`input_vocab_size`,
`target_vocab_size`, `target_space_id`, `has_inputs`); `vocab`: per vocab file (one
when inputs and targets share it) its name, the features using it, size and
SHA-256; `hparams_set` and `hparams`: the set and overrides the run started with
(a resume given neither takes the run's); and the last training's status, written
when it stops: `start_step`, `stop_reason` (one of STOP_REASONS), `stop_step`; and
`warm_start_from` for a run begun from other weights (WARM_START_KEY).
Where each file of a run directory is: `files.RunDir`.

Trainer, decoder, exporter, averager, visualizer and the T2T importer read and
write these two files only through this module, and build the model only through
`model_factory`. Before building a model on a `--data_dir`, they call
`check_vocab`: ids mean nothing with another vocabulary, even one of the same size.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Callable, Dict, List, Optional, Tuple

import tensorflow as tf

from data_gen import file_io, registry
from t2t_keras import errors
from t2t_keras.errors import RunError
from t2t_keras.hparams import HParams, create_hparams
from t2t_keras.rundir.files import HPARAMS_FILE, RUN_FILE, RunDir

# run.json: the problem's registered name, beside the ModelSpec fields.
PROBLEM_KEY = "problem"
# run.json: [{"file", "features", "size", "sha256"}], one entry per vocab file.
VOCAB_KEY = "vocab"
_SIZE_KEYS = {"inputs": "input_vocab_size", "targets": "target_vocab_size"}
# run.json: the --data_dir the run last trained on (where `open_run` finds its vocabulary).
DATA_DIR_KEY = "data_dir"
# run.json: the --hparams_set and --hparams the run started with (hparams.json holds
# their result); an older run.json has neither.
HPARAMS_SET_KEY = "hparams_set"
OVERRIDES_KEY = "hparams"
RECIPE_KEYS = (HPARAMS_SET_KEY, OVERRIDES_KEY)
# run.json entries that change from one training invocation to the next.
STATUS_KEYS = ("start_step", "stop_reason", "stop_step", DATA_DIR_KEY)
# run.json: where a warm-started run's first weights came from (`training/warm_start.py`):
# {"path", "checkpoint", "kind", "step", "vocab"}; kept as it is when the run resumes.
WARM_START_KEY = "warm_start_from"
STOP_REASONS = ("train_steps", "train_seconds", "signal", "diverged", "early_stopping")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """What the model needs to know of the problem.

  has_inputs: False for a problem of targets only (a language model), whose
  model is `lm_model.TransformerLM`; run.json records it only then.
  """
  input_vocab_size: int
  target_vocab_size: int
  target_space_id: int = 0
  has_inputs: bool = True


def _path(output_dir: str, name: str) -> str:
  """The run file `name` (HPARAMS_FILE or RUN_FILE) of `output_dir`, as RunDir names it."""
  run = RunDir(output_dir)
  return {HPARAMS_FILE: run.hparams_file, RUN_FILE: run.run_file}[name]


def _read_json(path: str) -> dict:
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def _write_json(path: str, value: dict) -> None:
  file_io.write_text(path, json.dumps(value, indent=2, sort_keys=True))


def save_or_check_run_files(output_dir: str, hparams: HParams, problem_name: str,
                            spec: ModelSpec, vocab: Optional[List[dict]] = None,
                            data_dir: Optional[str] = None,
                            hparams_set: Optional[str] = None,
                            overrides: str = "") -> None:
  """Writes hparams.json and run.json, or checks them against an existing run.

  The status entries of an existing run.json (STATUS_KEYS) are kept. `vocab`
  (`vocab_record`) is recorded; a run.json without one (an older version's) gets it.
  `data_dir`, when given, is recorded (absolute) as the run's DATA_DIR_KEY.
  `hparams_set` and `overrides` (what built `hparams`), when the set is given, are
  recorded as RECIPE_KEYS unless the run already records its own.

  Raises:
    ValueError: when `output_dir` is a file, or holds a run with other hparams,
      problem or vocabulary, naming the differing fields: resuming it silently
      with new values would corrupt it.
  """
  if tf.io.gfile.exists(output_dir) and not tf.io.gfile.isdir(output_dir):
    raise ValueError(f"output_dir {output_dir} is a file, not a directory.")
  run = _run_entries(problem_name, spec)
  hparams_path, run_path = _path(output_dir, HPARAMS_FILE), _path(output_dir, RUN_FILE)
  if tf.io.gfile.exists(hparams_path):
    _check_same_hparams(output_dir, _read_json(hparams_path), hparams, "--hparams_set/--hparams")
  status = {}
  recipe = {HPARAMS_SET_KEY: hparams_set, OVERRIDES_KEY: overrides or ""} if hparams_set else {}
  if tf.io.gfile.exists(run_path):
    old_run = _read_json(run_path)
    status = {k: old_run.pop(k) for k in STATUS_KEYS + (WARM_START_KEY,) if k in old_run}
    old_recipe = {k: old_run.pop(k) for k in RECIPE_KEYS if k in old_run}
    recipe = old_recipe if HPARAMS_SET_KEY in old_recipe else recipe
    old_vocab = old_run.pop(VOCAB_KEY, None)
    if old_run != run:
      raise ValueError(f"{output_dir} holds a run of {old_run}, not {run}. Use another "
                       "--output_dir.")
    if old_vocab is not None and vocab is not None and old_vocab != vocab:
      raise ValueError(f"{output_dir} holds a run of the vocabulary {old_vocab}, not "
                       f"{vocab}. Use another --output_dir, or the run's --data_dir.")
    vocab = vocab if vocab is not None else old_vocab
  if data_dir is not None:
    status[DATA_DIR_KEY] = data_dir if "://" in data_dir else os.path.abspath(data_dir)
  tf.io.gfile.makedirs(output_dir)
  file_io.write_text(hparams_path, hparams.to_json())
  _write_json(run_path, {**run, **recipe, **({VOCAB_KEY: vocab} if vocab is not None else {}),
                         **status})


def _run_entries(problem_name: str, spec: ModelSpec) -> dict:
  """run.json's identity entries; `has_inputs` only when False, so that the runs
  of problems with inputs keep the run.json they always had."""
  run = {PROBLEM_KEY: problem_name, **dataclasses.asdict(spec)}
  if spec.has_inputs:
    del run["has_inputs"]
  return run


def _check_same_hparams(output_dir: str, old: dict, new: HParams, given: str) -> None:
  """Refuses `new` (built from the flags `given`) unless it equals hparams.json's `old`.

  Raises:
    ValueError: one line naming each differing hparam, the run's value and the new one.
  """
  new = new.to_dict()
  # A field newer than the run's hparams.json did what its default does.
  defaults = HParams().to_dict()
  diff = sorted(k for k in set(old) | set(new) if old.get(k, defaults.get(k)) != new.get(k))
  if diff:
    details = ", ".join(f"{k}: {old.get(k)!r} in the run, {new.get(k)!r} given" for k in diff)
    raise ValueError(
        f"{given}: {output_dir} holds a run with different hparams ({details}; the run's are "
        f"in {_path(output_dir, HPARAMS_FILE)}): resume without {given} to keep the run's, or "
        "start a new run in another --output_dir.")


@dataclasses.dataclass(frozen=True)
class RunSettings:
  """What `resolve_run_settings` resolved: the problem and hparams to train with."""
  problem: str
  hparams: HParams
  hparams_set: Optional[str]  # None: a run of an older version, which did not record it
  overrides: str              # the --hparams that, with hparams_set, build `hparams`
  resuming: bool              # output_dir already holds a run's hparams.json


def resolve_run_settings(output_dir: str, problem: Optional[str] = None,
                         hparams_set: Optional[str] = None,
                         overrides: str = "") -> RunSettings:
  """The problem and hparams to train `output_dir` with.

  A new run (no hparams.json in `output_dir`) needs `problem` and `hparams_set`.
  An existing run resumes with those its run.json and hparams.json record; what
  is given must agree: `problem` and `hparams_set` with the names recorded, and
  `overrides` (T2T syntax) with the run's hparams (an older run, without a recorded
  set, is checked by the hparams `hparams_set` and `overrides` build).

  Raises:
    ValueError: one line naming the flag, the run's value and the given one, or
      the flag a new run lacks.
    errors.RunError: a damaged hparams.json or run.json.
  """
  hparams_path, run_path = _path(output_dir, HPARAMS_FILE), _path(output_dir, RUN_FILE)
  if not tf.io.gfile.exists(hparams_path):
    for name, value in (("problem", problem), ("hparams_set", hparams_set)):
      if not value:
        raise ValueError(f"--{name} is required: {output_dir} holds no run to resume "
                         f"(no {HPARAMS_FILE}).")
    return RunSettings(problem, create_hparams(hparams_set, overrides), hparams_set,
                       overrides or "", resuming=False)
  recorded = _parse_run_file(output_dir, HPARAMS_FILE, HParams.from_json)
  old = recorded.to_dict()
  run = _parse_run_file(output_dir, RUN_FILE, json.loads) if tf.io.gfile.exists(run_path) else {}
  if not isinstance(run, dict):
    raise _damaged(output_dir, RUN_FILE, "not a JSON object")

  def refuse(flag: str, given: str, runs: str) -> ValueError:
    return ValueError(
        f"--{flag}={given} differs from the run in {output_dir}, trained with "
        f"--{flag}={runs} (recorded in {run_path}): omit --{flag} to resume it, or "
        f"start a new run in another --output_dir.")

  recorded_problem = run.get(PROBLEM_KEY)
  if problem and recorded_problem and problem != recorded_problem:
    raise refuse("problem", problem, recorded_problem)
  problem = problem or recorded_problem
  if not problem:  # hparams.json without run.json: only the flag can say
    raise ValueError(f"--problem is required: {run_path} does not record the problem of the "
                     f"run in {output_dir}.")
  recorded_set = run.get(HPARAMS_SET_KEY)
  if hparams_set and recorded_set and hparams_set != recorded_set:
    raise refuse("hparams_set", hparams_set, recorded_set)
  if hparams_set and not recorded_set:  # an older run: its hparams are the check
    hparams = create_hparams(hparams_set, overrides)
    _check_same_hparams(output_dir, old, hparams, "--hparams_set/--hparams")
    return RunSettings(problem, hparams, hparams_set, overrides or "", resuming=True)
  hparams = recorded.parse(overrides or "")  # ValueError: an unknown or malformed override
  _check_same_hparams(output_dir, old, hparams, f"--hparams={overrides}")
  return RunSettings(problem, hparams, recorded_set, run.get(OVERRIDES_KEY, ""), resuming=True)


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def vocab_record(problem, data_dir: str, encoders: Optional[Dict] = None) -> List[dict]:
  """run.json's `vocab`: per vocab file of `problem` in `data_dir` (sorted by name),
  {"file": name, "features": ["inputs", ...], "size": ids, "sha256": hex digest}, and
  "type": "sentencepiece" for a SentencePiece model (a subword entry has no "type", as
  before SentencePiece, so that runs recorded then resume).

  Args:
    problem: a `Text2TextProblem` (its `vocab_filenames` and `feature_encoders`).
    encoders: the problem's encoders of `data_dir`, if already loaded.
  Raises:
    ValueError: a vocab file is missing or malformed, naming it.
  """
  encoders = encoders or problem.feature_encoders(data_dir)
  by_file: Dict[str, dict] = {}
  for side in ("inputs", "targets"):
    name = problem.vocab_filenames[side]
    if name not in by_file:
      by_file[name] = {"file": name, "features": [], "size": encoders[side].vocab_size,
                       "sha256": _sha256(os.path.join(data_dir, name))}
      if getattr(problem, "vocab_type", "subword") != "subword":
        by_file[name]["type"] = problem.vocab_type
    by_file[name]["features"].append(side)
  return [by_file[name] for name in sorted(by_file)]


def _vocab_differences(run: dict, current: List[dict], data_dir: str) -> List[str]:
  """What differs between the vocabularies recorded in `run` and `current`, per file."""
  recorded = {side: entry for entry in run.get(VOCAB_KEY) or []
              for side in entry.get("features", [])}
  found = []
  for entry in current:
    what = []
    for side in entry["features"]:
      size, digest = run.get(_SIZE_KEYS[side]), recorded.get(side, {}).get("sha256")
      if size is not None and size != entry["size"]:
        what.append(f"size {entry['size']}, the run's {size}")
      if digest and digest != entry["sha256"]:
        what.append(f"SHA-256 {entry['sha256'][:16]}..., the run's {digest[:16]}...")
    if what:
      found.append(f"{os.path.join(data_dir, entry['file'])} ({'; '.join(dict.fromkeys(what))})")
  return found


def check_vocab(output_dir: str, data_dir: str, log: Callable[[str], None], problem=None,
                resuming: bool = False) -> Optional[List[dict]]:
  """Refuses a `data_dir` whose vocabulary is not the one the run in `output_dir` used.

  Compares size and SHA-256 of each vocab file with run.json's. A run.json of an
  older version (sizes but no hash) passes with a one-line `log`: a warning, or
  with `resuming` (the trainer, which then records the hash) a note. Without a
  readable run.json (a new run) nothing is checked.

  Args:
    problem: the problem, default the one run.json names (looked up with `data_dir`).
  Returns:
    The `vocab_record` of `data_dir`; None without run.json and `problem`.
  Raises:
    RunError: naming both files and what differs, or a missing vocab file.
  """
  run_path = _path(output_dir, RUN_FILE)
  run = None
  if tf.io.gfile.exists(run_path):
    try:
      run = _read_json(run_path)
    except ValueError:  # damaged: loading the run reports it
      pass
  run = run if isinstance(run, dict) else None
  if run is not None and problem is not None and run.get(PROBLEM_KEY) != problem.name:
    run = None  # another problem: save_or_check_run_files refuses it
  if problem is None:
    if run is None or PROBLEM_KEY not in run:
      return None
    try:
      problem = registry.problem(run[PROBLEM_KEY], data_dir)
    except ValueError as e:
      raise RunError(str(e)) from None
  try:
    current = vocab_record(problem, data_dir)
  except ValueError as e:
    raise RunError(f"--data_dir={data_dir}: {e}") from None
  if run is None:
    return current
  files = ", ".join(os.path.join(data_dir, e["file"]) for e in current)
  differences = _vocab_differences(run, current, data_dir)
  if differences:
    raise RunError(
        f"the vocabulary of --data_dir is not the one the run was trained with (recorded in "
        f"{run_path}): {', '.join(differences)}. Give the --data_dir the run "
        "was trained on (with its vocab file unchanged), or train a new run on this one.")
  if not run.get(VOCAB_KEY):
    log(f"note: {run_path} records no vocabulary hash (an older t2t_keras run); recording "
        f"that of {files} now." if resuming else
        f"WARNING: {run_path} records no vocabulary hash (an older t2t_keras run): only the "
        f"size of {files} was checked against it.")
  return current


def record_stop(output_dir: str, reason: str, start_step: int, step: int) -> None:
  """Records in run.json from which step the last training ran, to which and why it stopped.

  Raises:
    ValueError: `reason` is not one of STOP_REASONS.
  """
  if reason not in STOP_REASONS:
    raise ValueError(f"reason must be one of {STOP_REASONS}, got {reason!r}.")
  run_path = _path(output_dir, RUN_FILE)
  run = _read_json(run_path) if tf.io.gfile.exists(run_path) else {}
  run.update(start_step=start_step, stop_reason=reason, stop_step=step)
  _write_json(run_path, run)


def record_warm_start(output_dir: str, source: dict) -> None:
  """Records in run.json the source of a warm-started run's first weights (WARM_START_KEY)."""
  run_path = _path(output_dir, RUN_FILE)
  run = _read_json(run_path) if tf.io.gfile.exists(run_path) else {}
  run[WARM_START_KEY] = source
  _write_json(run_path, run)


def last_stop(output_dir: str) -> Tuple[Optional[int], Optional[str]]:
  """(stop_step, stop_reason) of the last training in `output_dir`; None for what is absent."""
  run_path = _path(output_dir, RUN_FILE)
  run = _read_json(run_path) if tf.io.gfile.exists(run_path) else {}
  return run.get("stop_step"), run.get("stop_reason")


def recorded_data_dir(output_dir: str) -> Optional[str]:
  """The --data_dir run.json records (None: not recorded, or no longer there)."""
  path = _path(output_dir, RUN_FILE)
  try:
    data_dir = _read_json(path).get(DATA_DIR_KEY) if tf.io.gfile.exists(path) else None
  except (ValueError, AttributeError):  # damaged: load_run_files reports it
    return None
  return data_dir if data_dir and tf.io.gfile.isdir(data_dir) else None


def adam_step_offset(output_dir: str) -> int:
  """The `FusedAdam` adam_step_offset of a run: non-zero only for a T2T run imported
  without its Adam state, recorded in its t2t_import.json (`t2t_import.py`)."""
  path = RunDir(output_dir).import_record
  if not tf.io.gfile.exists(path):
    return 0
  return int(_read_json(path).get("adam_step_offset", 0))


def load_run_files(output_dir: str) -> Tuple[HParams, str, ModelSpec]:
  """(HParams, problem name, ModelSpec) saved by a training run in `output_dir`.

  Raises:
    FileNotFoundError: no hparams.json or run.json there, naming the trainer
      command to run.
    errors.RunError: one of them is damaged (truncated, not JSON, or without
      the fields it needs), naming the file and how to rewrite it.
  """
  hparams = _parse_run_file(output_dir, HPARAMS_FILE, HParams.from_json)
  run = _parse_run_file(output_dir, RUN_FILE, json.loads)
  fields = {f.name for f in dataclasses.fields(ModelSpec)}
  try:
    problem = run.pop(PROBLEM_KEY)
    return hparams, problem, ModelSpec(**{k: v for k, v in run.items() if k in fields})
  except (AttributeError, KeyError, TypeError) as e:  # valid JSON, wrong content
    raise _damaged(output_dir, RUN_FILE, f"no valid {e}") from None


def recorded_vocab_digests(output_dir: str) -> Dict[str, str]:
  """{side: SHA-256} of the vocabularies run.json records ({} for an older run.json)."""
  run = _parse_run_file(output_dir, RUN_FILE, json.loads)
  entries = run.get(VOCAB_KEY) if isinstance(run, dict) else None
  return {side: entry["sha256"] for entry in entries or [] if "sha256" in entry
          for side in entry.get("features", [])}


def _damaged(output_dir: str, name: str, detail: str) -> errors.RunError:
  return errors.RunError(
      f"{_path(output_dir, name)} is damaged ({detail}): restore it from a backup, or "
      f"delete it and run t2t_keras_trainer --output_dir={output_dir} with the run's "
      "--problem, --hparams_set and --hparams (it writes the file again and resumes "
      "from the newest checkpoint).")


def _parse_run_file(output_dir: str, name: str, parse: Callable[[str], object]):
  """`parse(text)` of the run file `name`, with the errors a user can act on."""
  path = _path(output_dir, name)
  try:
    with tf.io.gfile.GFile(path) as f:
      text = f.read()
  except tf.errors.NotFoundError:  # gfile's, not Python's FileNotFoundError
    raise FileNotFoundError(
        f"No {name} in {output_dir}: give the --output_dir of a training run, or train a "
        f"model there first with t2t_keras_trainer --output_dir={output_dir} ...") from None
  try:
    return parse(text)
  except (ValueError, TypeError, AttributeError, KeyError) as e:  # JSONDecodeError: ValueError
    raise _damaged(output_dir, name, " ".join(str(e).split()) or type(e).__name__) from None
