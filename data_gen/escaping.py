"""T2T's token escaping for subword vocabularies (`text_encoder._escape_token`).

Shared by `SubwordTextEncoder` (encoding) and `SubwordBuilder` (vocabulary build).
"""

import re
from collections.abc import Iterable

# Characters the escaping itself produces; always part of the alphabet.
ESCAPE_CHARS = frozenset("\\_u;0123456789")
_UNESCAPE_REGEX = re.compile(r"\\u|\\\\|\\([0-9]+);")


def escape_token(token: str, alphabet: set | frozenset) -> str:
  r"""Escapes `\`, `_` and out-of-alphabet characters and appends `_`.

  `\` -> `\\`, `_` -> `\u`, a character not in `alphabet` (and always `\n`)
  -> `\<decimal code point>;`.  The result ends in `_` and has no other `_`,
  so escaped tokens can be concatenated invertibly.
  """
  if not isinstance(token, str):
    raise ValueError("Expected a str token, got %r of type %s"
                     % (token, type(token).__name__))
  token = token.replace("\\", "\\\\").replace("_", "\\u")
  ret = [c if c in alphabet and c != "\n" else "\\%d;" % ord(c) for c in token]
  return "".join(ret) + "_"


def unescape_token(escaped_token: str) -> str:
  """Inverse of `escape_token`; a code point beyond Unicode gives U+3013."""
  def match(m):
    if m.group(1) is None:
      return "_" if m.group(0) == "\\u" else "\\"
    try:
      return chr(int(m.group(1)))
    except (ValueError, OverflowError):
      return "\u3013"  # GETA MARK, T2T's "undefined character".

  trimmed = escaped_token[:-1] if escaped_token.endswith("_") else escaped_token
  return _UNESCAPE_REGEX.sub(match, trimmed)


def make_alphabet(strings: Iterable[str]) -> set:
  alphabet = {c for s in strings for c in s}
  alphabet |= ESCAPE_CHARS
  alphabet.discard("\n")  # Always escaped; see `text_encoder`'s docstring.
  return alphabet
