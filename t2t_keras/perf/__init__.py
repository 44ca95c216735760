"""Every speed special case of the project, and one switch that turns them all off.

Each case is a named function in a module of this package; the layers, searches
and commands call it and hold no speed logic of their own. Each has a plain
equivalent, stock TensorFlow/Keras, taken instead when `plain_ops()` is true:
set `T2T_KERAS_PLAIN_OPS=1` to bisect a numerical difference, or to see what a
case buys (`tests/test_plain_ops.py` trains and beam-decodes both ways and
states how far they may differ). Figures are the measured gain of the case on
its own; the CPU classes are those of `docs/performance.md`.

| case (function) | applies when | measured gain | benchmark |
|---|---|---|---|
| `layer_norm.fused_layer_norm`: T2T's layer norm as one XLA kernel forward and one hand-written backward | training (`training=True`), any dtype | forward + backward at 64×32×512: float32 1.42×, mixed bfloat16 1.20× (Zen 5) | `bench/bench_layer_norm.py` |
| `tied_logits.tied_logits_matmul`: the shared embedding's softmax gradient as `x^T·dy`, no transpose of the table | float32, hidden ≤ 512, shared embedding and softmax | forward + backward at 2048×512×32,768: 1.32× (Zen 5) | `bench/bench_tied_logits.py` |
| `xent.smoothed_xent`: the label-smoothed cross-entropy in closed form, one XLA kernel forward and one backward, no `[tokens, vocab]` targets | training and evaluation loss, any dtype | TensorFlow's cross-entropy kernel was 9% of a mixed bfloat16 transformer_base step (AMX) | `bench/bench_train.py` |
| `adam.fused_adam_update`: Adam's update of a variable as TensorFlow's fused `ApplyAdam` kernel (T2T's), in place | every Adam step (dense gradients, no AMSGrad) | one pass over the variable instead of a dozen element-wise ops with a temporary each | `bench/bench_train.py` |
| `bias_grad.bias_add`: `Dense`'s bias gradient summed with float32 accumulation | bfloat16 compute dtype, training | accuracy: largest error 0.33 → 0.0034 of the column sum (bfloat16's rounding 0.0039); 0.27 against 0.44 ms at 2048×512 (Zen 4) | `bench/bench_bias_grad.py` |
| `dropout.dropout`: two 16-bit draws per 32-bit random word | training with a dropout rate > 0 | half the random-number work (the generator was 12% of a mixed bfloat16 transformer_base step, AMX); rate exact to 2^-17 in bfloat16 | `bench/bench_train.py` |
| `buffers.new_buffer`, `buffers.write_rows`, `buffers.written_prefix`: decoding's key/value buffers written in place, and attention reading only the written prefix | cached decoding in a graph (not eager, not XLA) | no copy of the buffers per step; the prefix read instead of the whole masked buffer | `bench/bench_decode.py` |
| `search.compiled_extensions`: the beam step's log-softmax and top-k compiled with XLA | beam search in a graph (not eager, not XLA, not a portable graph) | 6% of a mixed bfloat16 beam step (AMX) | `bench/bench_decode.py` |
| `inference.inference_model`: a mixed-bfloat16 model decodes through a twin holding bfloat16 weights, built by `model_factory.build_model(dtype="bfloat16")` | the decoder and the BLEU eval hook decoding a `mixed_bfloat16` model (the SavedModel keeps the mixed model) | 1.10× (Zen 5), 1.54× (AMX) decoding sentences/s | `bench/bench_decode_bound.py` |
| `inference.decode_with_xla`, `inference.xla_length`: XLA for long float32 decodes, input lengths padded to buckets | decoding with `--decode_jit_compile` unset, float32, hidden ≥ 512, ≥ 2,000 lines | worst case float32 XLA 3.0-3.6× Model Garden against 2.1× for the graph (Zen 4, Zen 5) | `bench/bench_decode.py` |
| `process.enable_onednn`: TensorFlow's oneDNN kernels on every x86-64 CPU | every command, unless `TF_ENABLE_ONEDNN_OPTS` is set | transformer_base step 1.4× on AVX2-only CPUs | `bench/bench_vs_model_garden.py` |
| `process.keep_freed_memory`: glibc keeps freed blocks below 32 MiB for reuse | training under glibc, unless the user set malloc thresholds | 50-67 thousand page faults a float32 transformer_base step → 1,000-1,800 (Zen 5) | `bench/bench_train.py` |

A graph traced to run in another process (the SavedModel, `portable_graph()`)
takes no case that needs XLA: a stock `tensorflow_model_server` disables XLA at
start-up, and a function marked for XLA then fails. Its other cases are ops
with GPU kernels for the dtypes they run in.

Importing this package does not import TensorFlow (`process` runs before it loads).
"""

from __future__ import annotations

import contextlib
import os
import threading

from t2t_keras import old_paths

PLAIN_OPS_ENV = "T2T_KERAS_PLAIN_OPS"

_tracing = threading.local()  # tf.function traces in the calling thread


@contextlib.contextmanager
def portable_graph():
  """Functions traced inside run elsewhere (a SavedModel): no case that needs XLA.

  TF Serving's model server calls `tensorflow::DisableXlaCompilation()` unless
  started with `--xla_cpu_compilation_enabled=true`, so a `jit_compile`
  function in an export would fail every request there.
  """
  depth = getattr(_tracing, "portable", 0)
  _tracing.portable = depth + 1
  try:
    yield
  finally:
    _tracing.portable = depth


def in_portable_graph() -> bool:
  """Whether the caller traces inside `portable_graph()`."""
  return getattr(_tracing, "portable", 0) > 0


def step_compiles_per_shape(jit_compile: bool) -> bool:
  """Whether a train or eval step holds XLA, which compiles once per input shape.

  It does under `jit_compile`, and otherwise through the fused layer norm and
  cross-entropy unless `plain_ops()`; the input pipeline then pads batches to
  their bucket's length (`inputs.make_dataset(pad_to_bucket=True)`).
  """
  return bool(jit_compile) or not plain_ops()


def plain_ops() -> bool:
  """Whether every case takes stock TensorFlow/Keras ops (`T2T_KERAS_PLAIN_OPS=1`).

  Read at each call, so at trace time: a model or search traced with the
  switch on keeps stock ops in that trace.
  """
  value = os.environ.get(PLAIN_OPS_ENV, "").strip().lower()
  if value in ("", "0", "false", "no", "off"):
    return False
  if value in ("1", "true", "yes", "on"):
    return True
  raise ValueError(f"{PLAIN_OPS_ENV}={os.environ[PLAIN_OPS_ENV]!r}: set it to 1 to use "
                   "stock TensorFlow/Keras ops everywhere, or 0 (or unset it) for the "
                   "special cases listed in t2t_keras/perf/__init__.py.")


def __getattr__(name):
  # inference, moved to decoding.inference_choices in 1.0, for one release.
  return old_paths.package_getattr(__name__, name)
