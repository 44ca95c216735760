"""A small stand-in for a stock `tensorflow_model_server`: run a SavedModel as TF Serving would.

Run as a fresh process that imports only TensorFlow, TF Text, tensorflow-serving-api, grpc and
numpy (never t2t_keras, data_gen or tests):

  python tests/support/tf_serving_harness.py --model_base_path=DIR --model_name=NAME

It follows the server's source (tensorflow/serving; behaviour re-implemented, no code copied):
- model_servers/main.cc: tensorflow::DisableXlaCompilation() before anything loads, unless
  --xla_cpu_compilation_enabled=true (a jit_compile function then fails: "XLA compilation
  disabled"); file_system_storage_path_source.cc: the highest integer subdirectory of the base
  path (the default "latest" version policy).
- The SavedModelBundle: a TF1 Session and its MetaGraphDef (tag "serve"), TF Text's ops linked in;
  signature tensors are fed and fetched by their TensorInfo names.
- saved_model_warmup{,_util}.cc: every record of <version>/assets.extra/tf_serving_warmup_requests
  is replayed before the model is ready (at most 1000, each once; none with
  --enable_model_warmup=false); a failing record fails the load (stderr, exit code 1).
- predict_util.cc and TF's cc/saved_model/util.cc (GetInputValues): signature lookup, input-count
  check, SignatureDef `defaults` for inputs the request leaves out, output_filter, outputs as typed
  TensorProto fields, model_spec in the response; TF errors keep their gRPC codes.
  GetModelMetadata returns the signature_def map.
- http_rest_api_handler.cc, http_server.cc and util/json_tensor.cc: POST
  /v1/models/<name>[/versions/<v>]:predict and GET .../metadata, the JSON row and columnar formats,
  the status-to-HTTP mapping. As there, JSON never uses `defaults`: every signature input must be
  in each instance or in the 'inputs' object.
Refusals have the server's codes and messages, except that a bad value in 'instances' is not
located by its element, ragged JSON lists have a message of their own and a warm-up record that
does not parse fails with the parser's.

What it cannot do: the batching scheduler (--enable_batching: requests concatenated along dim 0,
which needs every input to have a batch dimension), version transitions and file-system polling,
version labels (refused as by a server with none; REST /labels/ paths are malformed here), the
REST model status (GET /v1/models/<name>), the TFRT runtime, Classify/Regress/MultiInference
(UNIMPLEMENTED, also in warm-up records), --enable_signature_method_name_check,
--num_request_iterations_for_warmup, monitoring and metrics. Typed TensorProto fields and JSON
cover string, bool, float, double, int32 and int64 only (other outputs go out in tensor_content
over gRPC and are refused over REST; other JSON inputs are UNIMPLEMENTED). Python's Session.run
also checks a feed against its placeholder's static shape, which the C++ session does not.

`serve()` is the client side for tests: it starts the process and talks to it over 127.0.0.1.
"""

import argparse
import base64
import contextlib
import ctypes
import http.server
import json
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

if __name__ == "__main__":  # a fresh process: keep tests/support/ itself off the import path
  sys.path = [p for p in sys.path
              if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import grpc  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from tensorflow.core.framework import tensor_pb2  # noqa: E402
from tensorflow_serving.apis import (get_model_metadata_pb2, model_pb2, predict_pb2,  # noqa: E402
                                     prediction_log_pb2, prediction_service_pb2_grpc)

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MAX_WARMUP_RECORDS = 1000
PROJECT_PACKAGES = ("t2t_keras", "data_gen", "tests")
INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
_CODES = {code.value[0]: code for code in grpc.StatusCode}
_HTTP = {"CANCELLED": 499, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504, "NOT_FOUND": 404,
         "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429,
         "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501,
         "UNAVAILABLE": 503, "UNAUTHENTICATED": 401}  # anything else: 500
_PROTO_FIELDS = {tf.float32: "float_val", tf.float64: "double_val", tf.int32: "int_val",
                 tf.int64: "int64_val", tf.bool: "bool_val", tf.string: "string_val"}
_REST_PATH = re.compile(  # groups: name, version, POST verb, GET "metadata"
    r"/v1/models/([^/:]+)(?:/versions/(\d+))?(?::(classify|regress|predict)|/(metadata))", re.I)


class ServingError(Exception):
  """A failure with the gRPC status code and message the server would give."""

  def __init__(self, msg, code=INVALID):
    super().__init__("%s: %s" % (code.name, msg))
    self.code, self.message = code, msg


def _check(ok, msg, code=INVALID):
  if not ok:
    raise ServingError(msg, code)


def _type_name(dtype):
  """DataTypeString: float32 is "float", float64 "double"."""
  return {"float32": "float", "float64": "double", "float16": "half"}.get(dtype.name, dtype.name)


def _names(names):
  return ",".join(sorted(names))


def _js(value):
  text = json.dumps(value, ensure_ascii=False)
  return text if len(text) <= 200 else text[:200] + "..."


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
  _check(versions, "No versions of servable found under base path %s. Did you forget to name your "
         "leaf directory as a number (eg. '/1/')?" % base_path, NOT_FOUND)
  return max(versions), os.path.join(base_path, versions[max(versions)].rstrip("/"))


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

  def __init__(self, name, base_path):
    self.name = name
    self.version, self.path = latest_version(base_path)
    self.session = tf.compat.v1.Session(graph=tf.Graph())
    with self.session.graph.as_default():
      self.meta_graph = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], self.path)
    self.signatures = self.meta_graph.signature_def

  def handle(self, spec):
    """ServerCore::GetServableHandle: `spec` must name this model (and this version, if any)."""
    _check(spec.name, "ModelSpec has no name specified.")
    choice = spec.WhichOneof("version_choice")
    _check(choice != "version_label", "Unrecognized servable version label: " + spec.version_label)
    if choice == "version":
      _check(spec.name == self.name and spec.version.value == self.version, "Servable not found "
             "for request: Specific(%s, %d)" % (spec.name, spec.version.value), NOT_FOUND)
    _check(spec.name == self.name, "Servable not found for request: Latest(%s)" % spec.name,
           NOT_FOUND)

  def predict(self, request, timeout=None):
    """TensorflowPredictor::Predict: the servable the model_spec names, then RunPredict."""
    _check(request.HasField("model_spec"), "Missing ModelSpec")
    self.handle(request.model_spec)
    return self.run_predict(request, timeout)

  def run_predict(self, request, timeout=None):
    """RunPredict of predict_util.cc on this bundle (warm-up calls it without a model check)."""
    sig_name = request.model_spec.signature_name or "serving_default"
    _check(sig_name in self.signatures, 'Serving signature key "%s" not found.' % sig_name,
           grpc.StatusCode.FAILED_PRECONDITION)
    sig = self.signatures[sig_name]
    feeds = self._input_values(sig, request)
    aliases = list(request.output_filter)
    for i, alias in enumerate(aliases):
      _check(alias in sig.outputs, "output tensor alias not found in signature: %s Outputs "
             "expected to be in the set {%s}." % (alias, _names(sig.outputs)))
      _check(alias not in aliases[:i], "duplicate output tensor alias: " + alias)
    aliases = aliases or sorted(sig.outputs)
    options = (tf.compat.v1.RunOptions(timeout_in_ms=max(1, int(timeout * 1000)))
               if timeout is not None else None)
    try:
      values = self.session.run([sig.outputs[a].name for a in aliases], feeds, options=options)
    except tf.errors.OpError as e:
      raise ServingError(e.message, _CODES.get(e.error_code, grpc.StatusCode.UNKNOWN)) from e
    except (TypeError, ValueError) as e:  # Python's feed checks (static shapes)
      raise ServingError(str(e)) from e
    response = predict_pb2.PredictResponse()
    response.model_spec.name, response.model_spec.signature_name = request.model_spec.name, sig_name
    response.model_spec.version.value = self.version
    for alias, value in zip(aliases, values):
      response.outputs[alias].CopyFrom(tensor_proto(value, sig.outputs[alias].dtype))
    return response

  @staticmethod
  def _input_values(sig, request):
    """VerifyRequestInputsSize (predict_util.cc), then GetInputValues (saved_model/util.cc)."""
    sent, expected = set(request.inputs), set(sig.inputs)
    _check(len(sent) == len(expected) or len(sent) < len(expected) and sig.defaults,
           "input size does not match signature: %d!=%d len({%s}) != len({%s}). Sent extra: {%s}. "
           "Missing but required: {%s}." % (len(sent), len(expected), _names(sent),
                                            _names(expected), _names(sent - expected),
                                            _names(expected - sent)))
    feeds, mistyped = {}, []
    for i, alias in enumerate(sorted(sig.inputs)):
      info = sig.inputs[alias]
      _check(alias in request.inputs or alias in sig.defaults,
             "Signature input alias: %s(feed name: %s) not found in request and no default value "
             "provided. Inputs expected to be in the request {%s}, or default input alias set: %s"
             % (alias, info.name, _names(sent), _names(sig.defaults)))
      proto = request.inputs[alias] if alias in request.inputs else sig.defaults[alias]
      try:
        feeds[info.name] = tf.make_ndarray(proto)
      except Exception as e:  # pylint: disable=broad-except
        raise ServingError("tensor parsing error: " + alias) from e
      if proto.dtype != info.dtype:  # refused by Session::Run, after GetInputValues
        mistyped.append("Expects arg[%d] to be %s but %s is provided" % (
            i, _type_name(tf.as_dtype(info.dtype)), _type_name(tf.as_dtype(proto.dtype))))
    _check(sent <= expected, "Inputs contains invalid name. Used request inputs: %s, request "
           "input: %s" % (_names(sent & expected), _names(sent)))
    if mistyped:
      raise ServingError(mistyped[0])
    return feeds

  def warmup(self):
    """Replays the warm-up file as saved_model_warmup{,_util}.cc; returns the number of records."""
    path, count = os.path.join(self.path, WARMUP_FILE), 0
    for record in tf.data.TFRecordDataset(path) if tf.io.gfile.exists(path) else []:
      count += 1
      _check(count <= MAX_WARMUP_RECORDS, "Number of warmup records exceeds the maximum (%d) at %s"
             % (MAX_WARMUP_RECORDS, path))
      log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
      kind = log.WhichOneof("log_type")
      _check(kind in ("predict_log", None), "Unsupported log_type for warmup: %s (this harness "
             "replays predict_log only)" % kind, grpc.StatusCode.UNIMPLEMENTED)
      if kind:
        self.run_predict(log.predict_log.request)
    return count

  def metadata(self, request):
    """GetModelMetadataImpl: the signature_def map, packed in an Any."""
    _check(request.HasField("model_spec"), "Missing ModelSpec")
    _check(request.metadata_field,
           "GetModelMetadataRequest must specify at least one metadata_field")
    for field in request.metadata_field:
      _check(field == "signature_def", "Metadata field %s is not supported" % field)
    self.handle(request.model_spec)
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    response.model_spec.name, response.model_spec.version.value = self.name, self.version
    signatures = get_model_metadata_pb2.SignatureDefMap()
    for key, sig in self.signatures.items():
      signatures.signature_def[key].CopyFrom(sig)
    response.metadata["signature_def"].Pack(signatures)
    return response


def _is_object(value):
  """IsElementObject of json_tensor.cc: a JSON object other than {"b64": "..."}."""
  return isinstance(value, dict) and not (len(value) == 1 and isinstance(value.get("b64"), str))


def _json_scalar(v, dtype):
  """AddValueToTensor / JsonDecodeBase64Object of json_tensor.cc: one JSON value of `dtype`."""
  kind = ("Null" if v is None else "True" if v is True else "False" if v is False else
          "Object" if isinstance(v, dict) else "String" if isinstance(v, str) else "Number")
  if dtype == tf.string and kind == "String":
    return v.encode("utf-8", "surrogatepass")
  if dtype == tf.string and kind == "Object":
    if _is_object(v):
      raise ServingError("JSON Value: %s not formatted correctly for base64 data" % _js(v))
    try:
      return base64.b64decode(v["b64"] + "=" * (-len(v["b64"]) % 4), validate=True)
    except ValueError as e:  # binascii.Error
      raise ServingError("Unable to base64 decode") from e
  if dtype in (tf.float32, tf.float64) and kind == "Number":
    if (abs(v) >= 2 ** (24 if dtype == tf.float32 else 53) if isinstance(v, int)
        else np.isfinite(v) and abs(v) > dtype.max):
      raise ServingError("Cannot convert JSON value: %s to %s without loss of precision."
                         % (_js(v), _type_name(dtype)))
    return v
  if (dtype == tf.bool and kind in ("True", "False") or dtype in (tf.int32, tf.int64)
      and kind == "Number" and isinstance(v, int) and dtype.min <= v <= dtype.max):
    return v
  _check(dtype in _PROTO_FIELDS, "Conversion of JSON Value: %s to type: %s"
         % (_js(v), _type_name(dtype)), grpc.StatusCode.UNIMPLEMENTED)
  raise ServingError("JSON Value: %s Type: %s is not of expected type: %s"
                     % (_js(v), kind, _type_name(dtype)))


def _json_columns(doc, infos):
  """FillTensorMapFromInstancesList / FillTensorMapFromInputsMap: {input name: JSON value}.

  The row format's instances are stacked into one list per input, so that they must all have one
  shape (as there) for json_to_request to find a dense tensor.
  """
  if "inputs" in doc:
    if not _is_object(doc["inputs"]):
      _check(len(infos) == 1, "inputs is a plain value/list, but expecting an object as multiple "
             "input tensors required as per tensorinfo_map")
      return {next(iter(infos)): doc["inputs"]}
    for name in sorted(infos):
      _check(name in doc["inputs"], "Missing named input: %s in 'inputs' object." % name)
    return {name: doc["inputs"][name] for name in infos}
  rows = doc["instances"]
  _check(isinstance(rows, list), "JSON Value: %s Expecting 'instances' to be an list/array"
         % _js(doc))
  _check(rows, "JSON Value: %s No values in 'instances' array" % _js(doc))
  objects = _is_object(rows[0])
  _check(objects or len(infos) == 1, "instances is a plain list, but expecting list of objects as "
         "multiple input tensors required as per tensorinfo_map")
  for i, row in enumerate(rows):
    _check(objects == _is_object(row), "Expecting %s at item %d of input list"
           % ("object but got list" if objects else "value/list but got object", i))
    if objects and set(row) != set(infos):
      extra = sorted(set(row) - set(infos))
      raise ServingError(
          "Failed to process element: %d key: %s of 'instances' list. Error: JSON object: does not "
          "have named input: %s" % (i, extra[0], extra[0]) if extra else "Failed to process "
          "element: %d of 'instances' list. JSON object: %s keys must be equal to: %s"
          % (i, _js(row), _names(infos)))
  if not objects:
    return {next(iter(infos)): rows}
  return {name: [row[name] for row in rows] for name in infos}


def _json_array(value, dtype):
  """GetDenseTensorShape and FillTensorProto: a JSON value of `dtype` as a dense object array."""
  def walk(v):
    return [walk(x) for x in v] if isinstance(v, list) else _json_scalar(v, dtype)

  values = np.array(walk(value), dtype=object)  # lists of other sizes or depths are left in
  if any(isinstance(x, list) for x in values.flat):
    raise ServingError("JSON Value: %s is not a dense tensor: its lists differ in size or depth"
                       % _js(value))
  return values


def json_to_request(body, servable, spec):
  """FillPredictRequestFromJson: (PredictRequest, True for the row format) from a JSON body."""
  _check(body.strip(), "JSON Parse error: The document is empty")
  try:
    doc = json.loads(body)
  except ValueError as e:
    raise ServingError("JSON Parse error: %s" % e) from e
  _check(isinstance(doc, dict), "JSON Value: %s Is not object" % _js(doc))
  sig_name = doc.get("signature_name", "")
  _check(isinstance(sig_name, str), "JSON Value: %s not formatted correctly. 'signature_name' key "
         "must be a string value." % _js(doc))
  request = predict_pb2.PredictRequest(model_spec=spec)
  request.model_spec.signature_name = sig_name
  servable.handle(spec)
  key = sig_name or "serving_default"
  _check(key in servable.signatures, 'Serving signature name: "%s" not found in signature def'
         % key)
  infos = servable.signatures[key].inputs
  _check(infos, "Failed to get input map for signature: " + (sig_name or "DEFAULT"))
  _check("inputs" not in doc or "instances" not in doc, "JSON Value: %s Not formatted correctly "
         "expecting only one of 'inputs' or 'instances' keys to exist " % _js(doc))
  _check("inputs" in doc or "instances" in doc, "Missing 'inputs' or 'instances' key")
  for name, value in _json_columns(doc, infos).items():
    dtype = tf.as_dtype(infos[name].dtype)
    request.inputs[name].CopyFrom(tensor_proto(_json_array(value, dtype), dtype))
  return request, "instances" in doc


def _json_values(proto, name):
  """AddTensorValues: nested lists; strings as text, or {"b64": ...} for names ending in _bytes."""
  dtype = tf.as_dtype(proto.dtype)
  _check(dtype in _PROTO_FIELDS, "Failed to write JSON value for tensor type: " + _type_name(dtype))
  if dtype == tf.string and name.endswith("_bytes"):
    conv = lambda b: {"b64": base64.b64encode(b).decode("ascii")}  # noqa: E731
  elif dtype == tf.string:  # raw bytes out, as the server's writer: see _RestHandler.do_POST
    conv = lambda b: b.decode("utf-8", "surrogateescape")  # noqa: E731
  elif dtype == tf.float32:  # the shortest decimal that reads back as the same float
    conv = lambda x: float(str(np.float32(x)))  # noqa: E731
  else:
    conv = lambda x: x  # noqa: E731
  walk = lambda x: [walk(y) for y in x] if isinstance(x, list) else conv(x)  # noqa: E731
  return walk(tf.make_ndarray(proto).tolist())


def response_to_json(outputs, row):
  """MakeJsonFromTensors: {"predictions": rows} (row format) or {"outputs": ...} (columnar)."""
  _check(outputs, "Cannot convert empty tensor map to JSON")
  names = sorted(outputs)
  values = {name: _json_values(outputs[name], name) for name in names}
  if not row:
    return {"outputs": values if len(names) > 1 else values[names[0]]}
  batch = None
  for name in names:
    dims = outputs[name].tensor_shape.dim
    _check(dims, "Tensor name: %s has no shape information " % name)
    _check(batch in (None, dims[0].size), "Tensor name: %s has inconsistent batch size: %d "
           "expecting: %s" % (name, dims[0].size, batch))
    batch = dims[0].size
  rows = [{name: values[name][i] for name in names} for i in range(batch)]
  return {"predictions": rows if len(names) > 1 else [r[names[0]] for r in rows]}


class _RestHandler(http.server.BaseHTTPRequestHandler):
  """The REST API of http_rest_api_handler.cc: POST .../:predict and GET .../metadata."""
  servable = None  # set on a subclass

  def log_message(self, *args):  # pylint: disable=arguments-differ
    pass

  def do_POST(self):  # pylint: disable=invalid-name
    try:
      status, out = 200, self._process()
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

  do_GET = do_POST

  def _process(self):
    body = self.rfile.read(int(self.headers["Content-Length"] or 0))
    match = _REST_PATH.fullmatch(self.path)
    name, version, verb, metadata = match.groups() if match else (None,) * 4
    _check(verb if self.command == "POST" else metadata,
           "Malformed request: %s %s" % (self.command, self.path))
    spec = model_pb2.ModelSpec(name=urllib.parse.unquote(name))
    if version:
      spec.version.value = int(version)
    if metadata:
      response = self.servable.metadata(get_model_metadata_pb2.GetModelMetadataRequest(
          model_spec=spec, metadata_field=["signature_def"]))
      signatures = get_model_metadata_pb2.SignatureDefMap()
      response.metadata["signature_def"].Unpack(signatures)
      as_dict = lambda m: json_format.MessageToDict(  # noqa: E731
          m, always_print_fields_with_no_presence=True, preserving_proto_field_name=True)
      return {"model_spec": as_dict(response.model_spec),
              "metadata": {"signature_def": as_dict(signatures)}}
    _check(verb == "predict", "%s: the server has it, this harness serves Predict only" % verb,
           grpc.StatusCode.UNIMPLEMENTED)
    request, row = json_to_request(body, self.servable, spec)
    return response_to_json(self.servable.predict(request, 30.0).outputs, row)  # its default


class _PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
  """PredictionService over gRPC: Predict and GetModelMetadata."""

  def __init__(self, servable):
    self.servable = servable

  def Predict(self, request, context):  # pylint: disable=invalid-name
    return self._call(context, self.servable.predict, request, context.time_remaining())

  def GetModelMetadata(self, request, context):  # pylint: disable=invalid-name
    return self._call(context, self.servable.metadata, request)

  @staticmethod
  def _call(context, method, *args):
    try:
      return method(*args)
    except ServingError as e:
      context.abort(e.code, e.message)


def main(argv=None):
  """Loads, warms up and serves one model until SIGTERM/SIGINT; returns the exit code."""
  parser = argparse.ArgumentParser(description="A stand-in for tensorflow_model_server.")
  parser.add_argument("--model_base_path", required=True)
  parser.add_argument("--model_name", default="default")
  for flag, default in (("xla_cpu_compilation_enabled", "false"), ("enable_model_warmup", "true")):
    parser.add_argument("--" + flag, nargs="?", const="true", default=default,
                        choices=["true", "false"])
  args = parser.parse_args(argv)
  if args.xla_cpu_compilation_enabled == "false":
    disable_xla_compilation()
  import tensorflow_text  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  try:
    servable = Servable(args.model_name, args.model_base_path)
    replayed = servable.warmup() if args.enable_model_warmup == "true" else 0
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


def _ready_line(proc, timeout):
  """The JSON line `proc` prints when ready; None if it exits first; queue.Empty on timeout."""
  lines = queue.Queue()

  def pump():  # reads all of stdout, so that the server never blocks on it
    try:
      for line in proc.stdout:
        if line.startswith(b"{"):
          lines.put(line)
    except (OSError, ValueError):  # closed by serve()
      pass
    lines.put(None)

  threading.Thread(target=pump, daemon=True).start()
  line = lines.get(timeout=timeout)
  return json.loads(line) if line else None


@contextlib.contextmanager
def serve(model_base_path, model_name="model", xla_enabled=False, timeout=300, flags=()):
  """Runs this file as a fresh server process for `model_base_path`; yields a `ServedModel`.

  `flags` are extra command-line flags of the process (it knows --enable_model_warmup). Raises
  ServingLoadError (with the process's stderr tail) if it exits or is not ready within `timeout`
  seconds. The process is stopped when the context exits.
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
        ready, why = _ready_line(proc, timeout), "exited with code %s"
      except queue.Empty:
        ready, why = None, "was not ready within %ds (code %%s)" % timeout
      if ready is None:
        proc.kill()
        proc.wait(30)
        stderr.seek(0)
        raise ServingLoadError("tf_serving_harness %s; stderr:\n%s" % (
            why % proc.returncode, stderr.read()[-4000:].decode("utf-8", "replace")))
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
