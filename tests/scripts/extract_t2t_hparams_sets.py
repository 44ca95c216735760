"""Writes the value of every hparams set T2T's transformer.py registers, as JSON.

  python tests/scripts/extract_t2t_hparams_sets.py SOURCE [OUT.json]

SOURCE is a Tensor2Tensor checkout (the directory holding `tensor2tensor/`) or
a bare git repository of it (files are read with `git show HEAD:<path>`).
OUT defaults to tests/data/t2t_transformer_hparams_sets.json.

Neither TensorFlow nor T2T is imported. T2T's own source of transformer.py,
`layers/common_hparams.py` (`basic_params1`), `utils/expert_utils.py` and
`data_generators/librispeech.py` (the helpers its set functions call) is
executed statement by statement against stand-ins: a `StubHParams` with the
`add_hparam` / `set_hparam` / `del_hparam` / attribute semantics of T2T's
`utils/hparam.py:HParams`, a registry that records `register_hparams`, and a
permissive stub for every other module (TensorFlow, layers). Top-level
statements that fail against the stubs (model code) are skipped; set functions
only touch hparams.

The output maps each registered set name, in registration order, to
{field: value}; a set whose function raised maps to {"_error": message}.
Values that are not JSON (stub objects, e.g. modality types) are written as
their `repr`.
"""

import ast
import json
import os
import subprocess
import sys
import types

SOURCES = {
    "transformer": "tensor2tensor/models/transformer.py",
    "common_hparams": "tensor2tensor/layers/common_hparams.py",
    "expert_utils": "tensor2tensor/utils/expert_utils.py",
    "librispeech": "tensor2tensor/data_generators/librispeech.py",
}
DEFAULT_OUT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "data",
                           "t2t_transformer_hparams_sets.json"))


class _StubMeta(type):
  """Any attribute, call, item or arithmetic of a stub class is the stub class."""

  def __getattr__(cls, name):
    if name.startswith("__"):
      raise AttributeError(name)
    return _Stub

  def __call__(cls, *args, **kwargs):
    return _Stub

  def __getitem__(cls, key):
    return _Stub

  def __repr__(cls):
    return "<stub>"

  __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __truediv__ = __getitem__
  __or__ = __ror__ = __getitem__


class _Stub(metaclass=_StubMeta):
  pass


class StubHParams:
  """T2T's `HParams` semantics that set functions rely on.

  `add_hparam` refuses an existing name and `set_hparam` / `del_hparam` an
  unknown one, as T2T's do; plain attribute assignment sets any name.
  """

  def __init__(self, **kwargs):
    for name, value in kwargs.items():
      self.add_hparam(name, value)

  def add_hparam(self, name, value):
    if hasattr(self, name):
      raise ValueError(f"Hyperparameter name is reserved: {name}")
    setattr(self, name, value)

  def set_hparam(self, name, value):
    if name not in vars(self):
      raise ValueError(f"Unknown hyperparameter: {name}")
    setattr(self, name, value)

  def del_hparam(self, name):
    if name in vars(self):
      delattr(self, name)

  def get(self, name, default=None):
    return vars(self).get(name, default)

  def values(self):
    return dict(vars(self))

  def override_from_dict(self, values):
    for name, value in values.items():
      self.set_hparam(name, value)
    return self


class _Registry:
  """`registry` stand-in: records `register_hparams`, passes everything else through."""

  def __init__(self):
    self.hparams = {}

  def register_hparams(self, name=None):
    def record(fn, key=None):
      self.hparams[key or fn.__name__] = fn
      return fn
    if callable(name):
      return record(name)
    return lambda fn: record(fn, name)

  def __getattr__(self, name):
    def decorator(arg=None, *args, **kwargs):
      return arg if callable(arg) else (lambda fn: fn)
    return decorator


def read_source(source, path):
  if os.path.isdir(os.path.join(source, "tensor2tensor")):
    with open(os.path.join(source, path)) as f:
      return f.read()
  return subprocess.run(["git", "-C", source, "show", f"HEAD:{path}"], check=True,
                        capture_output=True, text=True).stdout


def execute(source_text, name, namespace):
  """Runs each top-level statement except imports in `namespace`; failures are skipped."""
  module = types.ModuleType(name)
  module.__dict__.update(namespace)
  for node in ast.parse(source_text).body:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      continue
    code = compile(ast.Module(body=[node], type_ignores=[]), name, "exec")
    try:
      exec(code, module.__dict__)  # noqa: S102 (T2T's own source, against stubs)
    except Exception:  # pylint: disable=broad-except
      pass
  return module


def _jsonable(value):
  if isinstance(value, (bool, int, float, str)) or value is None:
    return value
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  if isinstance(value, dict):
    return {str(k): _jsonable(v) for k, v in value.items()}
  return repr(value)


def extract(source):
  """{set name: {field: value} or {"_error": message}} of transformer.py's sets."""
  registry = _Registry()
  base = {"tf": _Stub, "registry": registry, "range": range, "zip": zip,
          "hparam": types.SimpleNamespace(HParams=StubHParams)}
  helpers = {name: execute(read_source(source, SOURCES[name]), name, base)
             for name in ("common_hparams", "expert_utils", "librispeech")}
  # The set functions call only these helpers; every other module name is a stub.
  namespace = dict(base, **helpers)
  for stubbed in ("common_attention", "common_layers", "modalities", "transformer_layers",
                  "transformer_memory", "beam_search", "mlperf_log", "t2t_model",
                  "tf_estimator", "inplace_ops", "nest"):
    namespace[stubbed] = _Stub
  registry.hparams.clear()  # Sets registered by the helper modules are not transformer.py's.
  execute(read_source(source, SOURCES["transformer"]), "transformer", namespace)
  out = {}
  for name, fn in registry.hparams.items():
    try:
      out[name] = {k: _jsonable(v) for k, v in sorted(fn().values().items())}
    except Exception as e:  # pylint: disable=broad-except
      out[name] = {"_error": f"{type(e).__name__}: {e}"}
  return out


def main(argv):
  if len(argv) not in (2, 3):
    sys.exit(__doc__)
  out_path = argv[2] if len(argv) == 3 else DEFAULT_OUT
  sets = extract(argv[1])
  tmp = out_path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(sets, f, indent=1, sort_keys=False)
    f.write("\n")
  os.replace(tmp, out_path)
  failed = [name for name, values in sets.items() if "_error" in values]
  print(f"{len(sets)} sets written to {out_path}; {len(failed)} failed: {failed}")


if __name__ == "__main__":
  main(sys.argv)
