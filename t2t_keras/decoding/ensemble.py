"""An ensemble of trained Transformers that decodes as one model.

The ensemble's next-token logits are the mean of its members' log-probabilities,

    logits_E(y) = (1 / M) * sum_m log p_m(y | prefix, inputs),

so its distribution is their normalised geometric mean (softmax of the mean), the
product-of-experts rule (Marian's default ensemble is the same up to the
normalisation, which does not change a step's ranking). Every search and scoring
function takes an `Ensemble` where it takes a `Transformer`: beam search,
greedy and sampling (`decoding.decode_ids`), scoring (`decoding.score_targets`:
log P(target) under the ensemble's distribution), the cached fast path (each
member keeps its own encoder memory and self-attention buffers) and the
uncached one, and the SavedModel export (one SavedModel holding every member).

Members may differ in size and hparams; they must share the vocabulary (the
inputs are encoded once, the ids the search extends are every member's), which
`check_same_vocabulary` enforces by name; either all or none of them prepend
their inputs (`prepend_mode`: the search forces the inputs first for every member).
An ensemble of one model is that model (`ensemble([m]) is m`): same logits, same
decodes, bit for bit.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import tensorflow as tf

from t2t_keras.decoding_state import DecodingState


class Ensemble:
  """Members decoded together; the decoding interface of `model.Transformer`.

  Args:
    members: two or more Transformers with one target vocabulary size.
  """

  def __init__(self, members: Sequence):
    members = list(members)
    if len(members) < 2:
      raise ValueError(f"an Ensemble needs at least two members, got {len(members)}; "
                       "use ensemble(models) to get a lone model back as it is.")
    each = [(m.input_vocab_size, m.target_vocab_size) for m in members]
    sizes = set(each)
    if len(sizes) > 1:
      raise ValueError("ensemble members need one vocabulary; their (input, target) "
                       f"vocabulary sizes are {each}.")
    prepend = [m.hparams.prepend_mode != "none" for m in members]
    if len(set(prepend)) > 1:
      modes = [m.hparams.prepend_mode for m in members]
      raise ValueError("ensemble members must all prepend their inputs (hparams.prepend_mode) "
                       f"or none of them: their prepend_modes are {modes}; decoding forces "
                       "the inputs and a 0 first for the ones that do.")
    self.members = members
    self.input_vocab_size, self.target_vocab_size = sizes.pop()
    self.name = "ensemble_of_" + "_".join(m.name for m in members)

  @property
  def hparams(self):
    """The first member's hparams (what the decoder's checks of a run read)."""
    return self.members[0].hparams

  @property
  def variables(self) -> List[tf.Variable]:
    return [v for m in self.members for v in m.variables]

  @property
  def weights(self) -> List:
    return [w for m in self.members for w in m.weights]

  def _mean_log_probs(self, logits: Sequence[tf.Tensor]) -> tf.Tensor:
    """Members' logits `[..., vocab]` -> the mean of their log-softmax, float32."""
    return tf.add_n([tf.nn.log_softmax(tf.cast(x, tf.float32)) for x in logits]) / len(logits)

  # -- what decoding.py and score_targets call ---------------------------------

  def __call__(self, features: Dict[str, tf.Tensor], training=None) -> tf.Tensor:
    """Teacher-forced: features {"inputs", "targets"} -> logits_E
    `[batch, target_length, vocab]`."""
    return self._mean_log_probs([m(features, training=training) for m in self.members])

  def encode(self, inputs, training=None) -> Tuple[tuple, tuple]:
    """inputs `[batch, length]` -> (each member's encoder output, each member's bias)."""
    encoded = [m.encode(inputs, training=training) for m in self.members]
    return tuple(e for e, _ in encoded), tuple(b for _, b in encoded)

  def decode(self, targets, encoder_output: tuple, encdec_bias: tuple,
             training=None) -> tf.Tensor:
    """Uncached: targets `[batch, length]` -> logits_E `[batch, length, vocab]`."""
    return self._mean_log_probs([
        m.decode(targets, e, b, training=training)
        for m, e, b in zip(self.members, encoder_output, encdec_bias)])

  def init_decoding_state(self, encoder_output: tuple, encdec_bias: tuple, decode_length,
                          beams: int = 1) -> DecodingState:
    """Each member's `init_decoding_state`, part by part: a `DecodingState` whose
    per_beam, per_item and in_place are tuples with one entry per member."""
    states = [m.init_decoding_state(e, b, decode_length, beams)
              for m, e, b in zip(self.members, encoder_output, encdec_bias)]
    return DecodingState(per_beam=tuple(s.per_beam for s in states),
                         per_item=tuple(s.per_item for s in states),
                         in_place=tuple(s.in_place for s in states))

  def decode_step(self, ids, i, state: DecodingState) -> Tuple[tf.Tensor, DecodingState]:
    """One cached step of every member on its own state -> (logits_E `[rows, vocab]`,
    the state after step i)."""
    logits, states = [], []
    for m, per_beam, per_item, in_place in zip(self.members, state.per_beam,
                                               state.per_item, state.in_place):
      x, s = m.decode_step(ids, i, DecodingState(per_beam, per_item, in_place))
      logits.append(x)
      states.append(s)
    return self._mean_log_probs(logits), DecodingState(
        per_beam=tuple(s.per_beam for s in states), per_item=state.per_item,
        in_place=tuple(s.in_place for s in states))


def ensemble(models: Sequence):
  """The model that decodes `models` together: the lone model itself, else an `Ensemble`."""
  models = list(models)
  if not models:
    raise ValueError("ensemble() needs at least one model.")
  return models[0] if len(models) == 1 else Ensemble(models)


def members(model) -> List:
  """The Transformers a decodable model is made of: an ensemble's members, else [model]."""
  return list(model.members) if isinstance(model, Ensemble) else [model]


def check_same_vocabulary(names: Sequence[str], encoders: Sequence[Dict]) -> None:
  """Refuses members whose input or target vocabularies differ.

  Args:
    names: one label per member (its run or checkpoint), for the message.
    encoders: per member {"inputs": encoder, "targets": encoder}.
  Raises:
    ValueError: one line naming the side, both members and their sizes.
  """
  def subwords(encoder):
    return list(getattr(encoder, "all_subtoken_strings", None) or  # subwords
                getattr(encoder, "pieces", None) or  # SentencePiece's
                [encoder.decode([i]) for i in range(encoder.vocab_size)])

  for side in ("targets", "inputs"):
    first = subwords(encoders[0][side])
    for name, enc in zip(names[1:], encoders[1:]):
      other = subwords(enc[side])
      if other != first:
        raise ValueError(
            f"ensemble members need the same vocabulary: the {side} vocabulary of {name} "
            f"({len(other)} subwords) differs from that of {names[0]} ({len(first)} "
            "subwords); ensemble only runs trained on one problem's vocabulary.")
