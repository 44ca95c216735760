"""Warm start (T2T's `--warm_start_from`): a new run begins with another model's weights.

The source is a t2t-keras run directory (its newest loadable checkpoint), a checkpoint
prefix of one (`run/ckpt-N`, `run/averaged/from-step-N/averaged.ckpt`: its run is the
nearest directory above holding run.json), or a T2T checkpoint (T2T's --output_dir or a
`model.ckpt-N` prefix). As in T2T, only the weights are taken: the new run starts at
step 0 with a fresh optimizer (zero Adam moments, the learning-rate schedule from its
start), and a run that already has checkpoints resumes from its own without it.

Every variable of the new model must be in the source with the same shape (the
hparams that size the model must be the source's). The vocabulary must be the source's
too: the same file, by SHA-256, as the source run recorded (run.json's `vocab`) or, for a
T2T checkpoint, as the `vocab.*` file next to it (else in T2T's --data_dir of its
flags.txt). With `vocab_mode="map"` another vocabulary is taken: the rows of the tokens
both vocabularies hold (the same string) are copied from the source into every
vocab-indexed table (embeddings, softmax), and the other rows keep the new model's
initialization, T2T's N(0, hidden_size^-0.5) (`layers/embedding.py`).

`prepare` checks all this and reads the weights before anything is written; `apply`
assigns them to the trainer's model; `WarmStart.record` is what run.json keeps of it.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from data_gen import registry, sentencepiece_encoder
from t2t_keras import checkpoints, t2t_weights
from t2t_keras.rundir import model_factory, settings
from t2t_keras.rundir.files import HPARAMS_FILE, RUN_FILE, RunDir

VOCAB_MODES = ("check", "map")
# How far above a checkpoint prefix its run directory may be (averaged/from-step-N/).
_RUN_DIR_DEPTH = 3


@dataclasses.dataclass
class WarmStart:
  """What `prepare` read: the weights to assign, by variable path of the new model.

  values: whole variables, copied unchanged.
  rows: vocab-indexed tables under `vocab_mode="map"`: (source table, new ids, source
    ids): row new_ids[k] of the new table is row source_ids[k] of the source's.
  """
  source: str
  checkpoint: str
  kind: str  # "run", "checkpoint" or "t2t"
  step: int
  values: Dict[str, np.ndarray]
  rows: Dict[str, Tuple[np.ndarray, np.ndarray, np.ndarray]]
  vocab: Dict[str, object]

  def record(self) -> dict:
    """run.json's `warm_start_from` entry."""
    return {"path": _absolute(self.source), "checkpoint": _absolute(self.checkpoint),
            "kind": self.kind, "step": self.step, "vocab": self.vocab}

  def describe(self) -> str:
    vocab = ""
    if self.vocab.get("mode") == "map":
      vocab = (f"; vocabulary mapped: {self.vocab['shared_tokens']} shared tokens copied, "
               f"{self.vocab['new_tokens']} new ones initialized as T2T's embeddings")
    return (f"Warm start from {self.checkpoint} (step {self.step}): its weights, step 0 and "
            f"a fresh optimizer{vocab}.")


def token_strings(encoder) -> List[str]:
  """The token string of every id of a vocabulary's encoder, by id.

  Takes a `SubwordTextEncoder` (its subtoken strings) or a `SentencePieceEncoder`
  (its pieces). Raises ValueError for an encoder with neither.
  """
  for name in ("all_subtoken_strings", "pieces"):
    tokens = getattr(encoder, name, None)
    if tokens is not None:
      return list(tokens)
  raise ValueError(f"{type(encoder).__name__} lists no token strings: its rows cannot be "
                   "mapped by token.")


def has_checkpoints(output_dir: str) -> bool:
  """Whether `output_dir` holds checkpoints of its own (then a run resumes from them)."""
  return bool(tf.io.gfile.glob(RunDir(output_dir).checkpoint("*") + ".index"))


def prepare(source: Optional[str], vocab_mode: Optional[str], output_dir: str,
            training: bool, start_over: bool, hparams, spec: settings.ModelSpec, problem,
            data_dir: str, encoders: Dict, log: Callable[[str], None]) -> Optional[WarmStart]:
  """The warm start of a new run in `output_dir` from `source`, checked and read.

  Returns None without `source`, and (saying so in one line) when `output_dir` holds
  checkpoints (it resumes from its own, unless `start_over`) or the schedule does
  not train.
  Raises:
    ValueError: one line naming what differs (a variable and both shapes, or both
      vocabularies, with the fix), or a source that cannot be read.
  """
  if vocab_mode is not None and vocab_mode not in VOCAB_MODES:
    raise ValueError(f"--warm_start_vocab must be one of {', '.join(VOCAB_MODES)}, got "
                     f"{vocab_mode!r}.")
  if not source:
    if vocab_mode == "map":
      raise ValueError("--warm_start_vocab=map maps the vocabulary of --warm_start_from, "
                       "which is not given.")
    return None
  if not training:
    log(f"--warm_start_from={source} not applied: the schedule does not train.")
    return None
  if has_checkpoints(output_dir) and not start_over:
    log(f"--warm_start_from={source} not applied: {output_dir} holds checkpoints, and the "
        "run resumes from its own (a warm start begins a new run only, as in T2T).")
    return None
  kind, prefix, run_dir = _resolve(source)
  old = _source_vocab(kind, prefix, run_dir, problem)  # before the slower read of weights
  try:
    with checkpoints.reading(prefix):
      checkpoints.verify_checkpoint(prefix)
      if kind == "t2t":
        source_model, step = _read_t2t(prefix, hparams, spec)
      else:
        source_model, _, _, source_spec, _ = model_factory.load_trained_model(run_dir, prefix)
        step = _our_step(prefix)
        if source_spec.target_space_id != spec.target_space_id:
          # As in T2T the embedding is copied whole and indexed by the new problem's id.
          log(f"--warm_start_from={source}: its problem's target_space_id is "
              f"{source_spec.target_space_id} and this problem's {spec.target_space_id}; "
              "the decoder starts from that other row of the target-space embedding.")
  except checkpoints.CheckpointError as e:
    raise ValueError(f"--warm_start_from={source}: {e}") from None
  new = {side: os.path.join(data_dir, problem.vocab_filenames[side]) for side in old}
  differs = [side for side in old if old[side][1] != _sha256(new[side])]
  if differs and vocab_mode != "map":
    side = differs[0]
    path = old[side][0] or "the source run's vocab file"
    what = old[side][0] or f"SHA-256 {old[side][1][:16]}..., recorded in its {RUN_FILE}"
    raise ValueError(
        f"--warm_start_from={source}: its vocabulary ({what}) is not the one of "
        f"--data_dir={data_dir} ({new[side]}), so its embedding rows would mean other tokens. "
        "Give --warm_start_vocab=map to copy the rows of the tokens both hold (new tokens "
        "start as T2T initializes them), or generate the new data with the old vocabulary: "
        f"copy {path} to {new[side]} before t2t_keras_datagen.")
  for side in differs:
    if not old[side][0] or not tf.io.gfile.exists(old[side][0]):
      raise ValueError(f"--warm_start_vocab=map: the vocab file of --warm_start_from={source} "
                       f"(SHA-256 {old[side][1][:16]}...) is not found in its data_dir; put "
                       "it back there to map its tokens.")
  target = model_factory.build_model(hparams, spec)  # the new run's variables and shapes
  tables = _vocab_tables(target)
  old_vars = {v.path: v for v in source_model.weights}
  _check_shapes(source, target, old_vars, tables if differs else {})
  values, rows, vocab = {}, {}, {"mode": "same"}
  for variable in target.weights:
    path = variable.path
    side = tables.get(path)
    if side is not None and side in differs:
      new_ids, old_ids = _token_map(sentencepiece_encoder.load_vocab(old[side][0]),
                                    encoders[side])
      rows[path] = (old_vars[path].numpy(), new_ids, old_ids)
      vocab = {"mode": "map", "shared_tokens": int(len(new_ids)),
               "new_tokens": int(variable.shape[0] - len(new_ids))}
    else:
      values[path] = old_vars[path].numpy()
  return WarmStart(source, prefix, kind, step, values, rows, vocab)


def apply(warm: WarmStart, model) -> None:
  """Assigns the warm start's weights to `model` (the trainer's, built for the new run).

  Mapped tables start from the model's own initial rows; the shared tokens' rows are
  then the source's, bit for bit.
  """
  for variable in model.weights:
    if variable.path in warm.rows:
      old, new_ids, old_ids = warm.rows[variable.path]
      table = variable.numpy()
      table[new_ids] = old[old_ids]
      variable.assign(table)
    else:
      variable.assign(warm.values[variable.path])


def _sha256(path: str) -> str:
  with tf.io.gfile.GFile(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def _absolute(path: str) -> str:
  return path if "://" in path else os.path.abspath(path)


def _our_step(prefix: str) -> int:
  """The optimizer's step a t2t-keras checkpoint was saved at (0: none, as averaged ones)."""
  reader = tf.train.load_checkpoint(prefix)
  for key in reader.get_variable_to_shape_map():
    if key.startswith("optimizer/") and key.endswith("iterations/.ATTRIBUTES/VARIABLE_VALUE"):
      return int(reader.get_tensor(key))
  return 0


def _is_run_dir(path: str) -> bool:
  return all(tf.io.gfile.exists(os.path.join(path, name)) for name in (HPARAMS_FILE, RUN_FILE))


def _resolve(source: str) -> Tuple[str, str, Optional[str]]:
  """(kind, checkpoint prefix, our run directory or None for T2T) of `source`."""
  if tf.io.gfile.isdir(source):
    if _is_run_dir(source):
      prefix, damaged = checkpoints.newest_loadable(source)
      if prefix is None:
        detail = f" ({checkpoints.describe(damaged)})" if damaged else ""
        raise ValueError(f"--warm_start_from={source}: no loadable checkpoint in that run"
                         f"{detail}.")
      return "run", prefix, source
    prefix = tf.train.latest_checkpoint(source)
    if prefix is None:
      raise ValueError(f"--warm_start_from={source}: neither a t2t-keras run (no {RUN_FILE}) "
                       "nor a directory of checkpoints; give a run directory or a checkpoint "
                       "prefix.")
  else:
    prefix = source
  if not tf.io.gfile.exists(prefix + ".index"):
    raise ValueError(f"--warm_start_from={source}: no checkpoint {prefix} ({prefix}.index is "
                     "missing); give a run directory or a checkpoint prefix such as "
                     "RUN/ckpt-1000 or T2T's OUTPUT_DIR/model.ckpt-1000.")
  with checkpoints.reading(prefix):  # a damaged index: a CheckpointError naming the file
    keys = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  if "_CHECKPOINTABLE_OBJECT_GRAPH" not in keys:
    return "t2t", prefix, None
  directory = os.path.dirname(os.path.abspath(prefix)) if "://" not in prefix else \
      os.path.dirname(prefix)
  for _ in range(_RUN_DIR_DEPTH):
    if _is_run_dir(directory):
      return "checkpoint", prefix, directory
    directory = os.path.dirname(directory)
  raise ValueError(f"--warm_start_from={source}: no {RUN_FILE} in the directories above it, "
                   "so its hparams and vocabulary are unknown; give the checkpoint inside "
                   "its run directory.")


def _read_t2t(prefix: str, hparams, spec: settings.ModelSpec):
  """(a model holding the T2T checkpoint's weights, T2T's step).

  The model has the new run's hparams and the checkpoint's vocabulary sizes (in T2T's
  `symbol_modality_<vocab>_<hidden>` scopes): `load_t2t_weights` names every variable
  whose shape differs.
  """
  names = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  sizes = {}
  for name in names:
    match = t2t_weights.MODALITY_RE.match(name)
    if match:
      sizes[match.group(3)] = int(match.group(1))
  has_inputs = t2t_weights.checkpoint_has_inputs(prefix)
  if has_inputs != spec.has_inputs:
    what = ("an encoder-decoder", "a language model")
    raise ValueError(f"T2T checkpoint {prefix} holds {what[not has_inputs]}, and the new run "
                     f"is {what[not spec.has_inputs]}.")
  targets = sizes.get("target_emb", sizes.get("softmax", sizes.get("shared")))
  inputs = sizes.get("input_emb", sizes.get("shared", targets))
  shaped = dataclasses.replace(spec, input_vocab_size=inputs or spec.input_vocab_size,
                               target_vocab_size=targets or spec.target_vocab_size)
  model = model_factory.build_model(hparams, shaped)
  step = t2t_weights.load_t2t_weights(model, prefix)["global_step"]
  return model, step


def _source_vocab(kind: str, prefix: str, run_dir: Optional[str], problem
                  ) -> Dict[str, Tuple[str, str]]:
  """{side: (vocab file, SHA-256)} of the source's vocabulary, per side of the new problem.

  Raises:
    ValueError: the vocabulary cannot be known (naming where it was looked for).
  """
  sides = ("inputs", "targets") if getattr(problem, "has_inputs", True) else ("targets",)
  if kind == "t2t":
    directory = os.path.dirname(prefix)
    flags_data_dir = _t2t_flag(directory, "data_dir")
    for place in [directory] + ([os.path.expanduser(flags_data_dir)] if flags_data_dir else []):
      found = sorted(p for p in glob.glob(os.path.join(place, "vocab.*"))
                     if not p.endswith(".manifest.json"))
      by_name = {side: os.path.join(place, problem.vocab_filenames[side]) for side in sides}
      if all(os.path.isfile(p) for p in by_name.values()):
        return {side: (p, _sha256(p)) for side, p in by_name.items()}
      t2t_problem = _t2t_flag(directory, "problem")
      named = [p for p in found if t2t_problem and
               os.path.basename(p).startswith(f"vocab.{t2t_problem}.")]
      for candidates in (found, named):  # T2T's one vocabulary, shared by inputs and targets
        if len(candidates) == 1:
          return {side: (candidates[0], _sha256(candidates[0])) for side in sides}
    raise ValueError(
        f"--warm_start_from={prefix}: the vocabulary of this T2T checkpoint is unknown: put "
        "T2T's vocab file (vocab.<problem>.<size>.subwords, from T2T's --data_dir) next to "
        f"the checkpoint, in {directory}, as its one vocab.<problem>.* file.")
  digests = settings.recorded_vocab_digests(run_dir)
  source_problem = settings.load_run_files(run_dir)[1]
  places = [d for d in (settings.recorded_data_dir(run_dir), run_dir) if d]
  found = {}
  for side in sides:
    try:
      name = registry.problem(source_problem, places[0]).vocab_filenames[side]
    except (ValueError, KeyError, IndexError):
      name = problem.vocab_filenames[side]
    paths = [os.path.join(d, name) for d in places if tf.io.gfile.exists(os.path.join(d, name))]
    digest = digests.get(side) or (_sha256(paths[0]) if paths else None)
    if digest is None:
      raise ValueError(f"--warm_start_from={run_dir}: its vocabulary is unknown ({RUN_FILE} "
                       f"records no SHA-256 and {name} is not in its data_dir): warm-start "
                       "from a run whose --data_dir still holds its vocab file.")
    same = [p for p in paths if _sha256(p) == digest]
    found[side] = (same[0] if same else "", digest)
  return found


def _t2t_flag(directory: str, name: str) -> Optional[str]:
  """A flag of T2T's flags.txt in `directory` (None: no file or no such flag)."""
  path = os.path.join(directory, "flags.txt")
  if not os.path.isfile(path):
    return None
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.startswith(f"--{name}="):
        return line.strip().split("=", 1)[1] or None
  return None


def _vocab_tables(model) -> Dict[str, str]:
  """{variable path: "inputs" or "targets"}: the model's vocab-indexed tables, by the
  vocabulary indexing their rows (T2T's symbol modalities)."""
  sides = {"input_emb": "inputs", "target_emb": "targets", "softmax": "targets",
           "shared": "targets"}
  return {modality.weights_var.path: sides[role]
          for role, modality in t2t_weights.modality_roles(model).items()}


def _check_shapes(source: str, target, old_vars: Dict, mapped: Dict[str, str]) -> None:
  """Refuses a variable of the new model that the source lacks or holds with another
  shape (mapped tables: another hidden size only)."""
  new_paths = [v.path for v in target.weights]
  missing = [p for p in new_paths if p not in old_vars]
  extra = [p for p in old_vars if p not in set(new_paths)]
  if missing or extra:
    what = (f"the new model's {missing[0]} is not in it" if missing else
            f"its {extra[0]} is not in the new model")
    more = len(missing) + len(extra) - 1
    raise ValueError(f"--warm_start_from={source} holds another model: {what}"
                     f"{f' (and {more} more)' if more else ''}; give --hparams_set/--hparams "
                     "that build the source's model.")
  for variable in target.weights:
    old = tuple(old_vars[variable.path].shape)
    new = tuple(variable.shape)
    if variable.path in mapped and old[1:] == new[1:]:
      continue
    if old != new:
      raise ValueError(f"--warm_start_from={source} holds another model: variable "
                       f"{variable.path} has shape {old} there but {new} in the new run's "
                       "model; give the source's --hparams for the sizes of the model.")


def _token_map(old_encoder, new_encoder) -> Tuple[np.ndarray, np.ndarray]:
  """(new ids, old ids) of the tokens both vocabularies hold, by token string."""
  old_ids: Dict[str, int] = {}
  for i, token in enumerate(token_strings(old_encoder)):
    old_ids.setdefault(token, i)
  pairs = [(j, old_ids[t]) for j, t in enumerate(token_strings(new_encoder)) if t in old_ids]
  new, old = zip(*pairs) if pairs else ((), ())
  return np.asarray(new, np.int64), np.asarray(old, np.int64)
