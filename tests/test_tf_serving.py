"""The export as a stock `tensorflow_model_server` runs it, against `t2t_keras_decoder`.

Each export of a trained fixture is served by `tests/support/tf_serving_harness.py`: a fresh
process with only TensorFlow, TF Text and tensorflow-serving-api that disables XLA
as the server's `main` does, loads the highest version with the session-based
loader, replays every warm-up request (one failure fails the load) and answers gRPC
Predict and REST :predict. Its outputs are compared with the decoder command run
in-process on the same lines with the same decode hparams.

Numerics. The server decodes the lines as one batch, the decoder in batches of its
own (sorted by length), so matmuls run on other shapes and may round otherwise:
texts are equal or part at a near-tie (tests/support/near_ties.py), with eps = SCORE_EPS
for float32 (the cached decode's bound, tests/test_decoding.py) and bfloat16's for
the mixed export. The same server on the same batch is compared exactly: gRPC with
REST, a signature with another that runs the same search, the query command with
the requests it sends.
"""

import os

import grpc
import numpy as np
import pytest

from data_gen import file_io
import t2t_keras
from t2t_keras.export import saved_model
from t2t_keras.perf import precision
from tests.support import near_ties, tf_serving_harness
from tests.support.cli import run_cli_output
from tests.support.tolerances import SCORE_EPS

DECODE_HP = "beam_size=4,alpha=0.6,extra_length=20"
BEAM_SIZES = (1, 4)
# Per-request settings of beam_4 and the decode hparams the decoder runs them with;
# n_best > 1 is the decoder's n-best output (return_beams), its first n_best columns.
SETTINGS = [
    (dict(alpha=1.0), "beam_size=4,alpha=1.0,extra_length=20"),
    (dict(alpha=0.2, extra_length=3, n_best=2),
     "beam_size=4,alpha=0.2,extra_length=3,return_beams=true"),
    (dict(alpha=0.0, extra_length=8, n_best=4),
     "beam_size=4,alpha=0.0,extra_length=8,return_beams=true"),
]
SETTING_DTYPES = {"alpha": np.float32, "extra_length": np.int32, "n_best": np.int32}


def _export(run_dir, data_dir, export_dir, mode):
  """Exports the run computing in `mode` (none, bfloat16); returns the opened run."""
  precision.set_mixed_precision(mode)
  try:
    opened = t2t_keras.open_run(run_dir, data_dir=data_dir)
    opened.export_saved_model(export_dir, DECODE_HP, beam_sizes=BEAM_SIZES)
  finally:
    precision.set_mixed_precision("none")
  return opened


@pytest.fixture(scope="module")
def runs(tiny_trained_run, tmp_path_factory):
  run_dir, data_dir = tiny_trained_run
  root = tmp_path_factory.mktemp("tf_serving")
  lines = file_io.read_lines(os.path.join(os.path.dirname(data_dir), "text", "test.en"))[:16]
  out = dict(run_dir=run_dir, data_dir=data_dir, root=root, lines=lines + [""])
  for mode in ("none", "bfloat16"):
    out[mode] = str(root / f"export_{mode}")
    out[mode + "_run"] = _export(run_dir, data_dir, out[mode], mode)
  return out


@pytest.fixture(scope="module")
def server(runs):
  with tf_serving_harness.serve(runs["none"], "transformer") as served:
    yield served


def _decoder(runs, lines, decode_hp, capsys, mode="none"):
  """The decoder command's output lines for `lines` (in-process, as a user runs it)."""
  src, out = runs["root"] / "in.txt", runs["root"] / "out.txt"
  src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  try:
    code, _, err = run_cli_output("t2t_keras.cli.decoder", [
        f"--output_dir={runs['run_dir']}", f"--data_dir={runs['data_dir']}",
        f"--decode_hparams={decode_hp}", f"--mixed_precision={mode}",
        f"--decode_from_file={src}", f"--decode_to_file={out}"], capsys)
  finally:
    precision.set_mixed_precision("none")
  assert code == 0, err[-3000:]
  return out.read_text(encoding="utf-8").split("\n")[:-1]


def _texts(values):
  return [v.decode("utf-8") for v in np.ravel(values)]


def _settings(values):
  """Request inputs for settings `values`: one value each, or one per row if a list."""
  return {name: np.asarray(v if isinstance(v, list) else [v], SETTING_DTYPES[name])
          for name, v in values.items()}


def _n_best(outputs, n):
  """The first n hypotheses of each `[batch, K]` row, tab-joined as the decoder writes them."""
  return ["\t".join(_texts(row)[:n]) for row in outputs]


def _near_tie_equal(runs, got, want, lines, decode_hp, mode="none", what=""):
  model, encoders = runs[mode + "_run"].model, runs[mode + "_run"].encoders
  stop_early = "return_beams" not in decode_hp
  margin_of = near_ties.text_margin_of(model, encoders, lines, decode_hp, stop_early)
  near_ties.assert_equal_or_near_tie(got, want, margin_of, SCORE_EPS, what)


def test_stock_server_loads_the_float32_export_and_serves_the_decoders_output(
    runs, server, capsys):
  # XLA disabled, session loader, warm-up: one request per signature, all replayed.
  assert server.version == 1 and server.project_modules == []
  assert server.warmup_replayed == 2 + len(BEAM_SIZES)
  lines = runs["lines"]
  got = server.predict("serving_default", {"inputs": np.array(lines, object)})
  assert got["outputs"].shape == (len(lines),) and not got["errors"].any()
  want = _decoder(runs, lines, DECODE_HP, capsys)
  assert sum(bool(w) for w in want) == len(lines) - 1 and want[-1] == ""
  _near_tie_equal(runs, _texts(got["outputs"]), want, lines, DECODE_HP,
                  what="served float32 export vs t2t_keras_decoder")
  # REST, row format: the same server on the same batch, so exact.
  status, body = server.predict_rest({"instances": lines})
  assert status == 200, body
  assert [p["outputs"] for p in body["predictions"]] == _texts(got["outputs"])
  np.testing.assert_array_equal(  # JSON holds each float32 in decimal, enough to round-trip
      np.float32([p["scores"] for p in body["predictions"]]), got["scores"])


def test_per_request_settings_equal_the_decoder_with_those_decode_hparams(
    runs, server, capsys):
  lines = runs["lines"][:-1]
  per_row = {}  # line index -> (setting's index, its text), for the mixed request below
  for k, (values, decode_hp) in enumerate(SETTINGS):
    got = server.predict("beam_4", dict(inputs=np.array(lines, object),
                                         **_settings(values)))
    assert got["outputs"].shape == (len(lines), 4) and not got["errors"].any()
    n = values.get("n_best", 1)
    assert not any(_texts(got["outputs"][:, n:])) and not got["scores"][:, n:].any()
    want = ["\t".join(line.split("\t")[:n]) for line in _decoder(runs, lines, decode_hp,
                                                                   capsys)]
    _near_tie_equal(runs, _n_best(got["outputs"], n), want, lines, decode_hp,
                    what=f"beam_4 with {values} vs t2t_keras_decoder {decode_hp}")
    for i in range(k, len(lines), len(SETTINGS)):
      per_row[i] = (k, _n_best(got["outputs"][i:i + 1], n)[0])
  # One request whose rows carry different settings (as the batching scheduler joins
  # requests): each row as in its own setting's request, up to a near-tie.
  rows = [SETTINGS[per_row[i][0]][0] for i in range(len(lines))]
  mixed = {name: [r.get(name, d) for r in rows] for name, d in
           (("alpha", 0.6), ("extra_length", 20), ("n_best", 1))}
  got = server.predict("beam_4", dict(inputs=np.array(lines, object),
                                       **_settings(mixed)))
  texts = [_n_best(got["outputs"][i:i + 1], rows[i].get("n_best", 1))[0]
           for i in range(len(lines))]
  for i, text in enumerate(texts):
    if text != per_row[i][1]:
      _near_tie_equal(runs, [text], [per_row[i][1]], [lines[i]], SETTINGS[per_row[i][0]][1],
                      what="a row of a mixed-settings request vs its own request")
  # The same mixed request over REST (every setting in every instance): exact.
  instances = [dict(inputs=line, **{name: mixed[name][i] for name in mixed})
               for i, line in enumerate(lines)]
  status, body = server.predict_rest({"signature_name": "beam_4", "instances": instances})
  assert status == 200, body
  assert [p["outputs"] for p in body["predictions"]] == [_texts(r) for r in got["outputs"]]
  # beam_1 is greedy search with its own extra_length.
  got = server.predict("beam_1", {"inputs": np.array(lines, object),
                                  "extra_length": np.array([5], np.int32)})
  _near_tie_equal(runs, _texts(got["outputs"]), _decoder(
      runs, lines, "beam_size=1,extra_length=5", capsys), lines, "beam_size=1,extra_length=5",
      what="beam_1 vs the greedy decoder")


def test_no_settings_gives_serving_defaults_output_bit_for_bit(runs, server):
  # Exact on every CPU: one server, one batch, the same search with settings as tensors.
  inputs = {"inputs": np.array(runs["lines"], object)}
  plain = server.predict("serving_default", inputs)
  for request in (inputs, dict(inputs, **_settings(dict(alpha=0.6, extra_length=20,
                                                        n_best=1)))):
    got = server.predict("beam_4", request)
    assert _texts(got["outputs"][:, 0]) == _texts(plain["outputs"])
    np.testing.assert_array_equal(got["scores"][:, 0], plain["scores"])
    assert not any(_texts(got["outputs"][:, 1:])) and not got["scores"][:, 1:].any()


def test_bad_settings_are_refused_by_name_and_a_long_extra_length_is_cut(runs, server):
  lines = np.array(runs["lines"][:3], object)
  for values, message in ((dict(n_best=5), "n_best must be between 1 and"),
                          (dict(n_best=0), "n_best must be between 1 and"),
                          (dict(alpha=-0.5), "alpha must be finite and >= 0"),
                          (dict(alpha=float("nan")), "alpha must be finite and >= 0"),
                          (dict(extra_length=-1), "extra_length must be >= 0"),
                          (dict(alpha=[0.6, 0.6]), "alpha must hold one value")):
    with pytest.raises(grpc.RpcError) as error:
      server.predict("beam_4", dict(inputs=lines, **_settings(values)))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, values
    assert message in error.value.details(), (values, error.value.details())
  status, body = server.predict_rest({"signature_name": "beam_4", "instances": [
      {"inputs": "a house", "alpha": 0.6, "extra_length": 20, "n_best": 9}]})
  assert status == 400 and "n_best must be between 1 and" in body["error"]
  long = server.predict("beam_4", dict(inputs=lines, **_settings(dict(extra_length=500))))
  most = server.predict("beam_4", dict(inputs=lines, **_settings(dict(extra_length=20))))
  assert _texts(long["outputs"]) == _texts(most["outputs"])
  assert all("extra_length cut to the export's maximum 20" in e for e in _texts(long["errors"]))
  assert not any(_texts(most["errors"]))


def test_query_command_through_the_server(runs, server, capsys):
  lines = runs["lines"][:5] + [""]
  src = runs["root"] / "query.txt"
  src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  common = ["--servable_name=transformer", f"--input_file={src}", "--timeout_secs=60"]
  settings = ["--signature_name=beam_4", "--alpha=0.2", "--n_best=2"]
  # What the command prints for the settings given and the export's extra_length (20),
  # read from the model's metadata: the request the command sends, hence exact.
  want = server.predict("beam_4", dict(inputs=np.array(lines, object), **_settings(
      dict(alpha=0.2, extra_length=20, n_best=2))))
  want = _n_best(want["outputs"], 2)
  assert want[-1] == "\t"  # n_best columns on every line: two empty ones for the empty line
  plain = _texts(server.predict("serving_default",
                                {"inputs": np.array(lines, object)})["outputs"])
  for protocol in ([f"--server={server.grpc_target}"],
                   ["--rest", f"--server={server.rest_address}"]):
    code, out, err = run_cli_output("t2t_keras.cli.query", common + protocol, capsys)
    assert code == 0, err
    assert out.split("\n")[:-1] == plain, protocol
    code, out, err = run_cli_output("t2t_keras.cli.query", common + protocol + settings, capsys)
    assert code == 0, err
    assert out.split("\n")[:-1] == want, protocol
  # T2T's protocol: ids in Examples, encoded and decoded with the run's vocabulary.
  code, out, err = run_cli_output("t2t_keras.cli.query", common + [
      f"--server={server.grpc_target}", "--signature_name=serialized_example",
      "--problem=translate_from_files", f"--data_dir={runs['data_dir']}"], capsys)
  assert code == 0, err
  assert out.split("\n")[:-1] == plain
  code, _, err = run_cli_output("t2t_keras.cli.query", common + [
      f"--server={server.grpc_target}", "--signature_name=beam_3"], capsys)
  assert code != 0 and "has no signature beam_3" in err and "beam_4" in err, err
  code, _, err = run_cli_output("t2t_keras.cli.query", common + [
      f"--server={server.grpc_target}", "--alpha=1"], capsys)
  assert code != 0 and "--signature_name=beam_<K>" in err, err


def test_stock_server_serves_the_mixed_bfloat16_export(runs, capsys):
  lines = runs["lines"]
  with tf_serving_harness.serve(runs["bfloat16"], "transformer") as served:
    assert served.warmup_replayed == 2 + len(BEAM_SIZES) and served.project_modules == []
    got = served.predict("serving_default", {"inputs": np.array(lines, object)})
    settings = served.predict("beam_4", dict(inputs=np.array(lines, object),
                                             **_settings(SETTINGS[1][0])))
    status, body = served.predict_rest({"instances": lines})  # same server and batch: exact
    assert status == 200 and [p["outputs"] for p in body["predictions"]] == _texts(
        got["outputs"]), body
  want = _decoder(runs, lines, DECODE_HP, capsys, mode="bfloat16")
  # The export runs the mixed model (float32 weights cast at each use), the decoder its
  # bfloat16 twin: both round to bfloat16 at other places in each of the model's ~20
  # layers of ops, up to ~20 * 2 ** -9 of a score (tests/test_decoding.py): 2% of the
  # largest score is eps.
  eps = 0.02 * float(np.abs(got["scores"]).max())
  model, encoders = runs["bfloat16_run"].model, runs["bfloat16_run"].encoders
  margin_of = near_ties.text_margin_of(model, encoders, lines, DECODE_HP)
  near_ties.assert_equal_or_near_tie(_texts(got["outputs"]), want, margin_of, eps,
                                     "served bfloat16 export vs t2t_keras_decoder bfloat16")
  values, decode_hp = SETTINGS[1]
  want = ["\t".join(line.split("\t")[:2]) for line in
          _decoder(runs, lines, decode_hp, capsys, mode="bfloat16")]
  margin_of = near_ties.text_margin_of(model, encoders, lines, decode_hp, stop_early=False)
  near_ties.assert_equal_or_near_tie(_n_best(settings["outputs"], 2)[:-1], want[:-1],
                                     margin_of, eps, f"bfloat16 beam_4 with {values}")


def test_export_exposes_its_settings_signatures(runs, server):
  assert saved_model.settings_signature(4) == "beam_4"
  status, body = server.rest("GET", "/v1/models/transformer/metadata")
  assert status == 200, body
  signatures = body["metadata"]["signature_def"]["signature_def"]
  assert {"serving_default", "serialized_example", "beam_1", "beam_4"} <= set(signatures)
  assert set(signatures["beam_4"]["defaults"]) == {"alpha", "extra_length", "n_best"}
  assert set(signatures["serving_default"]["inputs"]) == {"inputs"}  # batching-safe
