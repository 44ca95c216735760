"""A tiny synthetic translation problem (word-for-word EN->DE) for training tests."""

import os
import random

WORDS = {"the": "der", "a": "ein", "house": "Haus", "cat": "Katze", "dog": "Hund",
         "runs": "läuft", "sees": "sieht", "big": "groß", "small": "klein", "red": "rot",
         "green": "grün", "blue": "blau", "and": "und", "old": "alt", "new": "neu"}

# transformer_tiny overrides of a one-layer model that trains in seconds on this problem,
# for tests of what happens around training (stops, faults) rather than of what it learns.
ONE_LAYER = "num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,batch_size=128"


def write_parallel(path_prefix: str, count: int, seed: int, max_words: int = 9):
  rng = random.Random(seed)
  words = sorted(WORDS)
  with open(path_prefix + ".en", "w", encoding="utf-8") as en, \
      open(path_prefix + ".de", "w", encoding="utf-8") as de:
    for _ in range(count):
      sentence = [rng.choice(words) for _ in range(rng.randint(2, max_words))]
      en.write(" ".join(sentence) + "\n")
      de.write(" ".join(WORDS[w] for w in sentence) + "\n")


def make_tiny_problem(root: str, train: int = 2000, dev: int = 64, max_words: int = 9):
  """Writes text files and generates `translate_from_files` into root/data.

  Sentences have 2 to `max_words` words.

  Returns:
    data_dir.
  """
  from data_gen.translate_from_files import TranslateFromFiles
  text = os.path.join(root, "text")
  os.makedirs(text, exist_ok=True)
  write_parallel(os.path.join(text, "train"), train, seed=1, max_words=max_words)
  write_parallel(os.path.join(text, "dev"), dev, seed=2)
  write_parallel(os.path.join(text, "test"), dev, seed=3)
  problem = TranslateFromFiles(
      os.path.join(text, "train.en"), os.path.join(text, "train.de"),
      os.path.join(text, "dev.en"), os.path.join(text, "dev.de"), vocab_size=200,
      test_source=os.path.join(text, "test.en"), test_target=os.path.join(text, "test.de"),
      source_lang="en", target_lang="de")
  data_dir = os.path.join(root, "data")
  problem.generate_data(data_dir, os.path.join(root, "tmp"), num_shards=2)
  return data_dir
