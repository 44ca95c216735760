"""Matmul FLOPs of the Transformer, the cost measure of the paper's Table 2.

Counts 2 FLOPs per multiply-add of every matmul actually executed on a padded
batch (projections, attention scores and mixes, FFN, softmax); element-wise ops
are ignored. A training step costs three forward passes (forward, and the two
matmuls of the backward pass per forward matmul).
"""

from __future__ import annotations

from t2t_keras.hparams import HParams


def _relative_factor(hp: HParams) -> int:
  """2 for relative self-attention: it also multiplies the queries by the key
  embeddings and the weights by the value embeddings of every attended position."""
  return 2 if hp.self_attention_type == "dot_product_relative" else 1


def forward_flops(hp: HParams, target_vocab_size: int, batch: int, input_length: int,
                  target_length: int, has_inputs: bool = True) -> float:
  """Forward-pass matmul FLOPs of one padded batch `[batch, input/target_length]`;
  without inputs (a language model) no encoder nor encoder-decoder attention."""
  d, f, kc, vc = hp.hidden_size, hp.filter_size, hp.key_channels, hp.value_channels
  src, tgt = batch * input_length, batch * target_length
  projections = 2 * d * kc + 2 * d * vc  # q, k, v, output_transform
  ffn = 2 * d * f
  relative = _relative_factor(hp)
  encoder = hp.encoder_layers * src * (projections + ffn +
                                       relative * input_length * (kc + vc))
  decoder = hp.decoder_layers * (
      tgt * (projections + relative * target_length * (kc + vc))  # self-attention
      + float(has_inputs) * (tgt * (d * kc + vc * d + input_length * (kc + vc))  # enc-dec q, out
                             + src * (d * kc + d * vc))         # enc-dec k, v
      + tgt * ffn)
  softmax = tgt * d * target_vocab_size
  return 2.0 * (encoder + decoder + softmax)


def training_flops(hp: HParams, target_vocab_size: int, batch: int, input_length: int,
                   target_length: int, has_inputs: bool = True) -> float:
  return 3.0 * forward_flops(hp, target_vocab_size, batch, input_length, target_length,
                             has_inputs)


def decode_flops(hp: HParams, target_vocab_size: int, batch: int, input_length: int,
                 steps: int, beam_size: int = 1) -> float:
  """Matmul FLOPs of one cached decode of `[batch, input_length]` inputs.

  As run by `decoding.decode_ids` under XLA: the encoder once; encoder-decoder
  keys and values once per item; then `steps` steps over `batch * beam_size`
  rows, each attending to the input and to its item's whole fixed-size
  self-attention buffer of `steps * beam_size` positions (the beams of an item
  share it; positions of other beams and unwritten ones are masked, not
  skipped). Without XLA each step reads only the buffer's written prefix, so
  the graph path does fewer self-attention FLOPs than counted here.
  """
  d, f, kc, vc = hp.hidden_size, hp.filter_size, hp.key_channels, hp.value_channels
  src, rows = batch * input_length, batch * beam_size
  relative = _relative_factor(hp)
  encoder = hp.encoder_layers * src * (2 * d * kc + 2 * d * vc + 2 * d * f +
                                       relative * input_length * (kc + vc))
  encdec_kv = hp.decoder_layers * src * (d * kc + d * vc)
  per_row_step = hp.decoder_layers * (
      2 * d * kc + 2 * d * vc + relative * steps * beam_size * (kc + vc)  # self-attention
      + d * kc + vc * d + input_length * (kc + vc)               # enc-dec q, output, scores
      + 2 * d * f) + d * target_vocab_size
  return 2.0 * (encoder + encdec_kv + rows * steps * per_row_step)
