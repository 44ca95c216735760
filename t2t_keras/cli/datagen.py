r"""`t2t_keras_datagen`: T2T's `t2t-datagen` — vocab + sharded TFRecords for a problem.

  t2t_keras_datagen --problem=translate_ende_ding_bible8k --data_dir=~/t2t_data
  t2t_keras_datagen --problem=translate_from_files --data_dir=~/my_data \
      --train_source=train.en --train_target=train.de \
      --dev_source=dev.en --dev_target=dev.de --test_source=test.en \
      --test_target=test.de --source_lang=en --target_lang=de --vocab_size=8192

  t2t_keras_datagen --problem=languagemodel_from_files --data_dir=~/my_lm \
      --train_text=train.txt --dev_text=dev.txt --vocab_size=8192

  t2t_keras_datagen --problem=translate_ende_ding_bible8k --data_dir=~/t2t_data_spm \
      --vocab_type=sentencepiece   # a SentencePiece model: docs/vocabularies.md

translate_from_files writes a test split (shards + text files) when given
--test_source/--test_target (the decoder's --eval_use_test_set), and records
--source_lang/--target_lang: with a target language Moses tokenizes (e.g. de)
the decoder also prints the paper's tokenized BLEU. languagemodel_from_files
(T2T's Text2SelfProblem) makes each non-empty line of --train_text/--dev_text
[/--test_text] one example of targets only, for a language model.

Running it again removes leftovers of a killed run, skips finished splits and
reuses the vocab. `<problem>.manifest.json` remembers the vocab's SHA-256 and
the settings that shape the shards (--num_shards, --max_cases, --random_seed):

- A setting not given is the remembered one, so `t2t_keras_datagen
  --problem=P --data_dir=D` (what the trainer says to run) reproduces the
  data_dir as it was generated.
- A setting given with another value than the remembered one is applied: the
  splits it shapes are generated again (as t2t-datagen does what its flags say),
  and the summary names the old and the new value. A data_dir never mixes
  settings.
- A vocab file that changed since the shards were written (rebuilt, or edited)
  re-encodes every split with it; so does another --vocab_type (subword or
  sentencepiece) or SentencePiece setting, which the manifest also remembers.

The manifest is complete only when every split is written; the trainer refuses a
data_dir without a complete manifest that matches its files and vocab.

--num_workers processes (default: every CPU this process may use) encode the samples
and shuffle the shards; the files are byte-identical whatever the number, which is no
setting of the manifest (data_gen/parallel.py).
"""

import errno
import os
import sys
import time

from absl import flags

from data_gen import generate, registry
from t2t_keras.cli import common_flags, file_checks

FLAGS = flags.FLAGS
_define = common_flags.define_once  # several commands may be imported in one process (tests)


_define("string", "problem", None, "Registered problem name, e.g. translate_ende_ding_bible8k.")
_define("string", "data_dir", None, "Where the vocab and TFRecord shards are written.")
_define("string", "tmp_dir", "/tmp/t2t_datagen",
        "Scratch directory for sources and downloads. The WMT problems keep "
        "tensorflow-datasets' downloads (<tmp_dir>/downloads) and prepared data "
        "(<tmp_dir>/tensorflow_datasets) here; copy the WMT archives into it to work offline.")
_define("integer", "num_shards", None, "Number of train shards (default: as the data_dir's "
        "manifest records, else the problem's: T2T 100).")
_define("integer", "max_cases", None, "At most this many examples per split; 0: no limit "
        "(default: as the data_dir's manifest records, else no limit).")
_define("integer", "random_seed", None, "Seed of the per-shard shuffle (default: as the "
        "data_dir's manifest records, else 429459).")
_define("integer", "num_workers", None, "Processes that encode the samples and shuffle the "
        "shards (default: the CPUs this process may use). The main process reads the samples "
        "and writes the shards in order, so any number writes the same files, and a rerun "
        "with another number keeps finished splits. Memory stays bounded: 2 chunks of 1000 "
        "samples per worker in flight, and one shard per worker while shuffling.")
_define("string", "t2t_usr_dir", None, "Directory (a package) with user @register_problem modules.")
_define("string", "train_source", None, "translate_from_files: training source text file.")
_define("string", "train_target", None, "translate_from_files: training target text file.")
_define("string", "dev_source", None, "translate_from_files: dev source text file.")
_define("string", "dev_target", None, "translate_from_files: dev target text file.")
_define("string", "test_source", None, "translate_from_files: test source text file "
        "(optional, with --test_target: adds a test split, as T2T's WMT problems have).")
_define("string", "test_target", None, "translate_from_files: test target text file.")
_define("string", "train_text", None, "languagemodel_from_files: training text file.")
_define("string", "dev_text", None, "languagemodel_from_files: dev text file.")
_define("string", "test_text", None, "languagemodel_from_files: test text file (optional).")
_define("integer", "vocab_size", 2**15, "translate_from_files, languagemodel_from_files: "
        "approximate subword vocab size (with --vocab_type=sentencepiece: the most pieces).")
_define("enum", "vocab_type", None, "The vocabulary: subword (T2T's SubwordTextEncoder) or "
        "sentencepiece (a SentencePiece model, vocab.<problem>.<size>.spm.model), of the "
        "problem's size (--vocab_size for the *_from_files problems). Default: as the "
        "data_dir's manifest records, else subword. Another type re-encodes every split.",
        enum_values=["subword", "sentencepiece"])
_define("enum", "sentencepiece_model_type", None, "--vocab_type=sentencepiece: the model, "
        "unigram or bpe (default: as the manifest records, else unigram).",
        enum_values=["unigram", "bpe"])
_define("float", "sentencepiece_character_coverage", None, "--vocab_type=sentencepiece: the "
        "share of the sample's characters that get a piece, the rest map to <unk> (default: "
        "as the manifest records, else 1.0: every character, as T2T's subword vocab; 0.9995 "
        "suits scripts with thousands of characters).")
_define("string", "source_lang", None, "translate_from_files: source language, e.g. en; names "
        "the dev/test text files (default: src).")
_define("string", "target_lang", None, "translate_from_files: target language, e.g. de; names "
        "the dev/test text files, and one Moses tokenizes (de, fr, ...) makes the decoder "
        "also print the paper's tokenized BLEU (default: tgt, which it does not).")

_FILE_FLAGS = ("train_source", "train_target", "dev_source", "dev_target",
               "test_source", "test_target",
               "train_text", "dev_text", "test_text")  # = generate.FILE_ARGS + LM_FILE_ARGS


def _progress(stage: str, done: int, total) -> None:
  if stage == "vocab":
    msg = "vocab: loading or building (can take minutes for a new corpus)"
  elif stage.endswith("shuffle"):
    msg = "%s: shuffling %d shard(s)" % (stage, total)
  elif total:
    msg = "%s: %d / %d examples (%.0f%%)" % (stage, done, total, 100.0 * done / total)
  else:
    msg = "%s: %d examples" % (stage, done)
  print("[t2t_keras_datagen %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def _summary(name: str, data_dir: str, result) -> str:
  lines = ["problem %s -> %s" % (name, data_dir)]
  for key, (old, new) in sorted(result["changed"].items()):
    lines.append("  vocab %s since the shards were written: every split re-encoded" % new
                 if key == "vocab" else
                 "  --%s=%s (the manifest's: %s): regenerated what it shapes" % (key, new, old))
  for split, s in result["splits"].items():
    lines.append("  %-5s %8d examples  %10d input tokens  %10d target tokens%s"
                 % (split, s["examples"], s["inputs_tokens"], s["targets_tokens"],
                    "  (already done, skipped)" if s["skipped"] else ""))
  lines.append("  settings: %s" % ", ".join(
      "%s=%s" % (k, "none" if v is None else v) for k, v in sorted(result["settings"].items())))
  lines.append("  vocab build %.1fs%s, total %.1fs" % (
      result["vocab_seconds"], " (reused)" if result["vocab_seconds"] == 0 else "",
      result["seconds"]))
  return "\n".join(lines)


def run(argv) -> int:
  """Generates the data for --problem; returns the process exit code."""
  if len(argv) > 1:
    print("t2t_keras_datagen: unexpected arguments %r" % (argv[1:],), file=sys.stderr)
    return 2
  try:
    registry.import_usr_dir(FLAGS.t2t_usr_dir)  # before the problem names are listed
    if not FLAGS.problem or not FLAGS.data_dir:
      raise ValueError("--problem and --data_dir are required (got --problem=%r --data_dir=%r); "
                       "problems: %s" % (FLAGS.problem, FLAGS.data_dir,
                                         ", ".join(registry.list_problems())))
    data_dir = os.path.abspath(os.path.expanduser(FLAGS.data_dir))
    tmp_dir = os.path.abspath(os.path.expanduser(FLAGS.tmp_dir))
    for name in _FILE_FLAGS:  # before the vocabulary is built
      if getattr(FLAGS, name):
        file_checks.check_input_file(name, getattr(FLAGS, name),
                                     "a UTF-8 text file, one sentence per line")
    result = generate.generate_data(
        FLAGS.problem, data_dir, tmp_dir, num_shards=FLAGS.num_shards,
        max_cases=FLAGS.max_cases, random_seed=FLAGS.random_seed, vocab_size=FLAGS.vocab_size,
        source_lang=FLAGS.source_lang, target_lang=FLAGS.target_lang,
        progress=_progress, vocab_type=FLAGS.vocab_type,
        sentencepiece_model_type=FLAGS.sentencepiece_model_type,
        sentencepiece_character_coverage=FLAGS.sentencepiece_character_coverage,
        num_workers=FLAGS.num_workers, **{f: getattr(FLAGS, f) for f in _FILE_FLAGS})
  except ValueError as e:
    print("t2t_keras_datagen: error: %s" % e, file=sys.stderr)
    return 2  # a user error (as in the trainer): unknown problem, bad flags, a failed download
  except OSError as e:  # e.g. a full disk; the unfinished split's files were removed
    hint = " (disk full: free space in %s and rerun)" % FLAGS.data_dir if (
        e.errno == errno.ENOSPC) else ""
    print("t2t_keras_datagen: error: %s%s; partial files were removed and the manifest is "
          "marked incomplete, so trainers refuse this data_dir until a rerun finishes"
          % (e, hint), file=sys.stderr)
    return 1
  print(_summary(FLAGS.problem, data_dir, result), flush=True)
  return 0


def main() -> None:
  """Console-script entry point `t2t_keras_datagen`."""
  common_flags.run_cli(lambda argv: sys.exit(run(argv)))


if __name__ == "__main__":
  main()
