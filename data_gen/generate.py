"""`generate_data(problem, data_dir, ...)`: T2T's t2t-datagen as a library call.

  import t2t_keras
  t2t_keras.generate_data("translate_from_files", "work/my_data",
                          train_source="train.en", train_target="train.de",
                          dev_source="dev.en", dev_target="dev.de", vocab_size=8192)

`t2t_keras_datagen` is its command line; arguments have the flags' names and
meaning (`t2t_keras_datagen --help`): a setting left None is the one the
data_dir's manifest remembers, so a second call resumes or reproduces the first.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

from data_gen import registry

# translate_from_files' own settings (the problem's constructor arguments).
FILE_ARGS = ("train_source", "train_target", "dev_source", "dev_target", "test_source",
             "test_target")
LANG_ARGS = ("source_lang", "target_lang")  # names, not files; None: the problem's default
# languagemodel_from_files' own settings.
LM_FILE_ARGS = ("train_text", "dev_text", "test_text")
# The problems configured by arguments -> the arguments each takes (with vocab_size).
_PROBLEM_ARGS = {"translate_from_files": FILE_ARGS + LANG_ARGS,
                 "languagemodel_from_files": LM_FILE_ARGS}


def make_problem(name: str, data_dir: str, vocab_size: int = 2**15, **files: Optional[str]):
  """The problem to generate: registered `name`, or translate_from_files /
  languagemodel_from_files on `files`.

  `files` are `FILE_ARGS` and `LANG_ARGS`, or `LM_FILE_ARGS`; those None or
  empty are not given.

  Raises:
    ValueError: an unknown problem, or file arguments for another problem.
  """
  given = {k: v for k, v in files.items() if v}
  known = FILE_ARGS + LANG_ARGS + LM_FILE_ARGS
  unknown = sorted(set(files) - set(known))
  if unknown:
    raise ValueError(f"unknown argument(s) {', '.join(unknown)}; translate_from_files takes "
                     f"{', '.join(FILE_ARGS + LANG_ARGS)} and vocab_size, "
                     f"languagemodel_from_files {', '.join(LM_FILE_ARGS)} and vocab_size")
  takes = _PROBLEM_ARGS.get(name, ())
  foreign = [k for k in given if k not in takes]
  if foreign:
    owner = next(p for p, args in _PROBLEM_ARGS.items() if foreign[0] in args)
    raise ValueError("--%s only apply to --problem=%s, not %r"
                     % (", --".join(foreign), owner, name))
  if not given:
    return registry.problem(name, data_dir=data_dir)  # rerun: config saved in data_dir
  return registry.problem_class(name)(vocab_size=vocab_size, **given)


def generate_data(problem: str, data_dir: str, tmp_dir: str = "/tmp/t2t_datagen",
                  num_shards: Optional[int] = None, max_cases: Optional[int] = None,
                  random_seed: Optional[int] = None, t2t_usr_dir: Optional[str] = None,
                  vocab_size: int = 2**15,
                  progress: Optional[Callable[[str, int, Optional[int]], None]] = None,
                  vocab_type: Optional[str] = None,
                  sentencepiece_model_type: Optional[str] = None,
                  sentencepiece_character_coverage: Optional[float] = None,
                  num_workers: Optional[int] = None,
                  **files: Optional[str]) -> dict:
  """Writes the vocabulary and TFRecord shards of `problem` into `data_dir`.

  Args:
    problem: a registered problem name (`t2t_keras_datagen --help` lists them).
    data_dir, tmp_dir, num_shards, max_cases, random_seed, t2t_usr_dir: as the flags.
    vocab_size, train_source, train_target, dev_source, dev_target, test_source,
      test_target, source_lang, target_lang: translate_from_files' settings (the
      test files optional; the languages "src"/"tgt" unless given);
      train_text, dev_text, test_text: languagemodel_from_files' (test optional).
    progress: called as progress(stage, done, total) while generating.
    num_workers: processes that encode and shuffle (default: the CPUs this process
      may use); the files are the same whatever the number.
    vocab_type: "subword" (T2T's) or "sentencepiece"; sentencepiece_model_type
      ("unigram" or "bpe") and sentencepiece_character_coverage: the SentencePiece
      model's training settings. Each None: the data_dir's recorded one, else the
      default (subword; unigram, 1.0). Another vocabulary re-encodes every split.
  Returns:
    the generation's summary: {"splits": {split: counts}, "settings", "changed", ...}.
  Raises:
    ValueError: a bad argument, an unknown problem, a failed download.
    OSError: e.g. a full disk; the unfinished split's files were removed and the
      manifest is marked incomplete.
  """
  registry.import_usr_dir(t2t_usr_dir)
  data_dir = os.path.abspath(os.path.expanduser(data_dir))
  tmp_dir = os.path.abspath(os.path.expanduser(tmp_dir))
  prob = make_problem(problem, data_dir, vocab_size, **files)
  vocab = (vocab_type, sentencepiece_model_type, sentencepiece_character_coverage)
  if hasattr(prob, "set_vocab"):
    prob.restore_vocab(data_dir)  # a setting not given is the recorded one
    prob.set_vocab(*vocab)
  elif any(v is not None for v in vocab):
    raise ValueError("--vocab_type and the --sentencepiece_* flags apply to text problems; "
                     "%s has no text vocabulary" % problem)
  return prob.generate_data(data_dir, tmp_dir, num_shards=num_shards, max_cases=max_cases,
                            random_seed=random_seed, progress=progress, num_workers=num_workers)
