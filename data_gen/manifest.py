"""The datagen manifest: written LAST, so its presence means the data_dir is complete.

`<data_dir>/<problem>.manifest.json` lists the vocab files, and per split the shard
files (name, record count, bytes, SHA-256) and plain-text files. `check_data_dir`
is what the trainer calls before reading shards.
"""

import hashlib
import json
import os
import re
import struct
from typing import Dict, Sequence, Tuple

from data_gen.file_io import TMP_SUFFIX, write_lines

MANIFEST_VERSION = 1


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


def write_manifest(data_dir: str, problem_name: str, vocab_paths: Sequence[str],
                   splits: Dict[str, Tuple[Sequence[str], Sequence[str]]]) -> str:
  """Writes the manifest (call it LAST); returns its path.

  Args:
    vocab_paths: the vocab files.
    splits: {split: (shard paths, plain-text file paths)}.
  """
  manifest = {"format_version": MANIFEST_VERSION, "problem": problem_name,
              "written_by": "t2t_keras_datagen",  # no time stamp: reruns are byte-identical
              "vocab": [_file_entry(p) for p in sorted(set(vocab_paths))], "splits": {}}
  for split, (shards, texts) in splits.items():
    entries = [_file_entry(p, tfrecord=True) for p in shards]
    manifest["splits"][split] = {"records": sum(e["records"] for e in entries),
                                 "shards": entries, "text_files": [_file_entry(p) for p in texts]}
  path = manifest_path(data_dir, problem_name)
  write_lines(path, [json.dumps(manifest, indent=1, sort_keys=True)])
  return path


def check_data_dir(data_dir: str, problem_name: str,
                   required_splits: Sequence[str] = ("train", "dev"),
                   verify_checksums: bool = False) -> Dict:
  """Refuses a data_dir that datagen did not finish; returns its manifest.

  Checks the manifest exists, lists every `required_splits` split, and that each
  listed file exists with its recorded size (and SHA-256 with `verify_checksums`),
  and that no unlisted shard of a listed split would be read by a `-<split>*` glob.
  Data dirs of versions before manifests are refused too (a killed run looks the
  same); rerunning datagen on them keeps the finished splits and adds the manifest.

  Raises:
    ValueError: saying what is wrong and naming the datagen command to run.
  """
  command = "t2t_keras_datagen --problem=%s --data_dir=%s" % (problem_name, data_dir)
  path = manifest_path(data_dir, problem_name)
  if not os.path.isfile(path):
    has_shards = any(n.startswith(problem_name + "-") and not n.endswith(TMP_SUFFIX)
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
  problems = ["no %r split" % s for s in required_splits if not splits.get(s, {}).get("shards")]
  entries = list(manifest.get("vocab", []))
  for split, spec in splits.items():
    entries += spec["shards"] + spec.get("text_files", [])
    listed = {e["file"] for e in spec["shards"]}
    pattern = re.compile(r"%s-%s" % (re.escape(problem_name), split))
    problems += ["unlisted shard %s" % n for n in sorted(os.listdir(data_dir))
                 if pattern.match(n) and n not in listed and not n.endswith(TMP_SUFFIX)]
  for entry in entries:
    file_path = os.path.join(data_dir, entry["file"])
    if not os.path.isfile(file_path):
      problems.append("missing %s" % entry["file"])
    elif os.path.getsize(file_path) != entry["bytes"]:
      problems.append("%s has %d bytes, manifest says %d"
                      % (entry["file"], os.path.getsize(file_path), entry["bytes"]))
    elif verify_checksums and _sha256(file_path) != entry["sha256"]:
      problems.append("%s has another SHA-256 than the manifest" % entry["file"])
  if problems:
    raise ValueError("data_dir %s does not match its manifest: %s%s. Regenerate with `%s`."
                     % (data_dir, "; ".join(problems[:5]),
                        " (and %d more)" % (len(problems) - 5) if len(problems) > 5 else "",
                        command))
  return manifest
