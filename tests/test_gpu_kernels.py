"""t2t_keras.perf.gpu_kernels: the GPU-kernel checker on tiny SavedModels and the kernel registry.

The expectations are facts of TensorFlow 2.21's CUDA build, asserted against its
kernel registry here so that a TensorFlow upgrade that changes them fails loudly
instead of silently changing what the checker reports.
"""

import pytest
import tensorflow as tf
from tensorflow.core.framework import function_pb2
from tensorflow.python.framework import kernels

from t2t_keras.perf import gpu_kernels


class Scatter(tf.Module):
  """A While whose body does a TensorScatterUpdate, in bfloat16 and float32."""

  def _loop(self, x):
    def body(i, x):
      return i + 1, tf.tensor_scatter_nd_update(x, [[i]], tf.ones([1], x.dtype))
    return tf.while_loop(lambda i, x: i < 4, body, [0, x])[1]

  @tf.function(input_signature=[tf.TensorSpec([4], tf.bfloat16)])
  def scatter_bf16(self, x):
    return self._loop(x)

  @tf.function(input_signature=[tf.TensorSpec([4], tf.float32)])
  def scatter_f32(self, x):
    return self._loop(x)

  @tf.function(input_signature=[tf.TensorSpec([4], tf.bfloat16)])
  def inplace_bf16(self, x):
    return tf.raw_ops.InplaceUpdate(x=x, i=[1], v=tf.ones([1], tf.bfloat16))

  @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
  def strings(self, s):
    return tf.strings.regex_replace(s, "a", "b")


class Common(tf.Module):
  """Ops that look host-bound but have GPU (or DEFAULT) kernels."""

  def __init__(self):
    super().__init__()
    self.v = tf.Variable(tf.zeros([4]))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
  def common(self, ids):
    tf.debugging.Assert(tf.reduce_all(ids >= 0), [ids])
    return tf.identity(ids[1:3] + 1), self.v.read_value() * 2.0


@pytest.fixture(scope="module")
def scatter_library(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("scatter"))
  tf.saved_model.save(Scatter(), path)
  return gpu_kernels.function_library(path)


def check(library, python_name, host_ops=()):
  roots = gpu_kernels.root_functions(library, "__inference_%s_" % python_name)
  assert len(roots) == 1, roots
  reached = gpu_kernels.reachable_functions(library, roots)
  return gpu_kernels.missing_gpu_kernels(library, reached, host_ops)


def test_bfloat16_scatter_in_while_body_is_reported(scatter_library):
  missing = check(scatter_library, "scatter_bf16")
  assert [(op, attrs["T"]) for _, _, op, attrs in missing] == [("TensorScatterUpdate", "bfloat16")]
  function_name, node_name, _, _ = missing[0]
  # Found in the loop body, which only the While's `body` attr reaches.
  assert function_name.startswith("while_body")
  assert node_name.endswith("TensorScatterUpdate")
  root, = gpu_kernels.root_functions(scatter_library, "__inference_scatter_bf16_")
  assert "StatelessWhile" in {n.op for n in scatter_library[root].node_def}


def test_float32_scatter_has_a_gpu_kernel(scatter_library):
  assert check(scatter_library, "scatter_f32") == []


def test_bfloat16_inplace_update_has_a_gpu_kernel(scatter_library):
  ops = {n.op for f in scatter_library.values() for n in f.node_def}
  assert "InplaceUpdate" in ops
  assert check(scatter_library, "inplace_bf16") == []


def test_string_ops_reported_unless_host_ops(scatter_library):
  missing_ops = {op for _, _, op, _ in check(scatter_library, "strings")}
  assert missing_ops and all("Regex" in op for op in missing_ops), missing_ops
  assert check(scatter_library, "strings", host_ops=missing_ops) == []


def test_unreachable_functions_are_not_inspected(scatter_library):
  roots = gpu_kernels.root_functions(scatter_library, "__inference_scatter_f32_")
  reached = gpu_kernels.reachable_functions(scatter_library, roots)
  assert len(reached) == 3  # the root, its While's cond and body
  # The bfloat16 loop body, the string function and the save/restore functions
  # (string ops) are in the library and have missing kernels, but are not reached.
  everything = {m[0] for m in gpu_kernels.missing_gpu_kernels(scatter_library, scatter_library)}
  assert any(name.startswith("while_body") for name in everything)
  assert any(name.startswith("__inference_strings_") for name in everything)
  assert not everything & reached
  assert gpu_kernels.missing_gpu_kernels(scatter_library, reached) == []


def test_omitted_attrs_take_opdef_defaults():
  # Shape's GPU kernels constrain `out_type`, whose OpDef default is int32; a
  # NodeDef stripped of default attrs (as SavedModels may be) omits it.
  function = function_pb2.FunctionDef()
  function.signature.name = "f"
  node = function.node_def.add(name="shape", op="Shape", input=["x"])
  node.attr["T"].type = tf.float32.as_datatype_enum
  assert gpu_kernels.missing_gpu_kernels({"f": function}, ["f"]) == []
  node.attr["out_type"].type = tf.int8.as_datatype_enum
  assert gpu_kernels.missing_gpu_kernels({"f": function}, ["f"]) == [
      ("f", "shape", "Shape", {"T": "float32", "out_type": "int8"})]


def test_common_ops_have_kernels(tmp_path):
  tf.saved_model.save(Common(), str(tmp_path))
  library = gpu_kernels.function_library(str(tmp_path))
  roots = gpu_kernels.root_functions(library, "__inference_common_")
  ops = {n.op for name in roots for n in library[name].node_def}
  assert {"Assert", "ReadVariableOp", "StridedSlice", "Identity", "Const"} <= ops
  assert check(library, "common") == []


@pytest.mark.parametrize("op, attrs, expected", [
    ("TensorScatterUpdate", {"T": tf.bfloat16, "Tindices": tf.int32}, False),
    ("TensorScatterUpdate", {"T": tf.float32, "Tindices": tf.int32}, True),
    ("TensorScatterUpdate", {"T": tf.int32, "Tindices": tf.int32}, True),  # DEFAULT kernel
    ("InplaceUpdate", {"T": tf.bfloat16}, True),
    ("Const", {"dtype": tf.int32}, True),
    ("Const", {"dtype": tf.string}, False),
    ("Identity", {"T": tf.int32}, True),
    ("StridedSlice", {"T": tf.int32, "Index": tf.int32}, True),
    ("ReadVariableOp", {"dtype": tf.float32}, True),  # DEFAULT kernel only
    ("Placeholder", {"dtype": tf.int32}, True),  # DEFAULT kernel only
    ("Assert", {"T": (tf.int32, tf.string)}, True),  # DEFAULT kernel only
    ("RegexReplace", {}, False),
])
def test_registry_facts(op, attrs, expected):
  enums = {k: tuple(t.as_datatype_enum for t in v) if isinstance(v, tuple) else v.as_datatype_enum
           for k, v in attrs.items()}
  assert gpu_kernels.has_gpu_kernel(op, enums) is expected


@pytest.mark.parametrize("op", sorted(gpu_kernels.RUNTIME_OPS))
def test_runtime_ops_have_no_gpu_kerneldef(op):
  # Why they are exempted: no typed GPU KernelDef; the runtime lowers or calls them.
  device_types = {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}
  assert "GPU" not in device_types and "DEFAULT" in device_types
