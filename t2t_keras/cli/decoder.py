r"""t2t_keras_decoder: translate with a trained run (T2T's t2t-decoder and its flags).

  t2t_keras_decoder --problem=translate_ende_wmt32k --data_dir=$DATA \
      --output_dir=$TRAIN --decode_hparams='beam_size=4,alpha=0.6' \
      --decode_from_file=newstest2014.en --decode_to_file=out.de \
      --decode_reference=newstest2014.de

  t2t_keras_decoder --flagfile=flags/wmt14_ende_base.flags --data_dir=$DATA \
      --output_dir=$TRAIN --decode_from_file=newstest2014.en --decode_to_file=out.de

Without --decode_from_file it decodes the problem's dev split (test with
--eval_use_test_set) and scores it against the reference. The trainer's
flagfile may be given: the training flags in it are ignored here.
"""

from __future__ import annotations

import sys

from absl import app, flags

FLAGS = flags.FLAGS
from t2t_keras.cli import common_flags  # noqa: E402

common_flags.define_experiment_flags(common_flags.TRAINED_RUN_FLAGS + (
    "decode_hparams", "decode_from_file", "decode_to_file", "decode_reference"))

flags.DEFINE_bool("decode_interactive", False, "Read sentences from stdin, print translations.")
flags.DEFINE_string("score_file", None,
                    "Score source<TAB>target pairs from this file: print log P(target|source).")
flags.DEFINE_bool("eval_use_test_set", False, "Decode the test split instead of dev.")
flags.DEFINE_bool("decode_use_cache", True, "Cached incremental decoding (else recompute).")
flags.DEFINE_bool("decode_jit_compile", None,
                  "Compile decoding with XLA (true) or not (false). Unset: XLA for float32 "
                  "decoding of a file of at least 2,000 lines by a model of hidden_size >= "
                  "512, with input lengths padded to a few sizes; otherwise (bfloat16, small "
                  "models, short files, --decode_interactive) no XLA.")


def main(argv):
  del argv
  from data_gen import file_io
  from t2t_keras import bleu, decode_text, evalb
  from t2t_keras.hparams import create_decode_hparams
  try:  # settings and the output path are checked before the model loads
    # T2T's sampling settings may come in --hparams too (sampling_method=random).
    decode_hp = create_decode_hparams(FLAGS.decode_hparams, FLAGS.hparams)
  except ValueError as e:
    raise app.UsageError(f"--decode_hparams / --hparams: {e}") from None
  if decode_hp.num_samples > 0 and FLAGS.decode_from_file:
    raise app.UsageError("--decode_hparams=num_samples applies to decoding the dataset "
                         "(without --decode_from_file); a file gets one output per line.")
  if FLAGS.decode_to_file:
    common_flags.check_output_file("decode_to_file", FLAGS.decode_to_file)
  model, _, problem, encoders = common_flags.load_trained_run()
  decoder = decode_text.TextDecoder(
      model, encoders, decode_hp, use_cache=FLAGS.decode_use_cache,
      jit_compile=FLAGS.decode_jit_compile, log=lambda line: print(line, file=sys.stderr,
                                                                   flush=True))
  if FLAGS.score_file:
    pairs = [line.split("\t") for line in file_io.read_lines(FLAGS.score_file,
                                                              name="--score_file")]
    bad = [i + 1 for i, p in enumerate(pairs) if len(p) != 2]
    if bad:
      raise app.UsageError(f"{FLAGS.score_file}: line {bad[0]} is not source<TAB>target.")
    scores = decoder.score_pairs([p[0] for p in pairs], [p[1] for p in pairs])
    _emit([f"{s:.6f}" for s in scores])
    return
  if FLAGS.decode_interactive:
    for line in sys.stdin:
      print(decoder.decode_lines([line.rstrip("\n")])[0], flush=True)
    return
  # Parsing problems are scored with EVALB F1 against gold trees, not BLEU.
  parsing = hasattr(problem, "gold_trees_file")
  source, reference = FLAGS.decode_from_file, FLAGS.decode_reference
  if not source:
    split = "test" if FLAGS.eval_use_test_set else "dev"
    source = problem.text_file(FLAGS.data_dir, split, "inputs")
    reference = reference or (problem.gold_trees_file(FLAGS.data_dir, split) if parsing
                              else problem.text_file(FLAGS.data_dir, split, "targets"))
  lines = file_io.read_lines(source, decode_hp.delimiter, name="source")
  if decode_hp.num_samples > 0:  # T2T: only the first num_samples examples of the dataset.
    lines = lines[:decode_hp.num_samples]
  outputs = decoder.decode_lines(lines)
  _emit(outputs)
  if reference:
    refs = file_io.read_lines(reference, name="reference")
    if decode_hp.num_samples > 0:
      refs = refs[:decode_hp.num_samples]
    if len(refs) != len(outputs):
      raise app.UsageError(f"{reference} has {len(refs)} lines, {source} has {len(outputs)}.")
    hyps = [o.split("\t")[0] for o in outputs]
    if parsing:
      trees = evalb.delinearize_lines(refs, hyps)
      report = evalb.evaluate(refs, trees)
      print(f"EVALB (COLLINS.prm) against {reference}: {evalb.summary_line(report)}",
            flush=True)
      report = evalb.evaluate(refs, trees, evalb.EvalbParams(gold_punctuation_tags=True))
      print(f"  with gold punctuation tags: {evalb.summary_line(report)}", flush=True)
    else:
      score, signature = bleu.corpus_bleu(hyps, refs, tokenize="intl")
      print(f"BLEU = {score:.2f}  ({signature})", flush=True)
      language = bleu.paper_language(getattr(problem, "target_lang", ""))
      if language:  # the paper's tokenized BLEU, a different number (README)
        paper = bleu.paper_bleu(hyps, refs, language=language)
        print(f"tokenized BLEU (as in the paper) = {paper.score:.2f}  "
              f"({bleu.paper_signature(language)})", flush=True)


def _emit(lines):
  if FLAGS.decode_to_file:
    from data_gen import file_io
    file_io.write_lines(FLAGS.decode_to_file, lines)
    print(f"Wrote {len(lines)} lines to {FLAGS.decode_to_file}.", file=sys.stderr, flush=True)
  else:
    for line in lines:
      print(line)


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
