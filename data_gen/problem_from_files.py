"""A problem configured by the user's text files: the configuration saved beside the data.

`translate_from_files` and `languagemodel_from_files` take file paths (and a vocab
size) as constructor arguments. `generate_data` saves them as
`<name>.config.json` in data_dir once the data is generated, so that
`registry.problem(name, data_dir=...)` (`restore`) gives the trainer the same
problem back, and refuses a data_dir generated from other files. Their vocabulary is
built from a bounded sample of the training files (`generate_text_for_vocab`: ≈1 MB
per side, as T2T's translate problems), so a corpus of any size builds it in seconds.
"""

import json
import os
from typing import Any, Dict, Iterator, Optional, Sequence

from data_gen import file_io
from data_gen.problem import DatasetSplit, Text2TextProblem

VOCAB_FILE_BYTE_BUDGET = 1e6  # T2T's file_byte_budget


class ProblemFromFiles(Text2TextProblem):
  """Subclasses set `file_args` (their path arguments) and implement `config` and
  `_check_configured`; `name` names the config file and the messages."""

  file_args: Sequence[str] = ()

  @classmethod
  def config_filename(cls) -> str:
    return f"{cls.registered_name}.config.json"

  def file_config(self) -> Dict[str, Any]:
    """The path arguments, made absolute (None where not given)."""
    return {k: (os.path.abspath(getattr(self, k)) if getattr(self, k) else None)
            for k in self.file_args}

  def config(self) -> Dict[str, Any]:
    raise NotImplementedError

  def generate_text_for_vocab(self, data_dir: str, tmp_dir: str,
                              side: Optional[str] = None) -> Iterator[str]:
    """≈`VOCAB_FILE_BYTE_BUDGET` bytes of evenly spaced training samples per side (T2T's
    translate problems: `generate_lines_for_vocab`, 1e6 bytes per file), so the vocab build
    reads a bounded sample of any corpus; a smaller corpus is read whole, in order.
    """
    files = [getattr(self, k) for k in self.file_args if k.startswith("train") and getattr(self, k)]
    stride = max(1, int(max(map(os.path.getsize, files)) // VOCAB_FILE_BYTE_BUDGET))
    keys = [k for k in self.features if side in (None, k)]
    left = dict.fromkeys(keys, VOCAB_FILE_BYTE_BUDGET)
    for number, sample in enumerate(self.generate_samples(data_dir, tmp_dir, DatasetSplit.TRAIN)):
      if number % stride:
        continue
      for key in keys:
        if left[key] > 0:
          left[key] -= len(sample[key].encode("utf-8"))
          yield sample[key]
      if all(v <= 0 for v in left.values()):
        return

  def _check_configured(self) -> None:
    raise NotImplementedError

  @classmethod
  def restore(cls, data_dir: Optional[str]) -> "ProblemFromFiles":
    """The problem as configured when data_dir was generated (unconfigured if none saved)."""
    path = os.path.join(data_dir, cls.config_filename()) if data_dir else None
    if not path or not os.path.exists(path):
      return cls()
    with open(path, encoding="utf-8") as f:
      return cls(**json.load(f))

  def generate_data(self, data_dir: str, tmp_dir: str, **kwargs):
    """Validates the files, saves the config to data_dir, then generates as usual.

    Raises:
      ValueError: if data_dir already holds data generated from a different config.
    """
    self._check_configured()
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, self.config_filename())
    config = self.config()
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        saved = json.load(f)
      if saved != config:
        raise ValueError("data_dir %r already holds %s data made from %r, not %r; use "
                         "another data_dir or delete it" % (data_dir, self.name, saved, config))
    result = super().generate_data(data_dir, tmp_dir, **kwargs)
    # Saved only after success, so a failed run can be retried with other files.
    if not os.path.exists(path):
      file_io.write_lines(path, [json.dumps(config, indent=1, sort_keys=True)])
    return result
