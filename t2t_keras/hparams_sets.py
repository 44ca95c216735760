"""T2T's Transformer hparams sets, under T2T's names, with T2T's values.

Every set of T2T's `models/transformer.py` that this project builds is a
function here, registered with `hparams.register`: it starts from its T2T parent,
named explicitly, and lists only T2T's changes to it (docs/hparams_sets.md is
generated from these functions).

Where the paper and T2T differ, T2T's value is the default of the T2T-named sets
and the paper's is available by name (the `transformer_paper_*` sets) or override:
  * norm layout: `layer_preprocess_sequence="n"`, `layer_postprocess_sequence="da"`
    (T2T pre-norm) vs `"none"` / `"dan"` (paper post-norm);
  * positions: `pos="timing"` (T2T, concatenated [sin | cos], exponent i/(d/2-1))
    vs `pos="timing_paper"` (interleaved sin/cos, exponent 2i/d) vs `pos="emb"`
    (learned, the paper's Table 3 row E);
  * Adam beta2 0.997 (T2T >= v1.4.3) vs 0.98 (paper);
  * learning rate: factor-string schedules (T2T v3, constant 2.0, warmup 8000) vs
    the paper's formula (`learning_rate_schedule="legacy"`, `noam`, lr 0.1, 4000).

T2T's sets that are not built here are in `REFUSED_HPARAMS_SETS`, each with the
reason, which `hparams.refusal` and `hparams.create_hparams` report.

Build a set with `hparams.create_hparams(name)`, which imports this module on
first use (importing it is what registers the sets).
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from t2t_keras.hparams import HParams, register


@register
def transformer_base_v1() -> HParams:
  """Post-norm, attention/relu dropout 0, the paper's noam LR (v1 = dataclass defaults)."""
  return HParams()


@register
def transformer_base_v2() -> HParams:
  return transformer_base_v1().replace(
      layer_preprocess_sequence="n", layer_postprocess_sequence="da",
      layer_prepostprocess_dropout=0.1, attention_dropout=0.1, relu_dropout=0.1,
      learning_rate_warmup_steps=8000, learning_rate=0.2)


@register
def transformer_base_v3() -> HParams:
  return transformer_base_v2().replace(
      optimizer_adam_beta2=0.997,
      learning_rate_schedule="constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size",
      learning_rate_constant=2.0)


@register
def transformer_base() -> HParams:
  return transformer_base_v3()


@register
def transformer_big() -> HParams:
  return transformer_base().replace(hidden_size=1024, filter_size=4096, batch_size=2048,
                                    num_heads=16, layer_prepostprocess_dropout=0.3)


@register
def transformer_big_single_gpu() -> HParams:
  return transformer_big().replace(layer_prepostprocess_dropout=0.1,
                                   learning_rate_warmup_steps=16000)


@register
def transformer_base_single_gpu() -> HParams:
  return transformer_base().replace(
      batch_size=1024, learning_rate_schedule="constant*linear_warmup*rsqrt_decay",
      learning_rate_constant=0.1, learning_rate_warmup_steps=16000)


@register
def transformer_base_multistep8() -> HParams:
  return transformer_base().replace(optimizer="multistep_adam",
                                    optimizer_multistep_accumulate_steps=8)


@register
def transformer_parsing_base() -> HParams:
  # learning_rate=0.05 is inert under the factor schedule, as in T2T.
  return transformer_base().replace(
      attention_dropout=0.2, layer_prepostprocess_dropout=0.2, max_length=512,
      learning_rate_warmup_steps=16000, hidden_size=1024, learning_rate=0.05,
      shared_embedding_and_softmax_weights=False)


@register
def transformer_parsing_big() -> HParams:
  # T2T also sets `shared_source_target_embedding=False`, a name nothing reads.
  return transformer_big().replace(
      max_length=512, learning_rate_warmup_steps=4000, layer_prepostprocess_dropout=0.1,
      batch_size=2048, learning_rate=0.05)


@register
def transformer_tiny() -> HParams:
  return transformer_base().replace(num_hidden_layers=2, hidden_size=128, filter_size=512,
                                    num_heads=4)


@register
def transformer_small() -> HParams:
  return transformer_base().replace(num_hidden_layers=2, hidden_size=256, filter_size=1024,
                                    num_heads=4)


@register
def transformer_big_dr1() -> HParams:
  return transformer_base().replace(hidden_size=1024, filter_size=4096, num_heads=16,
                                    layer_prepostprocess_dropout=0.1)


@register
def transformer_big_enfr() -> HParams:
  return transformer_big_dr1().replace(shared_embedding_and_softmax_weights=False,
                                       filter_size=8192, layer_prepostprocess_dropout=0.1)


@register
def transformer_paper_base() -> HParams:
  """The paper's base model (§3, §5.3-5.4): post-norm, interleaved sinusoids, β2 0.98,
  lr = d^-0.5·min(step^-0.5, step·4000^-1.5), P_drop 0.1 on residuals and embeddings only,
  ε_ls 0.1, no target-space embedding (a T2T addition)."""
  return HParams(pos="timing_paper", use_target_space_embedding=False)


@register
def transformer_paper_big() -> HParams:
  """The paper's big model (Table 3): d 1024, d_ff 4096, 16 heads, P_drop 0.3."""
  return transformer_paper_base().replace(hidden_size=1024, filter_size=4096, num_heads=16,
                                          layer_prepostprocess_dropout=0.3)


# T2T's sets below: same names, each its T2T parent plus T2T's changes.


@register
def transformer_parsing_ice() -> HParams:
  return transformer_base_single_gpu().replace(batch_size=4096,
                                               shared_embedding_and_softmax_weights=False)


@register
def transformer_test() -> HParams:
  """T2T's test-sized model (its checkpoint in tests/data was trained with this set)."""
  return transformer_base().replace(num_hidden_layers=2, hidden_size=16, filter_size=8,
                                    num_heads=2)


def _base_with(**changes: Any) -> Callable[[], HParams]:
  """A set that is transformer_base with `changes` (T2T's one-change paper Table 3 rows)."""
  return lambda: transformer_base().replace(**changes)


# The paper's Table 3 variations of the base model, as T2T registered them.
for _name, _changes in (
    ("transformer_l2", dict(num_hidden_layers=2)), ("transformer_l4", dict(num_hidden_layers=4)),
    ("transformer_l8", dict(num_hidden_layers=8)),
    ("transformer_l10", dict(num_hidden_layers=10)),
    ("transformer_h1", dict(num_heads=1)), ("transformer_h4", dict(num_heads=4)),
    ("transformer_h16", dict(num_heads=16)), ("transformer_h32", dict(num_heads=32)),
    ("transformer_k128", dict(attention_key_channels=128)),
    ("transformer_k256", dict(attention_key_channels=256)),
    ("transformer_ff1024", dict(filter_size=1024)), ("transformer_ff4096", dict(filter_size=4096)),
    ("transformer_dr0", dict(layer_prepostprocess_dropout=0.0)),
    ("transformer_dr2", dict(layer_prepostprocess_dropout=0.2)),
    ("transformer_ls0", dict(label_smoothing=0.0)), ("transformer_ls2", dict(label_smoothing=0.2)),
    ("transformer_hs256", dict(hidden_size=256)), ("transformer_hs1024", dict(hidden_size=1024))):
  _fn = _base_with(**_changes)
  _fn.__name__ = _name
  register(_fn)


@register
def transformer_big_dr2() -> HParams:
  return transformer_big_dr1().replace(layer_prepostprocess_dropout=0.2)


@register
def transformer_clean() -> HParams:
  """No dropout, no label smoothing; max_length 0 (= batch_size)."""
  return transformer_base_v2().replace(
      label_smoothing=0.0, layer_prepostprocess_dropout=0.0, attention_dropout=0.0,
      relu_dropout=0.0, max_length=0)


@register
def transformer_clean_big() -> HParams:
  return transformer_clean().replace(hidden_size=1024, filter_size=4096)


@register
def transformer_fairseq_fp16_activation_big() -> HParams:
  """Float16 activations (mixed_float16, dynamic loss scaling) as in Ott et al. 2018."""
  return transformer_big().replace(activation_dtype="float16", batch_size=3584)


@register
def transformer_relative() -> HParams:
  """Shaw et al. 2018: self-attention on clipped relative positions, no sinusoid."""
  return transformer_base().replace(pos="none", self_attention_type="dot_product_relative",
                                    max_relative_position=20)


@register
def transformer_relative_tiny() -> HParams:
  return transformer_relative().replace(num_hidden_layers=2, hidden_size=128, filter_size=512,
                                        num_heads=4)


@register
def transformer_relative_big() -> HParams:
  return transformer_big().replace(pos="none", self_attention_type="dot_product_relative",
                                   max_relative_position=20)


@register
def transformer_cubbitt() -> HParams:
  """CUBBITT (Popel et al. 2020): transformer_big_single_gpu with Adafactor."""
  return transformer_big_single_gpu().replace(
      learning_rate_schedule="rsqrt_decay", batch_size=2900, learning_rate_warmup_steps=8000,
      max_length=150, layer_prepostprocess_dropout=0.0, optimizer="Adafactor")


# Dropout masks shared over attention's batch and heads and over the length of
# the [batch, length, depth] tensors: T2T's memory saving on TPUs.
_BROADCAST_DROPOUT = dict(attention_dropout_broadcast_dims="0,1",
                          relu_dropout_broadcast_dims="1",
                          layer_prepostprocess_dropout_broadcast_dims="1")


def _for_tpu(hp: HParams) -> HParams:
  """T2T's `update_hparams_for_tpu`: Adafactor with rsqrt_decay (warmup 10000), one
  embedding shard, max_length 64, batch_size at most 2048, `_BROADCAST_DROPOUT`."""
  return hp.replace(optimizer="Adafactor", learning_rate_schedule="rsqrt_decay",
                    learning_rate_warmup_steps=10000, symbol_modality_num_shards=1,
                    max_length=64, batch_size=min(hp.batch_size, 2048), **_BROADCAST_DROPOUT)


@register
def transformer_tpu() -> HParams:
  return _for_tpu(transformer_base())


@register
def transformer_packed_tpu() -> HParams:
  """T2T's deprecated alias of transformer_tpu."""
  return transformer_tpu()


@register
def transformer_tpu_bf16_activation() -> HParams:
  return transformer_tpu().replace(activation_dtype="bfloat16")


@register
def transformer_big_tpu() -> HParams:
  return _for_tpu(transformer_big())


@register
def transformer_tiny_tpu() -> HParams:
  return _for_tpu(transformer_tiny())


@register
def transformer_small_tpu() -> HParams:
  return _for_tpu(transformer_small())


@register
def transformer_clean_big_tpu() -> HParams:
  return _for_tpu(transformer_clean_big())


@register
def transformer_big_enfr_tpu() -> HParams:
  return _for_tpu(transformer_big_enfr().replace(num_heads=8))


@register
def transformer_mlperf_tpu() -> HParams:
  """T2T's MLPerf set; its mlperf_mode only switched on MLPerf compliance logging."""
  return transformer_base_v3().replace(
      symbol_modality_num_shards=1, max_length=256, batch_size=2048, hidden_size=1024,
      filter_size=4096, num_heads=16, **_BROADCAST_DROPOUT)


# T2T's prepend sets: a problem's inputs, a 0 and its targets are one target
# sequence (T2T's encoder still reads the inputs too).


@register
def transformer_prepend_v2() -> HParams:
  return transformer_base_v2().replace(prepend_mode="prepend_inputs_masked_attention",
                                       max_length=0)


@register
def transformer_prepend_v1() -> HParams:
  return transformer_base_v1().replace(prepend_mode="prepend_inputs_masked_attention",
                                       max_length=0)


@register
def transformer_prepend() -> HParams:
  return transformer_prepend_v2()


# T2T's language-model sets (problems of targets only: `lm_model.TransformerLM`).


@register
def transformer_lm_tpu_0() -> HParams:
  """T2T's set for languagemodel_lm1b8k on TPUs (92M parameters)."""
  return _for_tpu(transformer_clean_big()).replace(
      num_heads=4, batch_size=4096, shared_embedding_and_softmax_weights=False,
      layer_prepostprocess_dropout=0.1)


@register
def transformer_lm_tpu_1() -> HParams:
  """T2T's set for languagemodel_lm1b8k on TPUs (335M parameters)."""
  return transformer_lm_tpu_0().replace(hidden_size=2048, filter_size=8192)


@register
def transformer_wikitext103_l4k_v0() -> HParams:
  """T2T's set for languagemodel_wikitext103_l4k (4096-token examples), Adafactor."""
  return transformer_big().replace(
      optimizer="Adafactor", learning_rate_schedule="rsqrt_decay",
      learning_rate_warmup_steps=10000, num_heads=4, max_length=4096, batch_size=4096,
      shared_embedding_and_softmax_weights=False, num_hidden_layers=8, attention_dropout=0.1,
      layer_prepostprocess_dropout=0.2, relu_dropout=0.1, label_smoothing=0.0,
      symbol_modality_num_shards=1, **_BROADCAST_DROPOUT)


@register
def transformer_ada_lmpackedbase() -> HParams:
  """T2T's set for languagemodel_lm1b32k_packed (256-token packed rows), Adafactor.

  T2T derives it from transformer_base_vq_ada_32ex_packed (refused: VQ-gated
  mixture-of-experts layers) and puts dense_relu_dense layers back, so it is
  that set's other values on transformer_base_v2.
  """
  return transformer_base_v2().replace(
      batch_size=5072, shared_embedding_and_softmax_weights=False,
      learning_rate_warmup_steps=10000, learning_rate_decay_steps=27200, num_heads=4,
      num_decoder_layers=6, label_smoothing=0.0, layer_postprocess_sequence="dan",
      layer_preprocess_sequence="none", weight_decay=1e-6, optimizer="Adafactor",
      learning_rate_schedule="linear_warmup*rsqrt_decay*linear_decay", learning_rate=0.1)


@register
def transformer_ada_lmpackedbase_dialog() -> HParams:
  return transformer_ada_lmpackedbase().replace(max_length=1024, batch_size=4096)


@register
def transformer_ada_lmpackedbase_relative() -> HParams:
  """T2T's name only: it sets no relative attention, so it is transformer_ada_lmpackedbase."""
  return transformer_ada_lmpackedbase()


# T2T's transformer.py sets not built here, refused by name: set -> why.
_MOE = "mixture-of-experts / VQ-gated feed-forward layers (ffn_layer=local_moe) are not implemented"
_TALL = ("language-model 'tall' pre-training and multi-problem mixing (multiproblem_*) are "
         "not implemented")
_AUDIO = "audio inputs are not implemented"
_MEMORY = "Transformer-XL memory (memory_type, split_targets_*) is not implemented"
REFUSED_HPARAMS_SETS: Dict[str, str] = {
    **{name: _MOE for name in (
        "transformer_base_vq_ada_32ex_packed", "transformer_topk_16_packed",
        "transformer_base_vq1_16_nb1_packed_nda_b01_scales",
        "transformer_base_vq1_16_nb1_packed_dan_b01_scales",
        "transformer_base_vq1_16_nb1_packed_nda_b01_scales_dialog")},
    **{name: _TALL for name in (
        "transformer_tall", "transformer_tall_finetune_tied", "transformer_tall_train_tied",
        "transformer_tall_finetune_uniencdec", "transformer_tall_train_uniencdec",
        "transformer_tall_finetune_textclass", "transformer_tall_pretrain_lm",
        "transformer_tall_pretrain_lm_tpu_adafactor",
        "transformer_tall_pretrain_lm_tpu_adafactor_large", "transformer_tall_pretrain_lm_tpu",
        "transformer_tall_big")},
    **{name: "parameter attention (ffn_layer=parameter_attention) is not implemented"
       for name in ("transformer_parameter_attention_a", "transformer_parameter_attention_b")},
    **{name: "time-series inputs are not implemented"
       for name in ("transformer_timeseries", "transformer_timeseries_tpu")},
    "transformer_tpu_with_conv": ("convolutional feed-forward layers (ffn_layer=conv_relu_conv) "
                                  "are not implemented"),
    **{name: _AUDIO for name in (
        "transformer_librispeech_v1", "transformer_librispeech_v2",
        "transformer_librispeech_tpu_v1", "transformer_librispeech_tpu_v2",
        "transformer_librispeech_with_area_attention", "transformer_librispeech",
        "transformer_librispeech_tpu", "transformer_common_voice",
        "transformer_common_voice_tpu")},
    "transformer_supervised_attention": "supervised attention (an attention loss) is not "
                                        "implemented",
    "transformer_tpu_1b": "bfloat16 weights (weight_dtype=bfloat16) are not implemented",
    "transformer_wikitext103_l4k_memory_v0": _MEMORY,
    "transformer_wikitext103_l16k_memory_v0": _MEMORY,
    "transformer_cifar10_memory_v0": f"image inputs are not implemented; {_MEMORY}",
    "transformer_imagenet64_memory_v0": f"image inputs are not implemented; {_MEMORY}",
}
