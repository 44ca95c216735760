"""`open_run(path) -> TrainedRun`: the one way to load a trained run, for Python and the CLIs.

A language model's run (a problem without inputs) opens as a
`lm_run.LanguageModelRun`, which samples and scores text instead of translating.

  import t2t_keras
  run = t2t_keras.open_run("work/train")
  print(run.translate(["the house is small", "a cat sees the dog"]))
  print(run.score(["the house is small"], ["das Haus ist klein"]))
  run.export_saved_model()

A `TrainedRun` holds the run's hparams (hparams.json), problem and vocabulary
(checked against run.json's hashes), the Keras model with the weights of its newest
finite checkpoint (or the one asked for) and the decoding machinery. Translation,
scoring and the exports are the same code the decoder and exporter commands run,
so a line translated here is the line `t2t_keras_decoder` writes.
"""

from __future__ import annotations

import numbers
import os
import tempfile
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from data_gen import file_io, registry
from t2t_keras import hparams_checks
from t2t_keras.decoding import ensemble, text_args, text_decoder
from t2t_keras.errors import RunError
from t2t_keras.export import ctranslate2_decoder, ctranslate2_model, saved_model
from t2t_keras.hparams import api_decode_hparams
from t2t_keras.hparams_checks import check_decode_for_language_model
from t2t_keras.lm_run import LanguageModelRun
from t2t_keras.rundir import model_factory, settings
from t2t_keras.rundir.files import RunDir

check_export_dir = saved_model.check_export_dir  # the exporter's check of --export_dir


def _quiet(line: str) -> None:
  del line


class EnsembleError(ValueError):
  """Runs that cannot decode together (another vocabulary, a CTranslate2 engine)."""


def open_run(path: Union[str, Sequence[str]], checkpoint: Optional[str] = None,
             data_dir: Optional[str] = None, log: Callable[[str], None] = _quiet,
             default_run: Optional[str] = None) -> Union["TrainedRun", LanguageModelRun]:
  """Loads the trained run in `path` (a `t2t_keras_trainer --output_dir`).

  A run of a problem without inputs (a language model) is a `LanguageModelRun`:
  it samples and scores text (`lm_run.py`); an ensemble refuses it.

  `open_run([A, B, ...])` loads the ensemble of several (`ensemble.py`): each a
  run directory, or a checkpoint prefix whose directory is its run (else
  `default_run`'s); they must share the vocabulary. It translates, scores and
  exports as one run; its `members` are the runs, each loaded alone.

  Args:
    path: the run directory, or a list of runs / checkpoints (an ensemble).
    checkpoint: a checkpoint prefix (e.g. an averaged one) or a directory of
      checkpoints (its newest; the run's `best/`: the best by the dev metric);
      default the run's newest loadable checkpoint with finite weights.
    data_dir: the directory holding the run's vocabulary; default the --data_dir the
      run was trained on (recorded in run.json), else `path` itself (an imported
      T2T run holds its vocabulary).
    log: receives one-line warnings (skipped damaged checkpoints, older run files).
  Raises:
    FileNotFoundError: `path` is not a training run (no hparams.json / run.json),
      or no vocabulary is found.
    EnsembleError: an ensemble's runs differ in vocabulary, or one is a language
      model.
    errors.RunError: the vocabulary differs from the one the run was trained with,
      or a run file is damaged.
    checkpoints.CheckpointError: no loadable checkpoint, or `checkpoint` is damaged
      or belongs to another model.
  """
  if isinstance(path, os.PathLike):
    path = os.fspath(path)
  if not isinstance(path, str):
    if checkpoint:
      raise ValueError("open_run([...]) takes each member's checkpoint in the list, "
                       f"not checkpoint={checkpoint!r}.")
    return _open_ensemble(_member_paths(path), data_dir, log, default_run)
  _, problem_name, spec = settings.load_run_files(path)
  data_dir = data_dir or settings.recorded_data_dir(path)
  try:
    problem = registry.problem(problem_name, data_dir or path)
  except ValueError as e:  # not registered (a --t2t_usr_dir not imported)
    raise RunError(str(e)) from None
  if data_dir is None:
    if not all(os.path.isfile(p) for p in problem.vocab_paths(path).values()):
      raise FileNotFoundError(
          f"{RunDir(path).run_file} records no data_dir and {path} holds no vocabulary: "
          "pass data_dir=<the --data_dir the run was trained on>.")
    data_dir = path
  # Before the model is built: its ids mean nothing with another vocabulary.
  settings.check_vocab(path, data_dir, log, problem)
  model, _, _, _, checkpoint_path = model_factory.load_trained_model(path, checkpoint, log=log)
  if not spec.has_inputs:
    return LanguageModelRun(path, data_dir, problem, model, checkpoint_path, log)
  return TrainedRun(path, data_dir, problem, model, checkpoint_path, log)


def _member_paths(path) -> List[str]:
  """The items of open_run's list as paths: each a str or path object, not empty."""
  if isinstance(path, bytes) or not isinstance(path, Iterable):
    raise ValueError("open_run(path) takes a run directory or a list of runs and "
                     f"checkpoints (an ensemble), got {path!r:.60}.")
  items = []
  for i, item in enumerate(path):
    if isinstance(item, os.PathLike):
      item = os.fspath(item)
    if not isinstance(item, str):
      raise ValueError(f"open_run(path): path[{i}] is {item!r:.60} ({type(item).__name__}), "
                       "not a run directory or checkpoint; give each as a str.")
    if not item.strip():  # os.path would take "" for the working directory
      raise ValueError(f"open_run(path): path[{i}] is empty ({item!r}); give each "
                       "ensemble member's run directory or checkpoint.")
    items.append(item)
  return items


def _member_run(item: str, default_run: Optional[str]) -> Tuple[str, Optional[str]]:
  """(run directory, checkpoint or None) of an ensemble member given as a run
  directory or as a checkpoint (prefix or directory of checkpoints)."""
  if os.path.isfile(RunDir(item).hparams_file):
    return item, None
  parent = os.path.dirname(os.path.normpath(item))
  if os.path.isfile(RunDir(parent).hparams_file):
    return parent, item
  if default_run:
    return default_run, item
  raise FileNotFoundError(f"{item} is neither a run directory (no hparams.json) nor a "
                          "checkpoint in one; give run directories or their checkpoints.")


def check_decode_hparams(path: Union[str, Sequence[str]], decode_hp,
                         default_run: Optional[str] = None) -> None:
  """Refuses decode hparams the run in `path` (or each run of an ensemble list, as
  `open_run` takes it) cannot honour, read from hparams.json and run.json alone, before
  any model is built (`hparams_checks.check_decode_for_models`). Run files that cannot
  be read are left for `open_run` to report.

  Raises:
    ValueError: one line naming the decode hparam and its value.
  """
  items = None if isinstance(path, str) else _member_paths(path)
  try:
    run_paths = [path] if items is None else [_member_run(p, default_run)[0] for p in items]
    runs = [settings.load_run_files(p) for p in run_paths]
  except Exception:  # pylint: disable=broad-except
    return  # open_run reads them again and says what is wrong
  hparams_checks.check_decode_for_models(decode_hp, [hp for hp, _, _ in runs],
                                         runs[0][2].target_vocab_size)
  if len(runs) == 1 and not runs[0][2].has_inputs:
    check_decode_for_language_model(decode_hp)


def _open_ensemble(items: List[str], data_dir: Optional[str], log: Callable[[str], None],
                   default_run: Optional[str]) -> "TrainedRun":
  if not items:
    raise ValueError("open_run([]): an ensemble needs at least one run.")
  members = [_member_run(item, default_run) for item in items]
  if len(members) > 1:
    for item, (run_path, _) in zip(items, members):
      if not settings.load_run_files(run_path)[2].has_inputs:
        raise EnsembleError(f"{item} is a language model: an ensemble decodes translation "
                            "runs; open it alone (open_run(path)) to sample() and score() "
                            "text with it.")
  # Before any model is built: run.json records each run's vocabulary digests.
  digests = [settings.recorded_vocab_digests(run_path) for run_path, _ in members]
  for item, (run_path, _), digest in zip(items[1:], members[1:], digests[1:]):
    for side in ("targets", "inputs"):
      if digests[0].get(side) and digest.get(side) and digest[side] != digests[0][side]:
        raise EnsembleError(
            f"ensemble members need the same vocabulary: {item} was trained with another "
            f"{side} vocabulary (SHA-256 {digest[side][:16]}...) than {items[0]} "
            f"({digests[0][side][:16]}...); ensemble runs of one problem's vocabulary.")
  runs = [open_run(run_path, checkpoint, data_dir, log) for run_path, checkpoint in members]
  if len(runs) == 1:
    return runs[0]
  try:
    ensemble.check_same_vocabulary(items, [r.encoders for r in runs])
  except ValueError as e:
    raise EnsembleError(str(e)) from None
  first = runs[0]
  return TrainedRun(first.run_dir.path, first.data_dir, first.problem,
                    ensemble.Ensemble([r.model for r in runs]),
                    ",".join(r.checkpoint_path for r in runs), log, members=runs)


class TrainedRun:
  """A trained run, loaded: see `open_run`.

  Attributes:
    run_dir: its `RunDir` (every path of the run directory).
    data_dir: where its vocabulary was read.
    hparams: its `HParams`.
    problem: its `data_gen.problem.Problem`; `encoders`: {"inputs", "targets"}.
    model: the Keras model (`t2t_keras.model.Transformer`), weights restored.
    checkpoint_path: the checkpoint they came from (an ensemble's: comma-separated).
    members: an ensemble's runs (each a `TrainedRun`), else [].
  """

  def __init__(self, path: str, data_dir: str, problem, model, checkpoint_path: str,
               log: Callable[[str], None] = _quiet, members: Sequence["TrainedRun"] = ()):
    self.members = list(members)
    self.run_dir = RunDir(path)
    self.data_dir = data_dir
    self.problem = problem
    self.encoders = problem.feature_encoders(data_dir)
    self.model = model
    self.hparams = model.hparams
    self.checkpoint_path = checkpoint_path
    self.log = log
    self._decoders = {}  # DecodeHParams -> TextDecoder: traced decode functions are kept

  def __repr__(self) -> str:
    if self.members:
      return f"TrainedRun(ensemble of {[m.run_dir.path for m in self.members]!r})"
    return (f"TrainedRun({self.run_dir.path!r}, problem={self.problem.name!r}, "
            f"checkpoint={self.checkpoint_path!r})")

  def _refuse_ensemble_in_ctranslate2(self) -> None:
    if self.members:
      raise EnsembleError("CTranslate2 decodes one model, not an ensemble: use "
                          "engine='tensorflow' (--engine=tensorflow).")

  @property
  def vocab_files(self) -> Dict[str, str]:
    return self.problem.vocab_paths(self.data_dir)

  def decode_hparams(self, decode_hparams="", **values):
    """`DecodeHParams` from T2T's override string and/or keyword values (log_results
    off unless asked for); a DecodeHParams given alone is used as it is. Raises
    ValueError on an unknown name or a bad value."""
    return api_decode_hparams(decode_hparams, **values)

  def decoder(self, decode_hp, engine: str = "tensorflow", **engine_args):
    """The line decoder `t2t_keras_decoder` runs for these decode hparams: the
    TensorFlow one (kept per settings), or with engine="ctranslate2" one of
    `ctranslate2_model_dir` (engine_args; default the run converted now)."""
    if engine == "ctranslate2":
      return self._ctranslate2_decoder(decode_hp, **engine_args)
    if engine != "tensorflow":
      raise ValueError(f"engine must be 'tensorflow' or 'ctranslate2', got {engine!r}.")
    key = (decode_hp, tuple(sorted(engine_args.items())))
    if key not in self._decoders:
      self._decoders[key] = text_decoder.TextDecoder(self.model, self.encoders, decode_hp,
                                                    log=self.log, **engine_args)
    return self._decoders[key]

  def _ctranslate2_decoder(self, decode_hp, ctranslate2_model_dir: Optional[str] = None,
                           compute_type: str = "float32"):

    self._refuse_ensemble_in_ctranslate2()
    if ctranslate2_model_dir:
      return ctranslate2_decoder.CTranslate2Decoder(ctranslate2_model_dir, self.encoders,
                                                   decode_hp, compute_type=compute_type,
                                                   log=self.log)
    ctranslate2_model.check_convertible(self.hparams)
    with tempfile.TemporaryDirectory(prefix="t2t-keras-ctranslate2-") as tmp:
      model_dir = ctranslate2_model.export(self.model, self.vocab_files,
                                            os.path.join(tmp, "model"))
      self.log(f"Converted {self.run_dir.path} to CTranslate2 ({compute_type}).")
      return ctranslate2_decoder.CTranslate2Decoder(model_dir, self.encoders, decode_hp,
                                                   compute_type=compute_type, log=self.log)

  def translate(self, sentences: Sequence[str], beam_size: int = 4, alpha: float = 0.6,
                n_best: int = 1, prefix: Optional[Sequence[str]] = None,
                **decode_hparams) -> Union[List[str], List[List[str]]]:
    """Translations of `sentences`, one per sentence (an empty one gives "").

    `prefix` (one text per sentence, "" for none) forces the start of each
    translation: the search continues from it and scores count it
    (`decoding.decode_ids`).

    With n_best > 1 each is the list of the n best hypotheses, best first (T2T's
    return_beams). Other T2T decode hparams by name (extra_length=50,
    max_input_size=...; beam_size=1 decodes greedily or, with
    sampling_method="random", samples).
    `sentences` (and `prefix`) is a list: one string is refused, as are items other
    than str or UTF-8 bytes (`text_args.text_list`). An empty sentence gives "", or
    with n_best > 1 n empty hypotheses.
    Raises:
      ValueError: one line naming the argument and its value: one string, a bad item
        (with its index), n_best outside 1..beam_size, a bad decode hparam (every
        one checked before decoding), or not one prefix per sentence.
    """
    sentences = text_args.text_list(sentences, "translate()", "sentences", "sentences")
    if prefix is not None:
      prefix = text_args.text_list(prefix, "translate(prefix=...)", "prefix",
                                   "target prefixes, one per sentence")
    if "return_beams" in decode_hparams:
      raise ValueError("translate() sets return_beams from n_best; pass n_best=N, got "
                       f"return_beams={decode_hparams['return_beams']!r}.")
    if "write_beam_scores" in decode_hparams:  # they would come as hypotheses
      raise ValueError("translate() returns texts, not scores: got write_beam_scores="
                       f"{decode_hparams['write_beam_scores']!r}; score them with score().")
    # beam_size and the other decode hparams first: n_best's range depends on beam_size.
    decode_hp = self.decode_hparams(beam_size=beam_size, alpha=alpha,
                                    return_beams=_is_int(n_best) and n_best > 1,
                                    **decode_hparams)
    if not _is_int(n_best) or not 1 <= n_best <= decode_hp.beam_size:
      raise ValueError(f"n_best must be between 1 and beam_size={decode_hp.beam_size}, got "
                       f"{n_best!r}.")
    lines = self.decoder(decode_hp).decode_lines(sentences, prefixes=prefix)
    if n_best == 1:
      return lines
    return [line.split("\t")[:n_best] for line in lines]

  def score(self, sources: Sequence[str], targets: Sequence[str]) -> List[float]:
    """log P(target | source) of each pair, as `t2t_keras_decoder --score_file`.

    Each a list of texts, as `translate`'s sentences.
    Raises:
      ValueError: one string, a bad item (named with its index), or the two lists
        differ in length.
    """
    sources = text_args.text_list(sources, "score()", "sources", "source texts")
    targets = text_args.text_list(targets, "score()", "targets", "target texts")
    if len(sources) != len(targets):
      raise ValueError(f"score() needs one target per source: got {len(sources)} sources "
                       f"and {len(targets)} targets.")
    return self.decoder(self.decode_hparams()).score_pairs(sources, targets)

  def translate_file(self, source: str, output: str, decode_hparams: str = "",
                     **values) -> List[str]:
    """Translates the lines of file `source` into file `output`: one line per input
    line, written whole (a temporary file, then renamed). Returns the lines."""
    with open(source, encoding="utf-8") as f:
      lines = f.read().splitlines()
    outputs = self.decoder(self.decode_hparams(decode_hparams, **values)).decode_lines(lines)
    file_io.write_text(output, "".join(line + "\n" for line in outputs))
    return outputs

  def export_saved_model(self, export_dir: Optional[str] = None, decode_hparams: str = "",
                         beam_sizes: Sequence[int] = (), **values) -> str:
    """Writes the next version `<export_dir>/<N>` of the serving SavedModel (decode
    hparams baked in, as `t2t_keras_exporter`); default export_dir: the run's export/.
    `beam_sizes`: one `beam_<K>` signature (decode settings per request) for each
    (default: the decode hparams' beam_size). Returns the version directory.

    Raises:
      ValueError: export_dir is a file or ends in a version number.
    """
    export_dir = export_dir or self.run_dir.export_dir
    check_export_dir(export_dir)
    decode_hp = self.decode_hparams(decode_hparams, **values)
    if decode_hp.return_alignments:
      raise ValueError("decode_hparams.return_alignments: the SavedModel returns outputs and "
                       "scores only; get alignments from translate() or t2t_keras_decoder.")
    return saved_model.export_saved_model(self.model, self.hparams, decode_hp, self.vocab_files,
                                     export_dir, encoders=self.encoders, beam_sizes=beam_sizes)

  def export_ctranslate2(self, export_dir: Optional[str] = None,
                         quantization: Optional[str] = None) -> str:
    """Writes the run as a CTranslate2 model directory (replaced whole); default the
    run's export_ctranslate2/. `quantization` (e.g. "int8") stores the weights so;
    None keeps float32 (the decoder's compute_type can still quantize on load).

    Raises:
      ctranslate2_model.NotConvertibleError: hparams the converter cannot map, by name.
      ImportError: ctranslate2 is not installed.
    """
    self._refuse_ensemble_in_ctranslate2()
    ctranslate2_decoder.import_ctranslate2()
    ctranslate2_model.check_convertible(self.hparams)
    return ctranslate2_model.export(self.model, self.vocab_files,
                                     export_dir or self.run_dir.ctranslate2_dir,
                                     quantization=quantization)


def _is_int(value) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)
