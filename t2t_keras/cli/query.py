r"""t2t_keras_query: send sentences to a running TF Serving and print translations.

  t2t_keras_query --server=localhost:8500 --servable_name=transformer \
      --inputs_once='Hello world.'
  echo 'Hello world.' | t2t_keras_query --server=localhost:8501 --rest \
      --servable_name=transformer

  t2t_keras_query --server=localhost:8500 --servable_name=transformer \
      --signature_name=beam_4 --alpha=1.0 --n_best=2 --extra_length=50

The default signature takes raw text. `--signature_name=serialized_example`
speaks T2T's protocol (int64 ids in tf.train.Examples, EOS appended here) and
needs `--data_dir` (and `--problem`) to encode and decode with the vocabulary.
`--alpha`, `--extra_length` and `--n_best` go to a `beam_<K>` signature (decode
settings per request; see docs/serving.md): all three are sent with one value
per sentence, those not given with the signature's defaults read from the
server's model metadata (TF Serving's REST API applies no defaults, and its
batching needs every input to have the batch's rows).
One output line per input line, in order (tab-separated hypotheses with
return_beams or n_best > 1).
"""

from __future__ import annotations

import base64
import json
import re
import sys
from typing import Callable, List, Optional, Sequence
import urllib.error
import urllib.request

from absl import app, flags
import numpy as np

from data_gen import registry
from t2t_keras.cli import common_flags, file_checks

FLAGS = flags.FLAGS

flags.DEFINE_string("server", None, "host:port of the model server (gRPC, or REST with --rest).")
flags.DEFINE_string("servable_name", None, "The --model_name given to tensorflow_model_server.")
flags.DEFINE_string("signature_name", "serving_default",
                    "serving_default, serialized_example, or beam_<K> (decode settings per "
                    "request: --alpha, --extra_length, --n_best).")
flags.DEFINE_float("alpha", None, "beam_<K> signatures: the length penalty's exponent "
                   "(default: the export's).")
flags.DEFINE_integer("extra_length", None, "beam_<K> signatures: output tokens beyond the "
                     "input's length, at most the export's (default: the export's).")
flags.DEFINE_integer("n_best", None, "beam_<K> signatures: hypotheses per sentence, 1..K, "
                     "printed tab-separated (default: the export's).")
flags.DEFINE_string("inputs_once", None, "Translate this one sentence and exit.")
flags.DEFINE_string("input_file", None, "Translate the lines of this file (default: stdin).")
flags.DEFINE_bool("rest", False, "Use the REST API (POST .../v1/models/<name>:predict).")
flags.DEFINE_integer("timeout_secs", 10, "Per-request deadline in seconds.")
flags.DEFINE_integer("batch_size", 32, "Sentences per request.")
common_flags.define_once("string", "problem", None, "For --signature_name=serialized_example: the problem.")
common_flags.define_once("string", "data_dir", None, "For --signature_name=serialized_example: its vocabulary.")

EXAMPLE_SIGNATURE = "serialized_example"
SETTINGS = ("alpha", "extra_length", "n_best")
_SETTING_DTYPES = {"alpha": "float32", "extra_length": "int32", "n_best": "int32"}


def make_grpc_request_fn(server: str, servable_name: str, signature: str,
                         timeout_secs: float,
                         settings: Optional[dict] = None) -> Callable[[List], dict]:
  """fn(list of bytes) -> {"outputs": ndarray, "scores": ndarray} over gRPC.

  settings: {name: value} of `SETTINGS` sent with every request, one value per
  sentence (so that a server batching requests can concatenate them).
  """
  # gRPC and TensorFlow: loaded when a query is sent, not for --help
  import grpc
  import tensorflow as tf
  from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
  channel = grpc.insecure_channel(server)
  stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
  key = "input" if signature == EXAMPLE_SIGNATURE else "inputs"

  def request_fn(values: List[bytes]) -> dict:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = servable_name
    request.model_spec.signature_name = signature
    request.inputs[key].CopyFrom(tf.make_tensor_proto(values, dtype=tf.string))
    for name, value in (settings or {}).items():
      request.inputs[name].CopyFrom(tf.make_tensor_proto([value] * len(values),
                                                         dtype=_SETTING_DTYPES[name]))
    response = stub.Predict(request, timeout_secs)
    return {name: tf.make_ndarray(response.outputs[name]) for name in ("outputs", "scores")}

  return request_fn


def signature_defaults(server: str, servable_name: str, signature: str, timeout_secs: float,
                       rest: bool) -> dict:
  """{input name: value} of `signature`'s SignatureDef defaults, from the server's model
  metadata (gRPC GetModelMetadata, or REST GET .../metadata).

  Raises:
    KeyError: the model has no such signature (the message lists those it has).
  """
  # TensorFlow: loaded when a query is sent, not for --help
  from google.protobuf import json_format
  import tensorflow as tf
  from tensorflow.core.framework import tensor_pb2
  if rest:
    url = f"http://{server}/v1/models/{servable_name}/metadata"
    with urllib.request.urlopen(url, timeout=timeout_secs) as response:
      metadata = json.loads(response.read().decode("utf-8"))
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    defaults = {name: json_format.ParseDict(value, tensor_pb2.TensorProto())
                for name, value in signatures.get(signature, {}).get("defaults", {}).items()}
  else:
    # gRPC: loaded when a query is sent, not for --help
    import grpc
    from tensorflow_serving.apis import (get_model_metadata_pb2, model_pb2,
                                         prediction_service_pb2_grpc)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(server))
    response = stub.GetModelMetadata(get_model_metadata_pb2.GetModelMetadataRequest(
        model_spec=model_pb2.ModelSpec(name=servable_name), metadata_field=["signature_def"]),
        timeout_secs)
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(signature_map)
    signatures = signature_map.signature_def
    defaults = dict(signatures[signature].defaults) if signature in signatures else {}
  if signature not in signatures:
    raise KeyError(f"the model has no signature {signature}; it has "
                   f"{', '.join(sorted(s for s in signatures if not s.startswith('__')))}")
  return {name: tf.make_ndarray(value).reshape(-1)[0].item()
          for name, value in defaults.items()}


def make_rest_request_fn(server: str, servable_name: str, signature: str,
                         timeout_secs: float,
                         settings: Optional[dict] = None) -> Callable[[List], dict]:
  """fn(list of bytes) -> {"outputs": list, "scores": list} over TF Serving's REST API
  (settings: as `make_grpc_request_fn`, in each row of the row format)."""
  url = f"http://{server}/v1/models/{servable_name}:predict"

  def request_fn(values: List[bytes]) -> dict:
    if signature == EXAMPLE_SIGNATURE:
      instances = [{"b64": base64.b64encode(v).decode("ascii")} for v in values]
    else:
      instances = [v.decode("utf-8") for v in values]
    if settings:
      key = "input" if signature == EXAMPLE_SIGNATURE else "inputs"
      instances = [dict(settings, **{key: v}) for v in instances]
    body = json.dumps({"signature_name": signature, "instances": instances}).encode("utf-8")
    request = urllib.request.Request(url, data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_secs) as response:
      predictions = json.loads(response.read().decode("utf-8"))["predictions"]
    outputs = [p["outputs"] for p in predictions]
    if signature != EXAMPLE_SIGNATURE:  # text comes back as JSON strings
      outputs = np.array(outputs, dtype=object)
    return {"outputs": np.array(outputs), "scores": np.array([p["scores"] for p in predictions])}

  return request_fn


def _row_texts(row, encoders: Optional[dict], n_best: Optional[int] = None) -> List[str]:
  """One response row (a string, a beam list, ids or beams of ids) -> its texts.

  A `beam_<K>` signature returns K columns, of which the row's `n_best` are its
  hypotheses (the rest "" and 0): the first `n_best` are kept, empty ones too (an
  empty input has n_best empty hypotheses), so every line has n_best columns.
  """
  # TensorFlow and the models: loaded when the command runs, not for --help
  from t2t_keras.decoding import seq2seq
  if encoders is None:
    values = [row] if isinstance(row, (bytes, str)) else list(np.ravel(row))
    texts = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]
  else:
    ids = np.asarray(row)
    ids = ids[None] if ids.ndim == 1 else ids
    texts = [encoders["targets"].decode(seq2seq.strip_ids(r)) for r in ids]
  return texts if n_best is None else texts[:n_best]


def translate(lines: Sequence[str], request_fn: Callable[[List], dict], batch_size: int = 32,
              encoders: Optional[dict] = None, n_best: Optional[int] = None) -> List[str]:
  """One output string per input line, in order (beams joined by tabs).

  Args:
    encoders: {"inputs", "targets"} Python encoders for the serialized_example
      signature (ids in, ids out); None for the raw-text signature.
    n_best: the hypotheses per line asked of a `beam_<K>` signature (every line
      then has n_best columns); None: every column of the response.
  """
  # TensorFlow and the models: loaded when the command runs, not for --help
  from data_gen.text_encoder import EOS_ID
  from t2t_keras.export import saved_model
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
  results = []
  for begin in range(0, len(lines), batch_size):
    batch = lines[begin:begin + batch_size]
    if encoders is None:
      values = [line.encode("utf-8") for line in batch]
    else:
      values = [saved_model.make_example(encoders["inputs"].encode(line) + [EOS_ID])
                for line in batch]
    response = request_fn(values)
    for row in response["outputs"]:
      results.append("\t".join(_row_texts(row, encoders, n_best)))
  return results


def _read_input() -> List[str]:
  if FLAGS.inputs_once is not None:
    return [FLAGS.inputs_once]
  if FLAGS.input_file:
    return file_checks.read_input_lines("input_file", FLAGS.input_file,
                                        "a text file of sentences, one per line")
  return [line.rstrip("\n") for line in sys.stdin]


def main(argv):
  del argv
  for name in ("server", "servable_name"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  host, _, port = FLAGS.server.rpartition(":")
  if not host or not port.isdigit():
    raise app.UsageError(f"--server={FLAGS.server}: give host:port, e.g. localhost:8500 "
                         "(gRPC) or localhost:8501 with --rest.")
  signature = FLAGS.signature_name
  settings_signature = re.fullmatch(r"beam_[1-9][0-9]*", signature) is not None
  if signature not in ("serving_default", EXAMPLE_SIGNATURE) and not settings_signature:
    raise app.UsageError(f"--signature_name must be serving_default, {EXAMPLE_SIGNATURE} or "
                         f"beam_<K> (a beam size the export has), got {signature!r}.")
  settings = {name: getattr(FLAGS, name) for name in SETTINGS
              if getattr(FLAGS, name) is not None}
  if settings and not settings_signature:
    raise app.UsageError(f"--{'/--'.join(settings)}: decode settings go to a beam_<K> "
                         f"signature, not {signature}; give --signature_name=beam_<K> "
                         "(t2t_keras_exporter --serving_beam_sizes chooses the K; "
                         "saved_model_cli show --dir <version> lists them).")
  encoders = None
  if signature == EXAMPLE_SIGNATURE:
    if not FLAGS.data_dir or not FLAGS.problem:
      raise app.UsageError("--signature_name=serialized_example needs --problem and --data_dir "
                           "to encode inputs and decode output ids.")
    try:  # an unknown problem, a missing or malformed vocabulary (named)
      encoders = registry.problem(FLAGS.problem, FLAGS.data_dir).feature_encoders(FLAGS.data_dir)
    except ValueError as e:
      raise app.UsageError(str(e)) from None
  lines = _read_input()  # before connecting
  if settings_signature:
    try:
      defaults = signature_defaults(FLAGS.server, FLAGS.servable_name, signature,
                                    FLAGS.timeout_secs, FLAGS.rest)
    except KeyError as e:
      raise app.UsageError(f"--signature_name={signature}: {e.args[0]} (t2t_keras_exporter "
                           "--serving_beam_sizes chooses the beam_<K>).") from None
    except Exception as e:  # pylint: disable=broad-except
      message = _server_error(e)
      if message is None:
        raise
      raise app.UsageError(message) from None
    settings = {name: settings.get(name, defaults.get(name)) for name in SETTINGS}
  make = make_rest_request_fn if FLAGS.rest else make_grpc_request_fn
  request_fn = make(FLAGS.server, FLAGS.servable_name, signature, FLAGS.timeout_secs, settings)
  try:
    outputs = translate(lines, request_fn, FLAGS.batch_size, encoders,
                        settings.get("n_best") if settings_signature else None)
  except Exception as e:  # pylint: disable=broad-except
    message = _server_error(e)
    if message is None:
      raise
    raise app.UsageError(message) from None
  for line in outputs:
    print(line, flush=True)


def _server_error(e: Exception) -> Optional[str]:
  """One line for a failed request (no server, unknown model, refused request); None
  for other exceptions (bugs)."""
  api = "REST" if FLAGS.rest else "gRPC"
  where = f"--server={FLAGS.server}"
  grpc = sys.modules.get("grpc")
  if grpc is not None and isinstance(e, grpc.RpcError):
    code, details = e.code(), " ".join(str(e.details()).split())
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
      return (f"no model server answers gRPC at {where} ({code.name}: {details}); start "
              f"tensorflow_model_server --port={FLAGS.server.rpartition(':')[2]} or give "
              "its gRPC host:port (its REST port needs --rest).")
    if code == grpc.StatusCode.NOT_FOUND:
      return (f"the server at {where} has no model --servable_name={FLAGS.servable_name} "
              f"({details}); give the --model_name it was started with.")
    return f"the server at {where} refused the request ({code.name}: {details})."
  if isinstance(e, urllib.error.HTTPError):
    body = " ".join(e.read().decode("utf-8", "replace").split())[:300]
    if e.code == 404:
      return (f"the server at {where} has no model --servable_name={FLAGS.servable_name} "
              f"(REST 404: {body}); give the --model_name it was started with.")
    return f"the server at {where} refused the request (REST {e.code}: {body})."
  if isinstance(e, (urllib.error.URLError, ConnectionError, TimeoutError)):
    reason = getattr(e, "reason", e)
    return (f"no model server answers {api} at {where} ({reason}); start "
            f"tensorflow_model_server --rest_api_port={FLAGS.server.rpartition(':')[2]} or "
            "give its REST host:port (without --rest: its gRPC port).")
  return None


def run():
  common_flags.run_cli(main)


if __name__ == "__main__":
  run()
