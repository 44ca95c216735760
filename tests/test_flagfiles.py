"""Every flagfile in flags/ parses for the trainer, the decoder and the exporter.

Each command gets a fresh FlagValues holding exactly the flags it defines, so a
flag that one of them lacks makes absl raise; the problem must be registered and
the hparams and decode_hparams strings must build.
"""

import copy
import pathlib

import pytest
from absl import flags

from data_gen import all_problems  # noqa: F401  (registers the problems)
from data_gen import registry
from t2t_keras import hparams as hparams_lib
from t2t_keras.cli import common_flags, decoder, exporter, trainer

REPO = pathlib.Path(__file__).resolve().parent.parent
FLAGFILES = sorted((REPO / "flags").glob("*.flags"))
CLIS = {"t2t_keras_trainer": trainer, "t2t_keras_decoder": decoder,
        "t2t_keras_exporter": exporter}


def _flags_of(module) -> flags.FlagValues:
  """A fresh FlagValues with the shared flags and those `module` defines."""
  by_module = flags.FLAGS.flags_by_module_dict()
  fv = flags.FlagValues()
  for name in (common_flags.__name__, module.__name__):
    for flag in by_module.get(name, []):
      fv[flag.name] = copy.deepcopy(flag)
  return fv


def test_the_paper_and_cpu_set_ups_are_all_there():
  names = {p.stem for p in FLAGFILES}
  assert {"wmt14_ende_base", "wmt14_ende_big", "wmt14_enfr_big", "wsj_parsing",
          "demo"} <= names


@pytest.mark.parametrize("path", FLAGFILES, ids=lambda p: p.name)
@pytest.mark.parametrize("cli", sorted(CLIS))
def test_flagfile_parses_for_each_command(path, cli):
  fv = _flags_of(CLIS[cli])
  fv(["prog", f"--flagfile={path}"])  # a flag the command lacks raises here
  assert fv.problem in registry.list_problems()
  hp = hparams_lib.create_hparams(fv.hparams_set, fv.hparams)
  assert hp.hidden_size > 0
  decode_hp = hparams_lib.create_decode_hparams(fv.decode_hparams)
  # Every set-up states the paper's decoding: beam 4, alpha 0.6, input + 50 for
  # translation; beam 21, alpha 0.3, input + 300 for parsing.
  parsing = fv.problem.startswith("parsing_")
  assert (decode_hp.beam_size, decode_hp.alpha, decode_hp.extra_length) == (
      (21, 0.3, 300) if parsing else (4, 0.6, 50))
