"""The datagen manifest: what datagen wrote, with which settings and vocabulary.

`<data_dir>/<problem>.manifest.json` lists the vocab files (name, bytes,
SHA-256), the settings that shape the shards (`SETTINGS`: train shard count,
max_cases, random_seed; and the vocabulary's, `vocab_type` and the SentencePiece
ones, which `Text2TextProblem.restore_vocab` reads back), and per split the shard files (name, record count,
bytes, SHA-256) and plain-text files. Every listed split was written with those
settings and that vocabulary. Datagen marks it `"complete": false` before it
changes any file and lists each split as it finishes, so a killed run leaves a
manifest that remembers its settings; it marks it complete last.
`check_data_dir` is what the trainer calls before reading shards: it refuses an
incomplete manifest, files that differ from it, and a vocab file edited since.
"""

import hashlib
import json
import os
import re
import struct
from typing import Dict, Optional, Sequence, Tuple, Union

from data_gen.file_io import is_temporary, write_lines

MANIFEST_VERSION = 2
# The datagen settings that change the shards; `None` max_cases: no limit.
SETTINGS = ("num_shards", "max_cases", "random_seed")
DEFAULT_RANDOM_SEED = 429459


def manifest_path(data_dir: str, problem_name: str) -> str:
  """`<data_dir>/<problem_name>.manifest.json`, written last by datagen."""
  return os.path.join(data_dir, "%s.manifest.json" % problem_name)


def tfrecord_count(path: str) -> int:
  """Records of an uncompressed TFRecord file, walking its length headers.

  Raises:
    ValueError: naming the file if it ends inside a record (truncated).
  """
  size, pos, count = os.path.getsize(path), 0, 0
  with open(path, "rb") as f:
    while pos < size:
      header = f.read(12)
      pos += 12 + (struct.unpack("<Q", header[:8])[0] if len(header) == 12 else size) + 4
      if pos > size:
        raise ValueError("%s is truncated inside record %d" % (path, count + 1))
      f.seek(pos)
      count += 1
  return count


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def _file_entry(path: str, tfrecord: bool = False) -> Dict:
  entry = {"file": os.path.basename(path), "bytes": os.path.getsize(path),
           "sha256": _sha256(path)}
  if tfrecord:
    entry["records"] = tfrecord_count(path)
  return entry


def split_entry(shards: Sequence[str], texts: Sequence[str]) -> Dict:
  """A split's manifest entry: its shard files (with record counts) and text files."""
  entries = [_file_entry(p, tfrecord=True) for p in shards]
  return {"records": sum(e["records"] for e in entries), "shards": entries,
          "text_files": [_file_entry(p) for p in texts]}


def write_manifest(data_dir: str, problem_name: str, vocab_paths: Sequence[str],
                   splits: Dict[str, Union[Dict, Tuple[Sequence[str], Sequence[str]]]],
                   settings: Optional[Dict] = None, complete: bool = True) -> str:
  """Writes the manifest; returns its path. Complete only once every split is written.

  Args:
    vocab_paths: the vocab files.
    splits: {split: (shard paths, plain-text file paths), or its `split_entry`}.
    settings: the `SETTINGS` the listed splits were written with.
    complete: False while datagen is still writing (the trainer refuses it).
  """
  manifest = {"format_version": MANIFEST_VERSION, "problem": problem_name,
              "written_by": "t2t_keras_datagen",  # no time stamp: reruns are byte-identical
              "vocab": [_file_entry(p) for p in sorted(set(vocab_paths))], "splits": {},
              "settings": dict(settings or {}), "complete": complete}
  for split, value in splits.items():
    manifest["splits"][split] = value if isinstance(value, dict) else split_entry(*value)
  path = manifest_path(data_dir, problem_name)
  write_lines(path, [json.dumps(manifest, indent=1, sort_keys=True)])
  return path


def read_manifest(data_dir: str, problem_name: str) -> Optional[Dict]:
  """The manifest (complete or not), or None when there is none or it is unreadable."""
  try:
    with open(manifest_path(data_dir, problem_name), encoding="utf-8") as f:
      manifest = json.load(f)
  except (OSError, ValueError):
    return None
  ok = isinstance(manifest, dict) and isinstance(manifest.get("splits"), dict)
  return manifest if ok else None


def _files_unchanged(data_dir: str, entries: Sequence[Dict], sha256: bool = False) -> bool:
  for entry in entries:
    path = os.path.join(data_dir, entry["file"])
    if not os.path.isfile(path) or os.path.getsize(path) != entry["bytes"]:
      return False
    if sha256 and _sha256(path) != entry["sha256"]:
      return False
  return True


def vocab_unchanged(manifest: Optional[Dict], data_dir: str,
                    vocab_paths: Optional[Sequence[str]] = None) -> bool:
  """Whether the vocab files are those the manifest's shards were encoded with.

  With `vocab_paths` (the vocab files in use now) they must also be the files the
  manifest lists: another vocabulary (e.g. SentencePiece instead of subword) is a change
  even while the listed files stay as they were. True without a manifest (a data_dir
  of a version before manifests: unknown).
  """
  if manifest is None:
    return True
  listed = manifest.get("vocab", [])
  if vocab_paths is not None and (sorted(e["file"] for e in listed)
                                  != sorted({os.path.basename(p) for p in vocab_paths})):
    return False
  return _files_unchanged(data_dir, listed, sha256=True)


def recorded_settings(manifest: Optional[Dict], train_shards: Sequence[str]) -> Dict:
  """The `SETTINGS` the data_dir was generated with, as far as known.

  From the manifest; a version-1 manifest records only the train shard count (its
  listed train shards). Without a manifest, `train_shards` (the final train shard
  files present) give the count when they agree on one.
  """
  if manifest is not None:
    recorded = dict(manifest.get("settings") or {})
    if "num_shards" not in recorded and manifest["splits"].get("train", {}).get("shards"):
      recorded["num_shards"] = len(manifest["splits"]["train"]["shards"])
    return recorded
  counts = {int(m.group(1)) for m in (re.search(r"-of-(\d+)$", p) for p in train_shards) if m}
  return {"num_shards": counts.pop()} if len(counts) == 1 else {}


def split_reusable(manifest: Optional[Dict], data_dir: str, split: str, num_shards: int,
                   settings: Dict) -> bool:
  """Whether the manifest lists `split` as written with `num_shards` shards and
  `settings` (max_cases, random_seed), its files unchanged in size.

  True without a manifest (what the files were written with is unknown).
  """
  if manifest is None:
    return True
  entry = manifest["splits"].get(split)
  recorded = manifest.get("settings") or {}
  if not entry or len(entry.get("shards", [])) != num_shards:
    return False
  if any(k in recorded and recorded[k] != settings[k] for k in ("max_cases", "random_seed")):
    return False
  return _files_unchanged(data_dir, entry["shards"] + entry.get("text_files", []))


def check_data_dir(data_dir: str, problem_name: str,
                   required_splits: Sequence[str] = ("train", "dev"),
                   verify_checksums: bool = False) -> Dict:
  """Refuses a data_dir that datagen did not finish; returns its manifest.

  Checks the manifest exists and is complete, lists every `required_splits`
  split, that each listed file exists with its recorded size (and SHA-256 with
  `verify_checksums`; the small vocab files always: an edited vocabulary, even of
  the same size, makes every shard's ids wrong), and that no unlisted shard of a
  listed split would be read by a `-<split>*` glob. Data dirs of versions before
  manifests are refused too (a killed run looks the same); rerunning datagen on
  them keeps the finished splits and adds the manifest. The datagen command named
  reproduces the manifest's settings and re-encodes what the vocabulary changed.

  Raises:
    ValueError: saying what is wrong and naming the datagen command to run.
  """
  command = "t2t_keras_datagen --problem=%s --data_dir=%s" % (problem_name, data_dir)
  path = manifest_path(data_dir, problem_name)
  if not os.path.isfile(path):
    has_shards = any(n.startswith(problem_name + "-") and not is_temporary(n)
                     for n in (os.listdir(data_dir) if os.path.isdir(data_dir) else []))
    why = ("has shards but no datagen manifest %s: its datagen was interrupted, or it was "
           "written by a t2t_keras version before manifests" % path if has_shards else
           "has no data of problem %s (no manifest %s)" % (problem_name, path))
    raise ValueError("data_dir %s %s. Run `%s` (a rerun keeps the vocab and finished splits, "
                     "generates missing ones and writes the manifest last)."
                     % (data_dir, why, command))
  try:
    with open(path, encoding="utf-8") as f:
      manifest = json.load(f)
    splits = manifest["splits"]
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError("manifest %s is unreadable (%s); regenerate with `%s`" % (path, e, command))
  if manifest.get("complete") is False:
    raise ValueError("data_dir %s is incomplete: its datagen was interrupted or failed (manifest "
                     "%s is marked incomplete). Run `%s` (a rerun keeps the vocab, the settings "
                     "and finished splits, and generates the rest)." % (data_dir, path, command))
  problems = ["no %r split" % s for s in required_splits if not splits.get(s, {}).get("shards")]
  vocab = list(manifest.get("vocab", []))
  vocab_note = " (the vocabulary changed since the shards were encoded with it)"
  entries = list(vocab)
  for split, spec in splits.items():
    entries += spec["shards"] + spec.get("text_files", [])
    listed = {e["file"] for e in spec["shards"]}
    pattern = re.compile(r"%s-%s" % (re.escape(problem_name), split))
    problems += ["unlisted shard %s" % n for n in sorted(os.listdir(data_dir))
                 if pattern.match(n) and n not in listed and not is_temporary(n)]
  for entry in entries:
    file_path = os.path.join(data_dir, entry["file"])
    if not os.path.isfile(file_path):
      problems.append("missing %s" % entry["file"])
    elif os.path.getsize(file_path) != entry["bytes"]:
      problems.append("%s has %d bytes, manifest says %d%s"
                      % (entry["file"], os.path.getsize(file_path), entry["bytes"],
                         vocab_note if entry in vocab else ""))
    elif (verify_checksums or entry in vocab) and _sha256(file_path) != entry["sha256"]:
      problems.append("%s has another SHA-256 than the manifest%s"
                      % (entry["file"], vocab_note if entry in vocab else ""))
  if problems:
    raise ValueError("data_dir %s does not match its manifest: %s%s. Regenerate with `%s`."
                     % (data_dir, "; ".join(problems[:5]),
                        " (and %d more)" % (len(problems) - 5) if len(problems) > 5 else "",
                        command))
  return manifest
