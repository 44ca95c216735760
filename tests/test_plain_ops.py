"""T2T_KERAS_PLAIN_OPS: with it the layers run stock TensorFlow/Keras ops, and a run agrees.

End to end (what a user runs): tests/scripts/plain_ops_run.py trains the tiny
model 3 steps through the real t2t_keras_trainer and beam-decodes 4 sentences
(beam 4, cached, in a graph), once with T2T_KERAS_PLAIN_OPS=0 and once with =1,
same seed, float32, every dropout 0. The runs may differ only by float32
rounding, bounded as follows (unit roundoff u = 2^-24 = 6e-8):

- Losses, relative 1e-5. The cases change the order of float32 sums and the
  form of the layer norm's gradient, not the maths, so each op differs by a few
  u: the step-1 loss, a forward pass, by ~1e-7. 1e-5 is 100 times that; a plain
  path computing something else (a wrong layer norm) moves a loss by far more.
- Weights, absolute 1e-5 after 3 Adam steps of lr 0.01 and epsilon 1e-3. Adam
  steps each weight by lr * m / (sqrt(v) + eps); its derivative in the gradient g
  is at most lr * eps / (|g| + eps)^2 <= lr / eps, and for a relative gradient
  difference d the step moves by at most lr * d / 4. So a gradient difference
  delta moves a step by at most min(lr * delta / eps, lr * d / 4): with float32
  noise delta <= 6e-8 (a sum of a few hundred terms of ~1e-2 at u each) that is
  6e-7 a step, 2e-6 for 3, whatever the gradient's size. (With T2T's eps 1e-9 a
  gradient at noise level, ~1e-9, would step by +-lr / 2 with a sign set by the
  CPU's rounding.) The bound is a 3,000th of the 3 * lr = 0.03 that Adam can move
  a weight, so a plain path with a wrong gradient (steps off by ~lr) fails it.
- Decoded ids identical, scores absolute 1e-4: a score sums ~10 log-probs
  (|score| < 30) of a float32 forward pass through weights within 1e-5. The test
  accepts a sentence that decodes differently only where the search made a
  choice within twice that bound (a near-tie, tests/support/near_ties.py).
Observed on a 2-core Zen 4: losses 7e-8 relative, weights 3.6e-7, scores 1e-6.

And op by op: under the switch each layer's forward and backward trace holds
the ops of its stock Keras equivalent (no XLA call, no custom gradient, no 16-bit
random draws), and without it does not, so a case that ignores the switch fails.
"""

import collections
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import perf
from t2t_keras.decoding import inference_choices, seq2seq
from t2t_keras.hparams import create_decode_hparams, create_hparams
from t2t_keras.layers.dense import Dense
from t2t_keras.layers.dropout import Dropout
from t2t_keras.layers.embedding import SymbolModality
from t2t_keras.layers.layer_norm import LayerNorm
from t2t_keras.model import Transformer
from t2t_keras.perf import xent
from t2t_keras.training.optimization import FusedAdam
from tests.support import near_ties
from tests.support.decode_checks import id_rows, op_types, random_model
from tests.support.tiny_problem import make_tiny_problem

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_SCRIPT = os.path.join(REPO, "tests", "scripts", "plain_ops_run.py")
HP = ("num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,batch_size=128,"
      "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0,"
      "learning_rate_schedule=constant,learning_rate_constant=0.01,optimizer_adam_epsilon=1e-3")
SOURCES = ["the big house", "a small cat runs", "the red dog sees the old cat", "green and blue"]
LOSS_RTOL, WEIGHT_ATOL, SCORE_ATOL = 1e-5, 1e-5, 1e-4


# -- The switch's value ----------------------------------------------------------------------

@pytest.mark.parametrize("value, want", [(None, False), ("", False), ("0", False),
                                         ("false", False), ("1", True), (" TRUE ", True),
                                         ("yes", True), ("on", True)])
def test_plain_ops_reads_the_variable_at_each_call(monkeypatch, value, want):
  if value is None:
    monkeypatch.delenv(perf.PLAIN_OPS_ENV, raising=False)
  else:
    monkeypatch.setenv(perf.PLAIN_OPS_ENV, value)
  assert perf.plain_ops() is want


@pytest.mark.parametrize("value", ["2", "plain", "-1"])
def test_a_bad_value_names_the_variable(monkeypatch, value):
  monkeypatch.setenv(perf.PLAIN_OPS_ENV, value)
  with pytest.raises(ValueError, match=rf"T2T_KERAS_PLAIN_OPS='{value}': set it to 1"):
    perf.plain_ops()


# -- Op by op: each layer traces its stock equivalent's ops under the switch ------------------

def traced_ops(fn, x, weights):
  """(op type -> count, names of XLA-compiled functions) of fn's forward and gradient trace.

  The gradient is taken for `weights`, and for x when it is a float tensor.
  """
  floating = isinstance(x, tf.Tensor) and x.dtype.is_floating

  @tf.function
  def step(x):
    with tf.GradientTape() as tape:
      if floating:
        tape.watch(x)
      loss = tf.reduce_sum(tf.cast(fn(x), tf.float32) ** 2)
    return tape.gradient(loss, ([x] if floating else []) + weights)

  graph = step.get_concrete_function(x).graph.as_graph_def()
  ops = collections.Counter(node.op for node in graph.node)
  compiled = []
  for function in graph.library.function:
    ops.update(node.op for node in function.node_def)
    if function.attr["_XlaMustCompile"].b:
      compiled.append(function.signature.name)
  return ops, compiled


def layer_cases():
  """name -> (ours, stock): each a function of x `[2, 3, 8]` and its weights."""
  norm, stock_norm = LayerNorm(epsilon=1e-6), keras.layers.LayerNormalization(epsilon=1e-6)
  dense = Dense(4, activation="relu", dtype="mixed_bfloat16")
  stock_dense = keras.layers.Dense(4, activation="relu", dtype="mixed_bfloat16")
  drop, stock_drop = Dropout(0.3, seed=1), keras.layers.Dropout(0.3, seed=1)
  for layer in (norm, stock_norm, dense, stock_dense):
    layer.build([None, None, 8])
  modality = SymbolModality(11, 8)
  modality.build()

  def stock_logits(x):  # SymbolModality.logits with TensorFlow's matmul and gradient
    flat = tf.matmul(tf.reshape(x, [-1, 8]), modality.weights_var, transpose_b=True)
    return tf.reshape(flat, tf.concat([tf.shape(x)[:-1], [11]], 0))

  return {
      "layer_norm": ((lambda x: norm(x, training=True), [norm.gamma, norm.beta]),
                     (lambda x: stock_norm(x, training=True), [stock_norm.gamma])),
      "bias_grad": ((dense, [dense.bias]), (stock_dense, [stock_dense.bias])),
      "dropout": ((lambda x: drop(x, training=True), []),
                  (lambda x: stock_drop(x, training=True), [])),
      "tied_logits": ((modality.logits, [modality.weights_var]),
                      (stock_logits, [modality.weights_var])),
  }


@pytest.mark.parametrize("case", ["layer_norm", "bias_grad", "dropout", "tied_logits"])
def test_under_the_switch_each_layer_traces_stock_ops_only(monkeypatch, case):
  x = tf.random.stateless_normal([2, 3, 8], [0, 1])
  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "0")
  (ours, weights), (stock, stock_weights) = layer_cases()[case]
  stock_ops, _ = traced_ops(stock, x, stock_weights)
  special_ops, special_compiled = traced_ops(ours, x, weights)
  # Without the switch the case shows: a custom gradient (IdentityN), an XLA call, 16-bit draws.
  assert set(special_ops) != set(stock_ops) or special_compiled, case
  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "1")
  (ours, weights), _ = layer_cases()[case]
  plain_ops, plain_compiled = traced_ops(ours, x, weights)
  assert set(plain_ops) == set(stock_ops), (case, set(plain_ops) ^ set(stock_ops))
  assert not plain_compiled and "IdentityN" not in plain_ops and "Bitcast" not in plain_ops


def test_under_the_switch_the_loss_is_t2ts_stock_cross_entropy(monkeypatch):
  """perf.xent: without the switch an XLA kernel and a hand-written gradient; with it
  T2T's `softmax_cross_entropy_with_logits` against smoothed one-hot targets. Both
  give the same values and gradients to float32 rounding."""
  logits = tf.random.stateless_normal([3, 5, 11], [0, 2]) * 4.0
  labels = tf.constant(np.random.default_rng(1).integers(0, 11, [3, 5]), tf.int32)
  confidence, low = 0.9, 0.1 / 10

  def run():
    fn = lambda z: xent.smoothed_xent(z, labels, confidence, low)
    ops, compiled = traced_ops(fn, logits, [])
    with tf.GradientTape() as tape:
      tape.watch(logits)
      value = fn(logits)
      loss = tf.reduce_sum(value * tf.range(1.0, 16.0)[None, :5])
    return ops, compiled, value.numpy(), tape.gradient(loss, logits).numpy()

  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "0")
  _, special_compiled, special_value, special_grad = run()
  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "1")
  plain_ops, plain_compiled, plain_value, plain_grad = run()
  assert special_compiled and not plain_compiled and "IdentityN" not in plain_ops
  assert "SoftmaxCrossEntropyWithLogits" in plain_ops
  # Independent: -sum(t * log_softmax(z)) in float64.
  z = logits.numpy().astype(np.float64)
  t = np.where(np.arange(11) == labels.numpy()[..., None], confidence, low)
  log_p = z - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)) - z.max(
      -1, keepdims=True)
  want = -(t * log_p).sum(-1)
  np.testing.assert_allclose(special_value, want, rtol=1e-5)
  np.testing.assert_allclose(plain_value, want, rtol=1e-5)
  # Gradients against float64's dy * (p - t) (sum of t is 1), each within a bound that
  # holds for any summation order and exp/log within a few ulps: p = exp(z - lse) carries
  # lse's rounding (|lse| ulps), the sum of V exps ((V + 1) u), z - lse's rounding and
  # exp's own error; the softmax path, exp(z - max) / sum, has fewer. Then p - t and the
  # product with dy round once each. u = 2^-24; 8 extra ulps of slack for exp and log.
  dy = np.arange(1.0, 6.0)[None, :, None]
  lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)) + z.max(
      -1, keepdims=True)
  p = np.exp(z - lse)
  want_grad = dy * (p - t)
  u, vocab = 2.0 ** -24, z.shape[-1]
  bound = dy * p * u * (np.abs(lse) + np.abs(z - lse) + 2 * vocab + 8) + 2 * u * np.abs(
      want_grad)
  for grad in (special_grad, plain_grad):
    assert (np.abs(grad - want_grad) <= bound).all(), np.max(np.abs(grad - want_grad) / bound)


def test_under_the_switch_adam_is_keras_adam(monkeypatch):
  """perf.adam: TensorFlow's fused ApplyAdam without the switch, Keras' update with it;
  three steps agree with a NumPy Adam (T2T's formula) either way."""
  rng = np.random.default_rng(4)
  grads = [rng.normal(size=[3, 4]).astype(np.float32) for _ in range(3)]
  start = rng.normal(size=[3, 4]).astype(np.float32)
  lr, b1, b2, eps = 0.01, 0.9, 0.98, 1e-9
  m, v, want = np.zeros_like(start, np.float64), np.zeros_like(start, np.float64), start.astype(
      np.float64)
  for t, g in enumerate(grads, 1):
    m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    want = want - lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
  got = {}
  for value in ("0", "1"):
    monkeypatch.setenv(perf.PLAIN_OPS_ENV, value)
    var = keras.Variable(start)
    opt = FusedAdam(learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps)
    opt.build([var])
    step = tf.function(lambda g: opt.apply_gradients([(g, var)]))
    ops = {n.op for f in step.get_concrete_function(tf.constant(grads[0])).graph.as_graph_def(
    ).library.function for n in f.node_def} | {n.op for n in step.get_concrete_function(
        tf.constant(grads[0])).graph.as_graph_def().node}
    assert ("ResourceApplyAdam" in ops) == (value == "0"), ops
    for g in grads:
      step(tf.constant(g))
    got[value] = var.numpy()
  np.testing.assert_allclose(got["0"], want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got["1"], want, rtol=1e-5, atol=1e-6)


def test_plain_dropout_is_keras_dropout_with_the_same_seed_and_keeps_the_rate(monkeypatch):
  # Exact on every CPU: the same Philox draws and one correctly rounded multiply per element.
  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "1")
  n, rate = 1 << 20, 0.3
  x = tf.fill([n // 1024, 1024], 3.0)
  ours = Dropout(rate, seed=7)
  y = tf.function(lambda x: ours(x, training=True))(x).numpy()
  stock = keras.layers.Dropout(rate, seed=7)(x, training=True).numpy()
  np.testing.assert_array_equal(y, stock)
  dropped = y == 0.0
  assert abs(dropped.sum() - n * rate) < 6 * np.sqrt(n * rate * (1 - rate))  # Binomial(n, rate)
  np.testing.assert_allclose(y[~dropped], 3.0 / (1 - rate), rtol=1e-6)


def test_plain_training_step_with_dropout_runs_stock_random_ops(monkeypatch):
  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "1")
  tf.keras.utils.set_random_seed(3)
  hp = create_hparams("transformer_tiny", HP.replace("dropout=0", "dropout=0.3"))
  model = Transformer(hp, 30, target_space_id=2)
  model.build()
  rng = np.random.default_rng(0)
  features = {"inputs": tf.constant(rng.integers(2, 30, [4, 7]), tf.int32),
              "targets": tf.constant(rng.integers(2, 30, [4, 6]), tf.int32)}
  ops, compiled = traced_ops(lambda f: model(f, training=True), features, model.weights)
  assert ops["StatelessRandomUniformV2"] >= 5 and "Bitcast" not in ops  # stock dropouts
  assert not compiled and "IdentityN" not in ops
  loss = tf.function(lambda f: tf.reduce_mean(model(f, training=True) ** 2))
  assert loss(features).numpy() != loss(features).numpy()  # it runs, with new masks each call


def test_under_the_switch_graph_decoding_copies_buffers_and_compiles_nothing(monkeypatch):
  """perf.buffers and perf.search: a graph-mode beam search writes its key/value
  buffers in place (InplaceUpdate into Empty), reads their written prefix and runs
  its scoring step with XLA; under the switch it scatters into zeros and compiles
  nothing, and a mixed-bfloat16 model decodes as it is (perf.inference)."""
  model, hp = random_model()
  x = tf.constant(id_rows(np.random.default_rng(4), 30, [6, 4]))
  dhp = create_decode_hparams("beam_size=3,extra_length=5")
  layers = hp.num_hidden_layers

  def graph_of():
    fn = seq2seq.make_decode_fn(model, dhp).get_concrete_function(x)
    compiled = [f.signature.name for f in fn.graph.as_graph_def().library.function
                if f.attr["_XlaMustCompile"].b]
    return op_types(fn), compiled, fn(x)

  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "0")
  special, special_compiled, special_out = graph_of()
  assert special[("InplaceUpdate", "float32")] == 2 * layers and special_compiled
  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "1")
  plain, plain_compiled, plain_out = graph_of()
  assert not plain[("InplaceUpdate", "float32")] and not plain[("Empty", "")]
  assert plain[("TensorScatterUpdate", "float32")] == 2 * layers and not plain_compiled
  # Ids identical or a near-tie (tests/support/near_ties.py), scores within SCORE_ATOL.
  margin_of = near_ties.model_margin_of(model, x.numpy(), 3, dhp.alpha, 5, 30)
  near_ties.assert_equal_or_near_tie(list(plain_out[0].numpy()), list(special_out[0].numpy()),
                                     margin_of, SCORE_ATOL, "plain vs special decodes")
  same = [i for i in range(len(x)) if near_ties.same(plain_out[0][i], special_out[0][i])]
  np.testing.assert_allclose(plain_out[1].numpy()[same], special_out[1].numpy()[same],
                             atol=SCORE_ATOL)
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    mixed, _ = random_model()
  finally:
    keras.mixed_precision.set_global_policy("float32")
  assert inference_choices.inference_model(mixed) is mixed
  monkeypatch.setenv(perf.PLAIN_OPS_ENV, "0")
  assert inference_choices.inference_model(mixed) is not mixed
  assert not inference_choices.decode_with_xla(model, 10**6) or hp.hidden_size >= 512


# -- End to end: train 3 steps and beam-decode, with and without the switch ------------------

@pytest.fixture(scope="module")
def both_runs(tmp_path_factory):
  """{"0": arrays, "1": arrays} of plain_ops_run.py with T2T_KERAS_PLAIN_OPS=0 and =1."""
  root = tmp_path_factory.mktemp("plain_ops")
  data_dir = make_tiny_problem(str(root), train=200, dev=8)
  source = root / "source.txt"
  source.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
  procs = {}
  for value in ("0", "1"):  # both at once: two cores
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    env[perf.PLAIN_OPS_ENV] = value
    procs[value] = subprocess.Popen(
        [sys.executable, RUN_SCRIPT, str(root / f"out{value}.npz"), str(source),
         "--problem=translate_from_files", f"--data_dir={data_dir}",
         f"--output_dir={root / ('run' + value)}", "--hparams_set=transformer_tiny",
         f"--hparams={HP}", "--schedule=train", "--train_steps=3", "--random_seed=0",
         "--local_eval_frequency=100", "--log_every_steps=1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  runs = {"dirs": (str(root / "run0"), data_dir)}
  for value, proc in procs.items():
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output[-3000:]
    runs[value] = dict(np.load(root / f"out{value}.npz"))
  return runs


def test_losses_and_weights_agree_to_float32_rounding(both_runs):
  special, plain = both_runs["0"], both_runs["1"]
  assert special["loss"].shape == (3,)
  np.testing.assert_allclose(plain["loss"], special["loss"], rtol=LOSS_RTOL)
  weights = [k for k in special if k.startswith("w:")]
  assert weights == [k for k in plain if k.startswith("w:")] and len(weights) > 20
  diffs = {k: float(np.abs(plain[k] - special[k]).max()) for k in weights}
  worst = max(diffs, key=diffs.get)
  assert diffs[worst] <= WEIGHT_ATOL, (worst, diffs[worst])
  # The two runs did take different code (else the comparison proves nothing).
  assert diffs[worst] > 0.0


def test_beam_decodes_agree(both_runs):
  """Ids identical, or a near-tie (tests/support/near_ties.py): the runs' scores are within
  SCORE_ATOL of each other (checked), so with the special run's model as reference
  a sentence can decode differently only where its search made a choice within
  2 * SCORE_ATOL."""
  import t2t_keras  # pylint: disable=g-import-not-at-top
  special, plain = both_runs["0"], both_runs["1"]
  assert special["ids"].shape[:2] == (len(SOURCES), 4)
  run, data_dir = both_runs["dirs"]
  opened = t2t_keras.open_run(run, data_dir=data_dir)
  model, encoder = opened.model, opened.encoders["inputs"]
  rows = [encoder.encode(line) + [1] for line in SOURCES]
  margin_of = near_ties.model_margin_of(model, rows, 4, 0.6, 10, model.target_vocab_size,
                                        stop_early=False)  # all beams returned
  ties = near_ties.assert_equal_or_near_tie(list(plain["ids"]), list(special["ids"]),
                                            margin_of, SCORE_ATOL, "plain vs special beams")
  same = [i for i in range(len(SOURCES)) if near_ties.same(plain["ids"][i], special["ids"][i])]
  assert len(same) == len(SOURCES) - ties
  np.testing.assert_allclose(plain["scores"][same], special["scores"][same], rtol=0,
                             atol=SCORE_ATOL)
