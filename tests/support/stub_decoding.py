"""A stub for `decoding.decode_ids` that forces chosen subtoken ids into every output.

Output of each row = `forced` ids, then the row's own input ids (an echo, cut at its
EOS later), so a test knows the exact text and can compare decoder and SavedModel
on any input without training a model. `beam_size` beams are the same ids with
scores 0, -1, ...
"""

import tensorflow as tf

from tests.support.tiny_problem import WORDS


class NoModel:
  """What `export.ServingModule` and `TextDecoder` read from a model besides decoding."""
  variables = []


def build_vocab(path: str):
  """A small SubwordTextEncoder of the tiny problem's words, stored at `path`."""
  from data_gen import text_encoder
  text = [" ".join(WORDS), " ".join(WORDS.values())] * 5
  enc = text_encoder.SubwordTextEncoder.build_from_generator(text, 80)
  enc.store_to_file(path)
  return text_encoder.SubwordTextEncoder(path)


def forced_escape_ids(enc):
  """Ids decoding to "Haus\\nKatze\\t": a newline and a tab as the escapes `\\10;`, `\\9;`."""
  ids = (enc.encode("Haus") + enc.encode_without_tokenizing("\n") + enc.encode("Katze")
         + enc.encode_without_tokenizing("\t"))
  assert enc.decode(ids) == "Haus\nKatze\t", enc.decode(ids)
  return ids


def make_stub(forced):
  """decode_ids(model, inputs, decode_hp, ...) -> (forced + inputs, scores)."""

  def decode_ids(model, inputs, decode_hp, use_cache=True, decode_length=None, rows=None):
    del model, use_cache, decode_length, rows  # rows: the export's settings, unused here
    inputs = tf.cast(inputs, tf.int32)
    batch = tf.shape(inputs)[0]
    ids = tf.concat([tf.tile(tf.constant([forced], tf.int32), [batch, 1]), inputs], axis=1)
    scores = -tf.cast(tf.reduce_sum(tf.cast(inputs > 1, tf.int32), axis=1), tf.float32)
    if decode_hp.return_beams:
      beams = decode_hp.beam_size
      ids = tf.tile(ids[:, None], [1, beams, 1])
      scores = scores[:, None] - tf.range(beams, dtype=tf.float32)[None]
    return ids, scores

  return decode_ids
