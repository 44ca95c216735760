"""The beam step's scoring and top-k compiled with XLA when the search itself is not.

`beam_search.top_log_prob_extensions`'s log-sum-exp is the one element-wise
pass of a step over all `beam * vocab` logits. TensorFlow's own element-wise
kernels are built for a baseline x86 ISA; XLA generates code for the host CPU
and fuses the max, exp and sum (on a 2-core Sapphire Rapids these TensorFlow
ops were ~11% of a bfloat16 beam-search step's op time; compiled, the step ran
6% faster). A graph-mode search thus runs this one small cluster with XLA,
compiled once per batch size, while the model keeps TensorFlow's oneDNN
kernels. Under XLA, eagerly, plain (`T2T_KERAS_PLAIN_OPS=1`) and in a portable
graph (the SavedModel: `perf.portable_graph`) it runs as it is.
"""

from __future__ import annotations

from typing import Callable, Dict

import tensorflow as tf

from t2t_keras import perf
from t2t_keras.perf.buffers import in_xla_context

_compiled: Dict[Callable, Callable] = {}


def compiled_extensions(extensions: Callable, logits: tf.Tensor, parent_log_probs: tf.Tensor,
                        k: int) -> tuple:
  """`extensions(logits, parent_log_probs, k)`, XLA-compiled in a graph-mode search."""
  if (perf.plain_ops() or perf.in_portable_graph() or in_xla_context() or
      tf.executing_eagerly()):
    return extensions(logits, parent_log_probs, k)
  if extensions not in _compiled:
    _compiled[extensions] = tf.function(extensions, jit_compile=True)
  return _compiled[extensions](logits, parent_log_probs, k)
