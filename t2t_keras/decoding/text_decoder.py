r"""Text in, text out: T2T's decode_from_file, scoring, and the BLEU eval hook.

Lines are sorted by descending whitespace-token count (T2T's `_get_sorted_inputs`,
so memory problems show early), decoded in batches, and written back in input
order: exactly one output line per input line. Empty lines give empty lines
without running the model (with return_beams, as many empty hypotheses as the other
lines have columns, each scored 0.0).

Input length: by default no input is cut, whatever its length, as T2T's decoder
and its serving input did: sinusoidal positions extend to any length, and a
learned position table (hparams `pos="emb"`) adds nothing past its `max_length`
rows, as T2T's `add_positional_embedding`. With decode hparam `max_input_size` > 0
an input is cut to `max_input_size - 1` subword tokens + EOS (`text_rules.input_cap`,
T2T's count), and one warning per call names the cut lines. The SavedModel
(export.py) applies the same rule and names each cut row in its `errors`
output, so the decoder and the SavedModel give the same output for every line.

Inputs are normalised by `tokenizer.normalize_input` (the SavedModel runs its
in-graph twin, so both agree on every line). Outputs never contain a line break
or tab (a weak model can emit the escapes `\10;`, `\9;`): each is replaced by a
space, counted and reported once, so `--decode_to_file` keeps one line per input
and the tab-separated n-best columns stay intact.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from data_gen import tokenizer
from data_gen.text_encoder import EOS_ID, PAD_ID
from t2t_keras import errors, hparams_checks
from t2t_keras.decoding import alignments, ensemble, inference_choices, seq2seq
from t2t_keras.decoding.text_rules import clean_output, input_cap
from t2t_keras.hparams import DecodeHParams
from t2t_keras.model import Transformer

DEFAULT_FILE_BATCH_SIZE = 32  # T2T: decode_hparams.batch_size=0 means 32 from a file
MAX_LINES_NAMED = 20  # line numbers a truncation warning names
ALIGNMENT_SEPARATOR = " ||| "  # text ||| alignments, as OpenNMT-tf and fairseq write them


class LineDecoder:
  """What every decoding engine shares: text lines in, one output line per input.

  Subclasses implement `_decode_batch` (encoded inputs -> ids and scores) and
  `_score_batch`; they may regroup the work by overriding `_batches`.

  Args:
    encoders: {"inputs": encoder, "targets": encoder} (SubwordTextEncoder API).
    decode_hp: DecodeHParams.
    log: function taking one progress line.
  """

  supports_prefix = False  # whether `decode_lines` takes forced target prefixes
  supports_alignments = False  # whether decode hparam return_alignments works here

  def __init__(self, encoders: Dict, decode_hp: DecodeHParams,
               log: Callable[[str], None] = print):
    if decode_hp.return_alignments and not self.supports_alignments:
      raise ValueError(f"decode_hparams.return_alignments: {type(self).__name__} gives no "
                       "alignments; decode with the TensorFlow engine.")
    self.encoders = encoders
    self.decode_hp = decode_hp
    self.log = log
    self.truncated = 0
    self.cleaned = 0

  @property
  def batch_size(self) -> int:
    return self.decode_hp.batch_size or DEFAULT_FILE_BATCH_SIZE

  def _encode(self, text: str, side: str = "inputs") -> Tuple[List[int], bool]:
    """(ids + [EOS], whether an input was cut to `input_cap`)."""
    if side == "inputs":
      text = tokenizer.normalize_input(text)
    ids = self.encoders[side].encode(text)
    cap = input_cap(self.decode_hp)
    cut = side == "inputs" and cap is not None and len(ids) > cap
    if cut:
      ids = ids[:cap]
    return ids + [EOS_ID], cut

  @staticmethod
  def _pad(rows: List[List[int]], jit_compile: bool = False) -> np.ndarray:
    length = max(len(r) for r in rows)
    if jit_compile:
      length = inference_choices.xla_length(length)  # few distinct shapes -> few XLA compilations
    return np.array([r + [PAD_ID] * (length - len(r)) for r in rows], np.int32)

  def _format(self, ids, scores, aligned=None) -> str:
    """One output line: the top ids, or with return_beams every beam's (and score);
    with `aligned` (per hypothesis its Pharaoh string) each text + " ||| " + it."""
    def decode(row, alignment=None):
      text = self.encoders["targets"].decode(seq2seq.strip_ids(row))
      clean = clean_output(text)
      self.cleaned += clean != text
      return clean if alignment is None else f"{clean}{ALIGNMENT_SEPARATOR}{alignment}"

    if not self.decode_hp.return_beams:
      return decode(ids, aligned)
    parts = []
    for b, (beam, score) in enumerate(zip(ids, scores)):
      parts.append(decode(beam, None if aligned is None else aligned[b]))
      if self.decode_hp.write_beam_scores:
        parts.append(f"{score:.2f}")
    return "\t".join(parts)

  def _empty_output(self) -> str:
    """The line of an empty input, not decoded: "", or with return_beams as many empty
    hypotheses as the others have (each scored 0.0, the SavedModel's score of an empty
    row), so that every n-best line has its columns."""
    if not self.decode_hp.return_beams:
      return ""
    beams = self.decode_hp.beam_size
    return self._format([[]] * beams, [0.0] * beams,
                        [""] * beams if self.decode_hp.return_alignments else None)

  def _start(self, count: int) -> None:
    """Called once per `decode_lines` with the number of lines to decode."""

  def _batches(self, todo: List[int], encoded: Dict[int, List[int]]) -> List[List[int]]:
    """The line indices of each batch, in decoding order (`todo` is longest first)."""
    return [todo[begin:begin + self.batch_size]
            for begin in range(0, len(todo), self.batch_size)]

  def _decode_batch(self, rows: List[List[int]],
                    prefixes: Optional[List[List[int]]] = None) -> Tuple[Sequence, Sequence]:
    """Encoded inputs (EOS included) and, where supported, prefix ids (no EOS) ->
    (per row: ids `[length]` or with return_beams `[beam, length]`; per row: its
    score or its beams' scores)."""
    raise NotImplementedError

  def _score_batch(self, sources: List[List[int]], targets: List[List[int]]) -> List[float]:
    """log P(target | source) of each encoded pair (EOS included in both)."""
    raise NotImplementedError

  def _align(self, rows: List[List[int]], ids) -> List:
    """Per row its hypotheses' Pharaoh alignments (a string, or a list per beam)."""
    raise NotImplementedError

  def decode_lines(self, lines: Sequence[str], progress_every_secs: float = 10.0,
                   prefixes: Optional[Sequence[str]] = None) -> List[str]:
    """One output string per input line, in input order.

    prefixes: optional, one per line: the text each output starts with (its
    subwords forced, see `decoding.decode_ids`); "" decodes the line as without.
    An empty input line still gives "" (with return_beams, empty hypotheses).
    Raises:
      ValueError: prefixes not one per line, or an engine without prefixes.
    """
    if prefixes is not None:
      if not self.supports_prefix:
        raise ValueError(f"{type(self).__name__} does not force target prefixes; decode "
                         "them with the TensorFlow engine.")
      if len(prefixes) != len(lines):
        raise ValueError(f"one prefix per input line: got {len(prefixes)} prefixes for "
                         f"{len(lines)} lines.")
    self.truncated = self.cleaned = 0
    outputs = [self._empty_output()] * len(lines)
    todo = [i for i, line in enumerate(lines) if tokenizer.normalize_input(line)]
    # T2T: longest first by whitespace tokens; stable for equal lengths.
    todo.sort(key=lambda i: -len(lines[i].split()))
    encoded, cut = {}, []
    for i in todo:
      encoded[i], was_cut = self._encode(lines[i])
      if was_cut:
        cut.append(i + 1)
    self.truncated = len(cut)
    self._start(len(todo))
    if cut:
      shown = ", ".join(map(str, sorted(cut)[:MAX_LINES_NAMED]))
      more = ", ..." if len(cut) > MAX_LINES_NAMED else ""
      self.log(f"Truncated {len(cut)} input line(s) to max_input_size="
               f"{self.decode_hp.max_input_size} ({input_cap(self.decode_hp)} subword tokens "
               f"+ EOS): line(s) {shown}{more}.")
    start = last = time.time()
    done = 0
    forced = None
    if prefixes is not None and any(p.strip() for p in prefixes):
      forced = {i: self.encoders["targets"].encode(prefixes[i].strip()) for i in todo}
    for batch in self._batches(todo, encoded):
      rows = [encoded[i] for i in batch]
      if forced is None:
        ids, scores = self._decode_batch(rows)
      else:
        ids, scores = self._decode_batch(rows, [forced[i] for i in batch])
      aligned = self._align(rows, ids) if self.decode_hp.return_alignments else None
      for row, index in enumerate(batch):
        outputs[index] = self._format(ids[row], scores[row],
                                      None if aligned is None else aligned[row])
        if self.decode_hp.log_results:  # T2T's log_decode_results.
          self.log(f"Inference results INPUT: {lines[index]}")
          self.log(f"Inference results OUTPUT: {outputs[index]}")
      done += len(batch)
      if time.time() - last >= progress_every_secs and done < len(todo):
        rate = done / (time.time() - start)
        self.log(f"Decoded {done}/{len(todo)} lines ({rate:.1f} lines/s, ETA "
                 f"{(len(todo) - done) / max(rate, 1e-9):.0f}s).")
        last = time.time()
    if self.cleaned:
      self.log(f"Replaced line breaks/tabs by spaces in {self.cleaned} output(s) (the model "
               f"emitted escaped newlines or tabs), to keep one line per input.")
    return outputs

  def score_pairs(self, sources: Sequence[str], targets: Sequence[str]) -> List[float]:
    """log P(target | source) of each pair (T2T --score_file)."""
    scores = []
    for begin in range(0, len(sources), self.batch_size):
      src = [self._encode(s)[0] for s in sources[begin:begin + self.batch_size]]
      tgt = [self._encode(t, "targets")[0] for t in targets[begin:begin + self.batch_size]]
      scores.extend(float(s) for s in self._score_batch(src, tgt))
    return scores


class TextDecoder(LineDecoder):
  """Decodes and scores text with a trained model (TensorFlow).

  Args:
    model: a Transformer with restored weights.
    encoders: {"inputs": encoder, "targets": encoder} (SubwordTextEncoder API).
    decode_hp: DecodeHParams (beam search, or greedy / sampling with beam_size 1).
    use_cache: cached incremental decoding (default) or full recomputation.
    jit_compile: XLA-compile decoding (input lengths padded to
      `perf.inference.XLA_LENGTH_BUCKETS`);
      None (the default) chooses per call of `decode_lines` (`perf.inference.decode_with_xla`).
    log: function taking one progress line.
  """

  supports_prefix = True
  supports_alignments = True

  def __init__(self, model: Transformer, encoders: Dict, decode_hp: DecodeHParams,
               use_cache: bool = True, jit_compile: Optional[bool] = None,
               log: Callable[[str], None] = print):
    super().__init__(encoders, decode_hp, log)
    self.model = model
    if decode_hp.return_alignments or decode_hp.sampling_keep_top_k != -1:
      # A layer, head or top_k the model lacks: refused before decoding.
      hparams_checks.check_decode_for_models(
          decode_hp, [m.hparams for m in ensemble.members(model)], model.target_vocab_size)
    self.jit_compile = jit_compile
    self.use_cache = use_cache
    self._decode_fns = {}  # (jit_compile, with_prefix) -> fn, kept (XLA keeps its compilations)
    self._jit = False
    # What decoding runs (the model, or the bfloat16 twin `make_decode_fn` chose): its
    # weights are cast again at each decode_lines, so that a trainer's BLEU hook sees
    # the weights of its step.
    self._inference = None
    self.score_fn = tf.function(lambda x, y: seq2seq.score_targets(model, x, y),
                                input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2)

  def decode_fn(self, jit_compile: bool, with_prefix: bool = False) -> Callable:
    """The decoding tf.function with or without XLA (and a prefix input), made once."""
    key = (jit_compile, with_prefix)
    if key not in self._decode_fns:
      fn = seq2seq.make_decode_fn(self.model, self.decode_hp, use_cache=self.use_cache,
                                   jit_compile=jit_compile, decoded_model=self._inference,
                                   with_prefix=with_prefix)
      self._decode_fns[key], self._inference = fn, fn.decoded_model
    return self._decode_fns[key]

  def decode_lines(self, lines: Sequence[str], progress_every_secs: float = 10.0,
                   prefixes: Optional[Sequence[str]] = None) -> List[str]:
    """`LineDecoder.decode_lines`; a prepend-mode run (its inputs and a 0 forced first,
    `seq2seq.prepend_prefix`) refuses target prefixes (errors.ConfigError, a ValueError)."""
    if prefixes is not None and seq2seq.prepends_inputs(self.model) and any(
        p.strip() for p in prefixes):
      raise errors.ConfigError(seq2seq.PREPEND_PREFIX_ERROR.format(
          mode=self.model.hparams.prepend_mode))
    return super().decode_lines(lines, progress_every_secs, prefixes)

  def _start(self, count: int) -> None:
    self._jit = self.jit_compile
    if self._jit is None:
      self._jit = inference_choices.decode_with_xla(self.model, count)
    fresh = self._inference is None
    self.decode_fn(self._jit)
    if not fresh and self._inference is not self.model:
      inference_choices.copy_weights(self.model, self._inference)

  def _decode_batch(self, rows, prefixes=None):
    inputs = tf.constant(self._pad(rows, self._jit))
    if prefixes is None:
      ids, scores = self.decode_fn(self._jit)(inputs)
    else:  # rows without a prefix get none (all PAD): they decode as without
      prefix = tf.constant(self._pad([p or [PAD_ID] for p in prefixes], self._jit))
      ids, scores = self.decode_fn(self._jit, with_prefix=True)(inputs, prefix)
    return ids.numpy(), scores.numpy()

  def _align(self, rows, ids):
    hp = self.decode_hp
    if not hp.return_beams:
      return alignments.alignments(self.model, self.encoders, rows, list(ids),
                                   hp.alignment_layer, hp.alignment_heads, hp.alignment_level)
    beams = ids.shape[1]
    flat = alignments.alignments(self.model, self.encoders,
                                 [r for r in rows for _ in range(beams)],
                                 [beam for row in ids for beam in row], hp.alignment_layer,
                                 hp.alignment_heads, hp.alignment_level)
    return [flat[i * beams:(i + 1) * beams] for i in range(len(rows))]

  def _score_batch(self, sources, targets):
    return self.score_fn(tf.constant(self._pad(sources)), tf.constant(self._pad(targets)))
