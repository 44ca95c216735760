"""T2T's language model and prepend mode in NumPy (float64), beside t2t_numpy_model.py.

Written from T2T's source, not from t2t_keras:

  model without inputs (`transformer.py` `body` with has_input false): no
    encoder; `transformer_prepare_decoder` shifts the embedded targets right and
    adds the timing signal, with the causal lower-triangle bias; each decoder
    layer is self-attention then FFN (`transformer_self_attention_layer` skips
    encdec attention when encoder_output is None);
  `preprocess_example_common` with prepend_mode (not PREDICT): targets =
    concat(inputs, [0], targets), inputs keeping their EOS;
  `attention_bias_prepend_inputs_full_attention(padding)`: in_target = exclusive
    cumsum of padding, target_pos = cumsum(in_target), -1e9 where
    target_pos[key] > target_pos[query];
  `weights_prepend_inputs_to_targets(labels)`: cumsum(labels == 0) * labels != 0;
  `smoothing_cross_entropy`: soft targets (1 - ls at the label, ls / (V - 1)
    elsewhere) minus the normalizing constant, summed with the weights.

Nothing here imports t2t_keras.
"""

from typing import Dict

import numpy as np

from tests.support.t2t_numpy_model import NEG, T2TNumpyTransformer


class T2TNumpyLM(T2TNumpyTransformer):
  """T2T's Transformer on a problem without inputs, from T2T-named tensors."""

  def logits(self, targets):  # pylint: disable=arguments-differ
    """Teacher-forced logits `[n, t, vocab]` of 0-padded targets `[n, t]`."""
    targets = np.asarray(targets)
    shifted = np.pad(targets, [[0, 0], [1, 0]])[:, :-1]
    return self.decode(shifted, None, None)

  def log_prob(self, targets):  # pylint: disable=arguments-differ
    """Sum over non-pad positions of log P(target): `[n]`."""
    targets = np.asarray(targets)
    logp = log_softmax(self.logits(targets))
    picked = np.take_along_axis(logp, targets[..., None], -1)[..., 0]
    return (picked * (targets != 0)).sum(-1)


def log_softmax(logits):
  logits = logits - logits.max(-1, keepdims=True)
  return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def prepend_inputs(inputs_rows, targets_rows):
  """T2T's prepended targets of each example: inputs (with EOS), 0, targets (with EOS)."""
  return [list(i) + [0] + list(t) for i, t in zip(inputs_rows, targets_rows)]


def full_attention_bias(targets):
  """`[n, 1, t, t]` bias of prepend_inputs_full_attention from unshifted targets `[n, t]`."""
  padding = (np.asarray(targets) == 0).astype(np.float64)
  in_target = np.cumsum(padding, axis=1) - padding  # exclusive
  target_pos = np.cumsum(in_target, axis=1)
  illegal = target_pos[:, None, :] > target_pos[:, :, None]  # [n, query, key]
  return (illegal * NEG)[:, None]


def weights_prepend_inputs_to_targets(labels):
  labels = np.asarray(labels)
  past_first_zero = np.cumsum(labels == 0, axis=1)
  return ((past_first_zero * labels) != 0).astype(np.float64)


def smoothed_loss(logits, labels, label_smoothing: float, weights) -> Dict[str, float]:
  """T2T's padded_cross_entropy numerator and denominator with `weights`."""
  labels = np.asarray(labels)
  vocab = logits.shape[-1]
  confidence = 1.0 - label_smoothing
  low = (1.0 - confidence) / (vocab - 1)
  normalizing = -(confidence * np.log(confidence) + (vocab - 1) * low * np.log(low + 1e-20))
  soft = np.full(logits.shape, low)
  np.put_along_axis(soft, labels[..., None], confidence, -1)
  xent = -(soft * log_softmax(logits)).sum(-1) - normalizing
  return {"num": float((xent * weights).sum()), "den": float(weights.sum())}
