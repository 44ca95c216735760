"""t2t_keras_decoder on a parsing problem: EVALB F1 against the gold trees.

A parsing_english_ptb8k data set is generated from copies of one file of the
hand-written treebank-format sample (tests/data/ptb_sample, 7 trees) laid out as
sections 02 / 22 / 23, a tiny model is trained for a few
steps, and the decoder's F1 on the test split must equal what
t2t_keras_parse_eval computes from the decoder's own output file, with every
output line repaired into a valid tree over the gold words.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

REPO = pathlib.Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO / "tests" / "data" / "ptb_sample"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
PROBLEM = "parsing_english_ptb8k"
TINY = ("num_hidden_layers=1,hidden_size=32,filter_size=64,num_heads=2,batch_size=1024,"
        "max_length=256")


@pytest.fixture(scope="module")
def parse_run(tmp_path_factory):
  from data_gen import registry
  from t2t_keras.hparams import create_hparams
  from t2t_keras.rundir.settings import ModelSpec, save_or_check_run_files, vocab_record
  from t2t_keras.training import schedules
  from t2t_keras.training.trainer import Trainer, create_strategy
  root = tmp_path_factory.mktemp("parse")
  tmp_dir, data_dir, run_dir = root / "tmp", str(root / "data"), str(root / "run")
  for rel in ("parsed/mrg/wsj/02/wsj_0201.mrg", "parsed/mrg/wsj/22/wsj_2201.mrg",
              "parsed/mrg/wsj/23/wsj_2301.mrg"):
    (tmp_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(SAMPLE_DIR / "wsj_0003.mrg", tmp_dir / rel)
  problem = registry.problem(PROBLEM)
  problem.generate_data(data_dir, str(tmp_dir))
  enc = problem.feature_encoders(data_dir)
  hp = create_hparams("transformer_tiny", TINY)
  spec = ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size,
                   problem.target_space_id)
  save_or_check_run_files(run_dir, hp, PROBLEM, spec, vocab_record(problem, data_dir, enc))
  tf.keras.utils.set_random_seed(0)
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=5)
  config = schedules.RunConfig(output_dir=run_dir, train_steps=5, local_eval_frequency=5,
                                random_seed=0)
  schedules.Experiment(trainer, config, problem.filepattern(data_dir, "train"), None,
                        log=lambda line: None).train()
  return data_dir, run_dir, problem.gold_trees_file(data_dir, "test")


def _run(module, *args):
  res = subprocess.run([sys.executable, "-m", module, *args], env=ENV, capture_output=True,
                       text=True, timeout=600)
  assert res.returncode == 0, res.stderr[-3000:]
  return res.stdout


def test_decoder_prints_evalb_f1_equal_to_parse_eval(parse_run, tmp_path):
  # Exact on every CPU: both score the same decoded file (integer bracket counts).
  data_dir, run_dir, gold = parse_run
  out = tmp_path / "test.decoded"
  stdout = _run("t2t_keras.cli.decoder", f"--data_dir={data_dir}", f"--output_dir={run_dir}",
                "--eval_use_test_set", f"--decode_to_file={out}",
                "--decode_hparams=beam_size=2,alpha=0.3,extra_length=10")
  assert "BLEU" not in stdout
  got = re.search(r"EVALB \(COLLINS\.prm\) against (\S+): (P = .*)", stdout)
  assert got and got.group(1) == gold, stdout
  n_gold = len(pathlib.Path(gold).read_text(encoding="utf-8").splitlines())
  assert n_gold == 7  # the trees of wsj_0003.mrg
  assert len(out.read_text(encoding="utf-8").splitlines()) == n_gold
  trees = tmp_path / "test.trees"
  want = _run("t2t_keras.cli.parse_eval", f"--gold={gold}", f"--test={out}",
              "--linearized_test", f"--write_test_trees={trees}", "--max_errors=-1")
  assert got.group(2) in want
  assert f"of {n_gold} sentences)" in got.group(2)
  fixed = re.search(r"with gold punctuation tags: (P = .*)", stdout)
  assert fixed, stdout
  assert fixed.group(1) in _run("t2t_keras.cli.parse_eval", f"--gold={gold}", f"--test={out}",
                                "--linearized_test", "--gold_punctuation_tags",
                                "--max_errors=-1")
  # Every decode became a tree over exactly the gold words (EVALB may still call a
  # sentence an error when a word's predicted tag is punctuation and the gold one
  # is not, or the reverse: COLLINS.prm deletes punctuation by each tree's tags).
  from data_gen.trees import parse_tree  # pylint: disable=g-import-not-at-top
  gold_lines = pathlib.Path(gold).read_text(encoding="utf-8").splitlines()
  for g, t in zip(gold_lines, trees.read_text(encoding="utf-8").splitlines()):
    assert parse_tree(t).leaves() == parse_tree(g).leaves()
