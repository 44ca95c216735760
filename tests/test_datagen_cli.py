"""Tests for the `t2t_keras_datagen` CLI (run as `python -m t2t_keras.cli.datagen`)."""

import os

import tensorflow as tf

from data_gen import registry
from tests.support.cli import run_datagen, run_datagen_in_process


def test_from_files_cli_generates_then_skips(fake_parallel_files, tmp_path, capsys):
  f = fake_parallel_files
  data_dir = str(tmp_path / "data")
  args = ["--problem=translate_from_files", "--data_dir=" + data_dir,
           "--tmp_dir=" + str(tmp_path / "tmp"), "--vocab_size=64", "--num_shards=2",
           "--train_source=" + f["train_source"], "--train_target=" + f["train_target"],
           "--dev_source=" + f["dev_source"], "--dev_target=" + f["dev_target"]]
  first = run_datagen(*args)
  assert first.returncode == 0, first.stderr
  assert "train" in first.stdout and "40 examples" in first.stdout
  assert "5 examples" in first.stdout and "skipped" not in first.stdout
  shards = sorted(p for p in os.listdir(data_dir) if "-train-" in p)
  assert shards == ["translate_from_files-train-00000-of-00002",
                    "translate_from_files-train-00001-of-00002"]
  n = sum(1 for s in shards for _ in tf.data.TFRecordDataset(os.path.join(data_dir, s)))
  assert n == 40
  manifest = os.path.join(data_dir, "translate_from_files.manifest.json")
  registry.problem("translate_from_files", data_dir).check_data_dir(data_dir, True)
  os.remove(manifest)  # as a data_dir of a version before manifests
  mtimes = {p: os.stat(os.path.join(data_dir, p)).st_mtime_ns for p in os.listdir(data_dir)}
  # Rerun with only --problem/--data_dir: config comes from data_dir, nothing is rewritten;
  # only the manifest is added.
  code, stdout, stderr = run_datagen_in_process(capsys, "--problem=translate_from_files",
                                                "--data_dir=" + data_dir,
                                                "--tmp_dir=" + str(tmp_path / "tmp"),
                                                "--num_shards=2")
  assert code == 0, stderr
  assert stdout.count("(already done, skipped)") == 2 and "(reused)" in stdout
  assert mtimes == {p: os.stat(os.path.join(data_dir, p)).st_mtime_ns
                    for p in os.listdir(data_dir) if p != os.path.basename(manifest)}
  registry.problem("translate_from_files", data_dir).check_data_dir(data_dir, True)
  mtimes[os.path.basename(manifest)] = os.stat(manifest).st_mtime_ns
  code, stdout, stderr = run_datagen_in_process(capsys, "--problem=translate_from_files",
                                                "--data_dir=" + data_dir,
                                                "--tmp_dir=" + str(tmp_path / "tmp"),
                                                "--num_shards=2")
  assert code == 0, stderr
  assert mtimes == {p: os.stat(os.path.join(data_dir, p)).st_mtime_ns  # a no-op rerun
                    for p in os.listdir(data_dir)}


def test_cli_errors_are_clear(fake_parallel_files, tmp_path, capsys):
  f = fake_parallel_files
  short = tmp_path / "short.tgt"
  short.write_text("eins\n", encoding="utf-8")
  code, _, stderr = run_datagen_in_process(
      capsys, "--problem=translate_from_files", "--data_dir=" + str(tmp_path / "d"),
      "--vocab_size=64", "--train_source=" + f["train_source"],
      "--train_target=" + str(short), "--dev_source=" + f["dev_source"],
      "--dev_target=" + f["dev_target"])
  assert code == 2
  assert "misaligned" in stderr and str(short) in stderr and "line 2" in stderr
  code, _, stderr = run_datagen_in_process(capsys, "--problem=nope",
                                           "--data_dir=" + str(tmp_path / "d"))
  assert code == 2 and "translate_ende_ding_bible8k" in stderr
  code, _, stderr = run_datagen_in_process(capsys, "--problem=translate_ende_wmt32k",
                                           "--data_dir=" + str(tmp_path / "d"),
                                           "--train_source=" + f["train_source"])
  assert code == 2 and "only apply to --problem=translate_from_files" in stderr


def test_ding_bible_cli_on_fixture(fake_ding_bible_tmp_dir, tmp_path, capsys):
  tmp_dir, _, _ = fake_ding_bible_tmp_dir
  data_dir = str(tmp_path / "data")
  code, stdout, stderr = run_datagen_in_process(
      capsys, "--problem=translate_ende_ding_bible8k", "--data_dir=" + data_dir,
      "--tmp_dir=" + tmp_dir, "--num_shards=2", "--max_cases=100")
  assert code == 0, stderr
  assert "100 examples" in stdout  # train capped by --max_cases
  name = "translate_ende_ding_bible8k"
  for p in ("vocab.%s.8192.subwords" % name, "%s-train-00001-of-00002" % name,
            "%s-dev-00000-of-00001" % name, "%s-test-00000-of-00001" % name,
            "%s.test.en" % name, "%s.test.de" % name):
    assert os.path.exists(os.path.join(data_dir, p)), p
