"""SentencePiece vocabularies: the Python and in-graph encoders against the sentencepiece
package, datagen's --vocab_type through the command, and a run trained on one served by
the TF Serving stand-in and decoded by CTranslate2."""

import json
import os
import pickle

import pytest
import sentencepiece
import tensorflow as tf

from data_gen import generate, registry
from data_gen import sentencepiece_encoder as spm_lib
from data_gen.graph_sentencepiece_encoder import GraphSentencePieceEncoder, graph_encoder
from data_gen.text_encoder import EOS_ID, PAD_ID
from tests.support import tiny_problem
from tests.support.cli import run_datagen_in_process

# Every character of these is in CORPUS, so decode(encode(x)) is x as the model normalizes it.
CORPUS = ["Hello world, this is a small test.", "Über café 123 naïve — ok! (really?)",
          "Der schnelle braune Fuchs springt 42 mal; 3.14 ≈ π.", "日本語のテキスト、 東京。",
          "tabs\tand  double  spaces", "a_b-c/d \"quoted\" 'single' #7 $5 %9 &x *y +z",
          "Numbers: 0, 6, 8 and 1234567890."] * 20
TEXTS = ["Hello  world!", "", "  Über 42 café  ", "日本語。", "π ≈ 3.14 (ok)", "a\tb", "1234567890",
         "x", " ", "'quoted' \"Fuchs\"; tabs-and_spaces"]
UNSEEN = ["Zebra ✓ 🙂", "ĳ ﬁ ＡＢＣ"]  # characters not in CORPUS, NFKC-normalized ones


@pytest.fixture(scope="module", params=spm_lib.MODEL_TYPES)
def model_file(request, tmp_path_factory):
  path = str(tmp_path_factory.mktemp("spm_" + request.param) / "vocab.test.120.spm.model")
  with open(path, "wb") as f:
    f.write(spm_lib.train(iter(CORPUS), 120, request.param))
  return path


def test_python_encoder_equals_sentencepiece_and_keeps_t2t_ids(model_file):
  encoder = spm_lib.load_vocab(model_file)
  reference = sentencepiece.SentencePieceProcessor(model_file=model_file)
  assert isinstance(encoder, spm_lib.SentencePieceEncoder)
  assert encoder.pieces[:3] == ("<pad>", "<EOS>", "<unk>")
  assert (PAD_ID, EOS_ID, reference.bos_id()) == (reference.pad_id(), reference.eos_id(), -1)
  assert encoder.vocab_size == reference.get_piece_size()
  for text in TEXTS + UNSEEN:
    ids = encoder.encode(text)
    assert ids == reference.encode(text), text
    assert EOS_ID not in ids and PAD_ID not in ids
    assert encoder.decode(ids) == reference.decode(ids)
    assert encoder.decode_list(ids) == [reference.id_to_piece(i) for i in ids]
  for text in TEXTS:  # covered characters: the round trip is sentencepiece's normalization
    normalized = reference.normalize(text).replace("\u2581", " ").strip()  # ▁: its space
    assert encoder.decode(encoder.encode(text)) == normalized, text
  assert encoder.encode("") == [] and encoder.decode([]) == ""
  assert spm_lib.UNK_ID in encoder.encode(UNSEEN[0])  # uncovered characters: <unk>
  ids = encoder.encode(TEXTS[0])
  assert encoder.decode(ids + [EOS_ID, PAD_ID], strip_extraneous=True) == encoder.decode(ids)
  copy = pickle.loads(pickle.dumps(encoder))  # as datagen sends it to its worker processes
  assert [copy.encode(t) for t in TEXTS] == [encoder.encode(t) for t in TEXTS]


def test_in_graph_tokenizer_gives_the_same_ids_and_text(model_file):
  encoder = spm_lib.load_vocab(model_file)
  graph = graph_encoder(model_file)
  assert isinstance(graph, GraphSentencePieceEncoder)
  assert graph.vocab_size == encoder.vocab_size
  texts = TEXTS + UNSEEN
  ids = graph.encode(tf.constant(texts)).to_list()
  assert ids == [encoder.encode(t) for t in texts]
  decoded = [t.decode("utf-8") for t in graph.decode(tf.ragged.constant(ids, tf.int64)).numpy()]
  assert decoded == [encoder.decode(i) for i in ids]
  # Dense ids: trailing PAD dropped, cut at the first EOS as the SavedModel does.
  first = encoder.encode(TEXTS[0])
  dense = tf.constant([first + [EOS_ID] + first + [PAD_ID], [PAD_ID] * (2 * len(first) + 2)])
  assert [t.decode() for t in graph.decode(dense, cut_at_eos=True).numpy()] == [
      encoder.decode(first), ""]

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def round_trip(strings):
    return graph.decode(graph.encode(graph.normalize_input(strings)))

  assert [t.decode() for t in round_trip(tf.constant(TEXTS)).numpy()] == [
      encoder.decode(encoder.encode(t.strip())) for t in TEXTS]


def test_a_model_without_t2t_ids_is_refused(tmp_path):
  path = str(tmp_path / "plain.spm.model")
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(CORPUS), model_prefix=str(tmp_path / "plain"), vocab_size=80,
      hard_vocab_limit=False, minloglevel=2)
  os.rename(str(tmp_path / "plain.model"), path)
  with pytest.raises(ValueError, match="needs pad 0, EOS 1 and no BOS"):
    spm_lib.SentencePieceEncoder(path)
  with pytest.raises(ValueError, match="vocab_size 10 is below the number of characters"):
    spm_lib.train(iter(CORPUS), 10)


def _records(data_dir, split):
  pattern = os.path.join(data_dir, "translate_from_files-%s-*" % split)
  out = []
  for path in sorted(tf.io.gfile.glob(pattern)):
    for raw in tf.data.TFRecordDataset(path):
      example = tf.train.Example.FromString(raw.numpy())
      out.append({k: list(example.features.feature[k].int64_list.value)
                  for k in ("inputs", "targets")})
  return out


def _write_text(root, count=300):
  text = os.path.join(root, "text")
  os.makedirs(text, exist_ok=True)
  tiny_problem.write_parallel(os.path.join(text, "train"), count, seed=1)
  tiny_problem.write_parallel(os.path.join(text, "dev"), 16, seed=2)
  return ["--train_source=%s/train.en" % text, "--train_target=%s/train.de" % text,
          "--dev_source=%s/dev.en" % text, "--dev_target=%s/dev.de" % text,
          "--source_lang=en", "--target_lang=de"], text


def test_datagen_cli_sentencepiece_then_subword_reencodes(tmp_path, capsys):
  files, text = _write_text(str(tmp_path))
  data_dir = str(tmp_path / "data")
  common = ["--problem=translate_from_files", "--data_dir=" + data_dir,
            "--tmp_dir=" + str(tmp_path / "tmp"), "--vocab_size=100", "--num_shards=2"]
  code, out, err = run_datagen_in_process(
      capsys, *common, *files, "--vocab_type=sentencepiece", "--sentencepiece_model_type=bpe")
  assert code == 0, err
  model_name = "vocab.translate_from_files.100.spm.model"
  manifest_path = os.path.join(data_dir, "translate_from_files.manifest.json")
  with open(manifest_path, encoding="utf-8") as f:
    manifest = json.load(f)
  assert [e["file"] for e in manifest["vocab"]] == [model_name]
  assert manifest["settings"]["vocab_type"] == "sentencepiece"
  assert manifest["settings"]["sentencepiece_model_type"] == "bpe"
  # The problem looked up by name (trainer, decoder, exporter) reads the type back.
  problem = registry.problem("translate_from_files", data_dir)
  assert problem.vocab_filenames["inputs"] == model_name
  encoders = problem.feature_encoders(data_dir)
  assert isinstance(encoders["targets"], spm_lib.SentencePieceEncoder)
  reference = sentencepiece.SentencePieceProcessor(model_file=os.path.join(data_dir, model_name))
  records = _records(data_dir, "dev")
  with open(os.path.join(text, "dev.en"), encoding="utf-8") as f:
    sources = f.read().splitlines()
  assert len(records) == len(sources) == 16
  for record in records:  # shuffled: in another order than the text file
    assert record["inputs"][-1] == EOS_ID and record["targets"][-1] == EOS_ID
    assert EOS_ID not in record["inputs"][:-1] and PAD_ID not in record["inputs"]
  decoded = [encoders["inputs"].decode(r["inputs"][:-1]) for r in records]
  assert sorted(decoded) == sorted(sources)
  assert all(r["inputs"][:-1] == reference.encode(d) for r, d in zip(records, decoded))
  assert all(r["targets"][-1] == EOS_ID for r in _records(data_dir, "train"))
  problem.check_data_dir(data_dir)
  # A rerun without vocab flags keeps the recorded vocabulary: nothing regenerated.
  code, out, err = run_datagen_in_process(capsys, *common, *files)
  assert code == 0, err
  assert out.count("(already done, skipped)") == 2, out
  # Another vocab type re-encodes every split; the manifest lists only the new vocab.
  code, out, err = run_datagen_in_process(capsys, *common, *files, "--vocab_type=subword")
  assert code == 0, err
  assert "--vocab_type=subword (the manifest's: sentencepiece)" in out, out
  assert "every split re-encoded" in out and "skipped" not in out, out
  with open(manifest_path, encoding="utf-8") as f:
    assert [e["file"] for e in json.load(f)["vocab"]] == ["vocab.translate_from_files.100.subwords"]
  problem = registry.problem("translate_from_files", data_dir)
  assert problem.vocab_type == "subword"
  subword = problem.feature_encoders(data_dir)["inputs"]
  assert sorted(r["inputs"][:-1] for r in _records(data_dir, "dev")) == sorted(
      subword.encode(s) for s in sources)
  # Back to the SentencePiece model still in data_dir, unchanged: listed no more, so the
  # shards (encoded with the subwords) are re-encoded all the same.
  code, out, err = run_datagen_in_process(capsys, *common, *files, "--vocab_type=sentencepiece",
                                          "--sentencepiece_model_type=bpe")
  assert code == 0, err
  assert "vocab replaced since the shards were written: every split re-encoded" in out, out
  assert "skipped" not in out and "vocab build 0.0s (reused)" in out, out
  assert sorted(r["inputs"][:-1] for r in _records(data_dir, "dev")) == sorted(
      reference.encode(s) for s in sources)
  registry.problem("translate_from_files", data_dir).check_data_dir(data_dir)
  with pytest.raises(ValueError, match="--vocab_type must be one of subword, sentencepiece"):
    generate.generate_data("translate_from_files", data_dir, vocab_type="wordpiece")


@pytest.fixture(scope="module")
def spm_run(tmp_path_factory):
  """(run_dir, data_dir, opened run) of a tiny model trained briefly on SentencePiece data."""
  import t2t_keras
  from tests.support.trained_fixture import train_tiny_run
  root = str(tmp_path_factory.mktemp("spm_run"))
  _, text = _write_text(root, count=600)
  data_dir = os.path.join(root, "data")
  generate.generate_data(
      "translate_from_files", data_dir, os.path.join(root, "tmp"), num_shards=1, vocab_size=80,
      vocab_type="sentencepiece", train_source=text + "/train.en", train_target=text + "/train.de",
      dev_source=text + "/dev.en", dev_target=text + "/dev.de")
  overrides = ("num_hidden_layers=1,hidden_size=32,filter_size=64,num_heads=2,batch_size=512,"
               "learning_rate_warmup_steps=20,learning_rate_constant=0.5")
  run_dir, _ = train_tiny_run(root, steps=40, overrides=overrides, data_dir=data_dir)
  with open(os.path.join(text, "dev.en"), encoding="utf-8") as f:
    lines = f.read().splitlines()[:8]
  return run_dir, data_dir, t2t_keras.open_run(run_dir, data_dir=data_dir), lines


def test_run_json_records_the_sentencepiece_model(spm_run):
  run_dir, data_dir, opened, _ = spm_run
  with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
    vocab = json.load(f)["vocab"]
  assert [(e["file"], e["type"]) for e in vocab] == [
      ("vocab.translate_from_files.80.spm.model", "sentencepiece")]
  assert opened.vocab_files["inputs"].endswith(".spm.model")


# Greedy decoding: a model trained this briefly has near-ties between beams, where the
# engines' length penalties part; greedy steps compare exactly.
@pytest.fixture(scope="module")
def expected(spm_run):
  """The decoder's output lines (`open_run(...).translate`, as `t2t_keras_decoder`)."""
  _, _, opened, lines = spm_run
  out = opened.translate(lines, beam_size=1)
  assert sum(map(bool, out)) >= len(lines) // 2, out
  return out


def test_saved_model_served_as_tf_serving_equals_the_decoder(spm_run, expected, tmp_path):
  from tests.support import tf_serving_harness
  _, _, opened, lines = spm_run
  export_dir = str(tmp_path / "export")
  version = opened.export_saved_model(export_dir, "beam_size=1")
  assets = os.listdir(os.path.join(version, "assets"))
  assert any(name.endswith(".spm.model") for name in assets), assets
  os.rename(opened.vocab_files["inputs"], opened.vocab_files["inputs"] + ".moved")
  try:  # the export is self-contained: served without the data dir's model file
    with tf_serving_harness.serve(export_dir) as served:
      assert served.warmup_replayed > 0 and served.project_modules == []
      got = served.predict("serving_default", {"inputs": lines})["outputs"]
  finally:
    os.rename(opened.vocab_files["inputs"] + ".moved", opened.vocab_files["inputs"])
  assert [g.decode("utf-8") for g in got] == expected


def test_ctranslate2_export_decodes_as_the_decoder(spm_run, expected, tmp_path):
  pytest.importorskip("ctranslate2")
  _, _, opened, lines = spm_run
  model_dir = opened.export_ctranslate2(str(tmp_path / "ct2"))
  decoder = opened.decoder(opened.decode_hparams(beam_size=1), engine="ctranslate2",
                           ctranslate2_model_dir=model_dir)
  assert decoder.decode_lines(lines) == expected
