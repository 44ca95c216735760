"""`translate_from_files`: a user's own parallel text files (one sentence per line).

Configured by constructor arguments (the datagen CLI passes `--train_source`,
`--train_target`, `--dev_source`, `--dev_target`, optionally `--test_source`,
`--test_target`, and `--vocab_size`, `--source_lang`, `--target_lang`). The
configuration is saved as `translate_from_files.config.json` in data_dir, so
`registry.problem("translate_from_files", data_dir=...)` in the trainer or
decoder gets the same problem back: the test split for `--eval_use_test_set`,
and the target language that decides whether the decoder also prints the
paper's tokenized BLEU (a language Moses tokenizes, e.g. "de").

The dev and test text files are `translate_from_files.<split>.<lang>`.
"""

import os
import re
from typing import Any, Dict, Iterator, Optional

from data_gen import generator_utils
from data_gen.problem import DatasetSplit
from data_gen.problem_from_files import ProblemFromFiles
from data_gen.registry import register_problem

_FILE_ARGS = ("train_source", "train_target", "dev_source", "dev_target",
              "test_source", "test_target")
_LANG = re.compile(r"[A-Za-z0-9_-]+\Z")  # part of the text files' names


@register_problem
class TranslateFromFiles(ProblemFromFiles):
  """Parallel text files → shared subword vocab + T2T shards (train 100, dev 1 [, test 1])."""

  file_args = _FILE_ARGS

  def __init__(self, train_source: Optional[str] = None, train_target: Optional[str] = None,
               dev_source: Optional[str] = None, dev_target: Optional[str] = None,
               vocab_size: int = 2**15, test_source: Optional[str] = None,
               test_target: Optional[str] = None, source_lang: str = "src",
               target_lang: str = "tgt"):
    if not isinstance(vocab_size, int) or vocab_size < 8:
      raise ValueError("vocab_size must be an int >= 8, got %r" % (vocab_size,))
    if (test_source is None) != (test_target is None):
      raise ValueError("give both test_source and test_target or neither, got %r and %r"
                       % (test_source, test_target))
    for key, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
      if not isinstance(lang, str) or not _LANG.match(lang):
        raise ValueError("%s must be a language name of letters, digits, '_' or '-' "
                         "(e.g. en, de), got %r" % (key, lang))
    if source_lang == target_lang:
      raise ValueError("source_lang and target_lang must differ (they name the dev/test "
                       "text files), got %r for both" % (source_lang,))
    self.train_source, self.train_target = train_source, train_target
    self.dev_source, self.dev_target = dev_source, dev_target
    self.test_source, self.test_target = test_source, test_target
    self.approx_vocab_size = vocab_size
    self.source_lang, self.target_lang = source_lang, target_lang
    self.has_test_split = test_source is not None

  def config(self) -> Dict[str, Any]:
    """JSON-serialisable constructor arguments (file paths made absolute)."""
    cfg = self.file_config()
    cfg.update(vocab_size=self.approx_vocab_size, source_lang=self.source_lang,
               target_lang=self.target_lang)
    return cfg

  def _check_configured(self) -> None:
    missing = [k for k in _FILE_ARGS[:4] if not getattr(self, k)]
    if missing:
      raise ValueError("translate_from_files needs %s (flags --%s); got %r"
                       % (", ".join(missing), " --".join(missing),
                          {k: getattr(self, k) for k in missing}))
    for key in _FILE_ARGS:
      path = getattr(self, key)
      if path and not os.path.isfile(path):
        raise ValueError("%s file %r does not exist" % (key, path))

  def _files(self, split: str):
    prefix = {DatasetSplit.TRAIN: "train", DatasetSplit.EVAL: "dev", DatasetSplit.TEST: "test"}[split]
    return (getattr(self, prefix + "_source"), getattr(self, prefix + "_target"),
            (prefix + "_source", prefix + "_target"))

  def generate_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[Dict[str, str]]:
    del data_dir, tmp_dir
    self._check_configured()
    source, target, names = self._files(split)
    for src, tgt in generator_utils.read_parallel_lines(source, target, names):
      yield {"inputs": src, "targets": tgt}
