"""Named sets against the reference table (t2t_reference.md §3) and override parsing."""

import json

import pytest

from t2t_keras import hparams as hp_lib

V3 = "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"
# name: (d, ffn, heads, layers, batch, pre, post, prepost/attn/relu dropout, beta2,
#        schedule, constant or legacy lr, warmup) — transcribed from the reference table.
TABLE = {
    "transformer_base_v1": (512, 2048, 8, 6, 4096, "none", "dan", (0.1, 0.0, 0.0), 0.98,
                            "legacy", 0.1, 4000),
    "transformer_base_v2": (512, 2048, 8, 6, 4096, "n", "da", (0.1, 0.1, 0.1), 0.98,
                            "legacy", 0.2, 8000),
    "transformer_base_v3": (512, 2048, 8, 6, 4096, "n", "da", (0.1, 0.1, 0.1), 0.997, V3, 2.0,
                            8000),
    "transformer_base": (512, 2048, 8, 6, 4096, "n", "da", (0.1, 0.1, 0.1), 0.997, V3, 2.0, 8000),
    "transformer_big": (1024, 4096, 16, 6, 2048, "n", "da", (0.3, 0.1, 0.1), 0.997, V3, 2.0,
                        8000),
    "transformer_big_single_gpu": (1024, 4096, 16, 6, 2048, "n", "da", (0.1, 0.1, 0.1), 0.997,
                                   V3, 2.0, 16000),
    "transformer_base_single_gpu": (512, 2048, 8, 6, 1024, "n", "da", (0.1, 0.1, 0.1), 0.997,
                                    "constant*linear_warmup*rsqrt_decay", 0.1, 16000),
    "transformer_tiny": (128, 512, 4, 2, 4096, "n", "da", (0.1, 0.1, 0.1), 0.997, V3, 2.0, 8000),
    "transformer_small": (256, 1024, 4, 2, 4096, "n", "da", (0.1, 0.1, 0.1), 0.997, V3, 2.0,
                          8000),
    "transformer_parsing_base": (1024, 2048, 8, 6, 4096, "n", "da", (0.2, 0.2, 0.1), 0.997, V3,
                                 2.0, 16000),
    "transformer_parsing_big": (1024, 4096, 16, 6, 2048, "n", "da", (0.1, 0.1, 0.1), 0.997, V3,
                                2.0, 4000),
    "transformer_big_enfr": (1024, 8192, 16, 6, 4096, "n", "da", (0.1, 0.1, 0.1), 0.997, V3,
                             2.0, 8000),
    "transformer_base_multistep8": (512, 2048, 8, 6, 4096, "n", "da", (0.1, 0.1, 0.1), 0.997,
                                    V3, 2.0, 8000),
    "transformer_paper_base": (512, 2048, 8, 6, 4096, "none", "dan", (0.1, 0.0, 0.0), 0.98,
                               "legacy", 0.1, 4000),
    "transformer_paper_big": (1024, 4096, 16, 6, 4096, "none", "dan", (0.3, 0.0, 0.0), 0.98,
                              "legacy", 0.1, 4000),
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_set_matches_reference_table(name):
  (d, ffn, heads, layers, batch, pre, post, drops, beta2, schedule, lr,
   warmup) = TABLE[name]
  hp = hp_lib.create_hparams(name)
  assert (hp.hidden_size, hp.filter_size, hp.num_heads, hp.num_hidden_layers) == (
      d, ffn, heads, layers)
  assert hp.batch_size == batch
  assert (hp.layer_preprocess_sequence, hp.layer_postprocess_sequence) == (pre, post)
  assert (hp.layer_prepostprocess_dropout, hp.attention_dropout, hp.relu_dropout) == drops
  assert hp.optimizer_adam_beta2 == beta2
  assert hp.optimizer_adam_beta1 == 0.9 and hp.optimizer_adam_epsilon == 1e-9
  assert hp.learning_rate_schedule == schedule
  if schedule == "legacy":
    assert hp.learning_rate_decay_scheme == "noam" and hp.learning_rate == lr
  else:
    assert hp.learning_rate_constant == lr
  assert hp.learning_rate_warmup_steps == warmup
  assert hp.norm_epsilon == 1e-6 and hp.label_smoothing == 0.1


def test_set_specific_values():
  assert hp_lib.create_hparams("transformer_base").pos == "timing"
  paper = hp_lib.create_hparams("transformer_paper_base")
  assert paper.pos == "timing_paper" and not paper.use_target_space_embedding
  assert not hp_lib.create_hparams("transformer_big_enfr").shared_embedding_and_softmax_weights
  assert not hp_lib.create_hparams(
      "transformer_parsing_base").shared_embedding_and_softmax_weights
  assert hp_lib.create_hparams("transformer_parsing_base").max_length == 512
  assert hp_lib.create_hparams("transformer_parsing_big").shared_embedding_and_softmax_weights
  multistep = hp_lib.create_hparams("transformer_base_multistep8")
  assert multistep.optimizer_multistep_accumulate_steps == 8
  assert set(TABLE) <= set(hp_lib.list_hparams_sets())


def test_overrides_typed():
  hp = hp_lib.create_hparams("transformer_base", "num_heads=16, pos=emb,label_smoothing=0,"
                             "shared_embedding_and_softmax_weights=false")
  assert hp.num_heads == 16 and hp.pos == "emb" and hp.label_smoothing == 0.0
  assert hp.shared_embedding_and_softmax_weights is False
  assert isinstance(hp.num_heads, int) and isinstance(hp.label_smoothing, float)
  # The original set is untouched (immutability).
  assert hp_lib.create_hparams("transformer_base").num_heads == 8
  with pytest.raises(Exception):
    hp.num_heads = 4  # frozen


@pytest.mark.parametrize("overrides, message", [
    ("num_head=16", "Did you mean num_heads"),
    ("num_heads=sixteen", "expects an integer"),
    ("num_heads=2.5", "expects an integer"),
    ("label_smoothing=high", "expects a number"),
    ("shared_embedding_and_softmax_weights=maybe", "expects true or false"),
    ("pos=rotary", "timing_paper"),
    ("num_heads=7", "divisible by num_heads"),
    ("num_heads", "Malformed"),
    ("num_heads=4,num_heads=8", "given twice"),
    ("layer_preprocess_sequence=a", "layer_preprocess_sequence"),
    ("optimizer=momentum", "optimizer must be one of adam"),
    ("symbol_modality_num_shards=0", "symbol_modality_num_shards must be >= 1, got 0"),
    ("initializer=he_uniform", "initializer.*'he_uniform'.*uniform_unit_scaling"),
    ("learning_rate_schedule=constantt*linear_warmup",
     "unknown factor 'constantt'; valid factors.*constant, linear_warmup"),
    ("learning_rate_schedule=legacy,learning_rate_decay_scheme=piecewise",
     "learning_rate_decay_scheme.*noam, none, exp.*'piecewise'"),
    ("learning_rate_decay_steps=0", "learning_rate_decay_steps must be positive"),
    ("sampling_method=beam", "sampling_method must be 'argmax' or 'random'"),
    ("sampling_temp=-1", "sampling_temp must be >= 0"),
    ("sampling_keep_top_k=0", "sampling_keep_top_k must be -1"),
    ("relu_dropout_broadcast_dims=3", r"relu_dropout_broadcast_dims='3': dim 3 is outside "
     r"\[-3, 3\)"),
    ("attention_dropout_broadcast_dims='0,-5'", r"dim -5 is outside \[-4, 4\)"),
    ("layer_prepostprocess_dropout_broadcast_dims=length",
     "layer_prepostprocess_dropout_broadcast_dims must be comma-separated integers"),
])
def test_bad_overrides_name_the_problem(overrides, message):
  with pytest.raises(ValueError, match=message):
    hp_lib.create_hparams("transformer_base", overrides)


def test_broadcast_dims_read_as_t2t_reads_them():
  # T2T: comma-separated ints, empty items skipped, negative dims from the end.
  assert hp_lib.broadcast_dims("", 3) == ()
  assert hp_lib.broadcast_dims("1", 3) == (1,)
  assert hp_lib.broadcast_dims("1,0,", 4) == (0, 1)
  assert hp_lib.broadcast_dims("-1", 3) == (2,)
  # A quoted override value may hold the commas T2T's lists need.
  hp = hp_lib.HParams().parse("attention_dropout_broadcast_dims='0,1',num_heads=4,"
                              'relu_dropout_broadcast_dims="1"')
  assert (hp.attention_dropout_broadcast_dims, hp.num_heads) == ("0,1", 4)
  assert hp.relu_dropout_broadcast_dims == "1"


def test_unknown_set_lists_valid_sets():
  with pytest.raises(ValueError, match="transformer_big_single_gpu"):
    hp_lib.create_hparams("transformer_huge")


def test_unknown_name_lists_valid_names():
  with pytest.raises(ValueError, match="Valid names: .*hidden_size"):
    hp_lib.create_hparams("transformer_base", "no_such_thing=1")


def test_json_round_trip():
  hp = hp_lib.create_hparams("transformer_big", "pos=emb,num_encoder_layers=3")
  again = hp_lib.HParams.from_json(hp.to_json())
  assert again == hp
  assert json.loads(hp.to_json())["num_encoder_layers"] == 3


def test_decode_hparams_defaults_and_overrides():
  dhp = hp_lib.create_decode_hparams()
  assert (dhp.beam_size, dhp.alpha, dhp.extra_length, dhp.batch_size) == (4, 0.6, 100, 0)
  dhp = hp_lib.create_decode_hparams("beam_size=21,alpha=0.3,extra_length=300,return_beams=true")
  assert (dhp.beam_size, dhp.alpha, dhp.extra_length, dhp.return_beams) == (21, 0.3, 300, True)
  with pytest.raises(ValueError, match="beam_size"):
    hp_lib.create_decode_hparams("beam_size=0")


@pytest.mark.parametrize("overrides, message", [
    ("batch_size=-1", "batch_size must be >= 0.*got -1"),
    ("delimiter=", "delimiter must be a non-empty string"),
    ("num_samples=0", "num_samples must be -1 .*got 0"),
    ("write_beam_scores=true", "write_beam_scores=true needs return_beams=true"),
    ("force_decode_length=true", "force_decode_length=True is not implemented"),
    ("num_decodes=3", "num_decodes=3 is not implemented.*decoded once"),
    ("skip_eos_postprocess=true", "skip_eos_postprocess=True is not implemented"),
])
def test_bad_decode_hparams_are_refused_at_construction(overrides, message):
  with pytest.raises(ValueError, match=message):
    hp_lib.create_decode_hparams(overrides)
