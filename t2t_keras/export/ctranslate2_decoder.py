"""Decoding text with CTranslate2 (`ctranslate2_model`), as close to T2T's search as it allows.

What is T2T's here:
  * each sentence's cap is its own input length (EOS included) + extra_length,
    as `decoding` does: lines are grouped by input length and each group is
    decoded with its own `max_decoding_length`;
  * decoding may stop at step 0 (`min_decoding_length=0`) and no input is cut
    (`max_input_length=0`) unless decode hparam `max_input_size` says so;
  * greedy search is argmax, identical to T2T's;
  * beam search returns its n-best re-ranked with T2T's length penalty
    `((5 + length) / 6) ** alpha` (length with EOS) for finished hypotheses, and
    after them the unfinished ones by raw log-probability, as T2T ranks them.

What is not: CTranslate2's beam search itself. It normalises by `length ** alpha`
while searching, finishes a hypothesis only when EOS is among the top `beam_size`
of the 2 x beam_size candidates, and at the cap ranks unfinished hypotheses with
finished ones. The re-ranking corrects the final order among the hypotheses it
kept, not which it kept: top hypotheses can differ from T2T's beam search
(`docs/performance.md` gives the measured agreement). Sampling
(`sampling_method=random`) uses CTranslate2's own random numbers.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

from data_gen.text_encoder import EOS_ID
from t2t_keras import errors
from t2t_keras.decoding.text_decoder import LineDecoder
from t2t_keras.export.ctranslate2_model import INFO_FILE, MAX_POSITIONS
from t2t_keras.rundir.files import RunDir
from t2t_keras.hparams import DecodeHParams

COMPUTE_TYPES = ("float32", "int8", "int8_float32")
INSTALL_HINT = ("CTranslate2 is an optional extra: pip install -e '.[ct2]' "
                "(or pip install 'ctranslate2>=4.8,<5').")


def import_ctranslate2():
  """The `ctranslate2` module, or an ImportError that says how to install it."""
  try:
    import ctranslate2  # optional dependency (the ct2 extra)
  except ImportError as e:
    raise ImportError(f"{INSTALL_HINT} ({e})") from None
  return ctranslate2


def t2t_length_penalty(length: int, alpha: float) -> float:
  """T2T's (GNMT's) `((5 + length) / 6) ** alpha`."""
  return ((5.0 + length) / 6.0) ** alpha


def rerank(hypotheses: Sequence[Sequence[int]], ct2_scores: Sequence[float],
           alpha: float) -> List[Tuple[List[int], float]]:
  """CTranslate2's n-best (`length ** alpha`-normalised scores, EOS kept when finished)
  -> (ids, T2T score) best first: finished by log-prob / T2T's penalty, then
  unfinished by raw log-prob."""
  finished, unfinished = [], []
  for ids, score in zip(hypotheses, ct2_scores):
    length = len(ids)  # CTranslate2 counts EOS in the length it normalises by
    log_prob = score * length ** alpha if alpha else score
    if ids and ids[-1] == EOS_ID:
      finished.append((list(ids), log_prob / t2t_length_penalty(length, alpha)))
    else:
      unfinished.append((list(ids), log_prob))
  by_score = lambda pair: -pair[1]
  return sorted(finished, key=by_score) + sorted(unfinished, key=by_score)


class CTranslate2Decoder(LineDecoder):
  """Decodes and scores text with a CTranslate2 model directory (see module docstring).

  Args:
    model_dir: written by `ctranslate2_export.export`.
    encoders: {"inputs": encoder, "targets": encoder}.
    decode_hp: DecodeHParams.
    compute_type: "float32", "int8" or "int8_float32" (int8 weights; on CPU both
      int8 types compute the rest in float32).
    threads: CTranslate2's intra-op threads; 0: every CPU this process may use.
    log: function taking one progress line.
  """

  def __init__(self, model_dir: str, encoders: Dict, decode_hp: DecodeHParams,
               compute_type: str = "float32", threads: int = 0,
               log: Callable[[str], None] = print):
    super().__init__(encoders, decode_hp, log)
    if compute_type not in COMPUTE_TYPES:
      raise ValueError(f"compute_type must be one of {', '.join(COMPUTE_TYPES)}, "
                       f"got {compute_type!r}.")
    ctranslate2 = import_ctranslate2()
    info_path = os.path.join(model_dir, INFO_FILE)
    if not os.path.isfile(info_path):
      raise FileNotFoundError(f"{model_dir} is not a t2t-keras CTranslate2 export ({INFO_FILE} "
                              "is missing); write one with t2t_keras_exporter "
                              "--export_format=ctranslate2.")
    with open(info_path) as f:
      info = json.load(f)
    self.max_positions = info.get("max_positions", MAX_POSITIONS)
    for side, key in (("inputs", "input_vocab_size"), ("targets", "target_vocab_size")):
      size = getattr((encoders or {}).get(side), "vocab_size", None)
      if size is not None and size != info[key]:
        raise errors.RunError(
            f"{model_dir} was exported with {key} {info[key]}, but the {side} vocabulary "
            f"has {size} ids: it belongs to another run; export this run with "
            "t2t_keras_exporter --export_format=ctranslate2.")
    threads = threads or len(os.sched_getaffinity(0))
    self.compute_type = compute_type
    self.translator = ctranslate2.Translator(model_dir, device="cpu",
                                             compute_type=compute_type,
                                             inter_threads=1, intra_threads=threads)

  def _batches(self, todo, encoded):
    """Lines of one input length per batch, longest first: one cap per batch."""
    by_length: Dict[int, List[int]] = {}
    for i in todo:
      by_length.setdefault(len(encoded[i]), []).append(i)
    return [group[begin:begin + self.batch_size]
            for length in sorted(by_length, reverse=True)
            for group in [by_length[length]]
            for begin in range(0, len(group), self.batch_size)]

  def _check_length(self, longest: int, what: str) -> None:
    """A RunError when `longest` ids (of `what`) need more positions than the export has."""
    if longest > self.max_positions:
      raise errors.RunError(
          f"{what} of {longest} ids exceeds the {self.max_positions} positions of the "
          "CTranslate2 export; cut inputs with --decode_hparams=max_input_size=N, or use "
          "the TensorFlow decoder.")

  def _search_options(self) -> Dict:
    hp = self.decode_hp
    options = dict(min_decoding_length=0, max_input_length=0, return_scores=True,
                   return_end_token=True)
    if hp.beam_size > 1:
      return dict(options, beam_size=hp.beam_size, num_hypotheses=hp.beam_size,
                  length_penalty=hp.alpha)
    options.update(beam_size=1, length_penalty=0.0)
    if hp.sampling_method == "random" and hp.sampling_temp > 0:
      options.update(sampling_topk=hp.sampling_keep_top_k if hp.sampling_keep_top_k > 0 else 0,
                     sampling_temperature=hp.sampling_temp)
    return options

  def _decode_batch(self, rows):
    cap = len(rows[0]) + self.decode_hp.extra_length  # one input length per batch
    self._check_length(cap, f"an input of {len(rows[0])} ids + extra_length "
                       f"{self.decode_hp.extra_length} (its output cap)")
    results = self.translator.translate_batch(
        [[str(i) for i in row] for row in rows], max_decoding_length=cap,
        **self._search_options())
    ids, scores = [], []
    for result in results:
      hypotheses = [[int(t) for t in h] for h in result.hypotheses]
      if self.decode_hp.beam_size > 1:
        ranked = rerank(hypotheses, result.scores, self.decode_hp.alpha)
        hypotheses, row_scores = [h for h, _ in ranked], [s for _, s in ranked]
      else:
        row_scores = list(result.scores)
      if self.decode_hp.return_beams:
        ids.append(hypotheses)
        scores.append(np.asarray(row_scores, np.float32))
      else:
        ids.append(hypotheses[0])
        scores.append(np.float32(row_scores[0]))
    return ids, scores

  def _score_batch(self, sources, targets):
    self._check_length(max(len(r) for r in sources + targets), "a source or target")
    # CTranslate2 appends EOS to each target itself.
    results = self.translator.score_batch(
        [[str(i) for i in s] for s in sources], [[str(i) for i in t[:-1]] for t in targets],
        max_input_length=0)
    return [float(np.sum(r.log_probs)) for r in results]


def default_model_dir(output_dir: str) -> str:
  """Where `t2t_keras_exporter --export_format=ctranslate2` writes by default."""
  return RunDir(output_dir).ctranslate2_dir
