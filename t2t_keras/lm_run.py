"""`LanguageModelRun`: a trained language model, as `open_run` returns it.

  import t2t_keras
  run = t2t_keras.open_run("runs/lm")        # a run of a problem without inputs
  run.sample(["the cat"], max_new_tokens=20, temperature=0)
  # [Sample(text='sees the dog', log_prob=-2.1..., ended=True, ids=[...])]
  run.score(["the cat sees the dog"])
  # [TextScore(log_prob=-9.8..., tokens=6, perplexity=5.1...)]
  run.export_saved_model()                   # runs/lm/export/<N>: prompts in, continuations out

A language model (`lm_model.TransformerLM`, problems with `has_inputs` False such
as `languagemodel_from_files`) has no inputs to translate: it continues prompts
and scores texts (`decoding/lm.py`). `t2t_keras_decoder` and `t2t_keras_exporter`
call these methods on a language-model run, so a line sampled here is the line
the decoder writes for the same prompts, settings and seed.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from t2t_keras.decoding import lm, text_args, text_rules
from t2t_keras.export import lm_saved_model
from t2t_keras.export.saved_model import check_export_dir
from t2t_keras.hparams import DecodeHParams, api_decode_hparams
from t2t_keras.hparams_checks import check_decode_for_language_model
from t2t_keras.rundir.files import RunDir


def _quiet(line: str) -> None:
  del line


def sample_arguments(decode_hp: DecodeHParams) -> Dict:
  """`LanguageModelRun.sample`'s arguments from T2T's decode hparams, as the decoder
  and the exporter read them: extra_length new tokens; beam_size > 1 beam search
  (alpha), else sampling_method argmax (greedy) or random (sampling_temp,
  sampling_keep_top_k); batch_size (0: 32); max_input_size.

  Raises:
    ValueError: a decode hparam a language model does not take (return_beams, ...).
  """
  check_decode_for_language_model(decode_hp)
  settings = lm.ContinueSettings.from_decode_hparams(decode_hp)
  return dict(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
              top_k=settings.top_k, beam_size=settings.beam_size, alpha=settings.alpha,
              batch_size=decode_hp.batch_size or lm.DEFAULT_BATCH_SIZE,
              max_input_size=decode_hp.max_input_size)


class LanguageModelRun:
  """A trained language model, loaded: see `trained_run.open_run`.

  Attributes:
    run_dir: its `RunDir`.
    data_dir: where its vocabulary was read.
    hparams: its `HParams`.
    problem: its `data_gen.problem.Problem` (`has_inputs` False); `encoders`: its
      encoders, `encoders["targets"]` the subword encoder of every text.
    model: the Keras model (`t2t_keras.lm_model.TransformerLM`), weights restored.
    checkpoint_path: the checkpoint they came from.
    members: [] (a language model is not decoded in an ensemble).
  """

  def __init__(self, path: str, data_dir: str, problem, model, checkpoint_path: str,
               log: Callable[[str], None] = _quiet):
    self.members: List = []
    self.run_dir = RunDir(path)
    self.data_dir = data_dir
    self.problem = problem
    self.encoders = problem.feature_encoders(data_dir)
    self.model = model
    self.hparams = model.hparams
    self.checkpoint_path = checkpoint_path
    self.log = log
    self._continuers = {}  # (ContinueSettings, batch_size) -> Continuer: traced once
    self._score_fn = None

  def __repr__(self) -> str:
    return (f"LanguageModelRun({self.run_dir.path!r}, problem={self.problem.name!r}, "
            f"checkpoint={self.checkpoint_path!r})")

  @property
  def encoder(self):
    """The subword encoder of prompts, continuations and scored texts."""
    return self.encoders["targets"]

  @property
  def vocab_files(self) -> Dict[str, str]:
    return self.problem.vocab_paths(self.data_dir)

  def sample(self, prompts: Sequence[str], max_new_tokens: int = 100,
             temperature: float = 1.0, top_k: int = -1, beam_size: int = 1,
             seed: Optional[lm.Seed] = None, alpha: float = 0.6,
             batch_size: int = lm.DEFAULT_BATCH_SIZE,
             max_input_size: int = -1) -> List[lm.Sample]:
    """A continuation of each prompt (T2T's decoding of a problem without inputs).

    Each prompt is forced as the start of its row at no cost to the score (T2T's
    `partial_targets`), with T2T's space after final punctuation
    (`lm.t2t_prompt`); "" continues from nothing. Then up to `max_new_tokens` ids
    (EOS included; T2T's extra_length): greedy with temperature 0, sampling
    (`temperature`, `top_k`: T2T's sampling_temp and sampling_keep_top_k), or with
    beam_size > 1 T2T's beam search with length penalty `alpha` (temperature,
    top_k and seed unused).

    Args:
      prompts: a list of texts (str or UTF-8 bytes); one string is refused.
      seed: an int or a pair of ints: the same seed, prompts and batch_size give
        the same samples; None: a fresh random seed.
      batch_size: prompts decoded together, in the order given (sampling draws
        depend on the batch).
      max_input_size: > 0 keeps the first max_input_size - 1 subwords of a prompt
        (T2T's decode hparam; a log line counts the prompts cut).
    Returns:
      one `lm.Sample(text, log_prob, ended, ids)` per prompt: the continuation's
      text (the prompt not included), natural-log P(continuation | prompt) (EOS
      included if it ended), whether the model ended it with EOS, its subword ids.
    Raises:
      ValueError: one line naming the argument: one string, a bad item (with its
        index), a bad setting; all checked before decoding.
    """
    prompts = text_args.text_list(prompts, "sample()", "prompts", "prompts")
    settings = lm.ContinueSettings(max_new_tokens, temperature, top_k, beam_size, alpha)
    settings.check(self.model.target_vocab_size)
    seed = lm.seed_pair(seed)
    if not isinstance(max_input_size, int) or isinstance(max_input_size, bool):
      raise ValueError(f"max_input_size must be an int (> 0: subwords kept of a prompt + 1; "
                       f"-1: all), got {max_input_size!r}.")
    cap = text_rules.input_cap(DecodeHParams(max_input_size=max_input_size))
    key = (settings, batch_size)
    if key not in self._continuers:
      self._continuers[key] = lm.Continuer(self.model, settings, batch_size)
    if not prompts:
      return []
    if cap is not None:
      cut = sum(len(ids) > cap for ids in lm.encode_prompts(self.encoder, prompts))
      if cut:
        self.log(f"Cut {cut} prompt(s) to their first {cap} subword tokens "
                 f"(max_input_size={max_input_size}).")
    return lm.continue_texts(self._continuers[key], self.encoder, prompts, seed, cap)

  def score(self, texts: Sequence[str],
            batch_size: int = lm.DEFAULT_BATCH_SIZE) -> List[lm.TextScore]:
    """The score of each text as the model was trained on it: stripped, its subwords
    + EOS (`t2t_keras_decoder --score_file`).

    Args:
      texts: a list of texts (str or UTF-8 bytes); one string is refused.
    Returns:
      one `lm.TextScore(log_prob, tokens, perplexity)` per text: natural-log
      P(text + EOS), the ids scored (subwords + EOS), exp(-log_prob / tokens).
    Raises:
      ValueError: one string, a bad item (named with its index), or batch_size.
    """
    texts = text_args.text_list(texts, "score()", "texts")
    if self._score_fn is None:
      self._score_fn = lm.make_score_fn(self.model)
    return lm.text_scores(self.model, self.encoder, texts, batch_size, self._score_fn)

  def translate(self, *args, **kwargs):
    """Refused: a language model has no inputs to translate."""
    del args, kwargs
    raise TypeError(f"translate(): {self.run_dir.path} is a language model "
                    f"({self.problem.name}: no inputs to translate); continue prompts with "
                    "sample(prompts) and score texts with score(texts).")

  def translate_file(self, *args, **kwargs):
    """Refused: a language model has no inputs to translate."""
    del args, kwargs
    raise TypeError(f"translate_file(): {self.run_dir.path} is a language model; continue "
                    "the lines of a file with sample(prompts) or t2t_keras_decoder "
                    "--decode_from_file.")

  def export_ctranslate2(self, *args, **kwargs):
    """Refused: the CTranslate2 converter maps the encoder-decoder Transformer."""
    del args, kwargs
    raise TypeError(f"export_ctranslate2(): {self.run_dir.path} is a language model; the "
                    "CTranslate2 converter maps the encoder-decoder Transformer only: "
                    "export_saved_model() serves it.")

  def decode_hparams(self, decode_hparams="", **values) -> DecodeHParams:
    """`DecodeHParams` as `TrainedRun.decode_hparams`, checked for a language model."""
    decode_hp = api_decode_hparams(decode_hparams, **values)
    check_decode_for_language_model(decode_hp)
    return decode_hp

  def export_saved_model(self, export_dir: Optional[str] = None, decode_hparams="",
                         seed: lm.Seed = 0, **values) -> str:
    """Writes the next version `<export_dir>/<N>` of the serving SavedModel
    (`export/lm_saved_model.py`: prompts in, continuations and their scores out,
    and a `score` signature); default export_dir: the run's export/. The decode
    hparams (`sample_arguments`: greedy, sampling or beam search, extra_length new
    tokens) and the sampling `seed` are baked in. Returns the version directory.

    Raises:
      ValueError: export_dir is a file or ends in a version number, or a decode
        hparam a language model does not take.
    """
    export_dir = export_dir or self.run_dir.export_dir
    check_export_dir(export_dir)
    decode_hp = self.decode_hparams(decode_hparams, **values)
    return lm_saved_model.export_saved_model(self.model, decode_hp,
                                             self.vocab_files["targets"], export_dir, seed)
