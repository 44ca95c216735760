"""The texts the Python API takes: `translate`, `score` and the language-model functions.

Each such argument is a list (or another iterable) of texts, one per sentence, and the
result has one entry per text. One string is refused, not read character by
character: the message shows the list of one to pass. An item that is `bytes` (what
tf.data and TF Serving clients hold) is taken as its UTF-8 text; any other item
(None, a number, a list) is refused naming its index. No TensorFlow here: the checks
come before any model runs.
"""

from __future__ import annotations

from typing import Iterable, List

_SHOWN = 40  # characters of a bad value a message shows


def _shown(value) -> str:
  text = repr(value)
  return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def text_list(value: Iterable, call: str, argument: str, what: str = "texts") -> List[str]:
  """`value`, a list or other iterable of texts, as a list of str.

  Args:
    value: what the caller passed.
    call: the function, for the message, e.g. "translate()".
    argument: its parameter, e.g. "sentences" (an item is named `sentences[i]`).
    what: what each item is, e.g. "sentences" ("takes a list of sentences").
  Returns:
    one str per item; UTF-8 bytes decoded.
  Raises:
    ValueError: one line: `value` is one string (or bytes) or not iterable, or an
      item is neither str nor UTF-8 bytes (naming `argument[i]` and the item).
  """
  if isinstance(value, (str, bytes)):
    raise ValueError(f"{call} takes a list of {what}; got one string: pass "
                     f"[{value[:_SHOWN]!r}].")
  try:
    items = list(value)
  except TypeError:
    raise ValueError(f"{call} takes a list of {what}, got {_shown(value)} "
                     f"({type(value).__name__}).") from None
  texts = []
  for i, item in enumerate(items):
    if isinstance(item, bytes):
      try:
        item = item.decode("utf-8")
      except UnicodeDecodeError as e:
        raise ValueError(f"{call}: {argument}[{i}] is {_shown(item)}, bytes that are not "
                         f"UTF-8 ({e.reason} at byte {e.start}); pass str or UTF-8 "
                         "bytes.") from None
    elif not isinstance(item, str):
      raise ValueError(f"{call}: {argument}[{i}] is {_shown(item)} "
                       f"({type(item).__name__}), not a text; pass str (or UTF-8 bytes).")
    texts.append(item)
  return texts
