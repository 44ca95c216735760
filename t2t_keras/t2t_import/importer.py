"""Import a Tensor2Tensor training run: hparams.json + TF1 checkpoint -> a t2t-keras run.

A T2T run directory holds `hparams.json` (every hparam, as the trainer used
them), `flags.txt` (the trainer's flags: problem, hparams_set, ...) and TF1
name-based checkpoints `model.ckpt-<step>` whose variables carry T2T's scope
names (`transformer/body/encoder/layer_0/self_attention/multihead_attention/q/kernel`,
`transformer/symbol_modality_<vocab>_<hidden>/shared/weights_<shard>`, ...).

`hparams_from_t2t` (in `t2t_hparams`) maps hparams.json onto `HParams`,
refusing by name and value what we do not implement.
`load_t2t_weights` (in `t2t_keras.t2t_weights`, which training's warm start uses
too) assigns every checkpoint variable to the Keras model built from those hparams (concatenating the symbol-modality row shards), ignoring
only optimizer slots and T2T's bookkeeping, and fails listing every missing or
unexpected name; `load_t2t_adam_state` assigns T2T's Adam moments to our Adam.
`import_t2t_run` writes a complete run directory (hparams.json, run.json,
vocabulary, a trainer checkpoint at T2T's step with its Adam state) atomically.

A T2T run on a problem without inputs (T2T's language models: `has_input`
false) holds the decoder only: no `body/encoder/`, no `encdec_attention`
sublayers, no `target_space_embedding`, and its symbol modality's target
embedding is `shared` or `target_emb` (`shared` also under `shared_embedding`).
It imports as a run of `lm_model.TransformerLM` (run.json `has_inputs` false);
a T2T language-model problem not registered here becomes `LM_PROBLEM`, with
T2T's subword vocabulary.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from data_gen import file_io, registry, text_encoder
from data_gen.problem_from_files import ProblemFromFiles
from t2t_keras import checkpoints
from t2t_keras.hparams import HParams, create_hparams, list_hparams_sets
from t2t_keras.rundir import settings
from t2t_keras.rundir.files import RunDir
from t2t_keras.t2t_import.optimizer_state import load_t2t_adafactor_state, load_t2t_adam_state
from t2t_keras.t2t_import.t2t_hparams import (T2T_INERT_HPARAMS, T2T_REQUIRED_VALUES,
                                              hparams_from_t2t, overrides_for, read_t2t_flags)
from t2t_keras.t2t_weights import checkpoint_has_inputs, load_t2t_weights
from t2t_keras.training.trainer import Trainer

# The registered problem a T2T language-model run imports as when T2T's problem
# (e.g. languagemodel_lm1b32k) is not registered here: targets only, one subword
# vocabulary, its size in the vocabulary's file name.
LM_PROBLEM = "languagemodel_from_files"
# T2T's language-model problems whose vocabulary is not a subword one (T2T's
# `vocab_type` TOKEN or CHARACTER): no problem here reads it.
T2T_NON_SUBWORD_LM_PROBLEMS: Dict[str, str] = {
    "languagemodel_ptb10k": "a token vocabulary (vocab.lmptb.10000, T2T's TokenTextEncoder)",
    **{name: "a token vocabulary (vocab.languagemodel_wikitext103.tokens, T2T's "
             "TokenTextEncoder)" for name in (
                 "languagemodel_wikitext103", "languagemodel_wikitext103_l4k",
                 "languagemodel_wikitext103_l16k")},
    **{name: "characters (T2T's ByteTextEncoder)" for name in (
        "languagemodel_ptb_characters", "languagemodel_wikitext103_characters",
        "languagemodel_lm1b_characters", "languagemodel_lm1b_characters_packed")},
}


def trained_target_spaces(checkpoint_path: str) -> List[int]:
  """Rows of `target_space_embedding` that T2T's Adam updated (non-zero first moment).

  Adam's sparse update leaves the moments of rows never gathered at zero, so
  these are the target-space ids T2T trained with ([] without Adam slots).
  """
  reader = tf.train.load_checkpoint(checkpoint_path)
  for name in reader.get_variable_to_shape_map():
    if name.endswith("target_space_embedding/kernel/Adam"):
      return [int(i) for i in np.flatnonzero(np.abs(reader.get_tensor(name)).sum(axis=1))]
  return []


# ---------------------------------------------------------------------------
# A whole run.


def _find_vocab(filename: str, directories: List[Optional[str]]) -> str:
  for directory in directories:
    if directory and tf.io.gfile.exists(os.path.join(directory, filename)):
      return os.path.join(directory, filename)
  looked = ", ".join(d for d in directories if d)
  raise FileNotFoundError(f"Vocabulary {filename} not found (looked in {looked}); pass "
                          "--data_dir=<the T2T data_dir holding it>.")


def _find_t2t_lm_vocab(t2t_problem: str, directories: List[Optional[str]]) -> str:
  """T2T's subword vocabulary of a language-model problem, `vocab.<problem>.<N>.subwords`
  (T2T's `Text2TextProblem.vocab_filename`; a `_packed` problem reads its unpacked one's).

  Raises:
    ValueError / FileNotFoundError: several or none found, in one line.
  """
  names = [t2t_problem]
  if t2t_problem.endswith("_packed"):
    names.append(t2t_problem[:-len("_packed")])
  pattern = re.compile(r"^vocab\.(?:%s)\.\d+\.subwords$" % "|".join(map(re.escape, names)))
  for directory in directories:
    if not directory or not tf.io.gfile.isdir(directory):
      continue
    found = sorted(n for n in tf.io.gfile.listdir(directory) if pattern.match(n))
    if len(found) > 1:
      raise ValueError(f"{directory} holds several vocabularies of {t2t_problem} "
                       f"({', '.join(found)}): pass --vocab_file=<the one the T2T run read>.")
    if found:
      return os.path.join(directory, found[0])
  looked = ", ".join(d for d in directories if d)
  raise FileNotFoundError(
      f"No vocab.{names[-1]}.<N>.subwords (T2T's vocabulary of the language-model problem "
      f"{t2t_problem}, which is not registered here) in {looked}: pass --data_dir=<the T2T "
      "data_dir holding it> or --vocab_file=<T2T's subword vocabulary of the run>.")


def resolve_problem(t2t_problem: str, has_inputs: bool, data_dir: Optional[str],
                    directories: List[Optional[str]], vocab_file: Optional[str] = None
                    ) -> Tuple[Any, Dict[str, str]]:
  """The registered problem a T2T run of `t2t_problem` imports as, and its vocabulary.

  A registered problem must agree with the checkpoint on inputs. A T2T problem
  without inputs that is not registered here (T2T's languagemodel_lm1b32k, a
  `--t2t_usr_dir` Text2SelfProblem, ...) imports as `LM_PROBLEM`, reading
  T2T's subword vocabulary (`vocab_file`, or `vocab.<t2t_problem>.<N>.subwords`
  found in `directories`) under its name here, `vocab.languagemodel_from_files.<N>.subwords`.

  Args:
    t2t_problem: the problem's T2T name (--problem, or T2T's flags.txt).
    has_inputs: `checkpoint_has_inputs` of the T2T checkpoint.
    data_dir: where a registered problem's configuration is (`registry.problem`).
    directories: where to look for the vocabulary, in order.
    vocab_file: T2T's vocabulary of a language-model problem not registered here.
  Returns:
    (problem, {vocabulary file name the problem reads: the file to copy there}).
  Raises:
    ValueError / FileNotFoundError: in one line: a registered problem with or
      without inputs where the checkpoint has none or some, an unknown problem
      with inputs, a T2T language model whose vocabulary is not subwords, a
      vocabulary not found.
  """
  if t2t_problem in registry.list_problems():
    problem = registry.problem(t2t_problem, data_dir)
    if getattr(problem, "has_inputs", True) != has_inputs:
      raise ValueError(
          f"--problem={t2t_problem} is a problem {'with' if not has_inputs else 'without'} "
          "inputs, and the T2T checkpoint holds a model "
          + ("without inputs (no encoder: T2T's language model): pass --problem=<the T2T "
             f"language-model problem> (one not registered here imports as {LM_PROBLEM})."
             if not has_inputs else "with inputs (an encoder): pass --problem=<the problem "
             "the T2T run trained on>."))
    if vocab_file:
      raise ValueError(f"--vocab_file is for a T2T language-model problem not registered "
                       f"here; {t2t_problem} is registered: put its vocabulary in --data_dir.")
    return problem, {name: _find_vocab(name, directories)
                     for name in sorted(set(problem.vocab_filenames.values()))}
  if has_inputs:
    registry.problem(t2t_problem, data_dir)  # ValueError: unknown, naming the registered ones
  if t2t_problem in T2T_NON_SUBWORD_LM_PROBLEMS:
    raise ValueError(
        f"T2T's {t2t_problem} reads {T2T_NON_SUBWORD_LM_PROBLEMS[t2t_problem]}, and "
        f"t2t-keras's language-model problem ({LM_PROBLEM}) reads subword vocabularies only: "
        "this run's ids mean nothing here.")
  if vocab_file and not tf.io.gfile.exists(vocab_file):
    raise FileNotFoundError(f"--vocab_file={vocab_file} does not exist.")
  path = vocab_file or _find_t2t_lm_vocab(t2t_problem, directories)
  size = re.search(r"\.(\d+)\.subwords$", os.path.basename(path))
  problem = registry.problem_class(LM_PROBLEM)(
      vocab_size=int(size.group(1)) if size else text_encoder.SubwordTextEncoder(path).vocab_size)
  return problem, {problem.vocab_filenames["targets"]: path}


def resolve_hparams(t2t_output_dir: str, flags: Dict[str, str], hparams_set: Optional[str],
                    overrides: str, ignore: Iterable[str]) -> Tuple[HParams, str]:
  """(HParams of the T2T run, the registered set to express them as overrides of).

  hparams.json wins when present (it holds T2T's values after its overrides);
  otherwise the run's hparams_set (registered here) with its --hparams.
  `overrides` (our syntax) apply last.
  """
  hparams_set = hparams_set or flags.get("hparams_set") or None
  path = os.path.join(t2t_output_dir, "hparams.json")
  if tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      hp = hparams_from_t2t(json.load(f), ignore)
  elif hparams_set:
    hp = create_hparams(hparams_set, flags.get("hparams", "") if hparams_set ==
                        flags.get("hparams_set") else "")
  else:
    raise FileNotFoundError(f"No hparams.json in {t2t_output_dir} and no hparams_set in its "
                            "flags.txt: pass --hparams_set (and --hparams).")
  if overrides:
    hp = hp.parse(overrides)
  base = hparams_set if hparams_set in list_hparams_sets() else "transformer_base"
  return hp, base


def _choose_target_space(problem, source: str, hp: HParams,
                         log: Callable[[str], None]) -> int:
  """The problem's target space, unless T2T's Adam slots show it trained one other row."""
  wanted = problem.target_space_id
  trained = trained_target_spaces(source) if hp.use_target_space_embedding else []
  if len(trained) == 1 and trained != [wanted]:
    log(f"T2T trained target-space row {trained[0]}, not {problem.name}'s {wanted}: using "
        f"{trained[0]} (fine-tuning with t2t_keras_trainer needs a problem with that "
        "target space).")
    return trained[0]
  return wanted


def _write_notes(directory: str, problem_name: str, result: Dict[str, Any], source: str,
                 assigned: int) -> None:
  """trainer_flags.txt (for t2t_keras_trainer --flagfile) and t2t_import.json (provenance)."""
  run = RunDir(directory)
  file_io.write_text(run.trainer_flags, "".join(
      f"--{k}={v}\n" for k, v in (("problem", problem_name),
                                  ("hparams_set", result["hparams_set"]),
                                  ("hparams", result["hparams"]),
                                  ("output_dir", result["output_dir"]))))
  file_io.write_text(run.import_record, json.dumps(
      dict(result, t2t_checkpoint=os.path.abspath(source), t2t_variables=assigned),
      indent=2, sort_keys=True))


def import_t2t_run(t2t_output_dir: str, output_dir: str, checkpoint_path: Optional[str] = None,
                   problem_name: Optional[str] = None, hparams_set: Optional[str] = None,
                   hparams_overrides: str = "", data_dir: Optional[str] = None,
                   ignore_hparams: Iterable[str] = (), target_space_id: Optional[int] = None,
                   reset_optimizer: bool = False, vocab_file: Optional[str] = None,
                   log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Writes `output_dir`: a t2t-keras run holding the T2T run's model and Adam state.

  The run has hparams.json, run.json, the problem's vocabulary file(s) (so
  `--data_dir=output_dir` works for decoder and exporter), a trainer
  checkpoint `ckpt-<step>` (the model and T2T's Adam moments, so that
  fine-tuning takes the update T2T would take when resuming),
  `trainer_flags.txt` (problem, hparams_set and --hparams that reproduce the
  hparams, for t2t_keras_trainer --flagfile) and `t2t_import.json`
  (provenance, and where Adam's bias correction starts). It is assembled in a
  temporary directory and renamed: on any error nothing is left.

  The step is T2T's global step, divided by optimizer_multistep_accumulate_steps
  n when it is set: T2T's global step counts micro-batches, ours updates.
  Without Adam state in the checkpoint (or with `reset_optimizer`), Adam
  starts fresh: zero moments, bias correction counted from the import, while
  the learning-rate schedule continues at the step.

  A checkpoint without an encoder (T2T's model of a problem without inputs)
  imports as a language model: run.json's `has_inputs` is false, the problem
  is a registered one without inputs (`resolve_problem`: T2T's own name when
  registered here, else `LM_PROBLEM` with T2T's subword vocabulary and
  `languagemodel_from_files.config.json` giving its vocabulary's size).

  Args:
    t2t_output_dir: T2T's --output_dir (hparams.json, flags.txt, checkpoints).
    output_dir: the new run directory; must not exist or be empty.
    checkpoint_path: a T2T checkpoint prefix; default the latest.
    problem_name / hparams_set: default from T2T's flags.txt.
    hparams_overrides: our override syntax, applied after hparams.json.
    data_dir: where the vocabulary is (default: t2t_output_dir, then T2T's --data_dir).
    ignore_hparams: T2T hparams to drop although we do not implement them.
    target_space_id: override the problem's target space id (row of T2T's
      target_space_embedding; T2T >= 1.5 used 0 for most text problems). By
      default the problem's; if T2T's Adam slots show that T2T trained one
      other row, that row is used and a message says so.
    reset_optimizer: import the weights only; Adam starts fresh.
    vocab_file: T2T's subword vocabulary of a language-model run whose problem
      is not registered here (default: `vocab.<problem>.<N>.subwords` in
      data_dir, t2t_output_dir or T2T's --data_dir).
  Returns:
    {"output_dir", "checkpoint", "global_step" (our step), "hparams_set",
     "hparams", "t2t_global_step", "adam_slots", "adam_step_offset", "problem"
     (the registered problem), "t2t_problem", "has_inputs"}.
  """
  if tf.io.gfile.exists(output_dir) and tf.io.gfile.listdir(output_dir):
    raise ValueError(f"--output_dir={output_dir} exists and is not empty; give a new directory.")
  flags = read_t2t_flags(t2t_output_dir)
  problem_name = problem_name or flags.get("problem")
  if not problem_name:
    raise ValueError(f"No --problem given and none in {t2t_output_dir}/flags.txt.")
  hp, base_set = resolve_hparams(t2t_output_dir, flags, hparams_set, hparams_overrides,
                                 ignore_hparams)
  source = checkpoint_path or tf.train.latest_checkpoint(t2t_output_dir)
  if not source or not tf.io.gfile.exists(source + ".index"):
    raise FileNotFoundError(f"No T2T checkpoint {source or 'in ' + t2t_output_dir} "
                            "(pass --checkpoint_path=DIR/model.ckpt-STEP).")
  checkpoints.verify_checkpoint(source)  # a damaged file is named before anything is written
  with checkpoints.reading(source):
    has_inputs = checkpoint_has_inputs(source)
  if not has_inputs and target_space_id is not None:
    raise ValueError(f"--target_space_id={target_space_id}: T2T checkpoint {source} holds a "
                     "model without inputs (a language model), which has no target space.")
  t2t_data_dir = os.path.expanduser(flags["data_dir"]) if flags.get("data_dir") else None
  problem, vocab_sources = resolve_problem(problem_name, has_inputs, data_dir,
                                           [data_dir, t2t_output_dir, t2t_data_dir], vocab_file)
  final = os.path.abspath(output_dir)
  with file_io.atomic_directory(final) as write:
    tmp = write.tmp
    copies = {}  # copy -> the user's vocabulary file
    for filename, found in sorted(vocab_sources.items()):
      copy = os.path.join(tmp, filename)
      copies[copy] = found
      tf.io.gfile.copy(found, copy)
    if isinstance(problem, ProblemFromFiles):  # what registry.problem(name, output_dir) reads
      file_io.write_text(os.path.join(tmp, problem.config_filename()),
                         json.dumps(problem.config(), indent=2, sort_keys=True))
    try:
      encoders = problem.feature_encoders(tmp)
    except ValueError as e:  # a malformed vocabulary: name the user's file, not the copy
      message = str(e)
      for copy, found in copies.items():
        message = message.replace(copy, found)
      raise ValueError(message) from None
    if not has_inputs:
      target_space_id = problem.target_space_id  # recorded as the trainer records it
    elif target_space_id is None:
      with checkpoints.reading(source):
        target_space_id = _choose_target_space(problem, source, hp, log)
    spec = settings.ModelSpec(encoders["inputs"].vocab_size, encoders["targets"].vocab_size,
                             target_space_id, has_inputs)
    settings.save_or_check_run_files(tmp, hp, problem.name, spec,
                                    settings.vocab_record(problem, tmp, encoders))
    # The schedule is not used here; train_steps only has to be valid for it.
    trainer = Trainer(hp, spec, tf.distribute.get_strategy(),
                      train_steps=hp.learning_rate_warmup_steps + 1)
    with checkpoints.reading(source):  # a CRC mismatch in a checkpoint too big to verify
      loaded = load_t2t_weights(trainer.model, source)
    t2t_step = loaded["global_step"]
    step, partial = divmod(t2t_step, max(1, hp.optimizer_multistep_accumulate_steps))
    if partial:
      log(f"T2T's global step {t2t_step} is {partial} micro-batch(es) into an accumulation "
          f"of {hp.optimizer_multistep_accumulate_steps}: those gradients are not imported; "
          f"training continues at update {step}.")
    load_state = (load_t2t_adafactor_state if hp.optimizer == "adafactor"
                  else load_t2t_adam_state)
    with checkpoints.reading(source):
      adam = ({"slots": 0, "adam_step_offset": step, "other_optimizer": ""} if reset_optimizer
              else load_state(trainer.model, trainer.optimizer, source, step))
    trainer.optimizer.iterations.assign(step)
    checkpoint = tf.train.Checkpoint(model=trainer.model, optimizer=trainer.optimizer)
    written = tf.train.CheckpointManager(checkpoint, tmp, max_to_keep=None).save(
        checkpoint_number=step)
    result = {"output_dir": final, "checkpoint": os.path.join(final, os.path.basename(written)),
              "global_step": step, "hparams_set": base_set,
              "hparams": overrides_for(hp, base_set), "t2t_global_step": t2t_step,
              "adam_slots": adam["slots"], "adam_step_offset": adam["adam_step_offset"],
              "problem": problem.name, "t2t_problem": problem_name, "has_inputs": has_inputs}
    _write_notes(tmp, problem.name, result, source, loaded["assigned"])
  named = problem.name if problem.name == problem_name else \
      f"{problem.name} (T2T's {problem_name})"
  what = (f"target space {spec.target_space_id}" if has_inputs else
          f"a language model (no inputs, vocabulary {spec.target_vocab_size})")
  log(f"Imported {source} (T2T step {t2t_step}, {loaded['assigned']} variables) into {final}: "
      f"problem {named}, {what}.")
  log(_optimizer_note(adam, reset_optimizer, step, hp.optimizer))
  return result


def _optimizer_note(adam: Dict[str, Any], reset: bool, step: int, optimizer: str) -> str:
  """One line on the optimizer state the import carries."""
  name = "Adafactor" if optimizer == "adafactor" else "Adam"
  if adam["slots"] and name == "Adafactor":
    return (f"Adafactor state imported ({adam['slots']} slot tensors; its decay continues "
            f"at step {step}): fine-tuning continues T2T's Adafactor.")
  if adam["slots"]:
    made = step - adam["adam_step_offset"]
    return (f"Adam state imported ({adam['slots']} slot tensors; bias correction continues "
            f"after {made} updates): fine-tuning takes the update T2T would take resuming.")
  why = ("--reset_optimizer given" if reset else
         f"the checkpoint holds {adam['other_optimizer']} state, not {name}'s"
         if adam["other_optimizer"] else "the checkpoint has no optimizer state")
  counted = "its decay" if name == "Adafactor" else "bias correction"
  return (f"{name} starts fresh ({why}): zero moments, {counted} counted from this "
          f"import; the learning-rate schedule continues at step {step}.")
