"""T2T's subword vocabulary build, vectorised with numpy (`SubwordBuilder`).

`SubwordTextEncoder.build_from_token_counts` runs it; its vocabularies equal
those of T2T's `SubwordTextEncoder.build_from_token_counts` loop.
"""

from collections.abc import Mapping

import numpy as np

from data_gen.escaping import escape_token, make_alphabet


class SubwordBuilder:
  """T2T's vocabulary build, reorganised so each iteration is a few numpy ops.

  T2T re-escapes and re-slices every token in every iteration of every
  bisection step.  Here, once per `token_counts`:
  * each distinct token is escaped once (the alphabet never changes);
  * every substring `escaped[p:e]` that T2T could count (length below
    `max_subtoken_length`) is interned to an integer id, with `parent` = the
    id of `escaped[p:e-1]`; the substrings starting at one position are the
    prefixes of the suffix `escaped[p:]`, stored once per distinct suffix.
  Per iteration, the current vocabulary is a boolean mask over substring ids:
  the longest vocabulary prefix at every position is one `maximum.reduceat`,
  the greedy walk over subtoken boundaries is a vectorised frontier loop, the
  counts are two `bincount`s, and the longest-first prefix subtraction runs
  one length level at a time.  The first iteration (alphabet-only
  vocabulary) does not depend on `min_count` and is computed once.
  """

  def __init__(self, token_counts: Mapping[str, int],
               reserved_tokens: list[str], max_subtoken_length: int | None):
    if max_subtoken_length is not None and max_subtoken_length < 1:
      raise ValueError("max_subtoken_length must be >= 1 or None, got %r"
                       % (max_subtoken_length,))
    tokens = list(token_counts)
    self.reserved_tokens = reserved_tokens
    self.alphabet = make_alphabet(tokens + reserved_tokens)
    # T2T counts substrings escaped[start:end] for end < start + max_len.
    self._cap = None if max_subtoken_length is None else max_subtoken_length - 1
    self._intern([escape_token(t, self.alphabet) for t in tokens])
    counts = np.array([token_counts[t] for t in tokens], dtype=np.float64)
    self._group_count = np.repeat(counts, self._token_len)
    self._first_counts = None

  def _intern(self, escaped_tokens: list[str]) -> None:
    seg_cap = None if self._cap is None else max(self._cap, 1)
    sid_of, strings, parent = {}, [], []
    suffix_of, suffix_start, sub_ids, group_suffix = {}, [], [], []
    token_len = []
    for e in escaped_tokens:
      token_len.append(len(e))
      for p in range(len(e)):
        key = e[p:] if seg_cap is None else e[p:p + seg_cap]
        suffix = suffix_of.get(key)
        if suffix is None:
          suffix = suffix_of[key] = len(suffix_start)
          suffix_start.append(len(sub_ids))
          par = -1
          for end in range(1, len(key) + 1):
            s = key[:end]
            sid = sid_of.get(s)
            if sid is None:
              sid = sid_of[s] = len(strings)
              strings.append(s)
              parent.append(par)
            sub_ids.append(sid)
            par = sid
        group_suffix.append(suffix)
    self._sid_of, self._strings = sid_of, strings
    self._parent = np.array(parent, dtype=np.int64)
    self._lengths = np.array([len(s) for s in strings], dtype=np.int64)
    self._sub_ids = np.array(sub_ids, dtype=np.int64)
    self._suffix_start = np.array(suffix_start, dtype=np.int64)
    self._suffix_size = np.diff(np.append(self._suffix_start, len(sub_ids)))
    self._prefix_len = (np.arange(len(sub_ids)) -
                        np.repeat(self._suffix_start, self._suffix_size) + 1)
    self._group_suffix = np.array(group_suffix, dtype=np.int64)
    self._token_len = np.array(token_len, dtype=np.int64)
    self._token_start = np.cumsum(self._token_len) - self._token_len

  def build(self, min_count: float, num_iterations: int) -> list[str]:
    """Returns the subtoken list (reserved tokens first) for `min_count`."""
    min_count = max(min_count, 1)
    vocab = self.reserved_tokens + sorted(self.alphabet)
    for i in range(num_iterations):
      if i == 0:
        if self._first_counts is None:
          # T2T bounds this first segmentation by the longest alphabet entry
          # (1), so reserved tokens never match here.
          self._first_counts = self._count(
              self._boundaries(sorted(self.alphabet)))
        counts = self._first_counts
      else:
        counts = self._count(self._boundaries(vocab))
      vocab = self.reserved_tokens + self._select(counts, min_count)
    return vocab

  def _boundaries(self, vocab: list[str]) -> np.ndarray:
    """Greedy segmentation: `bool [num_positions]`, True at subtoken starts."""
    in_vocab = np.zeros(len(self._strings), dtype=np.int64)
    sids = [self._sid_of.get(s) for s in vocab]
    in_vocab[[i for i in sids if i is not None]] = 1
    if not len(self._sub_ids):
      return np.zeros(0, dtype=bool)
    longest = np.maximum.reduceat(in_vocab[self._sub_ids] * self._prefix_len,
                                  self._suffix_start)
    step = longest[self._group_suffix]
    if np.any(step == 0):
      raise ValueError("Internal error: a token cannot be segmented")
    is_start = np.zeros(len(step), dtype=bool)
    pos = self._token_start
    end = self._token_start + self._token_len
    while pos.size:
      is_start[pos] = True
      pos = pos + step[pos]
      more = pos < end
      pos, end = pos[more], end[more]
    return is_start

  def _count(self, is_start: np.ndarray) -> np.ndarray:
    """Weighted counts of all substrings starting at subtoken boundaries."""
    weights = np.where(is_start, self._group_count, 0.0)
    per_suffix = np.bincount(self._group_suffix, weights=weights,
                             minlength=len(self._suffix_start))
    counts = np.bincount(self._sub_ids,
                         weights=np.repeat(per_suffix, self._suffix_size),
                         minlength=len(self._strings))
    if self._cap is not None:
      counts[self._lengths > self._cap] = 0.0
    return counts

  def _select(self, counts: np.ndarray, min_count: float) -> list[str]:
    """Longest-first acceptance with prefix-count subtraction, then sort."""
    cand = np.flatnonzero(counts >= min_count)
    cand = cand[np.argsort(-self._lengths[cand], kind="stable")]
    subtracted = np.zeros(len(self._strings))
    level_starts = np.flatnonzero(np.diff(self._lengths[cand])) + 1
    accepted = []
    for ids in np.split(cand, level_starts):
      adjusted = counts[ids] - subtracted[ids]
      ok = adjusted >= min_count
      accepted.append((ids[ok], adjusted[ok]))
      carry = subtracted[ids] + np.where(ok, adjusted, 0.0)
      has_parent = self._parent[ids] >= 0
      np.add.at(subtracted, self._parent[ids][has_parent], carry[has_parent])
    scored = []
    for ids, adjusted in accepted:
      for sid, c in zip(ids.tolist(), adjusted.tolist()):
        if self._strings[sid] not in self.alphabet:
          scored.append((c, self._strings[sid]))
    for a in self.alphabet:
      sid = self._sid_of.get(a)
      scored.append((0.0 if sid is None else counts[sid] - subtracted[sid], a))
    scored.sort(reverse=True)
    return [s for _, s in scored]
