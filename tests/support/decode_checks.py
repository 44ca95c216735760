"""Small random Transformers, rows of random ids, and the decoding checks run on them.

Used by the decoding tests and by those of the features that must decode alike
(relative attention, plain ops).
"""

import collections

import numpy as np
import tensorflow as tf

from t2t_keras.decoding import seq2seq
from t2t_keras.hparams import create_hparams
from t2t_keras.model import Transformer
from tests.support import near_ties
from tests.support.tolerances import SCORE_EPS


def random_model(vocab=30, overrides=""):
  """A built two-layer transformer_tiny from random seed 1 (plus `overrides`): (model, hp)."""
  tf.keras.utils.set_random_seed(1)
  hp = create_hparams("transformer_tiny", "num_hidden_layers=2" + overrides)
  model = Transformer(hp, vocab, target_space_id=2)
  model.build()
  return model, hp


def id_rows(rng, vocab, lengths):
  """int32 `[len(lengths), max(lengths)]`: random ids each row ending in EOS, 0-padded."""
  rows = [list(rng.integers(2, vocab, size=n - 1)) + [1] for n in lengths]
  width = max(lengths)
  return np.array([r + [0] * (width - len(r)) for r in rows], np.int32)


def assert_cached_logits_equal_recomputation(model, x, steps=8):
  """Each step's logits with the cache equal those recomputed from the whole prefix."""
  enc, bias = model.encode(x)
  slow_state = seq2seq.initial_state(model, enc, bias, steps, use_cache=False)
  fast_state = model.init_decoding_state(enc, bias, steps)
  ids = np.zeros([x.shape[0], steps + 1], np.int32)
  fast_fn = seq2seq.make_symbols_to_logits_fn(model, True)
  slow_fn = seq2seq.make_symbols_to_logits_fn(model, False)
  for i in range(steps):
    fast, fast_state = fast_fn(tf.constant(ids), i, fast_state)
    slow, _ = slow_fn(tf.constant(ids), i, slow_state)
    np.testing.assert_allclose(fast.numpy(), slow.numpy(), atol=1e-5)
    ids[:, i + 1] = np.argmax(fast.numpy(), -1)


def assert_batch_equals_alone(fn, x, margin_of):
  """Each row decoded in the batch equals it decoded alone (ids, then only padding),
  or is a near-tie (tests/support/near_ties.py; margin_of: its `model_margin_of`)."""
  batch_ids, batch_scores = fn(tf.constant(x))
  alone = [fn(tf.constant(x[row:row + 1, :np.count_nonzero(x[row])])) for row in range(len(x))]
  near_ties.assert_decodes_equal_or_near_tie(
      (batch_ids, batch_scores), ([a[0][0].numpy() for a in alone],
                                  [a[1][0].numpy() for a in alone]),
      margin_of, SCORE_EPS, "batch vs alone")


def op_types(concrete) -> collections.Counter:
  """(op type, dtype attr T) counts of a traced function and of every function it
  calls (loop bodies)."""
  graph_def = concrete.graph.as_graph_def()
  nodes = list(graph_def.node)
  for function in graph_def.library.function:
    nodes.extend(function.node_def)
  def dtype(node):
    code = node.attr["T"].type if "T" in node.attr else 0  # 0: no single-type T
    return tf.dtypes.as_dtype(code).name if code else ""

  return collections.Counter((node.op, dtype(node)) for node in nodes)
