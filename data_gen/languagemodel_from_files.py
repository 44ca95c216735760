"""`languagemodel_from_files`: a language model of the user's own text files.

T2T's Text2SelfProblem (as `languagemodel_lm1b32k`): each non-empty line of
the text is one example of "targets" only (subword ids + EOS=1), no inputs.
Blank lines (paragraph breaks) are skipped. One subword vocabulary is built
from the training text.

Configured by constructor arguments (the datagen CLI passes `--train_text`,
`--dev_text`, optionally `--test_text`, and `--vocab_size`). The configuration
is saved as `languagemodel_from_files.config.json` in data_dir, so
`registry.problem("languagemodel_from_files", data_dir=...)` in the trainer gets
the same problem back. The dev and test text files are
`languagemodel_from_files.<split>.txt`.
"""

import json
import os
from typing import Any, Dict, Iterator, Optional

from data_gen import file_io
from data_gen.problem import DatasetSplit, Text2TextProblem
from data_gen.registry import register_problem

CONFIG_FILENAME = "languagemodel_from_files.config.json"
FILE_ARGS = ("train_text", "dev_text", "test_text")


def read_text_lines(path: str, name: str) -> Iterator[str]:
  """The stripped non-empty lines of a UTF-8 text file.

  Raises:
    ValueError: naming the file when it is missing, not UTF-8 or holds no text.
  """
  count = 0
  for line in file_io.iter_lines(path, name=name):
    line = line.strip()
    if line:
      count += 1
      yield line
  if not count:
    raise ValueError("%s %r holds no text; give a file with one sentence (or paragraph) per "
                     "line" % (name, path))


@register_problem
class LanguagemodelFromFiles(Text2TextProblem):
  """Text files -> subword vocab + T2T shards of "targets" only (train 100, dev 1 [, test 1])."""

  has_inputs = False
  target_lang = "txt"  # names the dev/test text files

  def __init__(self, train_text: Optional[str] = None, dev_text: Optional[str] = None,
               vocab_size: int = 2**15, test_text: Optional[str] = None):
    if not isinstance(vocab_size, int) or vocab_size < 8:
      raise ValueError("vocab_size must be an int >= 8, got %r" % (vocab_size,))
    self.train_text, self.dev_text, self.test_text = train_text, dev_text, test_text
    self.approx_vocab_size = vocab_size
    self.has_test_split = test_text is not None

  def config(self) -> Dict[str, Any]:
    """JSON-serialisable constructor arguments (file paths made absolute)."""
    cfg = {k: (os.path.abspath(getattr(self, k)) if getattr(self, k) else None)
           for k in FILE_ARGS}
    cfg["vocab_size"] = self.approx_vocab_size
    return cfg

  @classmethod
  def restore(cls, data_dir: Optional[str]) -> "LanguagemodelFromFiles":
    """The problem as configured when data_dir was generated (unconfigured if none saved)."""
    path = os.path.join(data_dir, CONFIG_FILENAME) if data_dir else None
    if not path or not os.path.exists(path):
      return cls()
    with open(path, encoding="utf-8") as f:
      return cls(**json.load(f))

  def _check_configured(self) -> None:
    missing = [k for k in FILE_ARGS[:2] if not getattr(self, k)]
    if missing:
      raise ValueError("languagemodel_from_files needs %s (flags --%s)"
                       % (", ".join(missing), " --".join(missing)))
    for key in FILE_ARGS:
      path = getattr(self, key)
      if path and not os.path.isfile(path):
        raise ValueError("%s file %r does not exist" % (key, path))

  def generate_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[Dict[str, str]]:
    del data_dir, tmp_dir
    self._check_configured()
    key = {DatasetSplit.TRAIN: "train_text", DatasetSplit.EVAL: "dev_text",
           DatasetSplit.TEST: "test_text"}[split]
    for line in read_text_lines(getattr(self, key), key):
      yield {"targets": line}

  def generate_data(self, data_dir: str, tmp_dir: str, **kwargs) -> Dict[str, Any]:
    """Validates the files, saves the config to data_dir, then generates as usual.

    Raises:
      ValueError: if data_dir already holds data generated from a different config.
    """
    self._check_configured()
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, CONFIG_FILENAME)
    config = self.config()
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        saved = json.load(f)
      if saved != config:
        raise ValueError("data_dir %r already holds languagemodel_from_files data made from "
                         "%r, not %r; use another data_dir or delete it"
                         % (data_dir, saved, config))
    result = super().generate_data(data_dir, tmp_dir, **kwargs)
    # Saved only after success, so a failed run can be retried with other files.
    if not os.path.exists(path):
      file_io.write_lines(path, [json.dumps(config, indent=1, sort_keys=True)])
    return result
