"""SentencePiece vocabularies beside T2T's subword one: training, loading, the Python encoder.

T2T had no SentencePiece; `t2t_keras_datagen --vocab_type=sentencepiece` builds a
model with the `sentencepiece` package instead of a `*.subwords` file and names it
`vocab.<problem>.<size>.spm.model` (`vocab_filename`). T2T's reserved ids hold:
`<pad>` = 0, `<EOS>` = 1, then `<unk>` = 2; no BOS. So records still end in EOS=1
and 0 pads them, and the model, the searches and the exports see ids as before.

`SentencePieceEncoder` has the part of `text_encoder.SubwordTextEncoder`'s
interface the rest uses (`encode`, `decode`, `decode_list`, `vocab_size`,
`filename`); it has no `all_subtoken_strings`, so alignments map its ids to words
through `decode` (`decoding/alignments.py`). `load_vocab` opens either kind of
vocab file; `data_gen/graph_sentencepiece_encoder.py` is its in-graph twin.

This module needs no TensorFlow.
"""

import io
import logging
import os
import time
from typing import Callable, Iterable, List, Optional, Sequence

import sentencepiece

from data_gen import file_io
from data_gen import text_encoder
from data_gen.text_encoder import EOS_ID, PAD_ID

SUBWORD, SENTENCEPIECE = "subword", "sentencepiece"
VOCAB_TYPES = (SUBWORD, SENTENCEPIECE)
MODEL_TYPES = ("unigram", "bpe")
DEFAULT_MODEL_TYPE = "unigram"
# Every character of the sample gets a piece (sentencepiece's default, 0.9995, drops the
# rarest 0.05% to <unk>, meant for scripts with thousands of characters): T2T's subword
# vocabulary also covers every character it was built from.
DEFAULT_CHARACTER_COVERAGE = 1.0
SUFFIX = ".spm.model"
UNK_ID = 2
# The most sentences the trainer keeps in memory: a reservoir sample of the text it is
# given (which the problem already bounds, as for the subword vocabulary).
MAX_SENTENCES = 10**6
_SAMPLE_SEED = 429459  # a fixed sample: the same text builds the same model


def check_options(vocab_type: str, model_type: str = DEFAULT_MODEL_TYPE,
                  character_coverage: float = DEFAULT_CHARACTER_COVERAGE) -> None:
  """Raises ValueError (one line, naming the flag) on an unknown vocab setting."""
  if vocab_type not in VOCAB_TYPES:
    raise ValueError("--vocab_type must be one of %s, got %r"
                     % (", ".join(VOCAB_TYPES), vocab_type))
  if model_type not in MODEL_TYPES:
    raise ValueError("--sentencepiece_model_type must be one of %s, got %r"
                     % (", ".join(MODEL_TYPES), model_type))
  if (isinstance(character_coverage, bool) or not isinstance(character_coverage, (int, float))
      or not 0.0 < character_coverage <= 1.0):
    raise ValueError("--sentencepiece_character_coverage must be a number in (0, 1] (the "
                     "share of the sample's characters that get a piece), got %r"
                     % (character_coverage,))


def vocab_filename(dataset_name: str, size: int, side: Optional[str] = None) -> str:
  """`vocab.<name>.<size>[.<side>].spm.model`, as T2T names its `.subwords` files."""
  return "vocab.%s.%d%s%s" % (dataset_name, size, "." + side if side else "", SUFFIX)


def is_sentencepiece_vocab(path: str) -> bool:
  """Whether `path` names a SentencePiece model (by its name, `SUFFIX`)."""
  return os.fspath(path).endswith(SUFFIX)


def load_vocab(path: str):
  """The encoder of a vocab file: a `SentencePieceEncoder` or a `SubwordTextEncoder`."""
  if is_sentencepiece_vocab(path):
    return SentencePieceEncoder(path)
  return text_encoder.SubwordTextEncoder(path)


class SentencePieceEncoder:
  """A SentencePiece model with `SubwordTextEncoder`'s interface.

  `encode(s)` is `SentencePieceProcessor.encode(s)` (no BOS, no EOS appended);
  `decode(ids)` its `decode`, which normalizes as sentencepiece does (NFKC, runs
  of white space made one space, none at the ends). PAD and EOS decode to nothing.

  Raises:
    ValueError: the file is missing or not a model with T2T's reserved ids.
  """

  def __init__(self, filename: str):
    self.filename = filename
    try:
      with open(filename, "rb") as f:
        self._model = f.read()
      self._processor = sentencepiece.SentencePieceProcessor(model_proto=self._model)
    except (OSError, RuntimeError) as e:
      raise ValueError("%s is not a readable SentencePiece model (%s); regenerate it with "
                       "t2t_keras_datagen --vocab_type=sentencepiece"
                       % (filename, " ".join(str(e).split())[:200])) from None
    sp = self._processor
    if (sp.pad_id(), sp.eos_id(), sp.bos_id()) != (PAD_ID, EOS_ID, -1):
      raise ValueError("%s has pad id %d, EOS id %d, BOS id %d; t2t_keras needs pad 0, EOS 1 "
                       "and no BOS (T2T's ids): build it with t2t_keras_datagen "
                       "--vocab_type=sentencepiece" % (filename, sp.pad_id(), sp.eos_id(),
                                                       sp.bos_id()))

  def __getstate__(self):  # datagen's worker processes get encoders pickled
    return {"filename": self.filename, "model": self._model}

  def __setstate__(self, state):
    self.filename, self._model = state["filename"], state["model"]
    self._processor = sentencepiece.SentencePieceProcessor(model_proto=self._model)

  @property
  def serialized_model(self) -> bytes:
    """The model file's bytes (what the in-graph tokenizer embeds)."""
    return self._model

  @property
  def vocab_size(self) -> int:
    return self._processor.get_piece_size()

  @property
  def pieces(self) -> tuple:
    """Every piece, by id (`<pad>`, `<EOS>`, `<unk>`, then the learned ones)."""
    return tuple(self._processor.id_to_piece(i) for i in range(self.vocab_size))

  def encode(self, s: str) -> List[int]:
    return self._processor.encode(s)

  def decode(self, ids: Sequence[int], strip_extraneous: bool = False) -> str:
    ids = [int(i) for i in ids]
    if strip_extraneous:
      ids = text_encoder.strip_ids(ids, (PAD_ID, EOS_ID))
    return self._processor.decode(ids)

  def decode_list(self, ids: Sequence[int]) -> List[str]:
    """The piece of each id (`▁` marks a word start, as sentencepiece writes it)."""
    return [self._processor.id_to_piece(int(i)) for i in ids]


def get_or_build(data_dir: str, filename: str, vocab_size: int,
                 text_iterator: Callable[[], Iterable[str]], model_type: str,
                 character_coverage: float):
  """Loads `data_dir/filename` if it was built with these settings, else trains it.

  `text_iterator` is only called when the model has to be trained.

  Returns:
    (encoder, seconds spent training; 0.0 when loaded).
  Raises:
    ValueError: one line saying what to change (e.g. a vocab_size below the
      number of characters).
  """
  check_options(SENTENCEPIECE, model_type, character_coverage)
  path = os.path.join(data_dir, filename)
  if os.path.exists(path):
    encoder = SentencePieceEncoder(path)
    if built_with(encoder.serialized_model) == (model_type, round(float(character_coverage), 6)):
      return encoder, 0.0
    logging.info("%s was built with other settings: training it again", path)
  start = time.time()
  model = train(text_iterator(), vocab_size, model_type, character_coverage, filename)
  with file_io.atomic_open(path, "wb") as f:
    f.write(model)
  encoder = SentencePieceEncoder(path)
  if abs(encoder.vocab_size - vocab_size) > 0.1 * vocab_size:
    logging.warning("%s: %d pieces for a requested vocab size of %d: the training text is "
                    "too small for more; give more text or a smaller vocab_size",
                    filename, encoder.vocab_size, vocab_size)
  return encoder, time.time() - start


def built_with(model: bytes) -> tuple:
  """(model type, character coverage) recorded in a serialized model's trainer spec."""
  # Imported here: the proto module is only needed to read a model's training settings.
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(model)
  spec = proto.trainer_spec
  model_type = spec.ModelType.Name(spec.model_type).lower()
  return model_type, round(float(spec.character_coverage), 6)


def train(sentences: Iterable[str], vocab_size: int, model_type: str = DEFAULT_MODEL_TYPE,
          character_coverage: float = DEFAULT_CHARACTER_COVERAGE,
          name: str = "the vocabulary") -> bytes:
  """Trains a model with T2T's reserved ids on `sentences`; returns its bytes.

  The trainer streams `sentences`, keeping a fixed-seed reservoir sample of at most
  `MAX_SENTENCES`. `vocab_size` is a soft limit: a text too small for it gives fewer
  pieces rather than an error.

  Raises:
    ValueError: no text, or a vocab_size below the characters the text needs.
  """
  check_options(SENTENCEPIECE, model_type, character_coverage)
  failures, count = [], [0]

  def lines():  # the text's own errors (a failed download, a bad file) are re-raised as such
    try:
      for line in sentences:
        line = line.replace("\n", " ").strip()
        if line:
          count[0] += 1
          yield line
    except Exception as e:
      failures.append(e)
      raise

  sentencepiece.set_random_generator_seed(_SAMPLE_SEED)
  out = io.BytesIO()
  try:
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=lines(), model_writer=out,
        vocab_size=vocab_size, model_type=model_type, character_coverage=character_coverage,
        pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
        pad_piece=text_encoder.PAD, eos_piece=text_encoder.EOS, hard_vocab_limit=False,
        input_sentence_size=MAX_SENTENCES, shuffle_input_sentence=True,
        num_threads=max(1, min(16, os.cpu_count() or 1)), minloglevel=2)
  except RuntimeError as e:
    if failures:
      raise failures[0] from None
    if not count[0]:
      raise ValueError("%s: no text to train a SentencePiece model on" % name) from None
    message = " ".join(str(e).split())
    if "smaller than required_chars" in message:
      raise ValueError("%s: vocab_size %d is below the number of characters the training text "
                       "needs (%s); give a larger vocab_size or a lower "
                       "--sentencepiece_character_coverage"
                       % (name, vocab_size, message.rsplit("required_chars.", 1)[-1].split(
                           ".")[0].strip() or "see sentencepiece")) from None
    raise ValueError("%s: sentencepiece could not train a model (%s)"
                     % (name, message[:300])) from None
  return out.getvalue()
