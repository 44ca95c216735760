"""Every flagfile in flags/ parses for the trainer, the decoder and the exporter.

Each command is imported alone in a fresh process (so it has exactly the flags it
defines) and parses every flagfile as its command line would (common_flags.parse_flags:
an experiment flag the command does not read is ignored, any other flag it lacks
makes it exit); the problem must be registered and the hparams and decode_hparams
strings must build.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from data_gen import all_problems  # noqa: F401  (registers the problems)
from data_gen import registry
from t2t_keras import hparams as hparams_lib

REPO = pathlib.Path(__file__).resolve().parent.parent
FLAGFILES = sorted((REPO / "flags").glob("*.flags"))
CLIS = {"t2t_keras_trainer": "t2t_keras.cli.trainer",
        "t2t_keras_decoder": "t2t_keras.cli.decoder",
        "t2t_keras_exporter": "t2t_keras.cli.exporter"}

# Run in the child: parse each flagfile as the command does, from its defaults.
_PARSE_ALL = """
import contextlib, importlib, io, json, sys
from absl import flags
from t2t_keras.cli import common_flags
module = importlib.import_module(sys.argv[1])
out = {}
for path in sys.argv[2:]:
  flags.FLAGS.unparse_flags()
  err = io.StringIO()
  try:
    with contextlib.redirect_stderr(err):
      common_flags.parse_flags(["prog", "--flagfile=" + path], module)
  except SystemExit as e:
    out[path] = {"error": f"exit {e.code}: {err.getvalue()}"}
    continue
  out[path] = {name: flags.FLAGS[name].value for name in
               ("problem", "hparams_set", "hparams", "decode_hparams")}
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=sorted(CLIS))
def parsed(request):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
  res = subprocess.run([sys.executable, "-c", _PARSE_ALL, CLIS[request.param],
                        *map(str, FLAGFILES)], env=env, capture_output=True, text=True,
                       timeout=300)
  assert res.returncode == 0, res.stderr[-3000:]
  return request.param, json.loads(res.stdout.strip().splitlines()[-1])


def test_the_paper_and_cpu_set_ups_are_all_there():
  names = {p.stem for p in FLAGFILES}
  assert {"wmt14_ende_base", "wmt14_ende_big", "wmt14_enfr_big", "wsj_parsing",
          "demo"} <= names


def test_every_flagfile_parses_for_each_command(parsed):
  cli, results = parsed
  assert sorted(results) == sorted(map(str, FLAGFILES))
  for path, values in results.items():
    assert "error" not in values, f"{cli} --flagfile={path}: {values.get('error')}"
    assert values["problem"] in registry.list_problems(), path
    hp = hparams_lib.create_hparams(values["hparams_set"], values["hparams"])
    assert hp.hidden_size > 0
    decode_hp = hparams_lib.create_decode_hparams(values["decode_hparams"])
    # Every set-up states the paper's decoding: beam 4, alpha 0.6, input + 50 for
    # translation; beam 21, alpha 0.3, input + 300 for parsing.
    parsing = values["problem"].startswith("parsing_")
    assert (decode_hp.beam_size, decode_hp.alpha, decode_hp.extra_length) == (
        (21, 0.3, 300) if parsing else (4, 0.6, 50)), path
