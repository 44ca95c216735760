"""Serving benchmark: exported SavedModel vs the in-process TextDecoder, same inputs.

  python bench/bench_serving.py                      # small random-weight model + vocab
  python bench/bench_serving.py --output_dir=$TRAIN --data_dir=$DATA \
      --decode_hparams=beam_size=4,alpha=0.6

Prints latency p50/p95 at batch 1 and throughput (sentences/s) at batch 32 of:
  * SavedModel: `serving_default` of the export, as a stock TF Serving runs it
    (no XLA: `perf.portable_graph`);
  * SavedModel+XLA: the same export traced as the in-process decoder traces its
    beam search (its step's top-k compiled with XLA), which a stock server
    refuses; what serving gives up by running without XLA;
  * beam_<K> settings: the per-request-settings signature at the export's beam
    size, sent alpha, extra_length and n_best (the export's values) with every
    request; what a per-request setting costs;
  * TextDecoder: the in-process decoder.
All in one process, in turn, on the same sentences.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time

from absl import app, flags

import harness

harness.configure_process()  # as the commands do, before TensorFlow loads

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "A trained run (default: a random-weight model).")
flags.DEFINE_string("data_dir", None, "Its data_dir (vocabulary).")
flags.DEFINE_string("decode_hparams", "beam_size=4,alpha=0.6,extra_length=20", "Decode hparams.")
flags.DEFINE_integer("latency_requests", 30, "Batch-1 requests for the latency figures.")
flags.DEFINE_integer("throughput_batches", 3, "Batch-32 requests for the throughput figure.")


def _random_run(root: str):
  """A random-weight transformer_tiny and a vocab built from a few sentences."""
  import tensorflow as tf

  from data_gen import text_encoder
  from t2t_keras.hparams import create_hparams
  from t2t_keras.model import Transformer
  words = ("the a house cat dog runs sees big small red green blue and old new "
           "under over river tree").split()
  corpus = {w: 10 for w in words}
  encoder = text_encoder.SubwordTextEncoder.build_to_target_size(100, corpus, 1, 50)
  vocab = os.path.join(root, "vocab.subwords")
  encoder.store_to_file(vocab)
  encoder = text_encoder.SubwordTextEncoder(vocab)
  tf.keras.utils.set_random_seed(0)
  hp = create_hparams("transformer_tiny", "num_hidden_layers=2")
  model = Transformer(hp, encoder.vocab_size, target_space_id=0)
  model.build()
  return model, hp, {"inputs": encoder, "targets": encoder}, {"inputs": vocab,
                                                              "targets": vocab}


def _trained_run():
  import t2t_keras
  run = t2t_keras.open_run(FLAGS.output_dir, data_dir=FLAGS.data_dir)
  return run.model, run.hparams, run.encoders, run.vocab_files


def _sentences(n: int, seed: int = 0):
  import random
  rng = random.Random(seed)
  words = "the a house cat dog runs sees big small red green blue and old new".split()
  return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) for _ in range(n)]


def _measure(fn, batches):
  """(per-call seconds list) after one warm-up call."""
  fn(batches[0])
  times = []
  for batch in batches:
    start = time.perf_counter()
    fn(batch)
    times.append(time.perf_counter() - start)
  return times


def main(argv):
  del argv
  import numpy as np
  import tensorflow as tf
  import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

  from t2t_keras import perf
  from t2t_keras.decoding import text_decoder
  from t2t_keras.export import saved_model
  from t2t_keras.hparams import create_decode_hparams
  decode_hp = create_decode_hparams(FLAGS.decode_hparams)
  with tempfile.TemporaryDirectory() as root:
    if FLAGS.output_dir:
      model, hp, encoders, vocab = _trained_run()
    else:
      model, hp, encoders, vocab = _random_run(root)
    start = time.perf_counter()
    path = saved_model.export_saved_model(model, hp, decode_hp, vocab, os.path.join(root, "export"),
                                     encoders)
    export_secs = time.perf_counter() - start
    portable = perf.portable_graph
    perf.portable_graph = contextlib.nullcontext  # traced as in-process: the XLA top-k
    try:
      xla_path = saved_model.export_saved_model(model, hp, decode_hp, vocab,
                                           os.path.join(root, "export_xla"), encoders)
    finally:
      perf.portable_graph = portable
    loaded = tf.saved_model.load(path)
    serving = loaded.signatures["serving_default"]
    with_xla = tf.saved_model.load(xla_path).signatures["serving_default"]
    settings_fn = loaded.signatures[saved_model.settings_signature(decode_hp.beam_size)]
    n_best = decode_hp.beam_size if decode_hp.return_beams else 1

    def with_settings(lines):
      rows = len(lines)
      return settings_fn(inputs=tf.constant(lines),
                         alpha=tf.fill([rows], tf.constant(decode_hp.alpha, tf.float32)),
                         extra_length=tf.fill([rows], decode_hp.extra_length),
                         n_best=tf.fill([rows], n_best))["outputs"].numpy()

    decoder = text_decoder.TextDecoder(model, encoders, decode_hp.replace(batch_size=32),
                                      log=lambda line: None)
    systems = {
        "SavedModel": lambda lines: serving(inputs=tf.constant(lines))["outputs"].numpy(),
        "SavedModel+XLA": lambda lines: with_xla(inputs=tf.constant(lines))["outputs"].numpy(),
        f"beam_{decode_hp.beam_size} settings": with_settings,
        "TextDecoder": decoder.decode_lines,
    }
    single = [[s] for s in _sentences(FLAGS.latency_requests, seed=1)]
    big = [_sentences(32, seed=10 + i) for i in range(FLAGS.throughput_batches)]
    harness.print_header()
    print(f"model: {'trained ' + FLAGS.output_dir if FLAGS.output_dir else 'random tiny'}, "
          f"decode_hparams: {FLAGS.decode_hparams}, export {export_secs:.1f}s")
    print(f"{'system':<20} {'p50 ms (b=1)':>13} {'p95 ms (b=1)':>13} {'sent/s (b=32)':>14}")
    for name, fn in systems.items():
      lat = np.array(_measure(fn, single)) * 1e3
      thr = _measure(fn, big)
      rate = 32 * len(thr) / sum(thr)
      print(f"{name:<20} {np.percentile(lat, 50):>13.1f} {np.percentile(lat, 95):>13.1f} "
            f"{rate:>14.1f}", flush=True)


if __name__ == "__main__":
  app.run(main)
