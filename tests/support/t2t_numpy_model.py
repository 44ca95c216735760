"""T2T's transformer forward pass in NumPy, read straight from a T2T checkpoint.

An independent expectation for the importer: it takes tensors by T2T's own
variable names (`tf.train.load_checkpoint`, or `from_tensors`) and T2T's hparams dict, and
computes what T2T's `Transformer` computes in inference mode (dropout off),
in float64:

  symbol bottom: gather rows of the concatenated `weights_<i>` shards, × sqrt(d)
    (multiply_embedding_mode "sqrt_depth"), PAD (id 0) rows zero;
  encoder input += target_space_embedding[space id]; + concatenated sinusoids
    (`get_timing_signal_1d`, [sin | cos], exponent i / (d/2 - 1));
  each sublayer: postprocess(x, f(preprocess(x))) with T2T's sequences
    ("n" layer norm eps norm_epsilon, "a" residual, "d" identity at inference);
  attention: q, k, v, output_transform without bias, q scaled by
    depth_per_head^-0.5, -1e9 bias on padded keys / future positions;
  relative self-attention (self_attention_type "dot_product_relative", T2T's
    `dot_product_attention_relative`): tables `relative_positions_keys` and
    `relative_positions_values` indexed by clip(j - i, -max, max) + max
    (`_generate_relative_positions_matrix`); logits += q · keys_table[rel]
    and output += weights · values_table[rel] (`_relative_attention_inner`),
    for encoder and decoder self-attention only; pos None adds no sinusoid;
  FFN: relu(x W1 + b1) W2 + b2; final preprocess after each stack;
  decoder input: targets embedded and shifted right (a zero vector first);
  logits = body @ softmax_weights^T.

Nothing here imports t2t_keras.
"""

import re
from typing import Callable, Dict

import numpy as np
import tensorflow as tf

NEG = -1e9


def timing_signal(length: int, channels: int, min_timescale=1.0, max_timescale=1.0e4):
  """`[length, channels]`: T2T's concatenated [sin | cos] position signal."""
  position = np.arange(length, dtype=np.float64)
  half = channels // 2
  increment = np.log(max_timescale / min_timescale) / max(half - 1, 1)
  inv = min_timescale * np.exp(np.arange(half, dtype=np.float64) * -increment)
  scaled = position[:, None] * inv[None, :]
  signal = np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)
  return np.pad(signal, [[0, 0], [0, channels % 2]])


class T2TNumpyTransformer:
  """T2T's transformer from a checkpoint's tensors.

  Args:
    checkpoint_path: a TF1 checkpoint prefix with T2T's names.
    hparams: T2T's hparams dict (hparams.json values).
    target_space_id: the row of `target_space_embedding` added to the inputs.
  """

  def __init__(self, checkpoint_path: str, hparams: Dict, target_space_id: int):
    reader = tf.train.load_checkpoint(checkpoint_path)
    self._setup({name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
                 if name.startswith("transformer/")}, hparams, target_space_id)

  @classmethod
  def from_tensors(cls, tensors: Dict[str, np.ndarray], hparams: Dict, target_space_id: int = 0):
    """The model of `tensors` named as in a T2T checkpoint (T2T's name -> array)."""
    model = cls.__new__(cls)
    model._setup(tensors, hparams, target_space_id)
    return model

  def _setup(self, tensors, hparams, target_space_id):
    self.t = {name: np.asarray(value, np.float64) for name, value in tensors.items()}
    self.hp = dict(hparams)
    self.d = self.hp["hidden_size"]
    self.heads = self.hp["num_heads"]
    self.space = target_space_id
    self.tables = {}
    shards = {}
    for name in self.t:
      m = re.match(r"transformer/symbol_modality_\d+_\d+/(\w+)/weights_(\d+)$", name)
      if m:
        shards.setdefault(m.group(1), {})[int(m.group(2))] = self.t[name]
    for role, parts in shards.items():
      self.tables[role] = np.concatenate([parts[i] for i in range(len(parts))], axis=0)
    shared_all = self.hp.get("shared_embedding_and_softmax_weights")
    shared_emb = shared_all or self.hp.get("shared_embedding", False)
    # A model without inputs (T2T's language model) has no input embedding.
    self.input_table = self.tables.get("shared" if shared_emb else "input_emb")
    self.target_table = self.tables["shared" if shared_emb else "target_emb"]
    self.softmax_table = self.tables["shared" if shared_all else "softmax"]

  # -- pieces ------------------------------------------------------------------

  def bottom(self, table, ids):
    x = table[ids]
    if self.hp.get("multiply_embedding_mode", "sqrt_depth") == "sqrt_depth":
      x = x * self.d ** 0.5
    return x * (ids != 0)[..., None]

  def layer_norm(self, scope, x):
    scale, bias = self.t[scope + "/layer_norm_scale"], self.t[scope + "/layer_norm_bias"]
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + self.hp["norm_epsilon"]) * scale + bias

  def prepost(self, scope, sequence, previous, x):
    if sequence == "none":
      return x
    norms = 0
    for op in sequence:
      if op == "a":
        x = x + previous
      elif op == "n":
        x = self.layer_norm(f"{scope}/layer_norm" + (f"_{norms}" if norms else ""), x)
        norms += 1
    return x

  def pre(self, scope, x):
    return self.prepost(scope + "/layer_prepostprocess", self.hp["layer_preprocess_sequence"],
                        None, x)

  def post(self, scope, previous, y):
    return self.prepost(scope + "/layer_postprocess", self.hp["layer_postprocess_sequence"],
                        previous, y)

  def _relative_tables(self, scope, length):
    """Self-attention of a relative model: (keys, values) `[l, l, depth]`, else None."""
    if self.hp.get("self_attention_type", "dot_product") != "dot_product_relative" or \
        not scope.endswith("/self_attention"):
      return None
    m = self.hp["max_relative_position"]
    position = np.arange(length)
    rel = np.clip(position[None, :] - position[:, None], -m, m) + m  # [query, key]
    base = f"{scope}/multihead_attention/dot_product_attention_relative"
    return tuple(self.t[f"{base}/relative_positions_{kind}/embeddings"][rel]
                 for kind in ("keys", "values"))

  def attention(self, scope, x, memory, bias):
    """x `[n, lq, d]`, memory `[n, lk, d]`, bias broadcastable to `[n, h, lq, lk]`."""
    w = lambda p: self.t[f"{scope}/multihead_attention/{p}/kernel"]
    q, k, v = x @ w("q"), memory @ w("k"), memory @ w("v")
    split = lambda a: a.reshape(a.shape[0], a.shape[1], self.heads, -1).transpose(0, 2, 1, 3)
    q, k, v = split(q), split(k), split(v)
    q = q * q.shape[-1] ** -0.5
    relative = self._relative_tables(scope, x.shape[1])
    logits = q @ k.transpose(0, 1, 3, 2) + bias
    if relative is not None:
      logits = logits + np.einsum("nhid,ijd->nhij", q, relative[0])
    logits = logits - logits.max(-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(-1, keepdims=True)
    out = weights @ v
    if relative is not None:
      out = out + np.einsum("nhij,ijd->nhid", weights, relative[1])
    out = out.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], -1)
    return out @ w("output_transform")

  def position_signal(self, length):
    """T2T's `pos`: "timing" (default) adds the sinusoid; None (transformer_relative) nothing."""
    if self.hp.get("pos", "timing") is None:
      return 0.0
    return timing_signal(length, self.d)

  def ffn(self, scope, x):
    h = np.maximum(x @ self.t[scope + "/conv1/kernel"] + self.t[scope + "/conv1/bias"], 0)
    return h @ self.t[scope + "/conv2/kernel"] + self.t[scope + "/conv2/bias"]

  def sublayer(self, scope, x, fn):
    return self.post(scope, x, fn(self.pre(scope, x)))

  def _layers(self, kind):
    return self.hp.get(f"num_{kind}_layers") or self.hp["num_hidden_layers"]

  # -- model -------------------------------------------------------------------

  def encode(self, inputs):
    """inputs int `[n, l]` (0-padded) -> (encoder output `[n, l, d]`, bias `[n, 1, 1, l]`)."""
    inputs = np.asarray(inputs)
    x = self.bottom(self.input_table, inputs)
    bias = (inputs == 0)[:, None, None, :] * NEG
    if self.hp.get("use_target_space_embedding", True):
      x = x + self.t["transformer/body/target_space_embedding/kernel"][self.space]
    x = x + self.position_signal(inputs.shape[1])
    for i in range(self._layers("encoder")):
      scope = f"transformer/body/encoder/layer_{i}"
      x = self.sublayer(f"{scope}/self_attention", x,
                        lambda y, s=scope: self.attention(f"{s}/self_attention", y, y, bias))
      x = self.sublayer(f"{scope}/ffn", x, lambda y, s=scope: self.ffn(f"{s}/ffn", y))
    return self.pre("transformer/body/encoder", x), bias

  def decode(self, decoder_ids, encoder_output, bias, self_bias=None):
    """decoder_ids `[n, t]` (already shifted: 0 first) -> logits `[n, t, vocab]`.

    encoder_output None: T2T's model without inputs (no encoder-decoder
    attention). self_bias: default the causal lower triangle.
    """
    decoder_ids = np.asarray(decoder_ids)
    length = decoder_ids.shape[1]
    x = self.bottom(self.target_table, decoder_ids) + self.position_signal(length)
    causal = np.triu(np.full([length, length], NEG), 1)[None, None]
    causal = causal if self_bias is None else self_bias
    for i in range(self._layers("decoder")):
      scope = f"transformer/body/decoder/layer_{i}"
      x = self.sublayer(f"{scope}/self_attention", x,
                        lambda y, s=scope: self.attention(f"{s}/self_attention", y, y, causal))
      if encoder_output is not None:
        x = self.sublayer(f"{scope}/encdec_attention", x, lambda y, s=scope: self.attention(
            f"{s}/encdec_attention", y, encoder_output, bias))
      x = self.sublayer(f"{scope}/ffn", x, lambda y, s=scope: self.ffn(f"{s}/ffn", y))
    x = self.pre("transformer/body/decoder", x)
    return x @ self.softmax_table.T

  def logits(self, inputs, targets):
    """Teacher-forced logits `[n, t, vocab]` for 0-padded inputs and targets `[n, t]`."""
    targets = np.asarray(targets)
    shifted = np.pad(targets, [[0, 0], [1, 0]])[:, :-1]
    return self.decode(shifted, *self.encode(inputs))

  def log_prob(self, inputs, targets):
    """Sum over non-pad target positions of log P(target | source): `[n]`."""
    logits = self.logits(inputs, targets)
    logits = logits - logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    targets = np.asarray(targets)
    picked = np.take_along_axis(logp, targets[..., None], -1)[..., 0]
    return (picked * (targets != 0)).sum(-1)

  def logits_fn(self, inputs) -> Callable[[np.ndarray], np.ndarray]:
    """For one source `[l]`: prefix `[n, t]` (sos 0 first) -> next-token logits `[n, vocab]`."""
    encoder_output, bias = self.encode(np.asarray(inputs)[None])

    def fn(prefix):
      prefix = np.asarray(prefix)
      n = prefix.shape[0]
      memory = np.repeat(encoder_output, n, axis=0)
      return self.decode(prefix, memory, np.repeat(bias, n, axis=0))[:, -1]

    return fn
