"""Static check that traced functions would run on a GPU without host fallbacks.

The check reads the function library of a SavedModel's `saved_model.pb` (or of a
traced graph, `graph_library`) and, for every node of the functions reachable from
some roots, asks TensorFlow's kernel registry whether a GPU kernel matches the
node's type attributes. It needs no GPU: the CUDA build of TensorFlow registers
its GPU kernels whether or not a device is present. A node without one is placed
on the CPU by the placer (soft placement) and costs device-to-host copies inside
what should be a GPU-only loop, e.g. a bfloat16 `TensorScatterUpdate` in a
decoding `While` body.

What counts as a GPU kernel, as the runtime's `FindKernelRegistration` decides:
a KernelDef of device type "GPU" whose constraints the node satisfies or, when
none does, one of device type "DEFAULT" (registered with `DEVICE_DEFAULT`, which
every non-symbolic device falls back to). In TF 2.21 `ReadVariableOp`,
`Placeholder` and `Assert` have only DEFAULT kernels, and the int32 kernel of
e.g. `TensorScatterUpdate` is a DEFAULT one; `Const`, `Identity` and
`StridedSlice` have GPU kernels for int32. Most int32 kernels are registered
with HostMemory arguments: that is fine, the kernel exists and the runtime
keeps those tensors in host memory. This checker says whether a kernel exists
for the node's dtypes, not where its memory lives. Kernel labels (`_kernel`)
and XLA devices (XLA_GPU, a symbolic device) are not considered.
"""

import functools

from tensorflow.core.framework import function_pb2
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import dtypes
from tensorflow.python.framework import kernels
from tensorflow.python.framework import op_def_registry

# Functional ops that the runtime itself handles rather than running a typed
# kernel: the graph runtime lowers While/If/Case (LowerFunctionalOpsPass) into
# Switch/Merge/Enter/Exit... and inlines or calls the functions named by
# PartitionedCall/StatefulPartitionedCall; NoOp does nothing. In TF 2.21 none of
# them has a "GPU" KernelDef; each has a constraint-free "DEFAULT" one. The
# functions they call are checked on their own, via `reachable_functions`.
RUNTIME_OPS = frozenset({
    "While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase",
    "PartitionedCall", "StatefulPartitionedCall", "NoOp",
})
GPU_DEVICE_TYPES = ("GPU", "DEFAULT")


def function_library(saved_model_dir):
  """Returns {name: FunctionDef} of the first meta graph of `saved_model_dir`."""
  saved_model = saved_model_pb2.SavedModel()
  with open(saved_model_dir.rstrip("/") + "/saved_model.pb", "rb") as f:
    saved_model.ParseFromString(f.read())
  library = saved_model.meta_graphs[0].graph_def.library
  return {f.signature.name: f for f in library.function}


def root_functions(library, prefix):
  """Names in `library` starting with `prefix`, sorted.

  tf.function names in a SavedModel are `__inference_<python name>_<number>`,
  so `__inference__decode_` selects the traces of a method `_decode`.
  """
  return sorted(name for name in library if name.startswith(prefix))


def _attr_functions(attr_value):
  """Yields the function names an AttrValue references (nested attrs included)."""
  kind = attr_value.WhichOneof("value")
  funcs = ([attr_value.func] if kind == "func" else
           list(attr_value.list.func) if kind == "list" else [])
  for func in funcs:
    yield func.name
    for nested in func.attr.values():
      yield from _attr_functions(nested)


def reachable_functions(library, roots):
  """The root functions and every library function they reach, transitively.

  A function is reached through a node whose op is a library function name, or
  through a node attr that names one (While's cond/body, If's then/else
  branches, Case's branches, PartitionedCall's `f`, ...).
  """
  seen, stack = set(), list(roots)
  while stack:
    name = stack.pop()
    if name in seen or name not in library:
      continue
    seen.add(name)
    for node in library[name].node_def:
      if node.op in library:
        stack.append(node.op)
      for attr_value in node.attr.values():
        stack.extend(_attr_functions(attr_value))
  return seen


def _type_attrs(node):
  """{attr: DataType enum or tuple of them} for a node, OpDef defaults filled in."""
  attrs = {}
  op_def = op_def_registry.get(node.op)
  sources = [(a.name, a.default_value) for a in op_def.attr if a.HasField("default_value")]
  sources += list(node.attr.items())
  for name, value in sources:
    kind = value.WhichOneof("value")
    if kind == "type":
      attrs[name] = value.type
    elif kind == "list" and value.list.type:
      attrs[name] = tuple(value.list.type)
  return attrs


def _kernel_matches(kernel_def, attrs):
  """Whether every type constraint of `kernel_def` is satisfied by `attrs`."""
  for constraint in kernel_def.constraint:
    allowed = set(constraint.allowed_values.list.type)
    value = attrs.get(constraint.name)
    values = value if isinstance(value, tuple) else (value,)
    if value is None or not set(values) <= allowed:
      return False
  return True


@functools.lru_cache(maxsize=None)
def _kernel_defs(op):
  return tuple(kernels.get_registered_kernels_for_op(op).kernel)


def has_gpu_kernel(op, attrs, device_types=None):
  """Whether a GPU (or, failing that, DEFAULT) KernelDef of `op` matches `attrs`;
  `device_types` instead of those, e.g. ("XLA_GPU_JIT",) inside an XLA function."""
  kernel_defs = _kernel_defs(op)
  for device_type in device_types or GPU_DEVICE_TYPES:
    if any(k.device_type == device_type and _kernel_matches(k, attrs) for k in kernel_defs):
      return True
  return False


def _dtype_names(attrs):
  return {name: (tuple(dtypes.as_dtype(t).name for t in value) if isinstance(value, tuple)
                 else dtypes.as_dtype(value).name) for name, value in attrs.items()}


def graph_library(graph_def, name="__graph__"):
  """A traced graph's function library plus its top-level nodes as function `name`,
  so that `missing_gpu_kernels` reads a tf.function's own graph as a library function."""
  library = {f.signature.name: f for f in graph_def.library.function}
  library[name] = function_pb2.FunctionDef(node_def=graph_def.node)
  return library


def xla_functions(library, function_names):
  """Those of `function_names` that XLA compiles (`_XlaMustCompile`), with every function
  they reach: their ops need an XLA_GPU_JIT kernel, not a GPU one."""
  roots = [n for n in function_names
           if "_XlaMustCompile" in library[n].attr and library[n].attr["_XlaMustCompile"].b]
  return reachable_functions(library, roots)


def missing_gpu_kernels(library, function_names, host_ops=(), device_types=None):
  """Nodes of `function_names` that have no GPU kernel for their dtypes.

  Skipped: calls of library functions (check those functions themselves),
  `RUNTIME_OPS`, and ops in `host_ops` (e.g. string ops meant to run on the
  host). Ops unknown to this process's op registry (a library such as TF-Text
  not imported) count as missing.

  Returns:
    Sorted list of (function name, node name, op, {attr: dtype name}); a
    list(type) attr maps to a tuple of names; attrs are empty for unknown ops.
  """
  missing = []
  for function_name in sorted(function_names):
    for node in library[function_name].node_def:
      if node.op in library or node.op in RUNTIME_OPS or node.op in host_ops:
        continue
      if op_def_registry.get(node.op) is None:
        missing.append((function_name, node.name, node.op, {}))
        continue
      attrs = _type_attrs(node)
      if not has_gpu_kernel(node.op, attrs, device_types):
        missing.append((function_name, node.name, node.op, _dtype_names(attrs)))
  return sorted(missing, key=lambda m: m[:3])
