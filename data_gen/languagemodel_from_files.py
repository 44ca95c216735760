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

import os
from typing import Any, Dict, Iterator, Optional

from data_gen import file_io
from data_gen.problem import DatasetSplit
from data_gen.problem_from_files import ProblemFromFiles
from data_gen.registry import register_problem

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
class LanguagemodelFromFiles(ProblemFromFiles):
  """Text files -> subword vocab + T2T shards of "targets" only (train 100, dev 1 [, test 1])."""

  file_args = FILE_ARGS

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
    cfg = self.file_config()
    cfg["vocab_size"] = self.approx_vocab_size
    return cfg

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
