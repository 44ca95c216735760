"""Problem base classes: T2T's `Problem` / `Text2TextProblem` contract.

A problem turns raw text pairs into a vocabulary plus sharded TFRecords of
`tf.train.Example` with int64 `inputs` and `targets` (each ending in EOS=1):

  data_dir/vocab.<name>.<size>.subwords   (or .spm.model: --vocab_type=sentencepiece)
  data_dir/<name>-train-00000-of-00100 … , <name>-dev-00000-of-00001 [, -test-…]
  data_dir/<name>.dev.<lang>, <name>.test.<lang>   plain text for scoring a decoder

`generate_data` is idempotent and remembers its settings. The manifest
`<name>.manifest.json` (`data_gen/manifest.py`) records the vocab's SHA-256 and
the settings that shape the shards (train shard count, max_cases, random_seed);
a setting not given is the recorded one, so a rerun with no settings (the
command the trainer names) reproduces the data_dir. A split is skipped when the
manifest lists it as written with the settings and vocab of this run, else it is
rewritten: a changed vocab (rebuilt, or edited by hand) re-encodes every split; a
setting given with another value than the recorded one regenerates the splits
it shapes (the train shard count: train; max_cases, random_seed: all), as
t2t-datagen does what its flags say; the data_dir never mixes settings. Without
a manifest (a version before manifests) finished splits are kept and the train
shard count is the one of the shards present.

A run first removes leftovers of a killed run, marks the manifest incomplete
before it changes any file, lists each split as it finishes, and marks it complete
last; a failed split removes its partial files. `check_data_dir` refuses a
data_dir without a complete, matching manifest.
"""

import glob
import logging
import os
import time
from typing import Any, Dict, Iterator, List, Optional

from data_gen import file_io
from data_gen import generator_utils
from data_gen import manifest as manifest_lib
from data_gen import parallel
from data_gen import sentencepiece_encoder as spm_lib
from data_gen import text_encoder
from data_gen.text_encoder import EOS_ID


class DatasetSplit:
  """T2T split names (also the middle part of shard file names)."""
  TRAIN = "train"
  EVAL = "dev"
  TEST = "test"


class SpaceID:
  """T2T's input/target space ids (`problem.SpaceID`), used by the target-space embedding."""
  GENERIC = 0
  IMAGE_LABEL = 1
  EN_CHR = 2
  EN_TOK = 3
  EN_BPE_TOK = 4
  FR_CHR = 5
  FR_TOK = 6
  DE_CHR = 7
  DE_TOK = 8
  DE_BPE_TOK = 9
  DIGIT_0 = 10
  DIGIT_1 = 11
  AUDIO_WAV = 12
  AUDIO_SPECTRAL = 13
  PARSE_CHR = 14
  PARSE_TOK = 15


class Problem:
  """Base class; subclasses are registered with `registry.register_problem`."""

  # Set by `register_problem`; the T2T snake_case name of the class.
  registered_name: Optional[str] = None
  # How the decoder scores output against the split's reference: "bleu"
  # (case-sensitive BLEU) or "parsing" (EVALB bracketing F1 against gold trees).
  scoring: str = "bleu"

  @property
  def name(self) -> str:
    if self.registered_name is None:
      raise ValueError("problem class %s is not registered; decorate it with "
                       "@register_problem" % type(self).__name__)
    return self.registered_name

  @property
  def dataset_name(self) -> str:
    """The name the problem's files carry (T2T's `dataset_filename()`): its own name,
    or another problem's whose files it reads (a `*_packed` problem's base)."""
    return self.name

  @classmethod
  def restore(cls, data_dir: Optional[str]) -> "Problem":
    """Instance used when the problem is looked up by name (with a data_dir)."""
    del data_dir
    return cls()

  def generate_data(self, data_dir: str, tmp_dir: str, **kwargs) -> Dict[str, Any]:
    raise NotImplementedError

  def check_data_dir(self, data_dir: str, verify_checksums: bool = False) -> Dict[str, Any]:
    """Raises ValueError (naming the datagen command) unless datagen finished data_dir.

    Requires the train and dev splits; see `manifest.check_data_dir`.
    """
    return manifest_lib.check_data_dir(data_dir, self.dataset_name,
                                       (DatasetSplit.TRAIN, DatasetSplit.EVAL),
                                       verify_checksums=verify_checksums)

  def filepattern(self, data_dir: str, split: str) -> str:
    """Glob of the final shard files of `split` (T2T `Problem.filepattern`)."""
    _check_split(split)
    return os.path.join(data_dir, "%s-%s*" % (self.dataset_name, split))


def _check_split(split: str) -> None:
  if split not in (DatasetSplit.TRAIN, DatasetSplit.EVAL, DatasetSplit.TEST):
    raise ValueError("split must be 'train', 'dev' or 'test', got %r" % (split,))


class Text2TextProblem(Problem):
  """Text → text problem with a SubwordTextEncoder vocabulary (shared by default).

  Subclasses implement `generate_samples`; they may override `approx_vocab_size`,
  `share_vocab`, `has_test_split`, `source_lang`/`target_lang` and the space ids.
  `has_inputs = False` is T2T's Text2SelfProblem (a language model): samples and
  records hold only "targets"; "inputs" still names the one shared vocabulary.

  `packed_length` (T2T's): training packs several examples into each row of
  this many tokens (`t2t_keras/training/inputs.py`, T2T's
  `pack_dataset`); the records stay one example each. T2T's `*_packed` problems
  are such twins of their problem that read its files (`dataset_name`).
  """

  has_inputs: bool = True
  packed_length: Optional[int] = None

  approx_vocab_size: int = 2**15
  share_vocab: bool = True
  has_test_split: bool = False
  max_subtoken_length: Optional[int] = 200
  additional_reserved_tokens: List[str] = []
  # The vocabulary's kind (`spm_lib.VOCAB_TYPES`): T2T's subword one, or a SentencePiece
  # model trained with these settings. Datagen sets them; `restore_vocab` reads them back
  # from a data_dir, so a problem looked up by name encodes as its data was encoded.
  vocab_type: str = spm_lib.SUBWORD
  sentencepiece_model_type: str = spm_lib.DEFAULT_MODEL_TYPE
  sentencepiece_character_coverage: float = spm_lib.DEFAULT_CHARACTER_COVERAGE
  input_space_id: int = SpaceID.GENERIC
  target_space_id: int = SpaceID.GENERIC
  source_lang: str = "inputs"
  target_lang: str = "targets"
  batch_size_means_tokens: bool = True

  # ---- subclass interface -------------------------------------------------
  def generate_samples(self, data_dir: str, tmp_dir: str, split: str) -> Iterator[Dict[str, str]]:
    """Yields {"inputs": str, "targets": str} for `split` (raw text; no inputs when
    not `has_inputs`)."""
    raise NotImplementedError

  def generate_text_for_vocab(self, data_dir: str, tmp_dir: str,
                              side: Optional[str] = None) -> Iterator[str]:
    """Text the vocabulary is built from: training inputs and targets.

    `side` ("inputs"/"targets") restricts it to one side for separate vocabs.
    """
    for sample in self.generate_samples(data_dir, tmp_dir, DatasetSplit.TRAIN):
      for key in self.features:
        if side in (None, key):
          yield sample[key]

  @property
  def features(self) -> tuple:
    """The features of the records: ("inputs", "targets"), or ("targets",) without inputs."""
    return ("inputs", "targets") if self.has_inputs else ("targets",)

  @property
  def dataset_splits(self) -> List[Dict[str, Any]]:
    """T2T defaults: train 100 shards, dev 1 (+ test 1 when the problem has one)."""
    splits = [{"split": DatasetSplit.TRAIN, "shards": 100},
              {"split": DatasetSplit.EVAL, "shards": 1}]
    if self.has_test_split:
      splits.append({"split": DatasetSplit.TEST, "shards": 1})
    return splits

  # ---- vocabulary ---------------------------------------------------------
  @property
  def vocab_filename(self) -> str:
    """T2T name of the shared vocab: `vocab.<name>.<size>.subwords` (SentencePiece:
    `vocab.<name>.<size>.spm.model`)."""
    if self.vocab_type == spm_lib.SENTENCEPIECE:
      return spm_lib.vocab_filename(self.dataset_name, self.approx_vocab_size)
    return "vocab.%s.%d.subwords" % (self.dataset_name, self.approx_vocab_size)

  @property
  def vocab_filenames(self) -> Dict[str, str]:
    """Vocab file per feature; separate `.inputs`/`.targets` files when not shared."""
    if self.share_vocab:
      return {"inputs": self.vocab_filename, "targets": self.vocab_filename}
    if self.vocab_type == spm_lib.SENTENCEPIECE:
      return {side: spm_lib.vocab_filename(self.dataset_name, self.approx_vocab_sizes[side], side)
              for side in ("inputs", "targets")}
    return {side: "vocab.%s.%d.%s.subwords" % (self.dataset_name, self.approx_vocab_sizes[side],
                                                side)
            for side in ("inputs", "targets")}

  def set_vocab(self, vocab_type: Optional[str] = None, model_type: Optional[str] = None,
                character_coverage: Optional[float] = None) -> None:
    """Sets the vocabulary's kind and SentencePiece settings (those not None).

    Raises:
      ValueError: an unknown type or setting, naming its datagen flag.
    """
    vocab_type = self.vocab_type if vocab_type is None else vocab_type
    model_type = self.sentencepiece_model_type if model_type is None else model_type
    coverage = (self.sentencepiece_character_coverage if character_coverage is None
                else character_coverage)
    spm_lib.check_options(vocab_type, model_type, coverage)
    self.vocab_type, self.sentencepiece_model_type = vocab_type, model_type
    self.sentencepiece_character_coverage = float(coverage)

  def vocab_settings(self) -> Dict[str, Any]:
    """The vocabulary settings datagen records in the manifest (named as its flags)."""
    if self.vocab_type != spm_lib.SENTENCEPIECE:
      return {"vocab_type": self.vocab_type}
    return {"vocab_type": self.vocab_type,
            "sentencepiece_model_type": self.sentencepiece_model_type,
            "sentencepiece_character_coverage": self.sentencepiece_character_coverage}

  def restore_vocab(self, data_dir: Optional[str]) -> None:
    """Takes the vocabulary settings data_dir was generated with (its manifest's).

    Without a recorded type (a manifest of an earlier version, or a run directory
    holding its vocab), a SentencePiece model present where no subword file is
    makes it SentencePiece; else it stays the class's (subword).
    """
    if not data_dir:
      return
    manifest = manifest_lib.read_manifest(data_dir, self.dataset_name)
    recorded = (manifest or {}).get("settings") or {}
    if recorded.get("vocab_type") in spm_lib.VOCAB_TYPES:
      self.set_vocab(recorded["vocab_type"], recorded.get("sentencepiece_model_type"),
                     recorded.get("sentencepiece_character_coverage"))
      return
    subword_files = self.vocab_paths(data_dir).values()
    if self.vocab_type == spm_lib.SUBWORD and not any(map(os.path.exists, subword_files)):
      self.vocab_type = spm_lib.SENTENCEPIECE
      if not all(map(os.path.exists, self.vocab_paths(data_dir).values())):
        self.vocab_type = spm_lib.SUBWORD

  @property
  def approx_vocab_sizes(self) -> Dict[str, int]:
    return {"inputs": self.approx_vocab_size, "targets": self.approx_vocab_size}

  def get_or_create_vocab(self, data_dir: str, tmp_dir: Optional[str],
                          force_get: bool = False) -> Dict[str, Any]:
    """Returns {"inputs": enc, "targets": enc}; builds missing vocab files unless `force_get`."""
    self.vocab_seconds = 0.0
    reserved = text_encoder.RESERVED_TOKENS + list(self.additional_reserved_tokens)
    by_file: Dict[str, Any] = {}
    for side in ("inputs", "targets"):
      filename = self.vocab_filenames[side]
      if filename in by_file:
        continue
      path = os.path.join(data_dir, filename)
      if force_get:
        if not os.path.exists(path):
          raise ValueError("vocab file %r not found; run t2t_keras_datagen --problem=%s "
                           "--data_dir=%s first" % (path, self.name, data_dir))
        by_file[filename] = spm_lib.load_vocab(path)
        continue
      which = None if self.share_vocab else side
      text = lambda w=which: self.generate_text_for_vocab(data_dir, tmp_dir, w)
      if self.vocab_type == spm_lib.SENTENCEPIECE:
        by_file[filename], seconds = spm_lib.get_or_build(
            data_dir, filename, self.approx_vocab_sizes[side], text,
            self.sentencepiece_model_type, self.sentencepiece_character_coverage)
      else:
        by_file[filename], seconds = generator_utils.get_or_generate_vocab(
            data_dir, filename, self.approx_vocab_sizes[side], text,
            max_subtoken_length=self.max_subtoken_length, reserved_tokens=reserved)
      self.vocab_seconds += seconds
    encoders = {side: by_file[self.vocab_filenames[side]] for side in ("inputs", "targets")}
    return encoders

  def vocab_paths(self, data_dir: str) -> Dict[str, str]:
    """{"inputs": path, "targets": path} of the vocab files in data_dir."""
    return {side: os.path.join(data_dir, name) for side, name in self.vocab_filenames.items()}

  def feature_encoders(self, data_dir: str) -> Dict[str, Any]:
    """{"inputs": encoder, "targets": encoder} read from data_dir."""
    return self.get_or_create_vocab(data_dir, None, force_get=True)

  # ---- files ---------------------------------------------------------------
  def shard_paths(self, data_dir: str, split: str, num_shards: Optional[int] = None,
                  shuffled: bool = True) -> List[str]:
    _check_split(split)
    if num_shards is None:
      num_shards = {s["split"]: s["shards"] for s in self.dataset_splits}.get(split, 1)
    return generator_utils.shard_filepaths(data_dir, self.dataset_name, split, num_shards,
                                           shuffled)

  def text_file(self, data_dir: str, split: str, side: str) -> str:
    """Plain-text file of a dev/test split: side "inputs" (source) or "targets" (reference)."""
    _check_split(split)
    langs = {"inputs": self.source_lang, "targets": self.target_lang}
    if side not in langs:
      raise ValueError("side must be 'inputs' or 'targets', got %r" % (side,))
    return os.path.join(data_dir, "%s.%s.%s" % (self.dataset_name, split, langs[side]))

  def reference_file(self, data_dir: str, split: str) -> str:
    """What decoded output of a dev/test split is scored against (see `scoring`)."""
    return self.text_file(data_dir, split, "targets")

  def split_text_files(self, data_dir: str, split: str) -> List[str]:
    """Plain-text files datagen writes beside a split's shards (listed in the manifest)."""
    if split == DatasetSplit.TRAIN:
      return []
    return [self.text_file(data_dir, split, s) for s in self.features]

  def write_split_extras(self, data_dir: str, split: str) -> None:
    """Hook: files a problem derives from a split's text files (before the manifest)."""

  def _split_done(self, data_dir: str, split: str, num_shards: int) -> bool:
    paths = self.shard_paths(data_dir, split, num_shards) + self.split_text_files(data_dir, split)
    return all(os.path.exists(p) for p in paths)

  # ---- generation -------------------------------------------------------------
  def generate_encoded_samples(self, data_dir: str, tmp_dir: str, split: str,
                               encoders: Dict[str, Any],
                               text_sink: Optional[List[tuple]] = None) -> Iterator[Dict[str, List[int]]]:
    """Encodes samples and appends EOS=1 (T2T `text2text_generate_encoded`)."""
    for sample in self.generate_samples(data_dir, tmp_dir, split):
      if text_sink is not None:
        text_sink.append(tuple(sample[k] for k in self.features))
      yield {k: encoders[k].encode(sample[k]) + [EOS_ID] for k in self.features}

  def generate_data(self, data_dir: str, tmp_dir: str, num_shards: Optional[int] = None,
                    max_cases: Optional[int] = None, random_seed: Optional[int] = None,
                    progress: generator_utils.Progress = None,
                    num_workers: Optional[int] = None) -> Dict[str, Any]:
    """Writes vocab, shards and dev/test text files; skips splits already written so.

    A setting left None is the one the data_dir's manifest records (`_settings`).
    A split is rewritten unless the manifest lists it as written with these
    settings and the vocab file present; so a changed vocab re-encodes every split.

    Args:
      num_shards: the number of train shards (default: the manifest's, else the
        problem's; T2T: 100).
      max_cases: at most this many examples per split; 0: no limit (as T2T).
      random_seed: seed of the per-shard shuffle (default: the manifest's, else 429459).
      progress: called as progress(stage, done, total_or_None) on long steps.
      num_workers: processes that encode and shuffle (`data_gen/parallel.py`; default:
        the CPUs this process may use); shapes nothing, any number writes the same bytes.

    Returns:
      {"splits": {split: {"examples", "inputs_tokens", "targets_tokens", "skipped"}},
       "vocab_seconds": float, "seconds": float, "settings": {...},
       "changed": {setting or "vocab": (recorded, now)}}
    """
    start = time.time()
    num_workers = parallel.check_num_workers(num_workers)  # None: every available CPU
    for name, value, low in (("num_shards", num_shards, 1), ("max_cases", max_cases, 0)):
      if value is not None and (not isinstance(value, int) or value < low):
        raise ValueError("%s must be an int >= %d, got %r" % (name, low, value))
    os.makedirs(data_dir, exist_ok=True)
    os.makedirs(tmp_dir, exist_ok=True)
    generator_utils.remove_stale_temporaries(data_dir, self.dataset_name)
    old = manifest_lib.read_manifest(data_dir, self.dataset_name)
    settings, changed = self._settings(data_dir, old, num_shards, max_cases, random_seed)
    recorded = dict((old or {}).get("settings") or {})
    if old is not None:
      recorded.setdefault("vocab_type", spm_lib.SUBWORD)  # manifests before SentencePiece
    changed.update({k: (recorded[k], v) for k, v in self.vocab_settings().items()
                    if k in recorded and recorded[k] != v})
    settings.update(self.vocab_settings())
    had_shards = bool(self._shards_present(data_dir))
    if progress is not None:
      progress("vocab", 0, None)
    encoders = self.get_or_create_vocab(data_dir, tmp_dir)
    vocabs = [os.path.join(data_dir, f) for f in self.vocab_filenames.values()]
    if self.vocab_seconds > 0 or not manifest_lib.vocab_unchanged(old, data_dir, vocabs):
      if had_shards:  # else a first run: nothing was encoded with another vocab
        changed["vocab"] = ("the manifest's", "new" if self.vocab_seconds > 0 else
                             "replaced" if "vocab_type" in changed else "edited")
      old = {"splits": {}}  # shards encoded with another vocab are stale
    shards = {spec["split"]: (settings["num_shards"] if spec["split"] == DatasetSplit.TRAIN
                              else spec["shards"]) for spec in self.dataset_splits}
    todo = [split for split, n in shards.items() if not (
        self._split_done(data_dir, split, n)
        and manifest_lib.split_reusable(old, data_dir, split, n, settings))]
    entries = {split: manifest_lib.split_entry(
        self.shard_paths(data_dir, split, n), self.split_text_files(data_dir, split))
               for split, n in shards.items() if split not in todo and (
                   todo or old is None or old.get("settings") != settings
                   or old.get("complete") is False)}
    for split in todo:  # the manifest says what is done, and with which settings
      manifest_lib.write_manifest(data_dir, self.dataset_name, vocabs, entries, settings, False)
      self._generate_split(data_dir, tmp_dir, split, shards[split], encoders,
                           settings["max_cases"], settings["random_seed"], progress,
                           num_workers)
      entries[split] = manifest_lib.split_entry(
          self.shard_paths(data_dir, split, shards[split]), self.split_text_files(data_dir, split))
    if entries:  # complete: every split is written with these settings and vocab
      manifest_lib.write_manifest(data_dir, self.dataset_name, vocabs, entries, settings)
    result = {"splits": {}, "vocab_seconds": self.vocab_seconds, "settings": settings,
              "changed": changed}
    for split, n in shards.items():
      result["splits"][split] = dict(generator_utils.shard_stats(
          self.shard_paths(data_dir, split, n)), skipped=split not in todo)
    result["seconds"] = time.time() - start
    return result

  def _settings(self, data_dir: str, manifest: Optional[Dict], num_shards: Optional[int],
                max_cases: Optional[int], random_seed: Optional[int]):
    """(settings, {name: (recorded, given)} for given settings that differ from the record).

    Each setting is the one given, else the one recorded (`manifest.recorded_settings`),
    else the default; max_cases 0 is stored as None (no limit).
    """
    recorded = manifest_lib.recorded_settings(
        manifest, self._shards_present(data_dir, DatasetSplit.TRAIN))
    defaults = {"num_shards": {s["split"]: s["shards"] for s in self.dataset_splits}.get(
        DatasetSplit.TRAIN, 1), "max_cases": None,
                "random_seed": manifest_lib.DEFAULT_RANDOM_SEED}
    given = {"num_shards": num_shards, "max_cases": max_cases, "random_seed": random_seed}
    settings = {k: (given[k] if given[k] is not None else recorded.get(k, defaults[k]))
                for k in manifest_lib.SETTINGS}
    settings["max_cases"] = settings["max_cases"] or None
    changed = {k: (recorded[k], settings[k]) for k in manifest_lib.SETTINGS
               if k in recorded and given[k] is not None and recorded[k] != settings[k]}
    return settings, changed

  def _shards_present(self, data_dir: str, split: str = "*") -> List[str]:
    """Final shard files of `split` (default: any split) in data_dir, temporaries aside."""
    present = glob.glob(os.path.join(data_dir, "%s-%s-[0-9]*-of-[0-9]*"
                                     % (self.dataset_name, split)))
    return [p for p in present if not file_io.is_temporary(p)]

  def _generate_split(self, data_dir, tmp_dir, split, shards, encoders, max_cases,
                      random_seed, progress, num_workers=1) -> None:
    """Writes one split; on any failure (e.g. a full disk) removes its partial files."""
    unshuffled = self.shard_paths(data_dir, split, shards, shuffled=False)
    final = self.shard_paths(data_dir, split, shards)
    try:
      with parallel.Workers(num_workers, encoders, self.features,
                            {k: encoders[k].vocab_size for k in self.features}) as workers:
        self._write_split(data_dir, tmp_dir, split, unshuffled, final, encoders, max_cases,
                          random_seed, progress, workers)
    except BaseException:
      paths = unshuffled + final
      file_io.remove_quietly(paths + [file_io.temp_path(p) for p in paths])
      raise

  def _write_split(self, data_dir, tmp_dir, split, unshuffled, final, encoders, max_cases,
                   random_seed, progress, workers) -> None:
    # Text files hold exactly the written examples, in generation order, written as read.
    texts = ([self.text_file(data_dir, split, side) for side in self.features]
             if split != DatasetSplit.TRAIN else [])
    parallel.write_split(self, workers, data_dir, tmp_dir, split, encoders, unshuffled, texts,
                         max_cases, progress)
    if texts:
      self.write_split_extras(data_dir, split)
    if progress is not None:
      progress(split + " shuffle", 0, len(final))
    parallel.shuffle_shards(workers, unshuffled, final, random_seed)
    # Shards of an earlier run with another shard count would match filepattern too.
    for path in glob.glob(os.path.join(data_dir, "%s-%s-[0-9]*-of-[0-9]*"
                                       % (self.dataset_name, split))):
      if path not in final and not file_io.is_temporary(path):
        logging.info("removing stale shard %s", path)
        os.remove(path)
