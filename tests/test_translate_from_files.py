"""translate_from_files through `t2t_keras_datagen`: the test split, the languages
(and so the decoder's paper BLEU), the vocab-size warning, the re-encoding message."""

import json
import os

import pytest
import tensorflow as tf

from data_gen import generator_utils, registry
from tests.support.cli import run_cli_output, run_datagen, run_datagen_in_process

NAME = "translate_from_files"
# 4 test pairs unlike the train/dev ones (fake_parallel_files: 40 train, 5 dev).
TEST_PAIRS = [("my small house %d" % i, "mein kleines haus %d" % i) for i in range(4)]


def _args(files, data_dir, *extra):
  return ["--problem=" + NAME, "--data_dir=" + str(data_dir), "--num_shards=2",
          "--tmp_dir=" + str(data_dir) + "_tmp",
          *("--%s=%s" % (k, files[k]) for k in ("train_source", "train_target",
                                                 "dev_source", "dev_target")), *extra]


@pytest.fixture
def files(fake_parallel_files, tmp_path):
  paths = dict(fake_parallel_files)
  for side, idx in (("source", 0), ("target", 1)):
    p = tmp_path / ("test." + side)
    p.write_text("".join(pair[idx] + "\n" for pair in TEST_PAIRS), encoding="utf-8")
    paths["test_" + side] = str(p)
  return paths


def _read(path):
  with open(path, encoding="utf-8") as f:
    return f.read().splitlines()


def _decoded(data_dir, split):
  """(inputs, targets) text of a split's shards, decoded with the data_dir's vocab."""
  problem = registry.problem(NAME, data_dir)
  enc = problem.feature_encoders(data_dir)
  out = {"inputs": [], "targets": []}
  for path in problem.shard_paths(data_dir, split):
    for raw in tf.data.TFRecordDataset(path):
      ex = tf.train.Example.FromString(raw.numpy())
      for key in out:
        ids = list(ex.features.feature[key].int64_list.value)
        assert ids[-1] == 1  # EOS
        out[key].append(enc[key].decode(ids[:-1]))
  return out


def test_test_split_and_languages_are_written_and_recorded(files, tmp_path, capsys):
  data_dir = tmp_path / "data"
  code, out, err = run_datagen_in_process(capsys, *_args(
      files, data_dir, "--vocab_size=50", "--test_source=" + files["test_source"],
      "--test_target=" + files["test_target"], "--source_lang=en", "--target_lang=de"))
  assert code == 0, err
  assert [line.split()[:2] for line in out.splitlines() if line.startswith("  test")] == [
      ["test", "4"]]
  test_src, test_tgt = (os.path.join(data_dir, "%s.test.%s" % (NAME, lang)) for lang in ("en", "de"))
  assert _read(test_src) == [p[0] for p in TEST_PAIRS]
  assert _read(test_tgt) == [p[1] for p in TEST_PAIRS]
  assert _read(os.path.join(data_dir, NAME + ".dev.de")) == [
      p[1] for p in files["data"]["dev"]]
  shards = _decoded(str(data_dir), "test")  # shuffled: compared as sets of pairs
  assert sorted(zip(shards["inputs"], shards["targets"])) == sorted(TEST_PAIRS)
  with open(os.path.join(data_dir, NAME + ".config.json"), encoding="utf-8") as f:
    config = json.load(f)
  assert (config["source_lang"], config["target_lang"]) == ("en", "de")
  assert config["test_target"] == os.path.abspath(files["test_target"])
  problem = registry.problem(NAME, str(data_dir))  # what the trainer and decoder get
  assert problem.has_test_split and problem.target_lang == "de"
  problem.check_data_dir(str(data_dir), True)  # the manifest lists the test split


def test_defaults_keep_src_tgt_and_no_test_split(files, tmp_path, capsys):
  data_dir = tmp_path / "data"
  code, _, err = run_datagen_in_process(capsys, *_args(files, data_dir, "--vocab_size=50"))
  assert code == 0, err
  names = set(os.listdir(data_dir))
  assert {NAME + ".dev.src", NAME + ".dev.tgt"} <= names
  assert not any("test" in n for n in names), names
  assert registry.problem(NAME, str(data_dir)).target_lang == "tgt"


def test_language_and_test_flags_are_checked(files, tmp_path, capsys):
  code, _, err = run_datagen_in_process(capsys, *_args(files, tmp_path / "a", "--source_lang=de",
                                                       "--target_lang=de"))
  assert code == 2 and "source_lang and target_lang must differ" in err
  code, _, err = run_datagen_in_process(capsys, *_args(files, tmp_path / "b", "--target_lang=de/x"))
  assert code == 2 and "target_lang must be a language name" in err and "'de/x'" in err
  code, _, err = run_datagen_in_process(capsys, *_args(files, tmp_path / "c",
                                                       "--test_source=" + files["test_source"]))
  assert code == 2 and "give both test_source and test_target" in err
  code, _, err = run_datagen_in_process(capsys, "--problem=translate_ende_wmt32k",
                                        "--data_dir=" + str(tmp_path / "d"), "--target_lang=de")
  assert code == 2 and "--target_lang only apply to --problem=translate_from_files" in err


def test_vocab_size_warning_rule():
  # More than 10% off warns, in one line with both sizes; 10% off or less does not.
  assert generator_utils.vocab_size_warning("v", 1000, 900) is None
  assert generator_utils.vocab_size_warning("v", 1000, 1100) is None
  small = generator_utils.vocab_size_warning("v", 1000, 899)
  assert "built 899 subwords for a requested vocab_size of 1000" in small
  assert "too small" in small and "vocab_size near 899" in small and "\n" not in small
  large = generator_utils.vocab_size_warning("v", 8, 37)
  assert "built 37 subwords" in large and "at least 37" in large and "\n" not in large


def test_vocab_size_warning_when_the_corpus_is_too_small(files, tmp_path, capsys):
  # The 40 train pairs give 88 subwords at most (every piece kept): 1000 is far, 50 is not.
  res = run_datagen(*_args(files, tmp_path / "far", "--vocab_size=1000"))
  assert res.returncode == 0, res.stderr
  lines = [line for line in res.stderr.splitlines() if "subwords for a requested" in line]
  assert len(lines) == 1, res.stderr
  assert lines[0].startswith("W") and "built 88 subwords for a requested vocab_size of 1000" \
      in lines[0] and "training text is too small" in lines[0]
  res = run_datagen(*_args(files, tmp_path / "close", "--vocab_size=50"))
  assert res.returncode == 0, res.stderr
  assert "subwords for a requested" not in res.stderr, res.stderr
  with open(os.path.join(tmp_path / "close", "vocab.%s.50.subwords" % NAME),
            encoding="utf-8") as f:
    assert abs(len(f.read().splitlines()) - 50) <= 5  # the premise: close to 50


def test_reencoded_message_only_over_existing_shards(files, tmp_path, capsys):
  data_dir = tmp_path / "data"
  code, out, err = run_datagen_in_process(capsys, *_args(files, data_dir, "--vocab_size=50"))
  assert code == 0, err
  assert "vocab build" in out and "(reused)" not in out  # the vocab was built
  assert "re-encoded" not in out and "since the shards were written" not in out, out
  os.remove(os.path.join(data_dir, "vocab.%s.50.subwords" % NAME))  # rebuilt on the rerun
  code, out, err = run_datagen_in_process(capsys, "--problem=" + NAME,
                                          "--data_dir=" + str(data_dir),
                                          "--tmp_dir=" + str(tmp_path / "tmp"))
  assert code == 0, err
  assert "  vocab new since the shards were written: every split re-encoded" in out.splitlines()
  assert "skipped" not in out


def _untrained_run(data_dir, run_dir):
  """An untrained tiny model's run on data_dir (decodes as well as any for these tests)."""
  from t2t_keras.hparams import create_hparams
  from t2t_keras.model import Transformer
  from t2t_keras.rundir.settings import ModelSpec, save_or_check_run_files, vocab_record
  problem = registry.problem(NAME, data_dir)
  encoders = problem.feature_encoders(data_dir)
  spec = ModelSpec(encoders["inputs"].vocab_size, encoders["targets"].vocab_size, 0)
  hp = create_hparams("transformer_tiny",
                      "hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1")
  save_or_check_run_files(run_dir, hp, NAME, spec, vocab_record(problem, data_dir, encoders))
  model = Transformer(hp, spec.input_vocab_size, spec.target_vocab_size, 0)
  model.build()
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model), run_dir, 1).save(1)


@pytest.mark.parametrize("target_lang", ["de", None])
def test_decoder_paper_bleu_follows_the_recorded_target_lang(files, tmp_path, capsys,
                                                              target_lang):
  data_dir, run_dir = str(tmp_path / "data"), str(tmp_path / "run")
  langs = ["--source_lang=en", "--target_lang=de"] if target_lang else []
  code, _, err = run_datagen_in_process(capsys, *_args(
      files, data_dir, "--vocab_size=50", "--test_source=" + files["test_source"],
      "--test_target=" + files["test_target"], *langs))
  assert code == 0, err
  _untrained_run(data_dir, run_dir)
  code, out, err = run_cli_output("t2t_keras.cli.decoder", [
      "--data_dir=" + data_dir, "--output_dir=" + run_dir, "--eval_use_test_set",
      "--decode_hparams=beam_size=1,extra_length=2"], capsys)
  assert code == 0, err
  lines = out.splitlines()
  assert len(lines) == len(TEST_PAIRS) + 2, out  # the test split's outputs, then 2 scores
  assert lines[-2].startswith("BLEU = ")
  paper = [line for line in lines if line.startswith("tokenized BLEU (as in the paper)")]
  assert len(paper) == 1, out
  if target_lang:
    assert paper[0].startswith("tokenized BLEU (as in the paper) = ")
    assert "lang:de" in paper[0]
  else:
    assert paper[0].startswith("tokenized BLEU (as in the paper): not computed")
    assert "'tgt'" in paper[0] and "--target_lang" in paper[0]
