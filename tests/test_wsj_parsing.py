"""Tests for data_gen/wsj_parsing.py: splits, problems, gold trees (tree code: test_trees.py)."""

import os
import pathlib
import shutil

import pytest

from data_gen import registry
from data_gen import trees
from data_gen import wsj_parsing as wp
from tests.support.ptb_sample import CAT, SAMPLE_COUNTS, SAMPLE_DIR, count_trees_by_text

REPO = pathlib.Path(__file__).resolve().parents[1]


# ---- splits and problems --------------------------------------------------
def test_problems_are_registered():
  names = registry.list_problems()
  for name in ("parsing_english_ptb8k", "parsing_english_ptb16k",
               "parsing_english_ptb_sample"):
    assert name in names
  p8, p16 = (registry.problem("parsing_english_ptb8k"),
             registry.problem("parsing_english_ptb16k"))
  assert p8.share_vocab and p8.approx_vocab_size == 2**13
  assert not p16.share_vocab
  assert p16.approx_vocab_sizes == {"inputs": 2**9, "targets": 2**14}
  assert len(set(p16.vocab_filenames.values())) == 2
  assert (p8.input_space_id, p8.target_space_id) == (3, 15)


def test_sample_split_sizes_by_file():
  # Hand counts of the sample's files (wsj_0001-0003 train, 0180-0181 dev, 0190 test).
  want = {split: sum(SAMPLE_COUNTS[n][0] for n in numbers if n in SAMPLE_COUNTS)
          for split, numbers in wp.SAMPLE_FILES.items()}
  assert want == {"train": 12, "dev": 5, "test": 2}
  problem = registry.problem("parsing_english_ptb_sample")
  for split in ("train", "dev", "test"):
    samples = list(problem.generate_samples(None, str(SAMPLE_DIR), split))
    assert len(samples) == want[split]
    for s in samples[:50]:
      assert len(s["inputs"].split()) == sum(
          1 for t in s["targets"].split()
          if t in trees.PTB_POS_TAGS)


def test_full_wsj_layout_split_by_section(tmp_path):
  src = SAMPLE_DIR / "wsj_0001.mrg"
  layout = {"parsed/mrg/wsj/02/wsj_0201.mrg": "train",
            "parsed/mrg/wsj/21/wsj_2199.mrg": "train",
            "wsj_0500.mrg": "train",           # flat layout works too
            "parsed/mrg/wsj/22/WSJ_2200.MRG": "dev",
            "parsed/mrg/wsj/23/wsj_2301.mrg": "test",
            "parsed/mrg/wsj/00/wsj_0001.mrg": None,   # sections 00, 01, 24
            "parsed/mrg/wsj/01/wsj_0100.mrg": None,   # are in no split
            "parsed/mrg/wsj/24/wsj_2400.mrg": None,
            "parsed/mrg/wsj/23/README": None}
  for rel in layout:
    (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, tmp_path / rel)
  for split in ("train", "dev", "test"):
    got = [os.path.relpath(p, tmp_path)
           for p in wp.split_files(str(tmp_path), split)]
    assert sorted(got) == sorted(r for r, s in layout.items() if s == split)
  problem = registry.problem("parsing_english_ptb16k")
  n_trees = count_trees_by_text(src)
  assert len(list(problem.generate_samples(None, str(tmp_path), "train"))) \
      == 3 * n_trees


def test_split_errors(tmp_path):
  with pytest.raises(ValueError, match="not a directory"):
    wp.split_files(str(tmp_path / "missing"), "train")
  with pytest.raises(ValueError, match="no dev files found"):
    wp.split_files(str(tmp_path), "dev")
  with pytest.raises(ValueError, match="split must be"):
    wp.split_files(str(tmp_path), "valid")
  for sub in ("a", "b"):
    (tmp_path / sub).mkdir()
    (tmp_path / sub / "wsj_2300.mrg").write_text(CAT)
  with pytest.raises(ValueError, match="two copies of wsj_2300.mrg"):
    wp.split_files(str(tmp_path), "test")


def test_gold_trees_file_matches_cleaned_trees(tmp_path):
  problem = registry.problem("parsing_english_ptb_sample")
  samples = list(problem.generate_samples(None, str(SAMPLE_DIR), "dev"))
  for side in ("inputs", "targets"):
    path = problem.text_file(str(tmp_path), "dev", side)
    with open(path, "w", encoding="utf-8") as f:
      f.writelines(s[side] + "\n" for s in samples)
  assert problem.write_gold_trees(str(tmp_path), "dev") == len(samples)
  want = [trees.tree_to_string(trees.clean_tree(t))
          for n in wp.SAMPLE_FILES["dev"] if n in SAMPLE_COUNTS
          for t in trees.read_mrg_file(str(SAMPLE_DIR / f"wsj_{n:04d}.mrg"))]
  gold = pathlib.Path(problem.gold_trees_file(str(tmp_path), "dev"))
  assert gold.name == "parsing_english_ptb_sample.dev.trees"
  assert gold.read_text(encoding="utf-8").splitlines() == want


# ---- flagfile -----------------------------------------------------------------
def test_wsj_parsing_flagfile():
  from absl import flags  # pylint: disable=g-import-not-at-top
  from t2t_keras import hparams as hparams_lib  # pylint: disable=g-import-not-at-top
  fv = flags.FlagValues()
  for name in ("problem", "hparams_set", "hparams", "decode_hparams"):
    flags.DEFINE_string(name, None, "", flag_values=fv)
  path = REPO / "flags" / "wsj_parsing.flags"
  fv(["prog", f"--flagfile={path}"])  # unknown flags in the file would raise
  assert fv.problem == "parsing_english_ptb16k"
  assert fv.problem in registry.list_problems()
  hp = hparams_lib.create_hparams(fv.hparams_set, fv.hparams)
  # Paper §6.3: 4 layers, d_model 1024; the rest is transformer_parsing_base.
  assert (hp.num_hidden_layers, hp.hidden_size) == (4, 1024)
  assert (hp.filter_size, hp.num_heads, hp.max_length) == (2048, 8, 512)
  dhp = hparams_lib.create_decode_hparams(fv.decode_hparams)
  assert (dhp.beam_size, dhp.alpha, dhp.extra_length) == (21, 0.3, 300)


def test_gold_trees_are_written_before_the_manifest_and_listed_in_it(tmp_path, monkeypatch):
  """A datagen stopped while writing gold trees leaves no manifest; a complete one lists them."""
  trees = [CAT, "(TOP (S (NP (PRP It)) (VP (VBZ rains)) (. .)))",
           "(TOP (S (NP (DT A) (NN dog)) (VP (VBD ran) (ADVP (RB away))) (. .)))"]
  tmp_dir, data_dir = tmp_path / "tmp", tmp_path / "data"
  tmp_dir.mkdir()
  for n in (200, 2200, 2300):  # sections 02 (train), 22 (dev), 23 (test)
    (tmp_dir / f"wsj_{n:04d}.mrg").write_text("\n".join(trees) + "\n")
  problem = registry.problem("parsing_english_ptb8k")

  def killed(self, data_dir, split):
    raise KeyboardInterrupt
  monkeypatch.setattr(wp.ParsingEnglishPtb, "write_gold_trees", killed)
  with pytest.raises(KeyboardInterrupt):
    problem.generate_data(str(data_dir), str(tmp_dir), num_shards=1)
  with pytest.raises(ValueError, match="manifest"):
    problem.check_data_dir(str(data_dir))
  monkeypatch.undo()

  problem.generate_data(str(data_dir), str(tmp_dir), num_shards=1)
  manifest = problem.check_data_dir(str(data_dir))
  for split in ("dev", "test"):
    gold = os.path.basename(problem.gold_trees_file(str(data_dir), split))
    assert gold in [e["file"] for e in manifest["splits"][split]["text_files"]]
  os.remove(problem.gold_trees_file(str(data_dir), "test"))
  with pytest.raises(ValueError, match="missing parsing_english_ptb8k.test.trees"):
    problem.check_data_dir(str(data_dir))
