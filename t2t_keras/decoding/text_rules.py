"""The text rules every decoding path shares: where an input is cut, what no output holds."""

from __future__ import annotations

from typing import Optional

from t2t_keras.hparams import DecodeHParams

# Characters that break a line (`str.splitlines`) or a tab-separated column; never
# in an output (`export/saved_model.py` replaces the same set in-graph).
OUTPUT_BREAKS = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x85\u2028\u2029"
_BREAKS_TABLE = {ord(c): " " for c in OUTPUT_BREAKS}


def input_cap(decode_hp: DecodeHParams) -> Optional[int]:
  """Subword tokens kept of an input (EOS not counted), or None: no cut.

  T2T's `_decode_batch_input_fn`: with `max_input_size` > 0 an input keeps
  `max_input_size - 1` tokens, so that with EOS it has `max_input_size` ids.
  """
  if decode_hp.max_input_size > 0:
    return decode_hp.max_input_size - 1
  return None


def clean_output(text: str) -> str:
  """`text` with each line break or tab (`OUTPUT_BREAKS`) replaced by a space."""
  return text.translate(_BREAKS_TABLE)
