"""Imports every built-in problem module so its problems register.

`data_gen.wsj_parsing` (parsing problems) is imported when that module exists.
"""

import importlib
import importlib.util

from data_gen import languagemodel_from_files  # noqa: F401  pylint: disable=unused-import
from data_gen import translate_ende  # noqa: F401  pylint: disable=unused-import
from data_gen import translate_enfr  # noqa: F401  pylint: disable=unused-import
from data_gen import translate_from_files  # noqa: F401  pylint: disable=unused-import

if importlib.util.find_spec("data_gen.wsj_parsing") is not None:
  importlib.import_module("data_gen.wsj_parsing")
