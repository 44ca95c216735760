"""flops.training_flops against the matmuls TensorFlow actually runs.

The independent count traces the model (and its gradient) into a graph with
static shapes and sums 2*M*N*K over every MatMul / BatchMatMul op, reading the
shapes and transpose flags from the graph itself.
"""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.hparams import create_hparams
from t2t_keras.model import Transformer
from t2t_keras.perf import flops
from t2t_keras.training import losses

BATCH, INPUT_LENGTH, TARGET_LENGTH, VOCAB = 2, 5, 7, 13

MATMUL_OPS = {"MatMul": ("transpose_a", "transpose_b"),
              "BatchMatMul": ("adj_x", "adj_y"),
              "BatchMatMulV2": ("adj_x", "adj_y"),
              "BatchMatMulV3": ("adj_x", "adj_y")}


def _graph_matmul_flops(graph: tf.Graph) -> float:
  """2 * M * N * K summed over the matmul ops of `graph` (and its function library)."""
  total = 0.0
  graphs = [graph] + [f.graph for f in getattr(graph, "_functions", {}).values()
                      if hasattr(f, "graph")]
  for g in graphs:
    for op in g.get_operations():
      if op.type == "Einsum":
        raise AssertionError("Einsum ops are not counted by this test; extend it.")
      if op.type not in MATMUL_OPS:
        continue
      a, b = (t.shape.as_list() for t in op.inputs[:2])
      assert None not in a + b, f"{op.name} has a dynamic shape {a} x {b}"
      ta, tb = (op.get_attr(name) for name in MATMUL_OPS[op.type])
      m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
      n = b[-2] if tb else b[-1]
      assert (b[-1] if tb else b[-2]) == k
      out = op.outputs[0].shape.as_list()
      batch = int(np.prod(out[:-2])) if len(out) > 2 else 1
      total += 2.0 * batch * m * n * k
  return total


def _model(hp):
  model = Transformer(hp, VOCAB, VOCAB)
  model.build()
  return model


def _features():
  rng = np.random.default_rng(0)
  return {"inputs": tf.constant(rng.integers(1, VOCAB, (BATCH, INPUT_LENGTH)), tf.int32),
          "targets": tf.constant(rng.integers(1, VOCAB, (BATCH, TARGET_LENGTH)), tf.int32)}


HPARAMS = [
    "hidden_size=8,filter_size=12,num_heads=2,num_hidden_layers=2",
    # Key and value depths differ from hidden_size; encoder and decoder depths differ.
    ("hidden_size=8,filter_size=20,num_heads=2,num_encoder_layers=1,num_decoder_layers=3,"
     "attention_key_channels=4,attention_value_channels=6"),
    # Relative self-attention: its embedding matmuls count like the scores and mix.
    ("hidden_size=8,filter_size=12,num_heads=2,num_encoder_layers=1,num_decoder_layers=2,"
     "self_attention_type=dot_product_relative,max_relative_position=2"),
]


@pytest.mark.parametrize("overrides", HPARAMS)
def test_forward_flops_equal_graph_matmuls(overrides):
  hp = create_hparams("transformer_base", overrides)
  model = _model(hp)
  graph = tf.function(lambda f: model(f, training=False)).get_concrete_function(
      _features()).graph
  want = _graph_matmul_flops(graph)
  assert want > 0
  got = flops.forward_flops(hp, VOCAB, BATCH, INPUT_LENGTH, TARGET_LENGTH)
  assert got == pytest.approx(want, rel=1e-12)


def test_training_flops_equal_forward_and_backward_graph_matmuls():
  hp = create_hparams("transformer_base", HPARAMS[1])
  model = _model(hp)

  def step(features):
    with tf.GradientTape() as tape:
      logits = model(features, training=True)
      num, _ = losses.padded_cross_entropy(logits, features["targets"], 0.1)
    return tape.gradient(num, model.trainable_variables)

  graph = tf.function(step).get_concrete_function(_features()).graph
  want = _graph_matmul_flops(graph)
  got = flops.training_flops(hp, VOCAB, BATCH, INPUT_LENGTH, TARGET_LENGTH)
  assert got == pytest.approx(want, rel=1e-12)


def test_forward_flops_hand_count():
  # hidden 4, filter 6, one layer each side, batch 1, lengths 2 (source) and 3 (target).
  hp = create_hparams("transformer_base",
                      "hidden_size=4,filter_size=6,num_heads=1,num_hidden_layers=1")
  enc = 2 * (4 * 16 + 2 * 24 + 2 * 8)          # q,k,v,o; ffn; scores + mix
  dec = (3 * (4 * 16 + 3 * 8)                  # self-attention
         + 3 * (2 * 16 + 2 * 8) + 2 * (2 * 16)  # enc-dec: q,o, scores+mix; k,v of memory
         + 3 * 2 * 24)                          # ffn
  softmax = 3 * 4 * 10
  assert flops.forward_flops(hp, 10, 1, 2, 3) == 2.0 * (enc + dec + softmax)
  assert flops.training_flops(hp, 10, 1, 2, 3) == 6.0 * (enc + dec + softmax)


@pytest.mark.parametrize("overrides", HPARAMS[1:])
def test_decode_flops_equal_graph_matmuls_of_encode_and_steps(overrides):
  # decode_ids = encode + encoder-decoder keys/values once, then `steps` decode_steps
  # over batch * beam rows; all buffers keep one row per item, the history one per beam.
  hp = create_hparams("transformer_base", overrides)
  model = _model(hp)
  beam, steps = 3, 6
  inputs = _features()["inputs"]

  def prepare(inputs):
    encoder_output, bias = model.encode(inputs, training=False)
    return model.init_decoding_state(encoder_output, bias, steps, beams=beam)

  once = _graph_matmul_flops(tf.function(prepare).get_concrete_function(inputs).graph)
  state = prepare(inputs)
  state = state.replace(per_beam=tf.repeat(state.per_beam, beam, axis=0))
  ids = tf.zeros([BATCH * beam], tf.int32)
  # Traced for XLA, which attends to the whole buffer (the graph path reads only
  # the written prefix, of a length known only when it runs).
  step_graph = tf.function(lambda ids, s: model.decode_step(ids, tf.constant(2), s),
                           jit_compile=True).get_concrete_function(ids, state).graph
  per_step = _graph_matmul_flops(step_graph)
  assert once > 0 and per_step > 0
  got = flops.decode_flops(hp, VOCAB, BATCH, INPUT_LENGTH, steps, beam)
  assert got == pytest.approx(once + steps * per_step, rel=1e-12)
