"""A small stand-in for a stock `tensorflow_model_server`: run a SavedModel as TF Serving would.

Run as a fresh process that imports only TensorFlow, TF Text, tensorflow-serving-api, grpc and
numpy (never t2t_keras, data_gen or tests):

  python tests/tf_serving_harness.py --model_base_path=DIR --model_name=NAME

It follows the server's source (tensorflow/serving; behaviour re-implemented, no code copied):
- model_servers/main.cc: tensorflow::DisableXlaCompilation() before anything loads, unless
  --xla_cpu_compilation_enabled=true (a jit_compile function then fails: "XLA compilation
  disabled"); sources/storage_path/file_system_storage_path_source.cc: the highest integer
  subdirectory of the base path (the default "latest" version policy).
- The SavedModelBundle: a TF1 Session and its MetaGraphDef (tag "serve"), TF Text's ops linked in;
  signature tensors are fed and fetched by their TensorInfo names.
- servables/tensorflow/saved_model_warmup.cc and saved_model_warmup_util.cc: every record of
  <version>/assets.extra/tf_serving_warmup_requests is replayed before the model is ready (at most
  1000, each once); a failing record fails the load (stderr, exit code 1).
- servables/tensorflow/predict_util.cc and TF's tensorflow/cc/saved_model/util.cc (GetInputValues):
  signature lookup, input-count check, SignatureDef `defaults` for inputs the request leaves out,
  output_filter, outputs as typed TensorProto fields, model_spec in the response; TF errors keep
  their gRPC codes. GetModelMetadata returns the signature_def map.
- model_servers/http_rest_api_handler.cc, http_rest_api_util.cc, http_server.cc and
  util/json_tensor.cc: the REST API (predict, model status, metadata), its JSON row/columnar
  formats, its messages and its status-to-HTTP mapping. As there, the JSON formats never use
  `defaults`: every signature input must be in each instance or in the 'inputs' object.

What it cannot do: the C++ batching scheduler (--enable_batching: requests concatenated along dim 0,
which needs every input to have a batch dimension), model version transitions and file-system
polling, version labels, the TFRT runtime, Classify/Regress/MultiInference (refused with
UNIMPLEMENTED, also in warm-up records), monitoring and metrics. Python's Session.run also checks a
feed against its placeholder's static shape, which the C++ session does not.

`serve()` is the client side for tests: it starts the process and talks to it over 127.0.0.1.
"""

import argparse
import base64
import binascii
import contextlib
import ctypes
import http.server
import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from concurrent import futures

if __name__ == "__main__":  # a fresh process: keep tests/ itself off the import path
  sys.path = [p for p in sys.path
              if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import grpc  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from google.protobuf import json_format, message  # noqa: E402
from tensorflow.core.framework import tensor_pb2  # noqa: E402
from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2,  # noqa: E402
                                     model_pb2, predict_pb2, prediction_log_pb2,
                                     prediction_service_pb2_grpc)

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MAX_WARMUP_RECORDS = 1000
PROJECT_PACKAGES = ("t2t_keras", "data_gen", "tests")
_CODES = {code.value[0]: code for code in grpc.StatusCode}
_HTTP = {"CANCELLED": 499, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504, "NOT_FOUND": 404,
         "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429,
         "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501,
         "UNAVAILABLE": 503, "UNAUTHENTICATED": 401}  # anything else: 500
_PROTO_FIELDS = {tf.float32: "float_val", tf.float64: "double_val", tf.int32: "int_val",
                 tf.int16: "int_val", tf.int8: "int_val", tf.uint8: "int_val",
                 tf.int64: "int64_val", tf.bool: "bool_val", tf.string: "string_val",
                 tf.uint32: "uint32_val", tf.uint64: "uint64_val"}
_INT_RANGES = {tf.int32: (-2**31, 2**31), tf.int16: (-2**31, 2**31), tf.int8: (-2**31, 2**31),
               tf.uint8: (-2**31, 2**31), tf.int64: (-2**63, 2**63), tf.uint32: (0, 2**32),
               tf.uint64: (0, 2**64)}  # [low, high) of the JSON integers each type takes
_PREDICT_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?:(classify|regress|predict)", re.I)
_MODEL_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:/versions/(\d+)|/labels/([^/:]+))?(?:/(metadata))?", re.I)


class ServingError(Exception):
  """A failure with the gRPC status code and message the server would give."""

  def __init__(self, code, msg):
    super().__init__("%s: %s" % (code.name, msg))
    self.code, self.message = code, msg


def _invalid(msg):
  return ServingError(grpc.StatusCode.INVALID_ARGUMENT, msg)


def _type_name(dtype):
  """DataTypeString: float32 is "float", float64 "double"."""
  return {"float32": "float", "float64": "double", "float16": "half"}.get(dtype.name, dtype.name)


def tensor_proto(value, dtype):
  """`value` as a TensorProto of `dtype`, values in the typed field as Tensor::AsProtoField."""
  dtype = tf.as_dtype(dtype)
  if dtype not in _PROTO_FIELDS:
    return tf.make_tensor_proto(value, dtype)
  arr = np.asarray(value, dtype=object if dtype == tf.string else dtype.as_numpy_dtype)
  proto = tensor_pb2.TensorProto(dtype=dtype.as_datatype_enum,
                                 tensor_shape=tf.TensorShape(arr.shape).as_proto())
  getattr(proto, _PROTO_FIELDS[dtype]).extend(arr.ravel().tolist())
  return proto


def latest_version(base_path):
  """(version, path) of the highest integer subdirectory of `base_path`."""
  versions = {int(c): c for c in tf.io.gfile.listdir(base_path) if re.fullmatch(r"[+-]?[0-9]+/?", c)
              and tf.io.gfile.isdir(os.path.join(base_path, c))}
  if not versions:
    raise ServingError(grpc.StatusCode.NOT_FOUND, "No versions of servable found under base path "
                       "%s. Did you forget to name your leaf directory as a number (eg. '/1/')?"
                       % base_path)
  version = max(versions)
  return version, os.path.join(base_path, versions[version].rstrip("/"))


def disable_xla_compilation():
  """Calls tensorflow::DisableXlaCompilation() and checks that a jit_compile function now fails."""
  lib = ctypes.CDLL(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_cc.so.2"))
  lib._ZN10tensorflow21DisableXlaCompilationEv()  # pylint: disable=protected-access
  try:
    tf.function(lambda x: x + 1, jit_compile=True)(tf.constant(1.0))
  except tf.errors.OpError as e:
    if "XLA compilation disabled" in e.message:
      return
    raise
  raise RuntimeError("DisableXlaCompilation() had no effect: a jit_compile function still ran")


class Servable:
  """One version of one model, loaded as the C++ SavedModelBundle (a Session and MetaGraphDef)."""

  def __init__(self, name, base_path, method_name_check=False):
    self.name, self.method_name_check = name, method_name_check
    self.version, self.path = latest_version(base_path)
    self.session = tf.compat.v1.Session(graph=tf.Graph())
    with self.session.graph.as_default():
      self.meta_graph = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], self.path)

  def handle(self, spec):
    """ServerCore::GetServableHandle: `spec` must name this model (and this version, if any)."""
    if not spec.name:
      raise _invalid("ModelSpec has no name specified.")
    choice = spec.WhichOneof("version_choice")
    if choice == "version_label":
      raise _invalid("Unrecognized servable version label: " + spec.version_label)
    if spec.name != self.name or (choice == "version" and spec.version.value != self.version):
      wanted = ("Specific(%s, %d)" % (spec.name, spec.version.value) if choice == "version"
                else "Latest(%s)" % spec.name)
      raise ServingError(grpc.StatusCode.NOT_FOUND, "Servable not found for request: " + wanted)

  def predict(self, request, timeout=None):
    """TensorflowPredictor::Predict: the servable the model_spec names, then RunPredict."""
    if not request.HasField("model_spec"):
      raise _invalid("Missing ModelSpec")
    self.handle(request.model_spec)
    return self.run_predict(request, timeout, self.version)

  def run_predict(self, request, timeout=None, version=None):
    """RunPredict of predict_util.cc on this bundle (warm-up calls it without a model check)."""
    sig_name = request.model_spec.signature_name or "serving_default"
    if sig_name not in self.meta_graph.signature_def:
      raise ServingError(grpc.StatusCode.FAILED_PRECONDITION,
                         'Serving signature key "%s" not found.' % sig_name)
    sig = self.meta_graph.signature_def[sig_name]
    response = predict_pb2.PredictResponse()
    response.model_spec.name, response.model_spec.signature_name = request.model_spec.name, sig_name
    if version is not None:
      response.model_spec.version.value = version
    methods = ["tensorflow/serving/" + m for m in ("predict", "classify", "regress")]
    if self.method_name_check and sig.method_name not in methods:
      raise ServingError(grpc.StatusCode.INTERNAL, "Expected prediction signature method_name to "
                         "be one of {%s}. Was: %s" % (", ".join(methods), sig.method_name))
    feeds = self._input_values(sig, request)
    aliases = list(request.output_filter)
    for i, alias in enumerate(aliases):
      if alias not in sig.outputs:
        raise _invalid("output tensor alias not found in signature: %s Outputs expected to be in "
                       "the set {%s}." % (alias, ",".join(sorted(sig.outputs))))
      if alias in aliases[:i]:
        raise _invalid("duplicate output tensor alias: " + alias)
    aliases = aliases or sorted(sig.outputs)
    options = (tf.compat.v1.RunOptions(timeout_in_ms=max(1, int(timeout * 1000)))
               if timeout is not None else None)
    try:
      values = self.session.run([sig.outputs[a].name for a in aliases], feeds, options=options)
    except tf.errors.OpError as e:
      raise ServingError(_CODES.get(e.error_code, grpc.StatusCode.UNKNOWN), e.message) from e
    except (TypeError, ValueError) as e:  # Python's feed checks (static shapes)
      raise _invalid(str(e)) from e
    for alias, value in zip(aliases, values):
      response.outputs[alias].CopyFrom(tensor_proto(value, sig.outputs[alias].dtype))
    return response

  @staticmethod
  def _input_values(sig, request):
    """VerifyRequestInputsSize (predict_util.cc), then GetInputValues (saved_model/util.cc)."""
    sent, expected = set(request.inputs), set(sig.inputs)
    if len(sent) > len(expected) or (len(sent) < len(expected) and not sig.defaults):
      raise _invalid(
          "input size does not match signature: %d!=%d len({%s}) != len({%s}). Sent extra: {%s}. "
          "Missing but required: {%s}." % (len(sent), len(expected), ",".join(sorted(sent)),
                                           ",".join(sorted(expected)),
                                           ",".join(sorted(sent - expected)),
                                           ",".join(sorted(expected - sent))))
    feeds, used, mistyped = {}, set(), []
    for i, alias in enumerate(sorted(sig.inputs)):
      info = sig.inputs[alias]
      if alias in request.inputs:
        proto = request.inputs[alias]
        used.add(alias)
      elif alias in sig.defaults:
        proto = sig.defaults[alias]
      else:
        raise _invalid("Signature input alias: %s(feed name: %s) not found in request and no "
                       "default value provided. Inputs expected to be in the request {%s}, or "
                       "default input alias set: %s" % (alias, info.name, ",".join(sorted(sent)),
                                                        ",".join(sorted(sig.defaults))))
      try:
        feeds[info.name] = tf.make_ndarray(proto)
      except Exception as e:  # pylint: disable=broad-except
        raise _invalid("tensor parsing error: " + alias) from e
      if proto.dtype != info.dtype:  # refused by Session::Run, after GetInputValues
        mistyped.append("Expects arg[%d] to be %s but %s is provided" % (
            i, _type_name(tf.as_dtype(info.dtype)), _type_name(tf.as_dtype(proto.dtype))))
    if sent and used != sent:
      raise _invalid("Inputs contains invalid name. Used request inputs: %s, request input: %s"
                     % (",".join(sorted(used)), ",".join(sorted(sent))))
    if mistyped:
      raise _invalid(mistyped[0])
    return feeds

  def warmup(self, iterations=1):
    """Replays the warm-up file as saved_model_warmup{,_util}.cc; returns the number of records."""
    path = os.path.join(self.path, WARMUP_FILE)
    if not tf.io.gfile.exists(path):
      return 0
    count = 0
    try:
      for record in tf.data.TFRecordDataset(path):
        log = prediction_log_pb2.PredictionLog()
        try:
          log.ParseFromString(record.numpy())
        except message.DecodeError as e:
          raise _invalid("Failed to parse warmup record: %r from %s"
                         % (record.numpy()[:100], path)) from e
        kind = log.WhichOneof("log_type")
        for _ in range(iterations):
          if kind == "predict_log":
            self.run_predict(log.predict_log.request)
          elif kind in ("predict_streamed_log", "session_run_log"):
            raise ServingError(grpc.StatusCode.UNIMPLEMENTED, "Unsupported log_type for warmup: %d"
                               % log.DESCRIPTOR.fields_by_name[kind].number)
          elif kind is not None:
            raise ServingError(grpc.StatusCode.UNIMPLEMENTED, "%s warm-up record: the server "
                               "would run it, this harness serves Predict only" % kind)
        count += 1
        if count > MAX_WARMUP_RECORDS:
          raise _invalid("Number of warmup records exceeds the maximum (%d) at %s"
                         % (MAX_WARMUP_RECORDS, path))
    except tf.errors.DataLossError as e:
      raise ServingError(grpc.StatusCode.DATA_LOSS, e.message + ". Please verify your warmup "
                         "data is in TFRecord format.") from e
    return count

  def metadata(self, request):
    """GetModelMetadataImpl: the signature_def map, packed in an Any."""
    if not request.HasField("model_spec"):
      raise _invalid("Missing ModelSpec")
    if not request.metadata_field:
      raise _invalid("GetModelMetadataRequest must specify at least one metadata_field")
    for field in request.metadata_field:
      if field != "signature_def":
        raise _invalid("Metadata field %s is not supported" % field)
    self.handle(request.model_spec)
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    response.model_spec.name, response.model_spec.version.value = self.name, self.version
    signatures = get_model_metadata_pb2.SignatureDefMap()
    for key, sig in self.meta_graph.signature_def.items():
      signatures.signature_def[key].CopyFrom(sig)
    response.metadata["signature_def"].Pack(signatures)
    return response

  def status(self, spec):
    """GetModelStatusImpl: this version, AVAILABLE."""
    if spec.name != self.name or (spec.HasField("version") and spec.version.value != self.version):
      raise ServingError(grpc.StatusCode.NOT_FOUND, (
          "Could not find version %d of model %s" % (spec.version.value, spec.name)
          if spec.HasField("version") else "Could not find any versions of model " + spec.name))
    response = get_model_status_pb2.GetModelStatusResponse()
    status = response.model_version_status.add(
        version=self.version, state=get_model_status_pb2.ModelVersionStatus.AVAILABLE)
    status.status.SetInParent()  # error_code OK, error_message ""
    return response


def _js(value):
  text = json.dumps(value, ensure_ascii=False)
  return text if len(text) <= 200 else text[:200] + "..."


def _is_b64(value):
  return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _is_object(value):
  return isinstance(value, dict) and not _is_b64(value)


def _json_scalar(v, dtype):
  """AddValueToTensor / JsonDecodeBase64Object of json_tensor.cc."""
  kind = ("Null" if v is None else "True" if v is True else "False" if v is False else
          "Object" if isinstance(v, dict) else "String" if isinstance(v, str) else "Number")
  is_int = kind == "Number" and isinstance(v, int)
  type_error = _invalid("JSON Value: %s Type: %s is not of expected type: %s"
                        % (_js(v), kind, _type_name(dtype)))
  if dtype == tf.string:
    if kind == "String":
      return v.encode("utf-8", "surrogatepass")
    if not _is_b64(v):
      raise (_invalid("JSON Value: %s not formatted correctly for base64 data" % _js(v))
             if kind == "Object" else type_error)
    try:
      return base64.b64decode(v["b64"] + "=" * (-len(v["b64"]) % 4), validate=True)
    except (binascii.Error, ValueError) as e:
      raise _invalid("Unable to base64 decode") from e
  if dtype in (tf.float32, tf.float64):
    if kind != "Number":
      raise type_error
    if is_int:
      lossless = abs(v) < 2 ** (24 if dtype == tf.float32 else 53)
    else:
      lossless = not math.isfinite(v) or abs(v) <= dtype.max
    if not lossless:
      raise _invalid("Cannot convert JSON value: %s to %s without loss of precision."
                     % (_js(v), _type_name(dtype)))
    return v
  if dtype in _INT_RANGES or dtype == tf.bool:
    low, high = _INT_RANGES.get(dtype, (0, 0))
    if not (isinstance(v, bool) if dtype == tf.bool else is_int and low <= v < high):
      raise type_error
    return v
  raise ServingError(grpc.StatusCode.UNIMPLEMENTED, "Conversion of JSON Value: %s to type: %s"
                     % (_js(v), _type_name(dtype)))


def _json_tensor(value, dtype):
  """(shape, flat values) of a JSON value: GetDenseTensorShape, then FillTensorProto."""
  shape, v = [], value
  while isinstance(v, list):
    shape.append(len(v))
    v = v[0] if v else None
  flat = []

  def fill(v, level):
    if not isinstance(v, list):
      if level != len(shape):
        raise _invalid("JSON Value: %s found at incorrect level: %d in the JSON DOM. Expected at "
                       "level: %d" % (_js(v), level + 1, len(shape)))
      flat.append(_json_scalar(v, dtype))
      return
    if level >= len(shape):
      raise _invalid("Encountered list at unexpected level: %d expected < %d" % (level, len(shape)))
    if len(v) != shape[level]:
      raise _invalid("Encountered list at unexpected size: %d at level: %d expected size: %d"
                     % (len(v), level, shape[level]))
    for x in v:
      fill(x, level + 1)

  fill(value, 0)
  return shape, flat


def _instances(items, infos):
  """FillTensorMapFromInstancesList: the row format, one element per batch row."""
  if not isinstance(items[0], dict) and len(infos) > 1:
    raise _invalid("instances is a plain list, but expecting list of objects as multiple input "
                   "tensors required as per tensorinfo_map")
  objects, firsts, flats = _is_object(items[0]), {}, {}

  def add(name, value):
    if name not in infos:
      raise _invalid("JSON object: does not have named input: " + name)
    shape, flat = _json_tensor(value, tf.as_dtype(infos[name].dtype))
    first_shape, first_size = firsts.setdefault(name, (shape, len(flat)))
    if len(flat) != first_size:
      raise _invalid("Expecting tensor size: %d but got: %d" % (first_size, len(flat)))
    if shape != first_shape:
      raise _invalid("Expecting shape [%s] but got: [%s]"
                     % (",".join(map(str, first_shape)), ",".join(map(str, shape))))
    flats.setdefault(name, []).extend(flat)

  for i, item in enumerate(items):
    if objects != _is_object(item):
      raise _invalid("Expecting %s at item %d of input list"
                     % ("object but got list" if objects else "value/list but got object", i))
    for name, value in (item.items() if objects else [(next(iter(infos)), item)]):
      try:
        add(name, value)
      except ServingError as e:
        raise _invalid("Failed to process element: %d%s of 'instances' list. Error: %s"
                       % (i, " key: " + name if objects else "", e)) from e
    if objects and set(item) != set(infos):
      raise _invalid("Failed to process element: %d of 'instances' list. JSON object: %s keys "
                     "must be equal to: %s" % (i, _js(item), ",".join(sorted(infos))))
  return {name: ([len(items)] + firsts[name][0], flat) for name, flat in flats.items()}


def _columns(value, infos):
  """FillTensorMapFromInputsMap: the columnar format."""
  if not isinstance(value, dict) or _is_b64(value):
    if len(infos) > 1:
      raise _invalid("inputs is a plain value/list, but expecting an object as multiple input "
                     "tensors required as per tensorinfo_map")
    name = next(iter(infos))
    return {name: _json_tensor(value, tf.as_dtype(infos[name].dtype))}
  tensors = {}
  for name in sorted(infos):
    if name not in value:
      raise _invalid("Missing named input: %s in 'inputs' object." % name)
    tensors[name] = _json_tensor(value[name], tf.as_dtype(infos[name].dtype))
  return tensors


def json_to_request(body, servable, spec):
  """FillPredictRequestFromJson: (PredictRequest, True for the row format) from a JSON body."""
  if not body.strip():
    raise _invalid("JSON Parse error: The document is empty")
  try:
    doc = json.loads(body)
  except ValueError as e:
    raise _invalid("JSON Parse error: %s" % e) from e
  if not isinstance(doc, dict):
    raise _invalid("JSON Value: %s Is not object" % _js(doc))
  request = predict_pb2.PredictRequest(model_spec=spec)
  if "signature_name" in doc:
    if not isinstance(doc["signature_name"], str):
      raise _invalid("JSON Value: %s not formatted correctly. 'signature_name' key must be a "
                     "string value." % _js(doc))
    request.model_spec.signature_name = doc["signature_name"]
  servable.handle(spec)
  sig_name = request.model_spec.signature_name or "serving_default"
  if sig_name not in servable.meta_graph.signature_def:
    raise _invalid('Serving signature name: "%s" not found in signature def' % sig_name)
  infos = servable.meta_graph.signature_def[sig_name].inputs
  if not infos:
    raise _invalid("Failed to get input map for signature: "
                   + (request.model_spec.signature_name or "DEFAULT"))
  if "instances" in doc and "inputs" in doc:
    raise _invalid("JSON Value: %s Not formatted correctly expecting only one of 'inputs' or "
                   "'instances' keys to exist " % _js(doc))
  if "instances" in doc:
    if not isinstance(doc["instances"], list):
      raise _invalid("JSON Value: %s Expecting 'instances' to be an list/array" % _js(doc))
    if not doc["instances"]:
      raise _invalid("JSON Value: %s No values in 'instances' array" % _js(doc))
    tensors = _instances(doc["instances"], infos)
  elif "inputs" in doc:
    tensors = _columns(doc["inputs"], infos)
  else:
    raise _invalid("Missing 'inputs' or 'instances' key")
  for name, (shape, flat) in tensors.items():
    dtype = tf.as_dtype(infos[name].dtype)
    try:
      arr = np.array(flat, dtype=object if dtype == tf.string else dtype.as_numpy_dtype)
    except (OverflowError, ValueError) as e:
      raise _invalid(str(e)) from e
    request.inputs[name].CopyFrom(tensor_proto(arr.reshape(shape), dtype))
  return request, "instances" in doc


def _json_values(proto, name):
  """AddTensorValues: nested lists; strings as text, or {"b64": ...} for names ending in _bytes."""
  dtype = tf.as_dtype(proto.dtype)
  if dtype == tf.string and name.endswith("_bytes"):
    conv = lambda b: {"b64": base64.b64encode(b).decode("ascii")}  # noqa: E731
  elif dtype == tf.string:  # raw bytes out, as the server's writer: see _RestHandler._send
    conv = lambda b: b.decode("utf-8", "surrogateescape")  # noqa: E731
  elif dtype == tf.float32:  # the shortest decimal that reads back as the same float
    conv = lambda x: float(str(np.float32(x)))  # noqa: E731
  elif dtype in _PROTO_FIELDS:
    conv = lambda x: x  # noqa: E731
  else:
    raise _invalid("Failed to write JSON value for tensor type: " + _type_name(dtype))
  walk = lambda x: [walk(y) for y in x] if isinstance(x, list) else conv(x)  # noqa: E731
  return walk(tf.make_ndarray(proto).tolist())


def response_to_json(outputs, row):
  """MakeJsonFromTensors: {"predictions": rows} (row format) or {"outputs": ...} (columnar)."""
  if not outputs:
    raise _invalid("Cannot convert empty tensor map to JSON")
  names = sorted(outputs)
  values = {name: _json_values(outputs[name], name) for name in names}
  if not row:
    return {"outputs": values if len(names) > 1 else values[names[0]]}
  batch = None
  for name in names:
    dims = outputs[name].tensor_shape.dim
    if not dims:
      raise _invalid("Tensor name: %s has no shape information " % name)
    if batch is not None and dims[0].size != batch:
      raise _invalid("Tensor name: %s has inconsistent batch size: %d expecting: %d"
                     % (name, dims[0].size, batch))
    batch = dims[0].size
  rows = [{name: values[name][i] for name in names} for i in range(batch)]
  return {"predictions": rows if len(names) > 1 else [r[names[0]] for r in rows]}


class _RestHandler(http.server.BaseHTTPRequestHandler):
  """The REST API of http_rest_api_handler.cc: predict, model status, model metadata."""
  servable = None  # set on a subclass

  def log_message(self, *args):  # pylint: disable=arguments-differ
    pass

  def do_POST(self):  # pylint: disable=invalid-name
    self._reply("POST")

  def do_GET(self):  # pylint: disable=invalid-name
    self._reply("GET")

  def _reply(self, method):
    try:
      body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
      status, out = 200, self._process(method, body)
    except ServingError as e:
      status, out = _HTTP.get(e.code.name, 500), {"error": e.message}
    except Exception as e:  # pylint: disable=broad-except
      status, out = 500, {"error": "tf_serving_harness: %r" % e}
    # Strings go out as their bytes, valid UTF-8 or not, as the server's JSON writer does.
    data = json.dumps(out, ensure_ascii=False, indent=1).encode("utf-8", "surrogateescape")
    self.send_response(status)
    self.send_header("Content-Type", "application/json")
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def _process(self, method, body):
    match = (_PREDICT_PATH if method == "POST" else _MODEL_PATH).fullmatch(self.path)
    if not match:
      raise _invalid("Malformed request: %s %s" % (method, self.path))
    name, version, label, verb = match.groups()
    spec = model_pb2.ModelSpec(name=urllib.parse.unquote(name or ""))
    if version:
      spec.version.value = int(version)
    if label:
      spec.version_label = urllib.parse.unquote(label)
    if method == "GET":
      if not spec.name:
        raise _invalid("Missing model name in request.")
      if verb == "metadata":
        response = self.servable.metadata(get_model_metadata_pb2.GetModelMetadataRequest(
            model_spec=spec, metadata_field=["signature_def"]))
        signatures = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signatures)
        as_dict = lambda m: json_format.MessageToDict(  # noqa: E731
            m, always_print_fields_with_no_presence=True, preserving_proto_field_name=True)
        return {"model_spec": as_dict(response.model_spec),
                "metadata": {"signature_def": as_dict(signatures)}}
      return json_format.MessageToDict(self.servable.status(spec),
                                       always_print_fields_with_no_presence=True)
    if verb in ("classify", "regress"):
      raise ServingError(grpc.StatusCode.UNIMPLEMENTED,
                         "%s: the server has it, this harness serves Predict only" % verb)
    if verb != "predict":
      raise _invalid("Malformed request: %s %s" % (method, self.path))
    request, row = json_to_request(body, self.servable, spec)
    return response_to_json(self.servable.predict(request, 30.0).outputs, row)  # its default


class _PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
  """PredictionService over gRPC: Predict and GetModelMetadata."""

  def __init__(self, servable):
    self.servable = servable

  def Predict(self, request, context):  # pylint: disable=invalid-name
    try:
      return self.servable.predict(request, context.time_remaining())
    except ServingError as e:
      context.abort(e.code, e.message)

  def GetModelMetadata(self, request, context):  # pylint: disable=invalid-name
    try:
      return self.servable.metadata(request)
    except ServingError as e:
      context.abort(e.code, e.message)


def main(argv=None):
  """Loads, warms up and serves one model until SIGTERM/SIGINT; returns the exit code."""
  parser = argparse.ArgumentParser(description="A stand-in for tensorflow_model_server.")
  parser.add_argument("--model_base_path", required=True)
  parser.add_argument("--model_name", default="default")
  parser.add_argument("--num_request_iterations_for_warmup", type=int, default=0)  # 0: once
  for flag, default in (("xla_cpu_compilation_enabled", False), ("enable_model_warmup", True),
                        ("enable_signature_method_name_check", False)):
    parser.add_argument("--" + flag, nargs="?", const="true", default=str(default).lower(),
                        choices=["true", "false"])
  args = parser.parse_args(argv)
  if args.xla_cpu_compilation_enabled == "false":
    disable_xla_compilation()
  import tensorflow_text  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  try:
    servable = Servable(args.model_name, args.model_base_path,
                        args.enable_signature_method_name_check == "true")
    replayed = (servable.warmup(max(args.num_request_iterations_for_warmup, 1))
                if args.enable_model_warmup == "true" else 0)
  except Exception as e:  # pylint: disable=broad-except
    print("Failed to start server. Error: %s" % e, file=sys.stderr, flush=True)
    return 1
  grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                            options=[("grpc.max_receive_message_length", -1),
                                     ("grpc.max_send_message_length", -1)])
  prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
      _PredictionService(servable), grpc_server)
  grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
  grpc_server.start()
  httpd = http.server.ThreadingHTTPServer(
      ("127.0.0.1", 0), type("Handler", (_RestHandler,), {"servable": servable}))
  httpd.daemon_threads = True
  threading.Thread(target=httpd.serve_forever, daemon=True).start()
  stop = threading.Event()
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda *_: stop.set())
  project = sorted(m for m in sys.modules if m.split(".")[0] in PROJECT_PACKAGES)
  print(json.dumps({"grpc_port": grpc_port, "rest_port": httpd.server_address[1],
                    "version": servable.version, "warmup_replayed": replayed,
                    "project_modules": project}), flush=True)
  while not stop.wait(1.0):
    pass
  httpd.shutdown()
  grpc_server.stop(grace=2).wait(5)
  servable.session.close()
  return 0


class ServingLoadError(RuntimeError):
  """The server process exited, or was not ready in time; the message ends with its stderr."""


class ServedModel:
  """A running stand-in server, as yielded by `serve`."""

  def __init__(self, ready, model_name):
    self.model_name = model_name
    self.grpc_target = "127.0.0.1:%d" % ready["grpc_port"]
    self.rest_address = "127.0.0.1:%d" % ready["rest_port"]
    self.version, self.warmup_replayed = ready["version"], ready["warmup_replayed"]
    self.project_modules = ready["project_modules"]
    self.channel = grpc.insecure_channel(self.grpc_target, options=[("grpc.enable_http_proxy", 0)])
    self.stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
    self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

  def predict(self, signature, inputs, output_filter=None, timeout=60):
    """Predict over gRPC: {alias: array or list} in, {alias: np.ndarray} out (grpc.RpcError)."""
    request = predict_pb2.PredictRequest(output_filter=output_filter or [])
    request.model_spec.name, request.model_spec.signature_name = self.model_name, signature or ""
    for alias, value in inputs.items():
      request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
    response = self.stub.Predict(request, timeout=timeout)
    return {alias: tf.make_ndarray(proto) for alias, proto in response.outputs.items()}

  def predict_rest(self, body, version=None, timeout=60):
    """POST /v1/models/<name>[/versions/<v>]:predict with `body` as JSON; (HTTP status, JSON)."""
    path = "/v1/models/%s%s:predict" % (urllib.parse.quote(self.model_name, safe=""),
                                        "" if version is None else "/versions/%d" % version)
    return self.rest("POST", path, json.dumps(body).encode("utf-8"), timeout)

  def rest(self, method, path, data=None, timeout=60):
    """Any REST call to the server; (HTTP status, decoded JSON)."""
    request = urllib.request.Request("http://%s%s" % (self.rest_address, path), data=data,
                                     method=method, headers={"Content-Type": "application/json"})
    try:
      with self._opener.open(request, timeout=timeout) as r:
        status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
      with e:
        status, raw = e.code, e.read()
    return status, json.loads(raw.decode("utf-8", "surrogateescape"))


def _first_json_line(proc, timeout):
  """The ready line from `proc`'s stdout; None if it exits first; raises queue.Empty on timeout."""
  lines = queue.Queue()

  def pump():
    try:
      for line in proc.stdout:
        if line.startswith(b"{"):
          lines.put(line)
    except (OSError, ValueError):
      pass
    lines.put(None)

  threading.Thread(target=pump, daemon=True).start()
  line = lines.get(timeout=timeout)
  return json.loads(line) if line else None


@contextlib.contextmanager
def serve(model_base_path, model_name="model", xla_enabled=False, timeout=300, flags=()):
  """Runs this file as a fresh server process for `model_base_path`; yields a `ServedModel`.

  Raises ServingLoadError (with the process's stderr tail) if it exits or is not ready within
  `timeout` seconds. The process is stopped when the context exits.
  """
  cmd = [sys.executable, os.path.abspath(__file__),
         "--model_base_path=" + os.path.abspath(model_base_path), "--model_name=" + model_name,
         "--xla_cpu_compilation_enabled=" + str(bool(xla_enabled)).lower(), *flags]
  env = dict(os.environ, PYTHONPATH="", TF_CPP_MIN_LOG_LEVEL="2")
  with tempfile.TemporaryFile() as stderr:
    proc = subprocess.Popen(cmd, cwd="/", env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=stderr)
    served = None
    try:
      try:
        ready, why = _first_json_line(proc, timeout), "exited with code %s"
      except queue.Empty:
        ready, why = None, "was not ready within %ds (code %%s)" % timeout
      if ready is None:
        proc.kill()
        proc.wait(30)
        stderr.seek(0)
        tail = stderr.read()[-4000:].decode("utf-8", "replace")
        raise ServingLoadError("tf_serving_harness %s; stderr:\n%s"
                               % (why % proc.returncode, tail))
      served = ServedModel(ready, model_name)
      yield served
    finally:
      if served is not None:
        served.channel.close()
      if proc.poll() is None:
        proc.terminate()
        try:
          proc.wait(15)
        except subprocess.TimeoutExpired:
          proc.kill()
          proc.wait(15)
      proc.stdout.close()


if __name__ == "__main__":
  sys.exit(main())
