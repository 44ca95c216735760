"""Every hparams set T2T's transformer.py registers is built with T2T's values or
refused by name with the reason.

T2T's values come from tests/data/t2t_transformer_hparams_sets.json, written by
tests/scripts/extract_t2t_hparams_sets.py from T2T's own source (no T2T is
needed here). Also: the script on a made-up T2T tree, activation_dtype choosing
the trainer's mixed precision, and the trainer's message for refused and
unknown names.
"""

import dataclasses
import json
import os
import textwrap

import pytest

from t2t_keras import hparams as hp_lib, hparams_sets
from t2t_keras.perf import precision
from t2t_keras.t2t_import.t2t_hparams import hparams_from_t2t
from tests.scripts import extract_t2t_hparams_sets as extract
from tests.support.cli import run_cli, run_cli_output

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
with open(os.path.join(DATA, "t2t_transformer_hparams_sets.json"), encoding="utf-8") as _f:
  T2T_SETS = json.load(_f)
# Sets of ours that T2T does not have: the paper's own configurations.
OURS_ONLY = {"transformer_paper_base", "transformer_paper_big"}
KINDS = {f.name: {"int": int, "float": float, "bool": bool, "str": str}[f.type]
         for f in dataclasses.fields(hp_lib.HParams)}


def same_value(kind, ours, theirs) -> bool:
  """T2T's value equals ours as T2T's typed HParams would hold it (an int given for
  a float field is that float; bools are not ints). T2T's pos=None (no position
  signal, as the relative sets set it) is our pos="none"."""
  if kind is str and theirs is None:
    return ours == "none"
  if kind is float:
    return (isinstance(theirs, (int, float)) and not isinstance(theirs, bool) and
            float(theirs) == ours)
  return type(theirs) is kind and theirs == ours


def test_the_extraction_covers_every_set_t2t_registers():
  # T2T's transformer.py at its last commit registers 96 sets; all ran.
  assert len(T2T_SETS) == 96
  assert [name for name, values in T2T_SETS.items() if "_error" in values] == []
  assert T2T_SETS["transformer_base"]["hidden_size"] == 512
  # Values set by helpers of other T2T modules, run from their source too.
  assert T2T_SETS["transformer_librispeech_v1"]["max_input_seq_length"] == 1650
  assert T2T_SETS["transformer_base_vq_ada_32ex_packed"]["z_size"] == 4


def test_every_t2t_set_is_built_or_refused_never_unknown():
  built = set(hp_lib.list_hparams_sets())
  refused = set(hparams_sets.REFUSED_HPARAMS_SETS)
  assert not built & refused
  assert set(T2T_SETS) == (built - OURS_ONLY) | refused


@pytest.mark.parametrize("name", sorted(set(T2T_SETS) & set(hp_lib.list_hparams_sets())))
def test_built_sets_hold_t2t_values(name):
  ours = hp_lib.create_hparams(name)
  shared = sorted(set(T2T_SETS[name]) & set(KINDS))
  assert "hidden_size" in shared and "activation_dtype" in shared
  wrong = {field: (getattr(ours, field), T2T_SETS[name][field]) for field in shared
           if not same_value(KINDS[field], getattr(ours, field), T2T_SETS[name][field])}
  assert wrong == {}, f"{name}: (ours, T2T's) differ"


def test_hparams_fields_t2t_has_no_hparam_for_hold_its_fixed_values():
  # T2T passed no timescales from hparams: `add_timing_signal_1d`'s defaults, 1 and
  # 1e4, applied to every set. Every other HParams field is compared above.
  assert set(KINDS) - set(T2T_SETS["transformer_base"]) == {"min_timescale", "max_timescale"}
  for name in set(T2T_SETS) & set(hp_lib.list_hparams_sets()):
    ours = hp_lib.create_hparams(name)
    assert (ours.min_timescale, ours.max_timescale) == (1.0, 1.0e4), name


@pytest.mark.parametrize("name", sorted(hparams_sets.REFUSED_HPARAMS_SETS))
def test_refused_sets_raise_naming_the_set_and_the_reason(name):
  reason = hparams_sets.REFUSED_HPARAMS_SETS[name]
  with pytest.raises(ValueError) as info:
    hp_lib.create_hparams(name)
  message = str(info.value)
  assert message.startswith(f"{name}: ") and reason in message
  assert "Unknown" not in message


def test_refusal_examples():
  with pytest.raises(ValueError, match=r"^transformer_librispeech: audio inputs are not "
                     r"implemented\."):
    hp_lib.create_hparams("transformer_librispeech")
  with pytest.raises(ValueError, match=r"^transformer_tpu_1b: bfloat16 weights "):
    hp_lib.create_hparams("transformer_tpu_1b")
  # Sets for packed examples are built since packing is (tests/test_packing.py).
  assert hp_lib.create_hparams("transformer_ada_lmpackedbase").optimizer == "Adafactor"
  with pytest.raises(ValueError, match=r"^Unknown hparams_set 'transformer_nope'"):
    hp_lib.create_hparams("transformer_nope")


def test_t2t_checkpoint_fixture_was_written_with_transformer_test():
  # The fixture's T2T (v1.2) had base = v2: its optimizer and schedule fields
  # predate T2T's base_v3; every other field is transformer_test's.
  with open(os.path.join(DATA, "t2t_transformer_test_ckpt", "hparams.json")) as f:
    theirs = hparams_from_t2t(json.load(f)).to_dict()
  ours = hp_lib.create_hparams("transformer_test").to_dict()
  differ = {k for k in ours if ours[k] != theirs[k]}
  assert differ == {"optimizer_adam_beta2", "learning_rate_schedule", "learning_rate_constant"}


def test_hparams_sets_doc_is_up_to_date():
  from tests.scripts import write_hparams_sets_doc
  with open(os.path.join(write_hparams_sets_doc.REPO, write_hparams_sets_doc.DOC),
            encoding="utf-8") as f:
    assert f.read() == write_hparams_sets_doc.document(), (
        "docs/hparams_sets.md is stale: run tests/scripts/write_hparams_sets_doc.py")


# -- The extraction script on a made-up T2T tree ------------------------------

FAKE_COMMON_HPARAMS = '''
from tensor2tensor.utils import hparam
import tensorflow.compat.v1 as tf

def basic_params1():
  return hparam.HParams(hidden_size=64, dropout=0.2, optimizer="adam")
'''
FAKE_TRANSFORMER = '''
from tensor2tensor.layers import common_hparams
from tensor2tensor.utils import registry
import tensorflow.compat.v1 as tf

class Transformer(object):
  DTYPE = tf.float32  # model code the stubs must tolerate

@registry.register_hparams
def fake_base():
  hparams = common_hparams.basic_params1()
  hparams.add_hparam("num_heads", 4)
  hparams.hidden_size = 32
  return hparams

@registry.register_hparams
def fake_child():
  hparams = fake_base()
  hparams.set_hparam("num_heads", 8)
  hparams.del_hparam("dropout")
  return hparams

@registry.register_hparams
def fake_broken():
  hparams = fake_base()
  hparams.add_hparam("num_heads", 2)  # T2T's HParams refuses a second add
  return hparams

def not_a_set():
  return 1
'''


def test_extraction_script_runs_t2t_set_functions_from_source(tmp_path):
  for path, text in (("tensor2tensor/layers/common_hparams.py", FAKE_COMMON_HPARAMS),
                     ("tensor2tensor/models/transformer.py", FAKE_TRANSFORMER),
                     ("tensor2tensor/utils/expert_utils.py", ""),
                     ("tensor2tensor/data_generators/librispeech.py", "")):
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text(textwrap.dedent(text))
  out = tmp_path / "sets.json"
  extract.main(["extract", str(tmp_path), str(out)])
  sets = json.loads(out.read_text())
  assert list(sets) == ["fake_base", "fake_child", "fake_broken"]
  assert sets["fake_base"] == {"dropout": 0.2, "hidden_size": 32, "num_heads": 4,
                               "optimizer": "adam"}
  assert sets["fake_child"] == {"hidden_size": 32, "num_heads": 8, "optimizer": "adam"}
  assert sets["fake_broken"] == {"_error": "ValueError: Hyperparameter name is reserved: "
                                           "num_heads"}


# -- activation_dtype and the trainer ------------------------------------------

@pytest.fixture
def policy_reset():
  yield
  precision.set_mixed_precision("none")


def test_activation_dtype_selects_the_mixed_precision_mode():
  assert precision.mode_for("float16", "none", flag_given=False) == "float16"
  assert precision.mode_for("bfloat16", "bfloat16", flag_given=True) == "bfloat16"
  assert precision.mode_for("float32", "bfloat16", flag_given=True) == "bfloat16"
  with pytest.raises(ValueError, match=r"--mixed_precision=none disagrees with "
                     r"hparams.activation_dtype=float16"):
    precision.mode_for("float16", "none", flag_given=True)
  with pytest.raises(ValueError, match="activation_dtype must be one of"):
    hp_lib.HParams(activation_dtype="float64")


def test_t2t_activation_dtype_imports_as_mixed_precision():
  with open(os.path.join(DATA, "t2t_transformer_test_ckpt", "hparams.json")) as f:
    values = json.load(f)
  assert hparams_from_t2t(dict(values, activation_dtype="bfloat16")).activation_dtype == \
      "bfloat16"
  with pytest.raises(ValueError, match="weight_dtype: only 'float32'"):
    hparams_from_t2t(dict(values, weight_dtype="bfloat16"))


def test_t2t_prepend_mode_imports_and_a_mode_t2t_lacks_is_refused():
  with open(os.path.join(DATA, "t2t_transformer_test_ckpt", "hparams.json")) as f:
    values = json.load(f)
  for mode in ("prepend_inputs_masked_attention", "prepend_inputs_full_attention"):
    assert hparams_from_t2t(dict(values, prepend_mode=mode)).prepend_mode == mode
  with pytest.raises(ValueError, match="prepend_mode must be one of none, "
                     "prepend_inputs_masked_attention, prepend_inputs_full_attention"):
    hparams_from_t2t(dict(values, prepend_mode="prepend_everything"))


def _trainer_args(tmp_path, hparams_set, *flags):
  return ["--problem=translate_from_files", f"--data_dir={tmp_path}",
          f"--output_dir={tmp_path / 'out'}", f"--hparams_set={hparams_set}",
          "--schedule=train", *flags]


@pytest.mark.parametrize("hparams_set, message, absent", [
    ("transformer_librispeech", "transformer_librispeech: audio inputs are not implemented",
     "Unknown"),
    ("transformer_nope", "Unknown hparams_set 'transformer_nope'", "not implemented"),
])
def test_trainer_names_refused_sets_apart_from_unknown_ones(tmp_path, capsys, hparams_set,
                                                           message, absent):
  code, err = run_cli("t2t_keras.cli.trainer", _trainer_args(tmp_path, hparams_set), capsys)
  assert code == 2 and message in err and absent not in err
  assert len(err.strip().splitlines()) == 1


def test_trainer_refuses_mixed_precision_that_disagrees_with_activation_dtype(tmp_path,
                                                                              capsys):
  code, err = run_cli("t2t_keras.cli.trainer", _trainer_args(
      tmp_path, "transformer_fairseq_fp16_activation_big", "--mixed_precision=bfloat16"),
      capsys)
  assert code == 2 and "--mixed_precision=bfloat16 disagrees with hparams.activation_dtype=" \
      "float16" in err
  assert not (tmp_path / "out").exists()


def test_fairseq_fp16_set_trains_in_mixed_float16(tmp_path, capsys, policy_reset):
  from tests.support.tiny_problem import make_tiny_problem
  data_dir = make_tiny_problem(str(tmp_path), train=200, dev=16)
  code, out, err = run_cli_output("t2t_keras.cli.trainer", [
      "--problem=translate_from_files", f"--data_dir={data_dir}",
      f"--output_dir={tmp_path / 'out'}", "--hparams_set=transformer_fairseq_fp16_activation_big",
      "--hparams=num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,batch_size=128",
      "--schedule=train", "--train_steps=1"], capsys)
  assert code == 0, err
  assert "policy mixed_float16" in out
  with open(tmp_path / "out" / "hparams.json") as f:
    assert json.load(f)["activation_dtype"] == "float16"
