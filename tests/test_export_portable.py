"""The SavedModel runs where TF Serving runs it: no XLA, and a GPU kernel for every op of
the decode loop.

A stock `tensorflow_model_server` disables XLA at start-up, so a function marked for
XLA (`_XlaMustCompile`, what `tf.function(jit_compile=True)` writes) fails every
request there. On a GPU server an op without a GPU kernel for its dtype runs on the
host: inside the decode loop that copies the key/value buffers to the host and back
at every step. Both are read statically from the export's `saved_model.pb`, the
kernels from the registry of the installed TensorFlow, which is the CUDA build
(`t2t_keras/perf/gpu_kernels.py`), for float32, mixed-bfloat16 and mixed-float16 exports, with
the speed cases on and with `T2T_KERAS_PLAIN_OPS=1`. Random-weight models: the graph,
not the weights, is checked.
"""

import os

import keras
import pytest
import tensorflow as tf

from data_gen import text_encoder
from t2t_keras import perf
from t2t_keras.export import saved_model
from t2t_keras.hparams import create_decode_hparams, create_hparams
from t2t_keras.model import Transformer
from t2t_keras.perf import gpu_kernels

# The functions of the decode loop: the searches of `serving_default`/`serialized_example`
# (`ServingModule._decode`) and of the `beam_<K>` signatures (`_decode_rows`, which the
# prefix also matches), with every function they call (the while loop's body and
# condition, the model's layers).
DECODE_ROOT = "__inference__decode_"
ROWS_ROOT = "__inference__decode_rows_"
DECODE_HP = "beam_size=2,alpha=0.6,extra_length=4"
# The signatures' functions: serving_default, serialized_example and beam_<K> (`serve`).
SERVING_ROOTS = ("__inference__serve_text_", "__inference__serve_examples_",
                 "__inference_serve_")
# Ops of the signatures outside the decode loop without a GPU kernel for their dtypes.
HOST_OPS = frozenset({
    # strings: normalisation, UTF-8 checks, output clean-up and messages
    "Add", "AsString", "Const", "Equal", "GatherV2", "Rank", "Reshape", "SelectV2", "Size",
    "StaticRegexFullMatch", "StaticRegexReplace", "StringJoin", "StringLength",
    "StringSplitV2", "StringToNumber", "Substr", "UnicodeDecode", "UnicodeEncode",
    "UnicodeTranscode", "UnsortedSegmentJoin",
    # the subword vocabulary: tables and TF Text's tokenizers
    "LookupTableFindV2", "RegexSplitWithOffsets", "WordpieceTokenizeWithOffsets",
    # ragged int64 row arithmetic of tokenization, and Example parsing
    "DenseBincount", "Fill", "RaggedGather", "RaggedTensorToTensor", "UnsortedSegmentMax",
    "UnsortedSegmentMin", "UnsortedSegmentSum", "ParseExampleV2",
})


def _export(root, policy):
  """A random-weight one-layer transformer_tiny exported under `policy`; its version dir."""
  words = "the a house cat dog runs sees big small red and old new".split()
  encoder = text_encoder.SubwordTextEncoder.build_to_target_size(
      60, {w: 10 for w in words}, 1, 50)
  vocab = os.path.join(root, "vocab.subwords")
  encoder.store_to_file(vocab)
  encoder = text_encoder.SubwordTextEncoder(vocab)
  keras.mixed_precision.set_global_policy(policy)
  try:
    tf.keras.utils.set_random_seed(0)
    hp = create_hparams("transformer_tiny", "num_hidden_layers=1")
    model = Transformer(hp, encoder.vocab_size, target_space_id=0)
    model.build()
    return saved_model.export_saved_model(
        model, hp, create_decode_hparams(DECODE_HP), {"inputs": vocab, "targets": vocab},
        os.path.join(root, "export"), {"inputs": encoder, "targets": encoder},
        beam_sizes=[1, 2])
  finally:
    keras.mixed_precision.set_global_policy("float32")


def _xla_marks(library):
  """(function, node or "", what) of every mark or op that needs XLA."""
  marks = []
  for name, function in library.items():
    for attr in ("_XlaMustCompile", "_XlaCompile"):
      if attr in function.attr and function.attr[attr].b:
        marks.append((name, "", attr))
    for node in function.node_def:
      if node.op.startswith(("Xla", "_Xla")):
        marks.append((name, node.name, node.op))
      for attr in ("_XlaMustCompile", "_XlaCompile", "_XlaScope"):
        if attr in node.attr and (node.attr[attr].b or node.attr[attr].s):
          marks.append((name, node.name, attr))
  return marks


@pytest.mark.parametrize("plain", [False, True], ids=["speed_cases", "plain_ops"])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_export_needs_no_xla_and_its_decode_loop_has_gpu_kernels(policy, plain, tmp_path,
                                                                  monkeypatch):
  if plain:
    monkeypatch.setenv(perf.PLAIN_OPS_ENV, "1")
  else:
    monkeypatch.delenv(perf.PLAIN_OPS_ENV, raising=False)
  library = gpu_kernels.function_library(_export(str(tmp_path), policy))
  assert _xla_marks(library) == []
  roots = gpu_kernels.root_functions(library, DECODE_ROOT)
  # serving_default's search and those of beam_1 and beam_2 (greedy, beam).
  assert len([r for r in roots if r.startswith(ROWS_ROOT)]) == 2, roots
  assert any(not r.startswith(ROWS_ROOT) for r in roots), roots
  functions = gpu_kernels.reachable_functions(library, roots)
  ops = {node.op for name in functions for node in library[name].node_def}
  assert "While" in ops or "StatelessWhile" in ops  # the walk reached the loop
  # The key/value buffer write of each path, in the compute dtype of the policy.
  write = "TensorScatterUpdate" if plain else "InplaceUpdate"
  if plain and policy != "float32":
    write = "ScatterNd"  # TensorScatterUpdate has no GPU kernel for 16-bit floats
  dtype = {"float32": tf.float32, "mixed_bfloat16": tf.bfloat16,
           "mixed_float16": tf.float16}[policy]
  written = {node.attr["T"].type for name in functions for node in library[name].node_def
             if node.op == write}
  assert dtype.as_datatype_enum in written, (write, written)
  assert gpu_kernels.missing_gpu_kernels(library, functions) == []
  # Before and after the loop: tokenization, detokenization and Example parsing, which
  # run on the host (strings, tables, ragged int64 index arithmetic); nothing else.
  serving = set()
  for prefix in SERVING_ROOTS:
    serving |= gpu_kernels.reachable_functions(
        library, gpu_kernels.root_functions(library, prefix))
  host = {m[2] for m in gpu_kernels.missing_gpu_kernels(library, serving - functions)}
  assert "WordpieceTokenizeWithOffsets" in host and host <= HOST_OPS, sorted(host - HOST_OPS)


def test_the_checks_see_what_they_look_for(tmp_path):
  """The two checks on a module that breaks both rules: a jit_compile function, and a
  bfloat16 TensorScatterUpdate in a loop (which the plain buffer write used to be)."""
  class Broken(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.bfloat16)])
    def _decode_rows(self, x):
      def body(i, x):
        return i + 1, tf.tensor_scatter_nd_update(x, [[0]], tf.ones([1, 4], tf.bfloat16))
      return tf.while_loop(lambda i, x: i < 3, body, [0, x])[1] + self.fast(x)

    @tf.function(jit_compile=True)
    def fast(self, x):
      return x * 2

  module = Broken()
  tf.saved_model.save(module, str(tmp_path), signatures=module._decode_rows)
  library = gpu_kernels.function_library(str(tmp_path))
  assert {m[2] for m in _xla_marks(library)} == {"_XlaMustCompile"}
  functions = gpu_kernels.reachable_functions(
      library, gpu_kernels.root_functions(library, ROWS_ROOT))
  missing = gpu_kernels.missing_gpu_kernels(library, functions)
  assert [(m[2], m[3]["T"]) for m in missing] == [("TensorScatterUpdate", "bfloat16")]
