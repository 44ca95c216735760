r"""t2t_keras_decoder: translate with a trained run (T2T's t2t-decoder and its flags).

  t2t_keras_decoder --problem=translate_ende_wmt32k --data_dir=$DATA \
      --output_dir=$TRAIN --decode_hparams='beam_size=4,alpha=0.6' \
      --decode_from_file=newstest2014.en --decode_to_file=out.de \
      --decode_reference=newstest2014.de

  t2t_keras_decoder --flagfile=flags/wmt14_ende_base.flags --data_dir=$DATA \
      --output_dir=$TRAIN --decode_from_file=newstest2014.en --decode_to_file=out.de

  cat news.en | t2t_keras_decoder --output_dir=$TRAIN --data_dir=$DATA \
      --decode_from_file=- > news.de

  t2t_keras_decoder --engine=ctranslate2 --compute_type=int8 --output_dir=$TRAIN \
      --data_dir=$DATA --decode_from_file=newstest2014.en --decode_to_file=out.de

decodes through CTranslate2 (`pip install -e '.[ct2]'`): the checkpoint is
converted into a temporary directory, or --ctranslate2_model_dir names a
t2t_keras_exporter --export_format=ctranslate2 directory. Same flags, files and output lines; the
beam search is CTranslate2's with T2T's length penalty applied to its n-best
(README, "CTranslate2").

--decode_from_file=- (or /dev/stdin, a pipe) reads stdin to its end, then decodes.
Without --decode_from_file it decodes the problem's dev split (test with
--eval_use_test_set) and scores it against the reference. The trainer's
flagfile may be given: the training flags in it are ignored here.

A language model's run (a problem without inputs, e.g. languagemodel_from_files)
continues prompts, as T2T's decoder did for such problems:

  t2t_keras_decoder --data_dir=data/lm --output_dir=runs/lm --decode_from_file=prompts.txt \
      --decode_to_file=continuations.txt \
      --decode_hparams='beam_size=1,sampling_method=random,sampling_temp=0.8,extra_length=30' \
      --random_seed=1

writes each prompt's continuation (the prompt not repeated), one line per input
line: greedy (beam_size=1), sampling (sampling_method=random, sampling_temp,
sampling_keep_top_k; seeded by --random_seed) or beam search (beam_size > 1,
alpha), extra_length new tokens at most. --decode_interactive continues each
line typed. --score_file=texts.txt --decode_to_file=scores.tsv writes per line
its natural-log probability and perplexity, tab-separated.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from data_gen import file_io, registry
from t2t_keras import errors
from t2t_keras.cli import common_flags, file_checks
from t2t_keras.hparams import DecodeHParams, create_decode_hparams, parse_overrides

FLAGS = flags.FLAGS

common_flags.define_experiment_flags(common_flags.TRAINED_RUN_FLAGS + (
    "decode_hparams", "decode_from_file", "decode_to_file", "decode_reference", "random_seed"))

flags.DEFINE_bool("decode_interactive", False, "Read sentences from stdin, print translations "
                  "(a language model: prompts, their continuations).")
flags.DEFINE_string("score_file", None,
                    "Score source<TAB>target pairs from this file: print log P(target|source). "
                    "A language model: one text per line; print log P(text)<TAB>perplexity.")
flags.DEFINE_string("decode_prefix_file", None,
                    "Force the start of each output: one target prefix per input line (an "
                    "empty line forces nothing); beam search continues from it and scores "
                    "count it.")
flags.DEFINE_bool("eval_use_test_set", False, "Decode the test split instead of dev.")
flags.DEFINE_bool("decode_use_cache", True, "Cached incremental decoding (else recompute).")
flags.DEFINE_bool("decode_jit_compile", None,
                  "Compile decoding with XLA (true) or not (false). Unset: XLA only where it "
                  "pays for its compilations (long files, large float32 models; never "
                  "bfloat16 nor --decode_interactive), as t2t_keras/decoding/inference_choices.py "
                  "decides and explains.")
flags.DEFINE_enum("engine", "tensorflow", ["tensorflow", "ctranslate2"],
                  "tensorflow: this project's decoder (T2T's search). ctranslate2: CTranslate2's "
                  "engine (int8 CPU inference; needs pip install -e '.[ct2]').")
flags.DEFINE_enum("compute_type", "float32", ["float32", "int8", "int8_float32"],
                  "--engine=ctranslate2 only: the weights' type (int8: quantized on load).")
flags.DEFINE_string("ctranslate2_model_dir", None,
                    "--engine=ctranslate2 only: a directory written by t2t_keras_exporter "
                    "--export_format=ctranslate2 (default: convert --output_dir's checkpoint).")


def main(argv):
  del argv
  common_flags.resolve_path_flags("data_dir", "output_dir", "checkpoint_path")
  try:  # settings, paths and input files are checked before the model loads
    # T2T's sampling settings may come in --hparams too (sampling_method=random).
    decode_hp = create_decode_hparams(FLAGS.decode_hparams, FLAGS.hparams)
  except ValueError as e:
    raise app.UsageError(f"--decode_hparams / --hparams: {e}") from None
  if common_flags.is_language_model_run():
    _decode_language_model(decode_hp)
    return
  if decode_hp.return_alignments and FLAGS.engine != "tensorflow":
    raise app.UsageError("--decode_hparams=return_alignments=true needs --engine=tensorflow "
                         "(the alignments come from its encoder-decoder attention).")
  if decode_hp.num_samples > 0 and FLAGS.decode_from_file:
    raise app.UsageError("--decode_hparams=num_samples applies to decoding the dataset "
                         "(without --decode_from_file); a file gets one output per line.")
  if FLAGS.decode_to_file:
    common_flags.check_output_file("decode_to_file", FLAGS.decode_to_file)
    # The file holds the outputs: T2T's two log lines per input only repeat them there
    # (unless asked for: --decode_hparams=log_results=true).
    if "log_results" not in parse_overrides(DecodeHParams, FLAGS.decode_hparams):
      decode_hp = decode_hp.replace(log_results=False)
  if FLAGS.score_file:
    pairs = [line.split("\t") for line in file_checks.read_input_lines(
        "score_file", FLAGS.score_file, "a file of source<TAB>target lines",
        allow_stdin=True)]
    bad = [i + 1 for i, p in enumerate(pairs) if len(p) != 2]
    if bad:
      raise app.UsageError(f"--score_file={FLAGS.score_file}: line {bad[0]} is not "
                           "source<TAB>target; give one tab-separated pair per line.")
  elif not FLAGS.decode_interactive:
    lines, reference, refs = _read_source_and_reference(decode_hp)
  prefixes = _read_prefixes(None if FLAGS.score_file or FLAGS.decode_interactive else lines)
  _check_engine_flags()
  common_flags.check_decode_hparams(decode_hp)  # those the run's model must allow
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.scoring import bleu, evalb
  run = common_flags.load_trained_run()
  problem = run.problem
  if FLAGS.engine == "ctranslate2":
    decoder = _ctranslate2_decoder(run, decode_hp)
  else:
    try:  # what the run files could not show (the loaded model's own checks)
      decoder = run.decoder(decode_hp, use_cache=FLAGS.decode_use_cache,
                            jit_compile=FLAGS.decode_jit_compile)
    except ValueError as e:
      raise app.UsageError(f"--decode_hparams / --hparams: {e}") from None
  if FLAGS.score_file:
    scores = decoder.score_pairs([p[0] for p in pairs], [p[1] for p in pairs])
    _emit([f"{s:.6f}" for s in scores])
    return
  if FLAGS.decode_interactive:
    for line in sys.stdin:
      print(decoder.decode_lines([line.rstrip("\n")])[0], flush=True)
    return
  outputs = decoder.decode_lines(lines, prefixes=prefixes)
  _emit(outputs)
  if reference:
    hyps = [o.split("\t")[0] for o in outputs]
    if problem.scoring == "parsing":  # EVALB F1 against gold trees, not BLEU
      trees = evalb.delinearize_lines(refs, hyps)
      report = evalb.evaluate(refs, trees)
      print(f"EVALB (COLLINS.prm) against {reference}: {evalb.summary_line(report)}",
            flush=True)
      report = evalb.evaluate(refs, trees, evalb.EvalbParams(gold_punctuation_tags=True))
      print(f"  with gold punctuation tags: {evalb.summary_line(report)}", flush=True)
    else:
      score, signature = bleu.corpus_bleu(hyps, refs, tokenize="intl")
      print(f"BLEU = {score:.2f}  ({signature})", flush=True)
      language = bleu.paper_language(problem.target_lang)
      if language:  # the paper's tokenized BLEU, a different number (README)
        paper = bleu.paper_bleu(hyps, refs, language=language)
        print(f"tokenized BLEU (as in the paper) = {paper.score:.2f}  "
              f"({bleu.paper_signature(language)})", flush=True)
      else:
        print(bleu.paper_not_computed(problem.target_lang), flush=True)


def _decode_language_model(decode_hp):
  """A language model's run: --decode_from_file's lines (or stdin's, with
  --decode_interactive) are prompts, each gets its continuation; --score_file's lines
  are texts, each gets its log-probability and perplexity. Every flag and input is
  checked before the model loads."""
  refused = {"decode_prefix_file": "its prompts are the prefixes",
             "decode_reference": "a continuation has no reference",
             "eval_use_test_set": "it decodes the prompts of --decode_from_file",
             "ctranslate2_model_dir": "it decodes with --engine=tensorflow",
             "compute_type": "it decodes with --engine=tensorflow"}
  for name, why in refused.items():
    if FLAGS[name].present:
      raise app.UsageError(f"--{name} does not apply to a language model ({why}).")
  if FLAGS.engine != "tensorflow":
    raise app.UsageError(f"--engine={FLAGS.engine}: a language model decodes with "
                         "--engine=tensorflow (the CTranslate2 converter maps the "
                         "encoder-decoder Transformer).")
  if not FLAGS.decode_use_cache or FLAGS.decode_jit_compile:
    raise app.UsageError("--decode_use_cache=false / --decode_jit_compile=true: a language "
                         "model decodes cached, without XLA; drop the flag.")
  if decode_hp.num_samples > 0:
    raise app.UsageError("--decode_hparams=num_samples applies to decoding a dataset; a "
                         "language model continues the prompts of --decode_from_file.")
  given = [f"--{name}" for name in ("decode_from_file", "score_file", "decode_interactive")
           if FLAGS[name].value]
  if len(given) != 1:
    raise app.UsageError(
        f"{' and '.join(given) or 'No input'}: a language model's run continues the prompts "
        "of --decode_from_file=FILE (or typed, --decode_interactive) or scores the texts of "
        "--score_file=FILE; give one of them.")
  if FLAGS.decode_to_file:
    common_flags.check_output_file("decode_to_file", FLAGS.decode_to_file)
    if "log_results" not in parse_overrides(DecodeHParams, FLAGS.decode_hparams):
      decode_hp = decode_hp.replace(log_results=False)
  lines = None
  if not FLAGS.decode_interactive:
    flag = "score_file" if FLAGS.score_file else "decode_from_file"
    what = "a text file of texts to score" if FLAGS.score_file else "a text file of prompts"
    lines = file_checks.read_input_lines(flag, FLAGS[flag].value, what + ", one per line",
                                         decode_hp.delimiter, allow_stdin=True)
  common_flags.check_decode_hparams(decode_hp)  # those of a language model
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras import lm_run
  from t2t_keras.decoding import text_rules
  run = common_flags.load_trained_run()
  arguments = lm_run.sample_arguments(decode_hp)
  if FLAGS.score_file:
    scores = run.score(lines, batch_size=arguments["batch_size"])
    _emit([f"{s.log_prob:.6f}\t{s.perplexity:.6f}" for s in scores])
    return

  def continuations(prompts):
    outputs = [text_rules.clean_output(s.text)
               for s in run.sample(prompts, seed=FLAGS.random_seed, **arguments)]
    if decode_hp.log_results:  # T2T's log_decode_results
      for prompt, output in zip(prompts, outputs):
        run.log(f"Inference results INPUT: {prompt}")
        run.log(f"Inference results OUTPUT: {output}")
    return outputs

  if FLAGS.decode_interactive:
    for line in sys.stdin:
      print(continuations([line.rstrip("\n")])[0], flush=True)
    return
  _emit(continuations(lines))


def _read_prefixes(lines):
  """--decode_prefix_file's lines, one per input line, or None."""
  if not FLAGS.decode_prefix_file:
    return None
  if lines is None:
    raise app.UsageError("--decode_prefix_file applies to decoding a file or the dataset, "
                         "not to --score_file or --decode_interactive.")
  if FLAGS.engine != "tensorflow":
    raise app.UsageError("--decode_prefix_file needs --engine=tensorflow.")
  prefixes = file_checks.read_input_lines(
      "decode_prefix_file", FLAGS.decode_prefix_file,
      "a text file of target prefixes, one per input line", allow_stdin=False)
  if len(prefixes) != len(lines):
    raise app.UsageError(
        f"--decode_prefix_file={FLAGS.decode_prefix_file} has {len(prefixes)} lines but the "
        f"input has {len(lines)}; give one prefix per input line (an empty line for none).")
  return prefixes


def _check_engine_flags():
  """CTranslate2's flags only with --engine=ctranslate2, which needs the package."""
  if FLAGS.engine != "ctranslate2":
    for name in ("compute_type", "ctranslate2_model_dir"):
      if FLAGS[name].present:
        raise app.UsageError(f"--{name} applies to --engine=ctranslate2 only.")
    return
  if "," in (FLAGS.checkpoint_path or ""):
    raise app.UsageError(f"--checkpoint_path={FLAGS.checkpoint_path} is an ensemble; "
                         "CTranslate2 decodes one model: use --engine=tensorflow.")
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.export import ctranslate2_decoder
  try:
    ctranslate2_decoder.import_ctranslate2()
  except ImportError as e:
    raise app.UsageError(f"--engine=ctranslate2: {e}") from None
  model_dir = FLAGS.ctranslate2_model_dir
  if model_dir and not os.path.isdir(model_dir):
    raise app.UsageError(f"--ctranslate2_model_dir={model_dir} is not a directory; write one "
                         "with t2t_keras_exporter --export_format=ctranslate2.")


def _ctranslate2_decoder(run, decode_hp):
  """A CTranslate2Decoder of --ctranslate2_model_dir, else of the run converted now."""
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.export import ctranslate2_model
  if FLAGS.ctranslate2_model_dir:
    try:
      return run.decoder(decode_hp, "ctranslate2", compute_type=FLAGS.compute_type,
                         ctranslate2_model_dir=FLAGS.ctranslate2_model_dir)
    except FileNotFoundError as e:
      raise app.UsageError(f"--ctranslate2_model_dir: {e}") from None
  try:
    ctranslate2_model.check_convertible(run.hparams)
  except ctranslate2_model.NotConvertibleError as e:
    raise app.UsageError(f"--engine=ctranslate2: {FLAGS.output_dir} cannot be converted: "
                         f"{e} Use --engine=tensorflow.") from None
  return run.decoder(decode_hp, "ctranslate2", compute_type=FLAGS.compute_type)


def _run_problem():
  """The problem --output_dir was trained on, read from its run files (no model built)."""
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.rundir import settings
  for name in ("data_dir", "output_dir"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  try:
    registry.import_usr_dir(FLAGS.t2t_usr_dir)
    _, problem_name, _ = settings.load_run_files(FLAGS.output_dir)
    return registry.problem(problem_name, FLAGS.data_dir)
  # No hparams.json / run.json (not a training run); a bad --t2t_usr_dir, or a problem
  # it no longer registers.
  except (FileNotFoundError, ValueError) as e:
    raise app.UsageError(str(e)) from None


def _read_source_and_reference(decode_hp):
  """(source lines, reference or None, its lines): --decode_from_file and
  --decode_reference, else the dataset's split with its reference (parsing problems:
  gold trees); num_samples applied. Checked to pair up line by line."""
  source, reference = FLAGS.decode_from_file, FLAGS.decode_reference
  if source:
    lines = file_checks.read_input_lines("decode_from_file", source,
                                         "a text file of sentences, one per line",
                                         decode_hp.delimiter, allow_stdin=True)
    label = f"--decode_from_file={source}"
  else:
    problem = _run_problem()
    split = "test" if FLAGS.eval_use_test_set else "dev"
    source = problem.text_file(FLAGS.data_dir, split, "inputs")
    if not os.path.isfile(source):
      raise app.UsageError(
          f"--data_dir={FLAGS.data_dir} has no {split} text of {problem.name} ({source} is "
          "missing); give the sentences to translate with --decode_from_file=FILE (and "
          "--decode_reference=FILE for BLEU).")
    try:
      lines = file_io.read_lines(source, decode_hp.delimiter, name="source")
    except ValueError as e:  # invalid UTF-8
      raise app.UsageError(str(e)) from None
    label = source
    if not reference:
      reference = problem.reference_file(FLAGS.data_dir, split)
      if not os.path.isfile(reference):
        raise app.UsageError(
            f"--data_dir={FLAGS.data_dir} has no {split} reference of {problem.name} "
            f"({reference} is missing); give one with --decode_reference=FILE.")
  if decode_hp.num_samples > 0:  # T2T: only the first num_samples examples of the dataset.
    lines = lines[:decode_hp.num_samples]
  refs = None
  if reference:
    refs = file_checks.read_input_lines(
        "decode_reference", reference, "a text file of reference lines, one per source line")
    if decode_hp.num_samples > 0:
      refs = refs[:decode_hp.num_samples]
    if len(refs) != len(lines):
      ref_label = f"--decode_reference={reference}" if FLAGS.decode_reference else reference
      raise app.UsageError(
          f"{ref_label} has {len(refs)} lines but {label} has "
          f"{len(lines)}; give one reference line per source line, in the same order.")
  return lines, reference, refs


def _emit(lines):
  if FLAGS.decode_to_file:
    try:  # atomic: a full disk leaves no partial file under the name
      file_io.write_lines(FLAGS.decode_to_file, lines)
    except OSError as e:
      if not errors.is_storage_error(e):
        raise
      raise errors.StorageError(
          f"no space left writing --decode_to_file={FLAGS.decode_to_file} ({e.strerror}); "
          "free some space and decode again: the file was not written.") from None
    print(f"Wrote {len(lines)} lines to {FLAGS.decode_to_file}.", file=sys.stderr, flush=True)
  else:
    for line in lines:
      print(line)


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
