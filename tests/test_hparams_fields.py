"""Every field of HParams and DecodeHParams does something, or is refused.

Each field is accounted for in exactly one of:
  * REFUSED: a non-default value the project does not implement raises a
    ValueError naming the field and what is supported;
  * PROBES: (context overrides, new value, observer); with the context applied,
    setting the field changes what the observer sees: model variables and
    outputs, the learning rate, one training step, batching, decode output;
  * ALLOW_LIST: read where an observer here cannot see it cheaply; each entry
    names the module that reads it with a text showing where (checked: the
    module contains it) and the test file covering it (checked: it mentions
    the field).
A new dataclass field in none of them fails `test_every_field_is_accounted_for`.

The training fields the probes only see change are also checked exactly against
T2T's maths: the Adam fields over three updates, weight_decay's gradient and
label_smoothing's loss.
"""

import dataclasses
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

from data_gen import file_io
from t2t_keras.decoding import text_decoder
from t2t_keras.hparams import DecodeHParams, HParams, create_hparams
from t2t_keras.model import Transformer
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.training import inputs
from tests.support.step_utils import one_step

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 30
SPEC = ModelSpec(VOCAB, VOCAB, 3)
TINY = "hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1"
# Constant learning rate and Adam's epsilon far above sqrt(v): the first update is
# then linear in the gradient (plain Adam's first step is about lr * sign(g)).
TRAIN = "learning_rate_schedule=constant,learning_rate_constant=0.1,optimizer_adam_epsilon=10"
ADAFACTOR = TRAIN + ",optimizer=adafactor"

# Fields whose non-default values are refused: (field, value, message fragment).
REFUSED = {
    HParams: [
        ("ffn_layer", "dense_relu_dense_gated", "only 'dense_relu_dense'"),
        ("norm_type", "batch", "only 'layer'"),
        ("weight_dtype", "bfloat16", "only 'float32'"),
    ],
    DecodeHParams: [
        ("force_decode_length", True, "only force_decode_length=False"),
        ("num_decodes", 2, "only num_decodes=1"),
        ("skip_eos_postprocess", True, "only skip_eos_postprocess=False"),
    ],
}

# field -> (module, text showing where it acts there, test file covering it, why
# no probe here). The test file must mention the field.
ALLOW_LIST = {
    HParams: {
        # T2T split the embedding into `weights_<i>` shards: a checkpoint layout
        # only. The importer concatenates the shards it finds; its tests write
        # checkpoints sharded by this field (the writer is in tests/support).
        "symbol_modality_num_shards": ("t2t_keras/t2t_import/importer.py", "weights_",
                                       "tests/support/t2t_checkpoint.py",
                                       "names T2T checkpoint variables only"),
        # Tested in test_training against the NumPy port of T2T's MultistepAdam (derived bound).
        "optimizer_multistep_accumulate_steps": (
            "t2t_keras/training/trainer.py", "hparams.optimizer_multistep_accumulate_steps",
            "tests/test_training.py", "needs a compiled multi-batch step"),
        # Selects the trainer's mixed-precision policy (precision.mode_for); the
        # policy's effect on a training step is tested in test_mixed_precision_training.
        "activation_dtype": ("t2t_keras/training/runner.py", "hp.activation_dtype",
                             "tests/test_t2t_hparams_sets.py",
                             "a process-wide Keras policy, set by t2t_keras.train"),
        # Shuffling order of training batches (seeded shuffle buffer size).
        "batch_shuffle_size": ("t2t_keras/training/inputs.py", "batch_shuffle_size",
                               "tests/test_inputs.py",
                               "changes only the random order of training batches"),
    },
    DecodeHParams: {
        # The decoder CLI keeps the first N dataset examples (test below).
        "num_samples": ("t2t_keras/cli/decoder.py", "decode_hp.num_samples",
                        "tests/test_hparams_fields.py", "read by the decoder CLI only"),
        # The random model here attends uniformly: a model whose attention is set by
        # hand shows what each changes (tests/test_alignment_output.py).
        **{name: ("t2t_keras/decoding/text_decoder.py", f"hp.{name}", "tests/test_alignment_output.py",
                  "needs attention that differs between layers, heads and subwords")
           for name in ("alignment_level", "alignment_layer", "alignment_heads")},
    },
}


def _encoder():
  class Words:
    """Letter i of the alphabet is id 2 + i (spaces dropped); decode joins letters."""
    vocab_size = VOCAB

    def encode(self, text):
      return [2 + (ord(c) - ord("a")) % (VOCAB - 2) for c in text.replace(" ", "")]

    def decode(self, ids):
      return " ".join(chr(ord("a") + int(i) - 2) for i in ids)
  return Words()


# -- Observers: hparams -> something comparable --------------------------------

def _tiny_model(hp: HParams):
  tf.keras.utils.set_random_seed(0)
  model = Transformer(hp, VOCAB, target_space_id=3, name="t")
  model.build()
  rng = np.random.default_rng(0)
  feats = {"inputs": rng.integers(2, VOCAB, (2, 6)), "targets": rng.integers(2, VOCAB, (2, 5))}
  return model, feats


def observe_model(hp: HParams, _decode_hp=None):
  """Variable names, shapes and values, and the logits."""
  model, feats = _tiny_model(hp)
  return ([(v.path, tuple(v.shape)) for v in model.weights], [v.numpy() for v in model.weights],
          model(feats, training=False).numpy())


def observe_model_training(hp: HParams, _decode_hp=None):
  """Logits in training mode (seeded dropout)."""
  model, feats = _tiny_model(hp)
  tf.keras.utils.set_random_seed(1)
  return model(feats, training=True).numpy()


def observe_schedule(hp: HParams, _decode_hp=None):
  from t2t_keras.training.optimization import T2TLearningRateSchedule
  schedule = T2TLearningRateSchedule(hp, train_steps=2000)
  return [float(schedule(step)) for step in (0, 1, 10, 60, 100, 150, 400, 1000, 1999)]


def _training_batches(count):
  rng = np.random.default_rng(0)
  return [{k: rng.integers(2, VOCAB, (3, 6)) for k in ("inputs", "targets")}
          for _ in range(count)]


def _trainer(hp: HParams):
  from t2t_keras.training.trainer import Trainer, create_strategy
  tf.keras.utils.set_random_seed(0)
  return Trainer(hp, SPEC, create_strategy("one_device"), train_steps=100)


def _train(trainer, batches):
  """One update per batch through the Trainer's train_step; returns the losses.

  Runs the step eagerly: the same code as the compiled step, without tracing
  one per probe.
  """
  tf.config.run_functions_eagerly(True)
  try:
    with warnings.catch_warnings():  # that tf.data's own functions still trace is fine
      warnings.filterwarnings("ignore", "Even though the", UserWarning)
      return [one_step(trainer, [b])["loss"] for b in batches]
  finally:
    tf.config.run_functions_eagerly(False)


def observe_training(hp: HParams, _decode_hp=None):
  """The losses and the weights over three updates (seeded dropout).

  Three updates, because Adam's beta1 cancels out of the first one.
  """
  trainer = _trainer(hp)
  losses = _train(trainer, _training_batches(3))
  return losses, [v.numpy() for v in trainer.model.weights]


def observe_batching(hp: HParams, _decode_hp=None, path=None):
  """Batch shapes of one eval epoch and the batching scheme."""
  return ([tuple(b["inputs"].shape) + tuple(b["targets"].shape)
           for b in inputs.make_dataset(path, hp, "eval")],
          inputs.hparams_to_batching_scheme(hp))


def observe_training_batching(hp: HParams, _decode_hp=None, path=None):
  """Each batch's features and shapes over one unshuffled training epoch."""
  return [sorted((k, tuple(v.shape)) for k, v in b.items())
          for b in inputs.make_dataset(path, hp, "train", shuffle=False, repeat=False)]


_MODELS = {}


def observe_finished_beams(hp: HParams, decode_hp: DecodeHParams, path=None):
  """observe_decoding with EOS tied to the untrained model's favourite token "u"."""
  return observe_decoding(hp, decode_hp, path, eos_like=2 + ord("u") - ord("a"))


def observe_decoding(hp: HParams, decode_hp: DecodeHParams, path=None, eos_like=None):
  """Decoded lines (as the decoder CLI reads them), log lines and batch count."""
  if hp not in _MODELS:
    tf.keras.utils.set_random_seed(0)
    _MODELS[hp] = Transformer(hp, VOCAB, target_space_id=3)
    _MODELS[hp].build()
  model = _MODELS[hp]
  if eos_like is not None:  # EOS as likely as token `eos_like`: hypotheses finish early.
    model = Transformer(hp, VOCAB, target_space_id=3)
    model.build()
    model.set_weights(_MODELS[hp].get_weights())
    model.softmax.weights_var[1].assign(model.softmax.weights_var[eos_like])
  logs, calls = [], []
  decoder = text_decoder.TextDecoder(model, {"inputs": _encoder(), "targets": _encoder()},
                                    decode_hp, log=logs.append)
  make_decode_fn = decoder.decode_fn

  def counting_decode_fn(jit_compile):  # counts the batches decoded
    fn = make_decode_fn(jit_compile)
    return lambda x: calls.append(1) or fn(x)

  decoder.decode_fn = counting_decode_fn
  with open(path, "w", encoding="utf-8") as f:
    f.write("ab c;d\nef;g h\n")
  lines = file_io.read_lines(path, decode_hp.delimiter)
  return decoder.decode_lines(lines), logs, len(calls)


# field -> (context, value, observer): a HParams field is set on create_hparams(
# "transformer_tiny", TINY + context); a DecodeHParams field on DECODE_BASE + context.
DECODE_BASE = "beam_size=1,extra_length=3,log_results=false"
PROBES = {
    HParams: {
        "hidden_size": ("", 24, observe_model),
        "filter_size": ("", 48, observe_model),
        "num_heads": ("", 4, observe_model),
        "num_hidden_layers": ("", 2, observe_model),
        "num_encoder_layers": ("", 2, observe_model),
        "num_decoder_layers": ("", 2, observe_model),
        "attention_key_channels": ("", 8, observe_model),
        "attention_value_channels": ("", 8, observe_model),
        "self_attention_type": ("max_relative_position=3", "dot_product_relative",
                                observe_model),
        "max_relative_position": ("self_attention_type=dot_product_relative,"
                                  "max_relative_position=2", 3, observe_model),
        "layer_preprocess_sequence": ("", "none", observe_model),
        "layer_postprocess_sequence": ("", "dan", observe_model),
        "layer_prepostprocess_dropout": ("", 0.5, observe_model_training),
        "attention_dropout": ("", 0.5, observe_model_training),
        "relu_dropout": ("", 0.5, observe_model_training),
        "layer_prepostprocess_dropout_broadcast_dims": ("", "1", observe_model_training),
        "attention_dropout_broadcast_dims": ("", "0,1", observe_model_training),
        "relu_dropout_broadcast_dims": ("", "1", observe_model_training),
        "norm_epsilon": ("", 0.5, observe_model),
        "pos": ("", "timing_paper", observe_model),
        "min_timescale": ("", 2.0, observe_model),
        "max_timescale": ("", 50.0, observe_model),
        "shared_embedding_and_softmax_weights": ("", False, observe_model),
        "shared_embedding": ("shared_embedding_and_softmax_weights=false", True,
                             observe_model),
        "multiply_embedding_mode": ("", "none", observe_model),
        "use_target_space_embedding": ("", False, observe_model),
        "initializer": ("", "orthogonal", observe_model),
        "initializer_gain": ("", 2.0, observe_model),
        "learning_rate": ("learning_rate_schedule=legacy", 0.3, observe_schedule),
        "learning_rate_schedule": ("", "constant*rsqrt_decay", observe_schedule),
        "learning_rate_decay_scheme": ("learning_rate_schedule=legacy", "sqrt",
                                       observe_schedule),
        "learning_rate_constant": ("", 3.0, observe_schedule),
        "learning_rate_warmup_steps": ("", 50, observe_schedule),
        "learning_rate_decay_steps": ("learning_rate_schedule=exp_decay,"
                                      "learning_rate_decay_rate=0.5,"
                                      "learning_rate_warmup_steps=50", 300, observe_schedule),
        "learning_rate_decay_rate": ("learning_rate_schedule=legacy,"
                                     "learning_rate_decay_scheme=exp,"
                                     "learning_rate_warmup_steps=50", 0.5, observe_schedule),
        "learning_rate_decay_staircase": ("learning_rate_schedule=exp_decay,"
                                          "learning_rate_decay_rate=0.5,"
                                          "learning_rate_decay_steps=300,"
                                          "learning_rate_warmup_steps=50", True,
                                          observe_schedule),
        "learning_rate_cosine_cycle_steps": ("learning_rate_schedule=legacy,"
                                             "learning_rate_decay_scheme=cosine,"
                                             "learning_rate_warmup_steps=50", 300,
                                             observe_schedule),
        "label_smoothing": (TRAIN, 0.3, observe_training),
        "weight_decay": (TRAIN, 0.5, observe_training),
        "clip_grad_norm": (TRAIN, 1e-3, observe_training),
        "optimizer_adam_beta1": (TRAIN, 0.5, observe_training),
        "optimizer_adam_beta2": (TRAIN, 0.5, observe_training),
        "optimizer_adam_epsilon": (TRAIN, 1.0, observe_training),
        # adam / lazy_adam / true_adam are the same dense update (create_optimizer).
        "optimizer": (TRAIN, "adafactor", observe_training),
        "optimizer_adafactor_beta1": (ADAFACTOR, 0.5, observe_training),
        "optimizer_adafactor_beta2": (ADAFACTOR + ",optimizer_adafactor_decay_type=adam", 0.5,
                                      observe_training),
        "optimizer_adafactor_decay_type": (ADAFACTOR, "adam", observe_training),
        "optimizer_adafactor_memory_exponent": (ADAFACTOR, 0.3, observe_training),
        "optimizer_adafactor_factored": (ADAFACTOR, False, observe_training),
        "optimizer_adafactor_clipping_threshold": (ADAFACTOR, 0.2, observe_training),
        "optimizer_adafactor_multiply_by_parameter_scale": (ADAFACTOR, False,
                                                            observe_training),
        "batch_size": ("batch_size=64", 32, observe_batching),
        "max_length": ("batch_size=64", 12, observe_batching),
        "min_length_bucket": ("batch_size=64", 4, observe_batching),
        "length_bucket_step": ("batch_size=64", 2.0, observe_batching),
        "use_fixed_batch_size": ("batch_size=4", True, observe_batching),
        "eval_drop_long_sequences": ("batch_size=64,max_length=10", True, observe_batching),
        "max_input_seq_length": ("batch_size=64", 4, observe_batching),
        "max_target_seq_length": ("batch_size=64", 4, observe_batching),
        # The targets become [inputs, 0, targets] (tests/test_prepend_mode.py: the
        # attention bias and loss weights against T2T's in NumPy).
        "prepend_mode": ("batch_size=64", "prepend_inputs_masked_attention", observe_batching),
        # Rows of several examples (tests/test_packing.py: the rows against a
        # brute-force packer, the models' logits against each example alone).
        "pack_dataset": ("batch_size=64", True, observe_training_batching),
    },
    DecodeHParams: {
        "beam_size": ("return_beams=true", 3, observe_decoding),
        "alpha": ("beam_size=3,return_beams=true,write_beam_scores=true", 2.0,
                  observe_finished_beams),
        "extra_length": ("", 5, observe_decoding),
        "batch_size": ("", 1, observe_decoding),
        "return_beams": ("beam_size=2", True, observe_decoding),
        "write_beam_scores": ("return_beams=true", True, observe_decoding),
        "max_input_size": ("", 2, observe_decoding),
        "delimiter": ("", ";", observe_decoding),
        "log_results": ("", True, observe_decoding),
        "sampling_method": ("", "random", observe_decoding),
        "sampling_temp": ("sampling_method=random", 0.3, observe_decoding),
        "sampling_keep_top_k": ("sampling_method=random", 2, observe_decoding),
        "return_alignments": ("", True, observe_decoding),
    },
}


def _field_cases():
  for cls in (HParams, DecodeHParams):
    for name, (context, value, observer) in PROBES[cls].items():
      yield pytest.param(cls, name, context, value, observer, id=f"{cls.__name__}.{name}")


def test_every_field_is_accounted_for():
  for cls in (HParams, DecodeHParams):
    fields = {f.name for f in dataclasses.fields(cls)}
    groups = [set(PROBES[cls]), {name for name, _, _ in REFUSED[cls]}, set(ALLOW_LIST[cls])]
    accounted = set().union(*groups)
    assert not fields - accounted, (
        f"{cls.__name__} fields {sorted(fields - accounted)} are neither probed, refused "
        "nor allow-listed: wire them (and add a probe) or refuse non-default values.")
    assert not accounted - fields, f"stale names {sorted(accounted - fields)}"
    assert sum(len(g) for g in groups) == len(accounted), "a field is listed twice"


@pytest.mark.parametrize("cls", [HParams, DecodeHParams], ids=lambda c: c.__name__)
def test_refused_values_name_the_field_and_what_is_supported(cls):
  for name, value, message in REFUSED[cls]:
    with pytest.raises(ValueError, match=f"{name}.*{message}"):
      cls(**{name: value})


@pytest.mark.parametrize("cls", [HParams, DecodeHParams], ids=lambda c: c.__name__)
def test_allow_listed_fields_are_read_and_tested_where_named(cls):
  for name, (module, evidence, test_file, _) in ALLOW_LIST[cls].items():
    with open(os.path.join(REPO, module), encoding="utf-8") as f:
      assert evidence in f.read(), f"{module} has no {evidence!r} ({name})"
    with open(os.path.join(REPO, test_file), encoding="utf-8") as f:
      assert name in f.read(), f"{test_file} does not mention {name}"


@pytest.fixture(scope="module")
def records(tmp_path_factory):
  """An eval shard: 24 examples, inputs of lengths 1..12 and targets of 12..1."""
  path = str(tmp_path_factory.mktemp("records") / "tiny-dev-00000-of-00001")
  with tf.io.TFRecordWriter(path) as writer:
    for i in range(24):
      ex = {"inputs": list(range(2, 3 + i % 12)), "targets": list(range(2, 14 - i % 12))}
      feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                 for k, v in ex.items()}
      writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                   .SerializeToString())
  return path


def _build(cls, context, changes=None):
  """(HParams, DecodeHParams) with `context` applied to `cls`'s object, then `changes`."""
  hp = create_hparams("transformer_tiny", TINY)
  decode_hp = DecodeHParams().parse(DECODE_BASE)
  if cls is HParams:
    hp = hp.parse(context)
  else:
    decode_hp = decode_hp.parse(context)
  if cls is HParams:
    return hp.replace(**(changes or {})), decode_hp
  return hp, decode_hp.replace(**(changes or {}))


_BASELINES = {}


def _observe(cls, observer, context, changes, path):
  """What `observer` sees; baselines (no changes) are computed once per context."""
  key = (cls, observer, context, path)
  if not changes and key in _BASELINES:
    return _BASELINES[key]
  hp, decode_hp = _build(cls, context, changes)
  if observer in (observe_batching, observe_training_batching, observe_decoding,
                  observe_finished_beams):
    seen = observer(hp, decode_hp, path=path)
  else:
    seen = observer(hp, decode_hp)
  if not changes:
    _BASELINES[key] = seen
  return seen


def _same(a, b) -> bool:
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
  if isinstance(a, dict) and isinstance(b, dict):
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
  if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
    return np.shape(a) == np.shape(b) and np.array_equal(a, b)
  return a == b


@pytest.fixture(scope="module")
def text_path(tmp_path_factory):
  return str(tmp_path_factory.mktemp("text") / "in.txt")


@pytest.fixture
def eager_decoding():
  # Decoding probes decode a few words with a tiny model: running eagerly avoids
  # tracing a beam search per probe.
  tf.config.run_functions_eagerly(True)
  yield
  tf.config.run_functions_eagerly(False)


def _eager_if_decoding(request, observer):
  if observer in (observe_decoding, observe_finished_beams):
    request.getfixturevalue("eager_decoding")


@pytest.mark.parametrize("cls,name,context,value,observer", list(_field_cases()))
def test_setting_a_field_changes_what_it_controls(cls, name, context, value, observer,
                                                 records, text_path, request):
  _eager_if_decoding(request, observer)
  path = records if observer in (observe_batching, observe_training_batching) else text_path
  base = _build(cls, context)[0 if cls is HParams else 1]
  assert getattr(base, name) != value, "the probe must set a non-default value"
  baseline = _observe(cls, observer, context, {}, path)
  changed = _observe(cls, observer, context, {name: value}, path)
  assert not _same(baseline, changed), f"{cls.__name__}.{name}={value!r} changed nothing"


@pytest.mark.parametrize("observer, context", [
    (observe_model, ""), (observe_model_training, ""), (observe_training, TRAIN),
    (observe_decoding, "sampling_method=random")], ids=lambda x: getattr(x, "__name__", x))
def test_observers_are_deterministic(observer, context, text_path, request):
  """Without this, every probe above would pass on noise."""
  _eager_if_decoding(request, observer)
  cls = DecodeHParams if observer is observe_decoding else HParams  # whose is `context`
  first = _observe(cls, observer, context, {}, text_path)  # The probes' baseline.
  hp, decode_hp = _build(cls, context)
  again = (observer(hp, decode_hp, path=text_path) if observer is observe_decoding
           else observer(hp, decode_hp))
  assert _same(first, again)


# -- Exact checks of the training fields against T2T's maths --------------------

NO_DROPOUT = "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0"
ULP = 2.0 ** -24  # float32's relative rounding


def _weights(model):
  return [v.numpy().astype(np.float64) for v in model.trainable_variables]


def test_adam_fields_give_tf1_adam_over_three_updates():
  """Three updates with non-default beta1, beta2, epsilon equal TF1's Adam (NumPy port
  of T2T's optimizer) fed the gradient of T2T's loss at its own weights; the same
  reference with any one of the three at its default is far off."""
  from t2t_keras.rundir import model_factory
  from tests.support.step_utils import t2t_loss_grads
  from tests.support.t2t_numpy_training import Tf1Adam
  fields = {"optimizer_adam_beta1": 0.7, "optimizer_adam_beta2": 0.9,
            "optimizer_adam_epsilon": 1e-3}
  lr = 0.01
  hp = create_hparams("transformer_tiny", f"{TINY},{NO_DROPOUT},learning_rate_schedule="
                      f"constant,learning_rate_constant={lr}").replace(**fields)
  trainer = _trainer(hp)
  oracle = model_factory.build_model(hp, SPEC)
  start = _weights(trainer.model)
  batches = _training_batches(3)
  _train(trainer, batches)
  got = _weights(trainer.model)

  def reference(**changes):
    settings = dict(fields, **changes)
    adam = Tf1Adam(start, settings["optimizer_adam_beta1"], settings["optimizer_adam_beta2"],
                   settings["optimizer_adam_epsilon"])
    for batch in batches:
      adam.apply(t2t_loss_grads(oracle, adam.w, batch, hp.label_smoothing)[1], lr)
    return adam.w

  # Per update: two float32 roundings of a weight (|w| <= 2), plus the gradient's
  # float32 error (|g| <= 0.2: 2e-8) times Adam's gain lr_t / epsilon (<= 1.1 lr / epsilon).
  atol = 3 * (2 * ULP * 2 + 1.1 * lr / 1e-3 * 2e-8)  # ~1.4e-6
  want = reference()
  for v, w, g in zip(trainer.model.trainable_variables, want, got):
    np.testing.assert_allclose(g, w, rtol=0, atol=atol, err_msg=v.path)
  assert max(np.abs(w - s).max() for w, s in zip(want, start)) > 1000 * atol  # it moved
  defaults = HParams()
  for name in fields:  # what a Trainer ignoring `name` would give
    ignored = reference(**{name: getattr(defaults, name)})
    off = max(np.abs(a - b).max() for a, b in zip(ignored, got))
    assert off > 100 * atol, f"{name} makes no visible difference ({off:.3g})"


def test_weight_decay_adds_wd_times_v_to_the_gradient_t2t_decays():
  """The first update with weight_decay=wd is the update of the loss gradient plus
  wd * v on every variable T2T's `optimize.weight_decay` decays (all but 1-D
  variables whose T2T name ends with "bias"), and of the loss gradient alone on
  the others. Linear Adam (epsilon 10) reveals the gradient exactly."""
  from tests.support.step_utils import LINEAR_ADAM, t2t_decayed
  wd = 0.5
  hp = create_hparams("transformer_tiny", f"{TINY},{LINEAR_ADAM}")
  lr, eps = hp.learning_rate_constant, hp.optimizer_adam_epsilon
  # beta2 as the float32 the optimizer uses (1 - beta2 is then exact in float32).
  s = np.sqrt(1 - np.float64(np.float32(hp.optimizer_adam_beta2)))

  def first_update(weight_decay):
    trainer = _trainer(hp.replace(weight_decay=weight_decay))
    rng = np.random.default_rng(1)
    for v in trainer.model.trainable_variables:
      if len(v.shape) == 1:  # biases and offsets start at 0: make decaying them visible
        v.assign(v + rng.normal(0, 0.5, v.shape).astype(np.float32))
    start = _weights(trainer.model)
    _train(trainer, _training_batches(1))
    return trainer.model, start, _weights(trainer.model)

  model, start, plain = first_update(0.0)
  _, start_wd, decayed = first_update(wd)
  # TF1 Adam's first update is u = lr * s * g / (s * |g| + eps), s = sqrt(1 - beta2):
  # inverted, g = u * eps / (s * (lr - |u|)), with dg/du = eps * lr / (s * (lr - |u|)^2).
  def gradient(w0, w1):
    u = w0 - w1
    return u * eps / (s * (lr - np.abs(u))), eps * lr / (s * (lr - np.abs(u)) ** 2)

  is_decayed = t2t_decayed(model)
  assert any(is_decayed) and not all(is_decayed)
  for v, w0, w0_wd, w1, w1_wd, d in zip(model.trainable_variables, start, start_wd, plain,
                                        decayed, is_decayed):
    np.testing.assert_array_equal(w0, w0_wd)
    g0, gain0 = gradient(w0, w1)
    g1, gain1 = gradient(w0, w1_wd)
    # u = w0 - w1 carries w1's float32 rounding and the update's (16 ulps: ~2x headroom)
    # (w0 is exact: the float32 start).
    bound = ULP * (gain0 * (np.abs(w1) + 16 * np.abs(w0 - w1)) +
                   gain1 * (np.abs(w1_wd) + 16 * np.abs(w0 - w1_wd)))
    want = wd * w0 if d else np.zeros_like(w0)
    err = np.abs(g1 - g0 - want)
    assert np.all(err <= bound), (v.path, d, err.max(), bound.min())
    if not d:  # decaying it would show
      assert np.any(np.abs(wd * w0) > 10 * bound), v.path


def _t2t_smoothed_loss(logits, targets, label_smoothing):
  """T2T's `common_layers.smoothing_cross_entropy`, weighted by targets != 0,
  summed and divided by max(1, count), in float64."""
  vocab = logits.shape[-1]
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab - 1)
  soft = np.where(np.eye(vocab, dtype=bool)[targets], confidence, low)
  z = logits - logits.max(-1, keepdims=True)
  log_softmax = z - np.log(np.exp(z).sum(-1, keepdims=True))
  normalizing = -(confidence * np.log(confidence) + (vocab - 1) * low * np.log(low + 1e-20))
  xent = -(soft * log_softmax).sum(-1) - normalizing
  weights = (targets != 0).astype(np.float64)
  return float((xent * weights).sum() / max(1.0, weights.sum()))


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 0.3])
def test_reported_loss_is_t2t_smoothing_cross_entropy(label_smoothing):
  """The loss of a step equals T2T's smoothed cross-entropy of the model's logits
  (padding excluded); other label_smoothing values give a different loss."""
  from tests.support.step_utils import batches
  hp = create_hparams("transformer_tiny", f"{TINY},{NO_DROPOUT}").replace(
      label_smoothing=label_smoothing)
  trainer = _trainer(hp)
  batch = batches(1, seed=3, vocab=VOCAB)[0]
  assert np.any(batch["targets"] == 0)
  logits = trainer.model({k: tf.constant(v) for k, v in batch.items()},
                         training=False).numpy().astype(np.float64)
  got = _train(trainer, [batch])[0]
  np.testing.assert_allclose(got, _t2t_smoothed_loss(logits, batch["targets"],
                                                     label_smoothing), rtol=1e-5)
  for other in {0.0, 0.1, 0.3} - {label_smoothing}:
    assert abs(_t2t_smoothed_loss(logits, batch["targets"], other) - got) > 1e-3 * got


def _untrained_run(tmp_path):
  """(data_dir, run_dir) of a tiny problem and an untrained model's run."""
  from data_gen import registry
  from t2t_keras.rundir.settings import save_or_check_run_files, vocab_record
  from tests.support.tiny_problem import make_tiny_problem
  data_dir = make_tiny_problem(str(tmp_path), train=100, dev=6)
  problem = registry.problem("translate_from_files", data_dir)
  encoders = problem.feature_encoders(data_dir)
  spec = ModelSpec(encoders["inputs"].vocab_size, encoders["targets"].vocab_size, 0)
  hp = create_hparams("transformer_tiny", TINY)
  run_dir = str(tmp_path / "run")
  save_or_check_run_files(run_dir, hp, "translate_from_files", spec,
                          vocab_record(problem, data_dir, encoders))
  model = Transformer(hp, spec.input_vocab_size, spec.target_vocab_size, 0)
  model.build()  # An untrained model decodes as well as any for this test.
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model), run_dir, 1).save(1)
  return data_dir, run_dir


def test_decoder_cli_num_samples_and_log_results(tmp_path):
  """num_samples keeps the first N dev examples (and references); log_results logs them."""
  data_dir, run_dir = _untrained_run(tmp_path)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
  cmd = [sys.executable, "-m", "t2t_keras.cli.decoder", f"--data_dir={data_dir}",
         f"--output_dir={run_dir}", "--decode_hparams=num_samples=3,beam_size=1,extra_length=2"]
  res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
  assert res.returncode == 0, res.stderr[-3000:]
  stdout = res.stdout.splitlines()
  assert stdout[3].startswith("BLEU = "), res.stdout  # 3 outputs, then the scores.
  with open(os.path.join(str(tmp_path), "text", "dev.en"), encoding="utf-8") as f:
    first = [line.rstrip("\n") for line in f][:3]
  logged = [line.split("INPUT: ", 1)[1] for line in res.stderr.splitlines()
            if "Inference results INPUT: " in line]
  assert sorted(logged) == sorted(first)
  res = subprocess.run(cmd[:-1] + ["--decode_hparams=num_samples=2,log_results=false",
                                   f"--decode_from_file={tmp_path}/text/dev.en"],
                       env=env, capture_output=True, text=True, timeout=300)
  assert res.returncode != 0 and "num_samples applies to decoding the dataset" in res.stderr


def test_decoder_cli_writing_a_file_logs_no_results_unless_asked(tmp_path):
  """With --decode_to_file the outputs are in the file: no per-input log lines by
  default; log_results=true logs both lines of each input, as T2T."""
  data_dir, run_dir = _untrained_run(tmp_path)
  source = os.path.join(str(tmp_path), "text", "dev.en")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
  logged = []
  for extra in ("", ",log_results=true"):
    out = tmp_path / f"out{len(logged)}.txt"
    res = subprocess.run(
        [sys.executable, "-m", "t2t_keras.cli.decoder", f"--data_dir={data_dir}",
         f"--output_dir={run_dir}", f"--decode_hparams=beam_size=1,extra_length=2{extra}",
         f"--decode_from_file={source}", f"--decode_to_file={out}"],
        env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(out.read_text(encoding="utf-8").splitlines()) == 6
    logged.append([line for line in res.stderr.splitlines() if "Inference results " in line])
  assert logged[0] == [] and len(logged[1]) == 12
