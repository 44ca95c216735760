"""BLEU on a dev set at each evaluation of training (T2T's decode hook).

The hook decodes with the model being trained, through the decoder's own
`TextDecoder` and the run's decode hparams, and scores with sacreBLEU.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

from data_gen import file_io
from t2t_keras.decoding import text_decoder
from t2t_keras.hparams import DecodeHParams
from t2t_keras.model import Transformer
from t2t_keras.scoring import bleu as bleu_lib


def make_bleu_hook(model: Transformer, encoders: Dict, decode_hp: DecodeHParams, source: str,
                   reference: str, max_lines: int = 0,
                   paper_language: Optional[str] = None) -> Callable[[int], Dict[str, float]]:
  """fn(step) -> {"bleu": sacrebleu BLEU} decoding `source` (first `max_lines`).

  With `paper_language` (the target language, e.g. "de") the dict also has
  "bleu_tokenized": the paper's tokenized BLEU (`bleu.paper_bleu`), cheap next
  to the decoding.
  """
  sources = file_io.read_lines(source, name="source")
  references = file_io.read_lines(reference, name="reference")
  if len(sources) != len(references):
    raise ValueError(f"{source} has {len(sources)} lines but {reference} has "
                     f"{len(references)}.")
  if max_lines:
    sources, references = sources[:max_lines], references[:max_lines]
  decoder = text_decoder.TextDecoder(model, encoders, decode_hp, log=lambda line: None)

  def hook(step: int) -> Dict[str, float]:
    del step
    hypotheses = decoder.decode_lines(sources)
    score, _ = bleu_lib.corpus_bleu(hypotheses, references, tokenize="intl")
    if paper_language is None:
      return {"bleu": score}
    paper = bleu_lib.paper_bleu(hypotheses, references, language=paper_language)
    return {"bleu": score, "bleu_tokenized": paper.score}

  return hook
