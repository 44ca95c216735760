"""How decoding runs fast: a bfloat16 twin of a mixed-bfloat16 model, and when to use XLA.

The twin. A "mixed_bfloat16" model keeps float32 weights and casts each to
bfloat16 at every use: in a decoding loop every step re-casts every weight (the
32k x 512 embedding too), which cost more thread time than the matmuls on a
2-core Sapphire Rapids. Decoding therefore runs a twin built by
`model_factory.build_model(..., dtype="bfloat16")` holding the same weights cast once;
its layer norms keep float32 scale and offset as in mixed precision
(`layers.layer_norm.LayerNorm`), so run op by op it gives the mixed model's
logits bit for bit; in a graph the mixed model's casts are fused into its
kernels and the two agree to bfloat16 rounding. Worst-case decoding ran 1.10x
(Zen 5) and 1.54x (AMX) faster (`bench/bench_decode_bound.py`).

XLA. XLA compiles once per input shape, so under XLA input lengths are padded
to `XLA_LENGTH_BUCKETS`: a file compiles a handful of times, at most 1.5x the
tokens of the longest input in a batch (decoding stops each sentence at its own
length anyway). The automatic choice (the decoder's `--decode_jit_compile`
unset), from measurements on a 2-core Zen 4 (docs/performance.md): XLA only for
float32 models of at least AUTO_XLA_MIN_HIDDEN_SIZE decoding at least
AUTO_XLA_MIN_LINES lines. A transformer_base batch of 32 decodes about 2 s
faster with XLA but each input shape compiles for about 14 s, so XLA pays after
roughly 2,000 lines; for transformer_tiny the decoder took 20.7 s for the
demo's 968 test lines with XLA against 12.9 s without (2-core Zen 5). Interactive and short inputs never wait for a
compilation. Never for bfloat16: XLA's CPU dots compute bfloat16 at the float32
rate, where TensorFlow's oneDNN kernels use the CPU's native bfloat16.

Plain (`T2T_KERAS_PLAIN_OPS=1`): the model decodes as it is, and XLA only when
asked for.
"""

from __future__ import annotations

from typing import Any, Optional

import tensorflow as tf

from t2t_keras import perf
from t2t_keras.decoding import ensemble
from t2t_keras.rundir import model_factory, settings

XLA_LENGTH_BUCKETS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
AUTO_XLA_MIN_LINES = 2000
AUTO_XLA_MIN_HIDDEN_SIZE = 512


def inference_dtype(model: Any) -> Optional[str]:
  """The dtype policy of the model decoding runs in `model`'s place, or None for `model` itself."""
  policy = getattr(model, "dtype_policy", None)  # stand-ins of tests may have none
  if perf.plain_ops() or policy is None or policy.name != "mixed_bfloat16":
    return None
  return "bfloat16"


def inference_model(model: Any) -> Any:
  """The model that decoding runs: `model`, or its twin of `inference_dtype` (weights
  copied); an ensemble's each member so."""
  if isinstance(model, ensemble.Ensemble):
    twins = [inference_model(m) for m in model.members]
    same = all(t is m for t, m in zip(twins, model.members))
    return model if same else ensemble.Ensemble(twins)
  dtype = inference_dtype(model)
  if dtype is None:
    return model
  spec = settings.ModelSpec(model.input_vocab_size, model.target_vocab_size,
                           model.target_space_id)
  twin = model_factory.build_model(model.hparams, spec, dtype=dtype, name=model.name)
  if [v.path for v in twin.weights] != [v.path for v in model.weights]:
    raise ValueError("the bfloat16 twin's variables differ from the model's: "
                     f"{[v.path for v in twin.weights][:5]}... vs "
                     f"{[v.path for v in model.weights][:5]}...")
  copy_weights(model, twin)
  return twin


def copy_weights(model: Any, twin: Any) -> None:
  """Casts `model`'s current weights into its `inference_model` twin (a snapshot:
  a model that trains on must be copied again before the twin decodes)."""
  if isinstance(model, ensemble.Ensemble):
    for member, member_twin in zip(model.members, twin.members):
      if member_twin is not member:
        copy_weights(member, member_twin)
    return
  for source, target in zip(model.weights, twin.weights):
    target.assign(tf.cast(source.value, target.dtype))


def xla_length(length: int) -> int:
  """The padded length of a batch whose longest input has `length` ids, under XLA."""
  for bucket in XLA_LENGTH_BUCKETS:
    if length <= bucket:
      return bucket
  return -(-length // 256) * 256


def decode_with_xla(model: Any, lines: int) -> bool:
  """Whether decoding `lines` lines is faster with XLA (the automatic choice; see above)."""
  if perf.plain_ops():
    return False
  return lines >= AUTO_XLA_MIN_LINES and all(
      m.hparams.hidden_size >= AUTO_XLA_MIN_HIDDEN_SIZE and
      m.dtype_policy.compute_dtype == "float32" for m in ensemble.members(model))
