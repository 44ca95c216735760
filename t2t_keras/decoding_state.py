"""The state a decoding loop carries between steps, and the Transformer's layout of it.

Every decoding loop (`beam_search.beam_search`, `sampling.greedy_search`,
`sampling.sample`) drives one callable

    symbols_to_logits_fn(ids, i, state) -> (logits, state)

with a `DecodingState` of three parts, told apart by how the loop treats them:

* `per_beam`: tensors with one row per hypothesis. Beam search is given them
  as `[batch, ...]`, tiles them to `[batch * beam_size, ...]` (item-major rows:
  `row = item * beam_size + beam`) and reorders them with the beams every step.
* `per_item`: fixed while decoding and the same for every beam of an item (the
  encoded inputs). Handed to the fn at every step, never carried through the
  loop nor reordered; what the fn returns in its place is ignored.
* `in_place`: tensors of any shapes that the fn updates and the loop never
  reorders, e.g. key/value buffers into which each beam slot writes its own
  entries (then a small `per_beam` table says which entries are whose).

Greedy and sampling decoding have one hypothesis per item and reorder nothing.
Each part is any nest of tensors, `()` when unused; shapes stay fixed across
steps so the loops compile with XLA.

The Transformer's layout, built by `DecodingState.init` and advanced by
`begin_step` (`Transformer.decode_step` is the fn):

* cached decoding: `per_item` = `Memory(bias, layers)`, the encoder-decoder
  bias and each decoder layer's encoder-decoder keys/values, one row per item;
  `in_place` = one `KeyValue` of self-attention buffers per decoder layer,
  `[items, heads, decode_length * beams, depth / heads]`: beam slot `s` writes
  step `i` at position `i * beams + s` of its item's buffers; `per_beam` (beam
  search only) = the history, bool `[rows, decode_length, beams]`:
  `history[row, t, s]` says that position `t` of this row's hypothesis is the
  entry slot `s` wrote at step `t`. Reordering that table with the beams
  replaces copying every buffer each step.
* uncached decoding (T2T's slow path, the decoder re-run over the prefix):
  `per_item` = `Memory(bias, encoder_output=...)` with one row per hypothesis;
  nothing else.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Tuple

import tensorflow as tf

from t2t_keras.perf.buffers import new_buffer


class KeyValue(NamedTuple):
  """Keys and values of one attention layer, split into heads.

  k: `[items, heads, length, key_depth / heads]`.
  v: `[items, heads, length, value_depth / heads]`.
  """
  k: tf.Tensor
  v: tf.Tensor


class Memory(NamedTuple):
  """What the decoder reads of the encoded inputs; fixed while decoding.

  bias: encoder-decoder attention bias, float32 `[items, 1, 1, input_length]`.
  layers: cached decoding: each decoder layer's encoder-decoder keys and values
    (`KeyValue` of `[items, heads, input_length, depth / heads]`).
  encoder_output: uncached decoding: `[items, input_length, hidden]`.
  """
  bias: tf.Tensor
  layers: Tuple[KeyValue, ...] = ()
  encoder_output: Any = ()

  def repeat(self, beams: int) -> "Memory":
    """Each row repeated `beams` times: one row per hypothesis, item-major."""
    return tf.nest.map_structure(lambda t: tf.repeat(t, beams, axis=0), self)


class DecodingState(NamedTuple):
  """What a decoding loop hands to `symbols_to_logits_fn` and takes back.

  See the module docstring for the three parts and the Transformer's layout.
  """
  per_beam: Any = ()
  per_item: Any = ()
  in_place: Any = ()

  @classmethod
  def init(cls, memory: Memory, decode_length, beams: int = 1) -> "DecodingState":
    """The Transformer's state before step 0 of cached decoding.

    Args:
      memory: `Memory(bias, layers)`, one row per item.
      decode_length: steps (positions) the self-attention buffers hold.
      beams: hypotheses per item sharing the item's buffers (beam search);
        > 1 adds the history table.

    Returns:
      zero buffers shaped like `memory.layers` with `decode_length * beams`
      positions, and with beams > 1 an all-False history
      `[items, decode_length, beams]`.
    """
    items = tf.shape(memory.bias)[0]

    def empty(t):  # [items, heads, input_length, depth] -> same with the buffer length
      return new_buffer([items, t.shape[1], decode_length * beams, t.shape[3]], t.dtype)

    buffers = tuple(KeyValue(empty(kv.k), empty(kv.v)) for kv in memory.layers)
    history = tf.zeros([items, decode_length, beams], tf.bool) if beams > 1 else ()
    return cls(per_beam=history, per_item=memory, in_place=buffers)

  def begin_step(self, i) -> Tuple["DecodingState", tf.Tensor]:
    """Marks step `i` in the history; says what step `i` may attend to.

    Args:
      i: scalar int32, the step (position) being written.

    Returns:
      (the state with step `i` marked, bool `visible`): in beam search
      `[items, 1, beams, decode_length * beams]` (the beams of an item are the
      queries of its row, keys position-major: the entries each hypothesis's
      history marks, its own step `i` included); otherwise
      `[1, 1, 1, decode_length]`, True up to position `i`.
    """
    if isinstance(self.per_beam, tuple):  # one hypothesis per item
      length = tf.shape(self.in_place[0].k)[2]
      return self, (tf.range(length) <= i)[None, None, None, :]
    history = self.per_beam
    beams = history.shape[2]
    rows, length = tf.shape(history)[0], tf.shape(history)[1]
    own_slot = tf.equal(tf.range(rows)[:, None] % beams, tf.range(beams))  # [rows, beams]
    written = tf.logical_and(own_slot[:, None, :], tf.equal(tf.range(length), i)[:, None])
    history = tf.logical_or(history, written)  # [rows, length, beams]
    visible = tf.reshape(history, [rows // beams, 1, beams, length * beams])
    return self._replace(per_beam=history), visible

  def replace(self, **parts) -> "DecodingState":
    """A copy with the given parts replaced."""
    return self._replace(**parts)
