"""SavedModel export: fresh-process load == TextDecoder, op allow-list, versions, load.

How a stock TF Serving runs the export (XLA disabled, session loader, warm-up, gRPC
and REST, the query command, per-request settings): tests/test_tf_serving.py.

One small model is trained and exported once per module (about 3 minutes in all).
"""

import ast
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the TF-Text ops the SavedModel uses)
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.saved_model import loader_impl
from tensorflow_serving.apis import prediction_log_pb2

from data_gen import file_io
import t2t_keras
from t2t_keras.cli import query
from t2t_keras.decoding import seq2seq, text_rules
from t2t_keras.decoding import text_decoder as text_decoder_lib
from t2t_keras.export import saved_model
from t2t_keras.hparams import create_decode_hparams
from tests.support import near_ties
from tests.support.tolerances import SCORE_EPS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
BIN = os.path.dirname(sys.executable)
DECODE_HP = "beam_size=4,alpha=0.6,extra_length=20"
BEAMS_HP = "beam_size=2,alpha=0.6,extra_length=5,return_beams=true"  # version 2

# TF-Text ops that TF Serving's tensorflow_model_server links in: its
# model_servers/BUILD puts "@org_tensorflow_text//tensorflow_text:ops_lib" in
# SUPPORTED_TENSORFLOW_OPS (since 2.x; the 2.0 release notes name the wordpiece,
# whitespace, unicode_script tokenizers, constrained_sequence and sentence
# breaking ops). Only ops of that library that we know by name are listed.
TF_TEXT_SERVING_OPS = frozenset({
    "RegexSplitWithOffsets", "WordpieceTokenizeWithOffsets", "WhitespaceTokenizeWithOffsets",
    "UnicodeScriptTokenizeWithOffsets", "CaseFoldUTF8", "NormalizeUTF8",
    "ConstrainedSequence", "SentenceFragments", "SplitMergeTokenizeWithOffsets",
})
# Core ops a model server cannot run (they call back into Python).
FORBIDDEN_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
# A SavedModel decoding one batch and TextDecoder decoding the same lines in other
# batches (sorted, split by batch_size, padded to other lengths) run the same float32
# model on other matmul shapes, whose kernels round differently on some CPUs. Each is
# the cached decode, whose scores lie within SCORE_EPS (1e-4, checked by
# tests/test_decoding.py) of the full uncached pass T2T's NumPy search reads; so
# their texts are equal or part at a choice of margin <= 2 * SCORE_EPS (the near-tie
# rule, tests/support/near_ties.py). The same signature on the same batch in one process is
# bitwise the same (same kernels, same shapes) and is compared exactly.


def _margin_of(run, lines, decode_hp=DECODE_HP, stop_early=True):
  """near_ties' margin_of for `lines` decoded with `decode_hp` by the run's model."""
  return near_ties.text_margin_of(run["model"], run["encoders"], lines, decode_hp, stop_early)


@pytest.fixture(scope="module")
def run(tiny_trained_run):
  """(run_dir, data_dir, export_dir, version_1_dir, model, hparams, encoders)."""
  run_dir, data_dir = tiny_trained_run
  opened = t2t_keras.open_run(run_dir, data_dir=data_dir)
  model, hp, problem, encoders = opened.model, opened.hparams, opened.problem, opened.encoders
  vocab = {s: os.path.join(data_dir, problem.vocab_filenames[s]) for s in encoders}
  export_dir = os.path.join(run_dir, "export")  # the exporter CLI's default
  version_dir = saved_model.export_saved_model(model, hp, create_decode_hparams(DECODE_HP), vocab,
                                          export_dir, encoders)
  return dict(run_dir=run_dir, data_dir=data_dir, export_dir=export_dir, v1=version_dir,
              model=model, hp=hp, encoders=encoders)


@pytest.fixture(scope="module")
def loaded(run):
  return tf.saved_model.load(run["v1"])


@pytest.fixture(scope="module")
def text_decoder(run):
  return text_decoder_lib.TextDecoder(run["model"], run["encoders"],
                                 create_decode_hparams(DECODE_HP), log=lambda line: None)


def _translate(loaded, sentences):
  out = loaded.signatures["serving_default"](inputs=tf.constant(sentences, tf.string))
  return [o.decode("utf-8") for o in out["outputs"].numpy()], out["scores"].numpy()


def _test_lines(run, n=50):
  return file_io.read_lines(os.path.join(os.path.dirname(run["data_dir"]), "text",
                                         "test.en"))[:n]


def test_layout_and_versioning(run):
  assert saved_model.existing_versions(run["export_dir"]) == [1]
  assert os.listdir(run["export_dir"]) == ["1"]  # no temp directory left behind
  assert os.path.exists(os.path.join(run["v1"], "saved_model.pb"))
  assets = os.listdir(os.path.join(run["v1"], "assets"))
  assert any(name.endswith(".subwords") for name in assets), assets


def _graph_op_types(saved_model_dir):
  proto = saved_model_pb2.SavedModel()
  with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
    proto.ParseFromString(f.read())
  graph = proto.meta_graphs[0].graph_def
  functions = {f.signature.name for f in graph.library.function}
  ops = {n.op for n in graph.node}
  for function in graph.library.function:
    ops |= {n.op for n in function.node_def}
  return ops - functions  # calls of library functions are not op types


def test_graph_uses_only_core_and_serving_tf_text_ops(run):
  ops = _graph_op_types(run["v1"])
  # The registry of a process that imported only tensorflow defines "core".
  script = ("import json, sys, tensorflow\n"
            "from tensorflow.python.framework import op_def_registry\n"
            "ops = json.loads(sys.stdin.read())\n"
            "print(json.dumps(sorted(o for o in ops if op_def_registry.get(o) is None)))\n")
  result = subprocess.run([sys.executable, "-c", script], input=json.dumps(sorted(ops)),
                          capture_output=True, text=True, env=ENV, timeout=120, check=True)
  not_core = set(json.loads(result.stdout.strip().splitlines()[-1]))
  assert not_core <= TF_TEXT_SERVING_OPS, sorted(not_core - TF_TEXT_SERVING_OPS)
  assert not ops & FORBIDDEN_OPS
  # The walk must see inside functions: tokenization and beam search live there.
  assert {"WordpieceTokenizeWithOffsets", "While", "HashTableV2"} <= ops


def test_fresh_process_equals_text_decoder(run, text_decoder):
  lines = _test_lines(run)
  assert len(lines) == 50
  script = ("import json, sys\nimport tensorflow as tf, tensorflow_text\n"
            "m = tf.saved_model.load(sys.argv[1])\n"
            "lines = json.loads(sys.stdin.read())\n"
            "out = m.signatures['serving_default'](inputs=tf.constant(lines))['outputs']\n"
            "mods = sorted(k for k in sys.modules if k.split('.')[0] in "
            "('t2t_keras', 'data_gen', 'tests'))\n"
            "print(json.dumps({'out': [o.decode() for o in out.numpy()], 'mods': mods}))\n")
  result = subprocess.run([sys.executable, "-c", script, run["v1"]], input=json.dumps(lines),
                          capture_output=True, text=True, env=dict(ENV, PYTHONPATH=""),
                          cwd="/", timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  got = json.loads(result.stdout.strip().splitlines()[-1])
  assert got["mods"] == []
  expected = text_decoder.decode_lines(lines)  # batches of 32 and 18, longest first
  near_ties.assert_equal_or_near_tie(got["out"], expected, _margin_of(run, lines), SCORE_EPS,
                                     "SavedModel (one batch) vs TextDecoder")
  assert sum(bool(e) for e in expected) == 50


def test_empty_long_and_mixed_batch(run, loaded):
  assert text_rules.input_cap(create_decode_hparams(DECODE_HP)) is None  # T2T: no cut
  # > max_length (256) subword tokens. 90 repeats (361 tokens): T2T's search on the
  # fixture parts its choices by >= 1.4e-3 there, well above 2 * SCORE_EPS, so the
  # near-tie rule below still tells a cut input (another output) from the whole;
  # with 80 repeats a choice was within 1.9e-4, a near-tie that accepts any output.
  long_line = "the big house and " * 90
  batch = ["the big house", "", long_line, "   ", "a red cat sees the old dog", "old"]
  outputs, scores = _translate(loaded, batch)
  assert len(outputs) == len(batch)
  assert outputs[1] == outputs[3] == "" and scores[1] == scores[3] == 0.0
  # In order: the same as alone (a batch of one: other shapes, so up to a near-tie).
  alone = [_translate(loaded, [batch[i]])[0][0] for i in (0, 4, 5)]
  near_ties.assert_equal_or_near_tie([outputs[i] for i in (0, 4, 5)], alone,
                                     _margin_of(run, [batch[i] for i in (0, 4, 5)]), SCORE_EPS,
                                     "in a mixed batch vs alone")
  # The long input is translated whole, as the Python decoder does.
  assert len(run["encoders"]["inputs"].encode(long_line)) > run["hp"].max_length
  whole = text_decoder_lib.TextDecoder(run["model"], run["encoders"], create_decode_hparams(DECODE_HP),
                                  log=lambda line: None)
  expected = whole.decode_lines([long_line])[0]
  assert expected != ""
  near_ties.assert_equal_or_near_tie([outputs[2]], [expected], _margin_of(run, [long_line]),
                                     SCORE_EPS, "long line, batch of 6 vs TextDecoder alone")


def test_example_signature_matches_text_signature(run, loaded):
  # Exact on every CPU: both signatures run the same decode graph on the same batch in one
  # process.
  lines = ["the big house", "a red cat sees the old dog", "", "new blue dog"]
  enc = run["encoders"]
  examples = [saved_model.make_example(enc["inputs"].encode(s) + [1] if s else []) for s in lines]
  out = loaded.signatures["serialized_example"](input=tf.constant(examples))
  ids = out["outputs"].numpy()
  assert ids.dtype == np.int32 and ids.ndim == 2 and len(ids) == len(lines)
  texts = [enc["targets"].decode(seq2seq.strip_ids(row)) for row in ids]
  expected, expected_scores = _translate(loaded, lines)
  assert texts == expected
  np.testing.assert_allclose(out["scores"].numpy(), expected_scores, atol=1e-5)
  assert not ids[2].any()


def test_all_empty_and_zero_size_batches(loaded):
  outputs, scores = _translate(loaded, ["", " "])
  assert outputs == ["", ""] and not scores.any()
  assert _translate(loaded, [])[0] == []
  out = loaded.signatures["serialized_example"](
      input=tf.constant([saved_model.make_example([]), saved_model.make_example([1])]))
  assert out["outputs"].shape[0] == 2 and not out["outputs"].numpy().any()


def test_saved_model_cli_show_and_run(run, loaded):
  show = subprocess.run([os.path.join(BIN, "saved_model_cli"), "show", "--all", "--dir",
                         run["v1"]], capture_output=True, text=True, env=ENV, timeout=120)
  assert show.returncode == 0, show.stderr[-2000:]
  text = show.stdout
  def section(name):
    start = text.index(f"signature_def['{name}']")
    return text[start:text.index("Method name", start)]
  default, example = section("serving_default"), section("serialized_example")
  # inputs, outputs and the per-row errors; inputs of unknown rank (checked in-graph).
  assert "inputs['inputs']" in default and default.count("DT_STRING") == 3
  assert "outputs['errors']" in default and "shape: unknown_rank" in default
  assert "outputs['scores']" in default and "DT_FLOAT" in default
  assert "inputs['input']" in example and "DT_INT32" in example
  assert "shape: (-1, -1)" in example
  # The plain binary has no TF-Text ops (TF Serving links them in), so `run` goes
  # through the same CLI code with tensorflow_text imported first.
  script = ("import sys, tensorflow_text\nfrom tensorflow.python.tools import saved_model_cli\n"
            "sys.argv = ['saved_model_cli'] + sys.argv[1:]\nsaved_model_cli.main()\n")
  sentence = "the red cat sees the dog"
  result = subprocess.run(
      [sys.executable, "-c", script, "run", "--dir", run["v1"], "--tag_set", "serve",
       "--signature_def", "serving_default", "--input_exprs", f'inputs=["{sentence}"]'],
      capture_output=True, text=True, env=ENV, timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
  printed = re.search(r"Result for output key outputs:\n\[(b(['\"]).*?\2)\]", result.stdout)
  assert printed, result.stdout[-2000:]
  got = ast.literal_eval(printed.group(1)).decode("utf-8")
  # The same signature on the same batch as in this process, but another process, whose
  # matmuls may split across threads otherwise: equal, or parted at a near-tie.
  expected = _translate(loaded, [sentence])[0][0]
  assert expected
  near_ties.assert_equal_or_near_tie([got], [expected], _margin_of(run, [sentence]), SCORE_EPS,
                                     "saved_model_cli run vs in-process")


def _predict(loaded, signature, inputs):
  return {k: v.numpy() for k, v in loaded.signatures[signature](**inputs).items()}


def test_concurrent_requests_are_consistent(loaded):
  # Exact on every CPU: the same signature, shape and process serves every thread.
  sentences = ["the big house", "a red cat sees the old dog", "new", "blue and green", ""]
  expected = {s: _translate(loaded, [s])[0][0] for s in sentences}
  fn = loaded.signatures["serving_default"]

  def worker(seed):
    rng = np.random.default_rng(seed)
    mismatches = 0
    for _ in range(50):
      s = sentences[rng.integers(len(sentences))]
      out = fn(inputs=tf.constant([s]))["outputs"].numpy()[0].decode()
      mismatches += out != expected[s]
    return mismatches

  with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
    assert list(pool.map(worker, range(8))) == [0] * 8


def _tree_digest(path):
  digest = hashlib.sha256()
  for root, _, files in sorted(os.walk(path)):
    for name in sorted(files):
      digest.update(os.path.join(os.path.relpath(root, path), name).encode())
      with open(os.path.join(root, name), "rb") as f:
        digest.update(f.read())
  return digest.hexdigest()


def test_exporter_cli_adds_version_2_and_warmup_parses(run, loaded):
  before = _tree_digest(run["v1"])
  result = subprocess.run(
      [sys.executable, "-m", "t2t_keras.cli.exporter", f"--output_dir={run['run_dir']}",
       f"--data_dir={run['data_dir']}", f"--decode_hparams={BEAMS_HP}",
       "--problem=translate_from_files", "--serving_beam_sizes=1,2"],
      capture_output=True, text=True, env=ENV, cwd=REPO, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip().endswith(os.path.join(run["export_dir"], "2"))
  assert saved_model.existing_versions(run["export_dir"]) == [1, 2]
  assert sorted(os.listdir(run["export_dir"])) == ["1", "2"]
  assert _tree_digest(run["v1"]) == before
  for version in ("1", "2"):
    path = os.path.join(run["export_dir"], version, "assets.extra",
                        saved_model.WARMUP_FILENAME)
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy())
            for r in tf.data.TFRecordDataset(path)]
    signatures = sorted(log.predict_log.request.model_spec.signature_name for log in logs)
    # One request a signature: beam_<K> of the decode hparams' beam size by default,
    # of each --serving_beam_sizes in version 2.
    beams = ["beam_4"] if version == "1" else ["beam_1", "beam_2"]
    assert signatures == beams + ["serialized_example", "serving_default"]
  # Version 2 returns both beams, as the Python decoder's tab-joined n-best list.
  lines = ["the big house", "", "a red cat sees the old dog"]
  outputs = tf.saved_model.load(os.path.join(run["export_dir"], "2")).signatures[
      "serving_default"](inputs=tf.constant(lines))["outputs"].numpy()
  assert outputs.shape == (3, 2)
  beams = text_decoder_lib.TextDecoder(run["model"], run["encoders"],
                                  create_decode_hparams(BEAMS_HP), log=lambda line: None)
  expected = beams.decode_lines(lines)
  expected[1] = "\t"  # an empty input gives empty beams (TextDecoder gives one "")
  # TextDecoder decodes the 2 non-empty lines as one batch, the SavedModel all 3: other
  # shapes, so equal up to a near-tie; every beam is returned, so T2T's stop_early is off.
  near_ties.assert_equal_or_near_tie(["\t".join(o.decode() for o in row) for row in outputs],
                                     expected, _margin_of(run, lines, BEAMS_HP, stop_early=False),
                                     SCORE_EPS, "version 2 beams vs TextDecoder")
  version_2 = tf.saved_model.load(os.path.join(run["export_dir"], "2"))
  signature_defs = loader_impl.parse_saved_model(
      os.path.join(run["export_dir"], "2")).meta_graphs[0].signature_def
  for log in logs:  # version 2's warm-up requests run on it
    request = log.predict_log.request
    # The model server fills inputs a request leaves out from the signature's defaults;
    # TensorFlow's Python signatures do not, so they are passed here.
    defaults = signature_defs[request.model_spec.signature_name].defaults
    inputs = {k: tf.constant(tf.make_ndarray(v))
              for k, v in {**defaults, **request.inputs}.items()}
    out = _predict(version_2, request.model_spec.signature_name, inputs)
    assert len(out["scores"]) == len(saved_model.WARMUP_SENTENCES)


def test_bad_arguments(run, tmp_path):
  with pytest.raises(ValueError, match="vocab_files"):
    saved_model.ServingModule(run["model"], run["hp"], create_decode_hparams(""),
                         {"inputs": str(tmp_path / "missing"), "targets": "x"})
  with pytest.raises(ValueError, match="batch_size"):
    query.translate(["a"], lambda values: None, batch_size=0)
  assert text_rules.input_cap(create_decode_hparams("max_input_size=7")) == 6  # T2T: + EOS
  (tmp_path / "3").mkdir()
  (tmp_path / "10").mkdir()
  (tmp_path / ".tmp-export-1").mkdir()
  assert saved_model.existing_versions(str(tmp_path)) == [3, 10]
