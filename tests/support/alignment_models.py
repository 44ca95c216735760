"""Hand-built Transformers whose cross-attention is known, for the alignment tests.

Two kinds of hand-set Transformer. Every sublayer's output projection (and the FFN's
second layer) is zero, so each layer's input is the model's input embedding and
every decoder layer reads the same queries:

* positions: embeddings zero, sinusoid positions. Encoder output and decoder
  queries are the layer-normed timing signals; the only decoder layer's q and k
  projections are c * identity. Layer-normed vectors have one norm (up to the
  epsilon), so by Cauchy-Schwarz target position i attends most to source position i.
* tokens: no positions, token id k embedded as [h_k, h_k] (h_k row k of a 16 x 16
  Hadamard matrix: zero mean, unit variance, so layer norm keeps it). Each head
  sees one half; its query map sends h_i to sum_j l_j * h_sigma_j(i) / 4, so it adds
  exactly l_j to the logit of each source position holding token sigma_j(i). A
  target position t >= 1 reads token t-1 (shift right); position 0 reads the zero
  vector, whose uniform attention ties and goes to source 0.

`numpy_position_attention` and `numpy_token_attention` recompute the attention in
NumPy from the weights set here.
"""

import math

import keras
import numpy as np

from data_gen.text_encoder import EOS_ID
from t2t_keras.hparams import create_hparams
from t2t_keras.model import Transformer
from tests.support.t2t_numpy_model import timing_signal

D = 32  # hidden size
M = D // 2  # depth per head of the token models (two heads)
EPS = 1e-6  # norm_epsilon
POSITION_C = 4.0
COMMON = "filter_size=16,layer_prepostprocess_dropout=0.0,attention_dropout=0.0,relu_dropout=0.0"


def _build(overrides, vocab_size, policy):
  keras.mixed_precision.set_global_policy(policy)
  try:
    model = Transformer(create_hparams("transformer_tiny", f"hidden_size={D},{COMMON},"
                                       + overrides), vocab_size)
    model.build()
  finally:
    keras.mixed_precision.set_global_policy("float32")
  for layer in model.encoder.layers_ + model.decoder.layers_:
    for attention in ("self_attention", "encdec_attention"):
      if hasattr(layer, attention):
        _set(getattr(layer, attention).output_transform.kernel, 0.0)
    _set(layer.ffn.conv2.kernel, 0.0)
    _set(layer.ffn.conv2.bias, 0.0)
  return model


def _set(variable, value):
  variable.assign(np.broadcast_to(np.asarray(value, np.float32), variable.shape))


def _layer_norm(x):
  x = x - x.mean(-1, keepdims=True)
  return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + EPS)


def _softmax(logits):
  e = np.exp(logits - logits.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


# -- The position model ------------------------------------------------------------

def position_model(vocab_size=20, policy="float32"):
  """One layer, one head: target position i attends most to source position i."""
  model = _build("num_heads=1,num_hidden_layers=1", vocab_size, policy)
  _set(model.input_modality.weights_var, 0.0)  # shared with the targets
  _set(model.target_space_embedding.embeddings, 0.0)
  attention = model.decoder.layer_0.encdec_attention
  _set(attention.q.kernel, POSITION_C * np.eye(D))
  _set(attention.k.kernel, np.eye(D))
  return model


def numpy_position_attention(inputs, target_length):
  """`[target_length, input_length]` for one 0-padded input row."""
  inputs = np.asarray(inputs)
  keys = _layer_norm(timing_signal(len(inputs), D))
  queries = _layer_norm(timing_signal(target_length, D))
  logits = POSITION_C * queries @ keys.T / math.sqrt(D) + np.where(inputs == 0, -1e9, 0.0)
  return _softmax(logits)


# -- The token models --------------------------------------------------------------

def hadamard(n):
  h = np.ones([1, 1])
  while h.shape[0] < n:
    h = np.block([[h, h], [h, -h]])
  return h


H = hadamard(M)
SOURCE_TOKENS = range(2, 7)
IDENTITY = {}
SIGMA_A = {2: 3, 3: 4, 4: 5, 5: 6, 6: 2}
SIGMA_B = {2: 5, 3: 6, 4: 2, 5: 3, 6: 4}
SHARP, SOFT = 20.0, math.log(2.0)


def query_map(terms):
  """`[M, M]` sending h_i to sum of logit / sqrt(M) * h_sigma(i) over (logit, sigma) terms."""
  out = np.zeros([M, M])
  for logit, sigma in terms:
    p = np.eye(M)
    for i, j in sigma.items():
      p[i] = np.eye(M)[j]
    out += logit / math.sqrt(M) * H.T @ p @ H / M
  return out


def token_model(layers, policy="float32"):
  """layers: per decoder layer, per head (two), the (logit, sigma) terms of its query map."""
  model = _build(f"num_heads=2,num_hidden_layers={len(layers)},pos=none,"
                 "use_target_space_embedding=false", M, policy)
  table = np.concatenate([H, H], axis=1) / math.sqrt(D)  # embed() multiplies by sqrt(D)
  _set(model.input_modality.weights_var, table)
  for layer, heads in zip(model.decoder.layers_, layers):
    q = np.zeros([D, D])
    for h, terms in enumerate(heads):
      q[h * M:(h + 1) * M, h * M:(h + 1) * M] = query_map(terms)
    _set(layer.encdec_attention.q.kernel, q)
    _set(layer.encdec_attention.k.kernel, np.eye(D))
  return model


def numpy_token_attention(layers, inputs, targets, layer, heads):
  """`[target_length, input_length]` for one row, from the maps `token_model(layers)` set."""
  inputs, targets = np.asarray(inputs), np.asarray(targets)
  table = np.concatenate([H, H], axis=1)
  keys = _layer_norm(table[inputs]) * (inputs != 0)[:, None]  # PAD: zero embedding
  shifted = np.concatenate([[0], targets[:-1]])
  queries = _layer_norm(table[shifted]) * (shifted != 0)[:, None]
  spec = layers[layer]
  weights = []
  for h in range(heads or len(spec)):
    q = queries[:, h * M:(h + 1) * M] @ query_map(spec[h])
    logits = q @ keys[:, h * M:(h + 1) * M].T / math.sqrt(M)
    weights.append(_softmax(logits + np.where(inputs == 0, -1e9, 0.0)))
  return np.mean(weights, axis=0)


HEADS_SPEC = [
    [[(SHARP, SIGMA_A)], [(SHARP, SIGMA_A)]],  # layer 0: both heads sigma_a
    [[(SOFT, IDENTITY)], [(SHARP, SIGMA_B)]],  # layer 1: a soft identity and a sharp sigma_b
]
# Source token v of row 0 is at position v - 2, of row 1 at 6 - v; row 2 repeats tokens
# (ties go to the first) and pads the other rows by two.
INPUTS = [[2, 3, 4, 5, 6, EOS_ID], [6, 5, 4, 3, 2, EOS_ID, 0, 0], [2, 3, 4, 5, 6, 2, 3, EOS_ID]]
OUTPUTS = [[4, 2, 6, 3, 5, EOS_ID], [3, 3, 2], [2, 6, 2, EOS_ID, 0]]
# Hand-computed: target t >= 1 reads OUTPUTS[t-1] = v and goes to the source position of
# v (identity), sigma_a(v) or sigma_b(v).
WANT = {
    "identity": ["0-0 2-1 0-2 4-3 1-4", "0-0 3-1 3-2", "0-0 0-1 4-2"],
    "sigma_a": ["0-0 3-1 1-2 0-3 2-4", "0-0 2-1 2-2", "0-0 1-1 0-2"],
    "sigma_b": ["0-0 0-1 3-2 2-3 4-4", "0-0 0-1 0-2", "0-0 3-1 2-2"],
}
