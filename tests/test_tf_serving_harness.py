"""tests/support/tf_serving_harness.py against tiny hand-built SavedModels (no project code).

The toy model: `serving_default` takes `inputs` (strings) and an optional `alpha` (float, default
[0.5] in the SignatureDef) and returns `outputs` (upper-cased) and `score` (length * alpha); `echo`
takes `inputs` and returns `echo_bytes` (inputs + b"\\xff"). A second copy calls a
`jit_compile=True` function, which a server with XLA disabled must fail to warm up.
"""

import base64
import os
import shutil

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import get_model_metadata_pb2, predict_pb2, prediction_log_pb2

from tests.support import tf_serving_harness as harness


class _Toy(tf.Module):

  def __init__(self, jit=False):
    super().__init__()
    self._scale = tf.function(lambda x, a: x * a, jit_compile=jit)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs"),
                                tf.TensorSpec([None], tf.float32, name="alpha")])
  def serve(self, inputs, alpha=tf.constant([0.5])):
    length = tf.cast(tf.strings.length(inputs), tf.float32)
    return {"outputs": tf.strings.upper(inputs), "score": self._scale(length, alpha)}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
  def echo(self, inputs):
    return {"echo_bytes": inputs + tf.constant(b"\xff")}


def _request(signature, **inputs):
  request = predict_pb2.PredictRequest()
  request.model_spec.signature_name = signature
  for alias, value in inputs.items():
    request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
  return request


def _save(path, jit, warmup_requests):
  toy = _Toy(jit)
  tf.saved_model.save(toy, path, signatures={"serving_default": toy.serve, "echo": toy.echo})
  os.makedirs(os.path.join(path, "assets.extra"))
  with tf.io.TFRecordWriter(os.path.join(path, harness.WARMUP_FILE)) as writer:
    for request in warmup_requests:
      log = prediction_log_pb2.PredictionLog(
          predict_log=prediction_log_pb2.PredictLog(request=request))
      writer.write(log.SerializeToString())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  root = tmp_path_factory.mktemp("tf_serving")
  warmup = [_request("", inputs=["ab"], alpha=[2.0]), _request("serving_default", inputs=["x"]),
            _request("echo", inputs=["ab", "c"])]
  _save(str(root / "toy" / "12"), False, warmup)
  shutil.copytree(root / "toy" / "12", root / "toy" / "1")  # an older version, not served
  (root / "toy" / "13.tmp").mkdir()  # not a version
  _save(str(root / "jit" / "1"), True, warmup[:1])
  return {"toy": str(root / "toy"), "jit": str(root / "jit")}


@pytest.fixture(scope="module")
def server(models):
  with harness.serve(models["toy"], model_name="toy", timeout=120) as served:
    yield served


def _grpc_error(server, request, name="toy"):
  request.model_spec.name = name
  with pytest.raises(grpc.RpcError) as info:
    server.stub.Predict(request, timeout=30)
  return info.value.code(), info.value.details()


def test_ready_line(server):
  assert (server.version, server.warmup_replayed, server.project_modules) == (12, 3, [])


def test_grpc_predict_uses_signature_defaults(server):
  out = server.predict("serving_default", {"inputs": ["ab", "xyz"]})
  assert list(out["outputs"]) == [b"AB", b"XYZ"]
  np.testing.assert_allclose(out["score"], [1.0, 1.5])
  out = server.predict("", {"inputs": ["ab", "xyz"], "alpha": [2.0, 3.0]}, output_filter=["score"])
  assert list(out) == ["score"]
  np.testing.assert_allclose(out["score"], [4.0, 9.0])
  request = _request("", inputs=["ab"])
  request.model_spec.name = "toy"
  response = server.stub.Predict(request, timeout=30)
  assert (response.model_spec.name, response.model_spec.signature_name,
          response.model_spec.version.value) == ("toy", "serving_default", 12)
  assert list(response.outputs["score"].float_val) == [1.0]  # typed fields, as AsProtoField
  assert list(response.outputs["outputs"].string_val) == [b"AB"]


def test_grpc_errors_are_the_servers(server):
  invalid = grpc.StatusCode.INVALID_ARGUMENT
  assert _grpc_error(server, _request("nope", inputs=["a"])) == (
      grpc.StatusCode.FAILED_PRECONDITION, 'Serving signature key "nope" not found.')
  assert _grpc_error(server, _request("", inputs=["a"], alpha=[1.0], beta=[1.0])) == (
      invalid, "input size does not match signature: 3!=2 len({alpha,beta,inputs}) != "
      "len({alpha,inputs}). Sent extra: {beta}. Missing but required: {}.")
  assert _grpc_error(server, _request("", inputs=["a"], beta=[1.0])) == (
      invalid, "Inputs contains invalid name. Used request inputs: inputs, request input: "
      "beta,inputs")
  assert _grpc_error(server, _request("", alpha=[1.0])) == (
      invalid, "Signature input alias: inputs(feed name: serving_default_inputs:0) not found in "
      "request and no default value provided. Inputs expected to be in the request {alpha}, or "
      "default input alias set: alpha")
  assert _grpc_error(server, _request("echo")) == (  # no defaults in this signature
      invalid, "input size does not match signature: 0!=1 len({}) != len({inputs}). "
      "Sent extra: {}. Missing but required: {inputs}.")
  code, details = _grpc_error(server, _request("", inputs=["a"], alpha=[1]))
  assert code == invalid and "Expects arg" in details and "int32" in details
  request = _request("", inputs=["a"])
  request.output_filter.append("nope")
  assert _grpc_error(server, request)[1].startswith("output tensor alias not found in signature")
  assert _grpc_error(server, _request("", inputs=["a"]), name="other") == (
      grpc.StatusCode.NOT_FOUND, "Servable not found for request: Latest(other)")
  request = _request("", inputs=["a"])
  request.model_spec.version.value = 1
  assert _grpc_error(server, request) == (
      grpc.StatusCode.NOT_FOUND, "Servable not found for request: Specific(toy, 1)")


def test_grpc_model_metadata(server):
  request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
  request.model_spec.name = "toy"
  response = server.stub.GetModelMetadata(request, timeout=30)
  signatures = get_model_metadata_pb2.SignatureDefMap()
  assert response.metadata["signature_def"].Unpack(signatures)
  assert {"serving_default", "echo"} <= set(signatures.signature_def)
  assert list(signatures.signature_def["serving_default"].defaults) == ["alpha"]


def test_rest_row_and_columnar_formats(server):
  status, out = server.predict_rest(
      {"instances": [{"inputs": "ab", "alpha": 2.0}, {"inputs": "xyz", "alpha": 1.0}]})
  assert (status, out) == (200, {"predictions": [{"outputs": "AB", "score": 4.0},
                                                 {"outputs": "XYZ", "score": 3.0}]})
  status, out = server.predict_rest({"inputs": {"inputs": ["ab"], "alpha": [0.1]}}, version=12)
  assert (status, out) == (200, {"outputs": {"outputs": ["AB"], "score": [0.2]}})
  b64 = lambda b: {"b64": base64.b64encode(b).decode()}  # noqa: E731
  status, out = server.predict_rest(
      {"signature_name": "echo", "instances": ["ab", b64(b"\x00c")]})
  assert (status, out) == (200, {"predictions": [b64(b"ab\xff"), b64(b"\x00c\xff")]})
  status, out = server.predict_rest({"signature_name": "echo", "inputs": ["ab"]})
  assert (status, out) == (200, {"outputs": [b64(b"ab\xff")]})


def test_rest_json_never_uses_defaults(server):
  """json_tensor.cc asks for every signature input, in each instance or in 'inputs'."""
  status, out = server.predict_rest({"instances": [{"inputs": "ab"}]})
  assert status == 400 and out["error"].endswith("keys must be equal to: alpha,inputs")
  status, out = server.predict_rest({"inputs": {"inputs": ["ab"]}})
  assert (status, out) == (400, {"error": "Missing named input: alpha in 'inputs' object."})
  status, out = server.predict_rest({"instances": ["ab"]})
  assert status == 400 and out["error"].startswith("instances is a plain list")


def test_rest_errors_are_the_servers(server):
  status, out = server.predict_rest({"signature_name": "nope", "instances": ["a"]})
  assert (status, out) == (
      400, {"error": 'Serving signature name: "nope" not found in signature def'})
  status, out = server.predict_rest(
      {"instances": [{"inputs": "a", "alpha": 1.0, "beta": 1.0}]})
  assert status == 400 and "does not have named input: beta" in out["error"]
  status, out = server.predict_rest({"instances": [{"inputs": "a", "alpha": "x"}]})
  assert status == 400 and "is not of expected type: float" in out["error"]
  status, out = server.predict_rest({"signature_name": "echo", "instances": ["a"]}, version=1)
  assert (status, out) == (404, {"error": "Servable not found for request: Specific(toy, 1)"})
  assert server.rest("POST", "/v1/models/toy:explain", b"{}")[0] == 400


def test_rest_model_metadata(server):
  status, out = server.rest("GET", "/v1/models/toy/metadata")
  assert status == 200 and out["model_spec"]["version"] == "12"
  assert "alpha" in out["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
  assert server.rest("GET", "/v1/models/other/metadata")[0] == 404


def test_jit_model_fails_warm_up_unless_xla_is_enabled(models):
  with pytest.raises(harness.ServingLoadError, match="XLA compilation disabled"):
    with harness.serve(models["jit"], timeout=120):
      pass
  with harness.serve(models["jit"], xla_enabled=True, timeout=120) as served:
    assert (served.version, served.warmup_replayed, served.project_modules) == (1, 1, [])
    np.testing.assert_allclose(served.predict("", {"inputs": ["abc"]})["score"], [1.5])
