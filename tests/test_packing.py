"""Packed examples (T2T's pack_dataset): the packer, and the models computing each
example of a packed row as alone.

The packer (`training/inputs.pack_dataset`) is checked against a brute-force
packer written here from T2T's description of `pack_examples` / `pack_dataset`
(first fit over a queue of open rows, oldest first; the oldest row emitted when
none has room; segment ids 1, 2, ... per row, 0 for padding; positions
restarting at 0 in each example). The models (`Transformer`, `TransformerLM`)
are checked by packing examples of different lengths into one row and comparing
each example's logits with those of the example run alone, and by changing one
example of a row and finding the others' logits and attention untouched. A
training step on packed rows equals one on the same examples unpacked, and a
`*_packed` problem trains on rows of its `packed_length`.
"""

import numpy as np
import pytest
import tensorflow as tf

import t2t_keras
from data_gen import generator_utils as gu
from data_gen import registry
from t2t_keras.hparams import HParams, create_hparams
from t2t_keras.lm_model import TransformerLM
from t2t_keras.model import Transformer
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.training import inputs, losses
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support.step_utils import LINEAR_ADAM, assert_same_training
from tests.support.tiny_problem import ONE_LAYER

VOCAB = 40
NO_DROPOUT = "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0"
KEYS = ("inputs", "targets")
FEATURES = KEYS + inputs.packed_features()


# -- The brute-force packer -------------------------------------------------------

def brute_force_pack(examples, length, keys=KEYS, queue_size=10):
  """T2T's packing in plain Python: a list of rows {feature: list}."""
  open_rows, done = [], []
  for example in examples:
    seqs = {k: [int(t) for t in example[k][:length]] for k in keys}
    row = next((r for r in open_rows
                if all(len(r[k]) + len(seqs[k]) <= length for k in keys)), None)
    if row is None:
      if len(open_rows) == queue_size:
        done.append(open_rows.pop(0))
      row = {f: [] for k in keys for f in (k, k + "_segmentation", k + "_position")}
      row["examples"] = 0
      open_rows.append(row)
    row["examples"] += 1
    for k in keys:
      row[k] += seqs[k]
      row[k + "_segmentation"] += [row["examples"]] * len(seqs[k])
      row[k + "_position"] += list(range(len(seqs[k])))
  for row in done + open_rows:
    del row["examples"]
  return done + open_rows


def _random_examples(rng, count, max_len, keys=KEYS):
  """Examples of random lengths 1..max_len (ids >= 2, ending in EOS); an LM's inputs empty."""
  out = []
  for _ in range(count):
    ex = {}
    for k in KEYS:
      n = int(rng.integers(1, max_len + 1)) if k in keys else 0
      ex[k] = np.append(rng.integers(2, VOCAB, n - 1), 1).astype(np.int64) if n else \
          np.zeros([0], np.int64)
    out.append(ex)
  return out


def _dataset(examples):
  return tf.data.Dataset.from_generator(
      lambda: iter(examples),
      output_signature={k: tf.TensorSpec([None], tf.int64) for k in KEYS})


def _rows(dataset):
  return [{k: v.numpy().tolist() for k, v in row.items()} for row in dataset]


@pytest.mark.parametrize("keys, length, queue_size, max_len", [
    (KEYS, 16, 10, 12),
    (KEYS, 16, 1, 20),  # one open row (next fit); examples longer than a row are cut
    (KEYS, 64, 3, 30),
    (("targets",), 32, 10, 40),  # a language model: targets only
])
def test_pack_dataset_equals_brute_force(keys, length, queue_size, max_len):
  rng = np.random.default_rng(length + queue_size)
  examples = _random_examples(rng, 300, max_len, keys)
  got = _rows(inputs.pack_dataset(_dataset(examples), length, keys, queue_size))
  want = brute_force_pack(examples, length, keys, queue_size)
  assert len(got) == len(want) and len(want) < len(examples)
  for g, w in zip(got, want):
    assert g == w
  # Every token once, in order within its example; positions 0.. within each segment.
  tokens = sum(len(e[k][:length]) for e in examples for k in keys)
  assert sum(len(r[k]) for r in got for k in keys) == tokens


def test_pack_dataset_t2t_docstring_example():
  # T2T's pack_dataset docstring: two examples packed into one row of 10.
  examples = [{"inputs": np.array([8, 7, 1]), "targets": np.array([4, 1])},
              {"inputs": np.array([2, 3, 4, 1]), "targets": np.array([5, 6, 1])}]
  ds = tf.data.Dataset.from_generator(
      lambda: iter(examples), output_signature={k: tf.TensorSpec([None], tf.int64)
                                                for k in KEYS})
  [row] = _rows(inputs.pack_dataset(ds, 10).padded_batch(1, padded_shapes={
      f: [10] for f in FEATURES}))
  assert row["inputs"] == [[8, 7, 1, 2, 3, 4, 1, 0, 0, 0]]
  assert row["inputs_segmentation"] == [[1, 1, 1, 2, 2, 2, 2, 0, 0, 0]]
  assert row["inputs_position"] == [[0, 1, 2, 0, 1, 2, 3, 0, 0, 0]]
  assert row["targets"] == [[4, 1, 5, 6, 1, 0, 0, 0, 0, 0]]
  assert row["targets_segmentation"] == [[1, 1, 2, 2, 2, 0, 0, 0, 0, 0]]
  assert row["targets_position"] == [[0, 1, 0, 1, 2, 0, 0, 0, 0, 0]]


def _write_shard(tmp_path, examples, name="p-train"):
  path = str(tmp_path / gu.sharded_name(name, 0, 1))
  with tf.io.TFRecordWriter(path) as writer:
    for ex in examples:
      record = {k: ex[k].tolist() for k in KEYS if len(ex[k])}
      writer.write(gu.to_example(record).SerializeToString())
  return str(tmp_path / (name + "*"))


@pytest.mark.parametrize("has_inputs", [True, False])
def test_make_dataset_packs_every_kept_example_into_batches_of_rows(tmp_path, has_inputs):
  rng = np.random.default_rng(3)
  keys = KEYS if has_inputs else ("targets",)
  examples = _random_examples(rng, 200, 30, keys)
  pattern = _write_shard(tmp_path, examples)
  hp = HParams(batch_size=128, max_length=32, pack_dataset=True)
  batches = list(inputs.make_dataset(pattern, hp, "train", shuffle=False, repeat=False))
  assert {b["targets"].shape[0] for b in batches[:-1]} == {128 // 32}
  assert set(batches[0]) == set(FEATURES)
  rows = [{k: b[k].numpy()[r] for k in FEATURES} for b in batches
          for r in range(b["targets"].shape[0])]
  want = brute_force_pack(examples, 32, keys)  # unshuffled: the records in order
  assert len(rows) == len(want)
  for row, w in zip(rows, want):
    for f in w:
      n = len(w[f])
      assert row[f][:n].tolist() == w[f] and not row[f][n:].any(), f
  if not has_inputs:  # a language model's inputs stay empty
    assert batches[0]["inputs"].shape[1] == 0
  # Shuffled and repeated too; evaluation and predict mode read examples unpacked.
  train = next(iter(inputs.make_dataset(pattern, hp, "train", seed=1)))
  assert "targets_segmentation" in train and train["targets"].shape[0] == 4
  assert set(next(iter(inputs.make_dataset(pattern, hp, "eval")))) == set(KEYS)
  assert inputs.packed_row_length(hp, "eval") is inputs.packed_row_length(hp, "predict") is None
  assert inputs.packed_row_length(hp.replace(pack_dataset=False), "train") is None
  assert inputs.packed_row_length(hp.replace(pack_dataset=False), "train", 16) == 16


def test_packing_refuses_prepend_mode():
  with pytest.raises(ValueError, match="pack_dataset=true with prepend_mode"):
    HParams(pack_dataset=True, prepend_mode="prepend_inputs_masked_attention")
  hp = HParams(prepend_mode="prepend_inputs_masked_attention")
  with pytest.raises(ValueError, match="packed examples .* prepend_mode"):
    inputs.packed_row_length(hp, "train", 64)


# -- The models ------------------------------------------------------------------

def _pack_rows(examples, keys):
  """The brute-force rows of `examples` as one batch {feature: int64 [rows, width]}
  (2 columns of padding past the longest row), and each (row, {key: start}) of its
  segments, row by row."""
  length = 64
  rows = brute_force_pack(examples, length, keys)
  width = {k: max(len(r[k]) for r in rows) + 2 for k in keys}  # + padding
  batch = {f: np.zeros([len(rows), width[f.split("_")[0]]], np.int64)
           for f in rows[0]}
  for i, r in enumerate(rows):
    for f, v in r.items():
      batch[f][i, :len(v)] = v
  where = [(i, {k: r[k + "_segmentation"].index(s) for k in keys})
           for i, r in enumerate(rows) for s in range(1, max(r["targets_segmentation"]) + 1)]
  return batch, where


def _transformer(overrides, seed=0):
  tf.keras.utils.set_random_seed(seed)
  hp = create_hparams("transformer_tiny", ",".join(x for x in (NO_DROPOUT, overrides) if x))
  model = Transformer(hp, VOCAB, target_space_id=3)
  model.build()
  return model


def _lm(overrides, seed=0):
  tf.keras.utils.set_random_seed(seed)
  hp = create_hparams("transformer_tiny", ",".join(x for x in (NO_DROPOUT, overrides) if x))
  model = TransformerLM(hp, VOCAB)
  model.build()
  return model


def _three_examples(keys, seed=0):
  rng = np.random.default_rng(seed)
  lengths = {"inputs": (5, 9, 3), "targets": (7, 4, 11)}
  return [{k: (np.append(rng.integers(2, VOCAB, lengths[k][i] - 1), 1) if k in keys
               else np.zeros([0], np.int64)) for k in KEYS} for i in range(3)]


MODEL_VARIANTS = [
    "",  # pre-norm, sinusoid positions
    "pos=emb,layer_preprocess_sequence=none,layer_postprocess_sequence=dan",
    "pos=timing_paper",
    "self_attention_type=dot_product_relative,max_relative_position=3",
]


@pytest.mark.parametrize("overrides", MODEL_VARIANTS)
def test_transformer_gives_each_packed_example_its_logits_alone(overrides):
  model = _transformer(overrides)
  examples = _three_examples(KEYS)
  batch, where = _pack_rows(examples, KEYS)
  assert batch["targets"].shape[0] == 1  # all three in one row
  packed = model({k: tf.constant(v) for k, v in batch.items()}).numpy()
  for ex, (row, start) in zip(examples, where):
    alone = model({"inputs": ex["inputs"][None], "targets": ex["targets"][None]}).numpy()[0]
    n, s = len(ex["targets"]), start["targets"]
    np.testing.assert_allclose(packed[row, s:s + n], alone, rtol=0, atol=2e-5)
  assert np.abs(packed).max() > 1.0


@pytest.mark.parametrize("overrides", MODEL_VARIANTS)
def test_language_model_gives_each_packed_text_its_logits_alone(overrides):
  model = _lm(overrides)
  examples = _three_examples(("targets",))
  batch, where = _pack_rows(examples, ("targets",))
  features = {k: tf.constant(v) for k, v in batch.items() if k.startswith("targets")}
  packed = model(features).numpy()
  assert batch["targets"].shape[0] == 1
  for ex, (row, start) in zip(examples, where):
    alone = model({"targets": ex["targets"][None]}).numpy()[0]
    n, s = len(ex["targets"]), start["targets"]
    np.testing.assert_allclose(packed[row, s:s + n], alone, rtol=0, atol=2e-5)


def _segment_mask(query_segment, key_segment):
  return query_segment[:, None] == key_segment[None, :]


def test_no_attention_crosses_examples_in_a_packed_row():
  model = _transformer("")
  examples = _three_examples(KEYS, seed=1)
  batch, where = _pack_rows(examples, KEYS)
  features = {k: tf.constant(v) for k, v in batch.items()}
  logits, scores = model(features, return_attention_scores=True)
  in_seg, tgt_seg = batch["inputs_segmentation"][0], batch["targets_segmentation"][0]
  # Every attention weight between two examples of the row is 0 (exp(-1e9) in float32).
  for weights, (q, k) in ([(w, (in_seg, in_seg)) for w in scores.encoder] +
                          [(w, (tgt_seg, tgt_seg)) for w in scores.decoder] +
                          [(w, (tgt_seg, in_seg)) for w in scores.encdec]):
    w = weights.numpy()[0]  # [heads, length_q, length_kv]
    assert not w[:, ~_segment_mask(q, k)].any()
    real = q > 0
    np.testing.assert_allclose(w[:, real].sum(-1), 1.0, atol=1e-5)
  # Changing every token of the middle example leaves the others' logits as they were.
  changed = dict(batch)
  for key in KEYS:
    seg = batch[key + "_segmentation"]
    changed[key] = np.where(seg == 2, (batch[key] - 2 + 7) % (VOCAB - 2) + 2, batch[key])
  assert (changed["targets"] != batch["targets"]).any()
  out = model({k: tf.constant(v) for k, v in changed.items()}).numpy()
  other = tgt_seg != 2
  np.testing.assert_array_equal(out[0, other], logits.numpy()[0, other])
  assert np.abs(out[0, tgt_seg == 2] - logits.numpy()[0, tgt_seg == 2]).max() > 1e-3


def test_unpacked_features_unchanged_and_packed_features_checked():
  model = _transformer("")
  ex = _three_examples(KEYS)[0]
  plain = {"inputs": ex["inputs"][None], "targets": ex["targets"][None]}
  # One example packed alone (segment 1, positions 0..n-1) is the unpacked call.
  packed = dict(plain)
  for k in KEYS:
    packed[k + "_segmentation"] = np.ones_like(plain[k])
    packed[k + "_position"] = np.arange(plain[k].shape[1])[None]
  np.testing.assert_allclose(model(packed).numpy(), model(plain).numpy(), rtol=0, atol=1e-6)
  with pytest.raises(ValueError, match="both inputs_ and targets_segmentation"):
    model({k: v for k, v in packed.items() if not k.startswith("inputs_")})
  with pytest.raises(ValueError, match="no targets_position"):
    model({k: v for k, v in packed.items() if k != "targets_position"})


def test_a_training_step_on_packed_rows_equals_one_on_the_examples_unpacked():
  # Same weights after one update: the loss (padding, segment 0, weighted 0 as
  # today) and its gradients are those of the unpacked batch.
  examples = _three_examples(KEYS, seed=2)
  packed, _ = _pack_rows(examples, KEYS)
  width = {k: max(len(e[k]) for e in examples) for k in KEYS}
  unpacked = {k: np.stack([np.pad(e[k], [0, width[k] - len(e[k])]) for e in examples])
              for k in KEYS}
  hp = create_hparams("transformer_tiny", LINEAR_ADAM)
  results = []
  for batch in (unpacked, packed):
    tf.keras.utils.set_random_seed(0)
    trainer = Trainer(hp, ModelSpec(VOCAB, VOCAB, 3), create_strategy("one_device"),
                      train_steps=10)
    start = [v.numpy() for v in trainer.model.weights]
    spec = {k: tf.TensorSpec([None, None], tf.as_dtype(v.dtype)) for k, v in batch.items()}
    ds = tf.data.Dataset.from_generator(lambda b=batch: iter([b]), output_signature=spec)
    tf.config.run_functions_eagerly(True)  # the compiled step's code, without tracing it
    try:
      metrics = trainer.train_step(iter(trainer.strategy.distribute_datasets_from_function(
          lambda ctx, d=ds: d)))
    finally:
      tf.config.run_functions_eagerly(False)
    results.append((metrics["loss"], metrics["tokens"],
                    [v.numpy() for v in trainer.model.weights]))
  (loss_u, tokens_u, weights_u), (loss_p, tokens_p, weights_p) = results
  assert tokens_u == tokens_p
  np.testing.assert_allclose(loss_p, loss_u, rtol=1e-5)
  assert_same_training(weights_u, weights_p, start, 1)
  den = losses.target_weights(tf.constant(packed["targets"]), "none", True)
  assert float(tf.reduce_sum(den)) == sum(len(e["targets"]) for e in examples)


# -- Problems --------------------------------------------------------------------

@pytest.mark.parametrize("name, base", [
    ("translate_ende_ding_bible8k_packed", "translate_ende_ding_bible8k"),
    ("translate_ende_wmt32k_packed", "translate_ende_wmt32k"),
    ("translate_ende_wmt8k_packed", "translate_ende_wmt8k"),
])
def test_packed_problems_read_their_base_problem_s_files(tmp_path, name, base):
  packed, unpacked = registry.problem(name), registry.problem(base)
  assert packed.packed_length == 256 and unpacked.packed_length is None
  data = str(tmp_path)
  assert packed.filepattern(data, "train") == unpacked.filepattern(data, "train")
  assert packed.vocab_paths(data) == unpacked.vocab_paths(data)
  assert packed.text_file(data, "dev", "targets") == unpacked.text_file(data, "dev", "targets")
  assert packed.shard_paths(data, "dev") == unpacked.shard_paths(data, "dev")


def test_a_packed_problem_trains_on_rows_of_its_packed_length(tmp_path, fake_ding_bible_tmp_dir,
                                                             monkeypatch):
  tmp_dir, _, _ = fake_ding_bible_tmp_dir
  data_dir = str(tmp_path / "data")
  registry.problem("translate_ende_ding_bible8k_packed").generate_data(data_dir, tmp_dir,
                                                                      num_shards=1)
  registry.problem("translate_ende_ding_bible8k").check_data_dir(data_dir)  # the base's files
  lengths, pack = [], inputs.pack_dataset
  monkeypatch.setattr(inputs, "pack_dataset",
                      lambda ds, length, *a, **k: lengths.append(length) or pack(ds, length))
  run = t2t_keras.train("translate_ende_ding_bible8k_packed", "transformer_tiny", data_dir,
                        str(tmp_path / "run"), hparams=ONE_LAYER, train_steps=2,
                        schedule="train_and_evaluate", local_eval_frequency=2,
                        log=lambda line: None)
  assert run.checkpoint_path.endswith("ckpt-2")
  assert lengths == [256]  # training packs; evaluation reads examples unpacked
