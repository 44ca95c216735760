"""Tests for t2t_keras/bleu.py and t2t_keras_bleu against a pure-Python BLEU."""

import collections
import math
import random

import pytest
import regex
from absl import flags
from absl.testing import flagsaver

from t2t_keras import bleu
from t2t_keras.cli import bleu as bleu_cli


def reference_bleu(hyps, refs, max_order=4):
  """Papineni et al. corpus BLEU on whitespace tokens, 0-100 (no smoothing).

  Clipped n-gram counts and lengths are summed over the corpus; brevity
  penalty exp(1 - r/c) when c < r. Needs a match at every order.
  """
  matches, totals = [0] * max_order, [0] * max_order
  hyp_len = ref_len = 0
  for hyp, ref in zip(hyps, refs):
    h, r = hyp.split(), ref.split()
    hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
    for n in range(1, max_order + 1):
      h_ngrams = collections.Counter(tuple(h[i:i + n])
                                     for i in range(len(h) - n + 1))
      r_ngrams = collections.Counter(tuple(r[i:i + n])
                                     for i in range(len(r) - n + 1))
      matches[n - 1] += sum(min(c, r_ngrams[g]) for g, c in h_ngrams.items())
      totals[n - 1] += max(len(h) - n + 1, 0)
  assert all(matches), "reference_bleu needs a match at every order"
  log_p = sum(math.log(m / t) for m, t in zip(matches, totals)) / max_order
  bp = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
  return 100 * bp * math.exp(log_p)


WORDS = "the a cat dog sat ran on under mat house big small red blue".split()


def _random_corpus(seed, segments=20):
  """Lower-case ASCII words only, so 13a and intl tokenization are identity."""
  rng = random.Random(seed)
  refs, hyps = [], []
  for _ in range(segments):
    ref = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
    hyp = list(ref)
    for _ in range(rng.randint(0, 4)):  # substitutions, deletions, insertions
      op, i = rng.random(), rng.randrange(len(hyp))
      if op < 0.4:
        hyp[i] = rng.choice(WORDS)
      elif op < 0.7 and len(hyp) > 4:
        del hyp[i]
      else:
        hyp.insert(i, rng.choice(WORDS))
    refs.append(" ".join(ref))
    hyps.append(" ".join(hyp))
  return hyps, refs


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("tokenize", ["intl", "13a"])
def test_matches_pure_python_bleu(seed, tokenize):
  hyps, refs = _random_corpus(seed)
  score, signature = bleu.corpus_bleu(hyps, refs, tokenize=tokenize)
  assert score == pytest.approx(reference_bleu(hyps, refs), abs=1e-9)
  assert f"tok:{tokenize}" in signature and "case:mixed" in signature


def test_brevity_penalty_by_hand():
  # Hypothesis = first 6 of 8 reference words: every precision is 1,
  # BP = exp(1 - 8/6), BLEU = 100 * exp(-1/3) = 71.65.
  ref = "the cat sat on the mat today again"
  hyp = "the cat sat on the mat"
  score, _ = bleu.corpus_bleu([hyp], [ref])
  assert score == pytest.approx(100 * math.exp(-1 / 3))


def test_cased_and_uncased_by_hand():
  hyp = ["The Cat sat on the mat today"]
  ref = ["the cat sat on the mat today"]
  # Cased: matches 5/7, 4/6, 3/5, 2/4; product 1/7, BLEU = 100 * 7**-0.25.
  cased, cased_sig = bleu.corpus_bleu(hyp, ref, lowercase=False)
  uncased, uncased_sig = bleu.corpus_bleu(hyp, ref, lowercase=True)
  assert cased == pytest.approx(100 * 7 ** -0.25)  # 61.48
  assert uncased == pytest.approx(100.0)
  assert "case:mixed" in cased_sig and "case:lc" in uncased_sig


def test_perfect_translation_scores_100():
  hyps, refs = _random_corpus(7)
  for tokenize in bleu.TOKENIZERS:
    assert bleu.corpus_bleu(refs, refs, tokenize=tokenize)[0] == \
        pytest.approx(100.0)
  # Real punctuation too: tokenization is the same on both sides.
  text = ["Hello, world! It's 3.5 \"degrees\" (or so)."]
  assert bleu.corpus_bleu(text, text)[0] == pytest.approx(100.0)


def test_intl_and_13a_differ_on_hyphens():
  # intl (T2T's t2t-bleu) splits punctuation next to letters, so "well-known"
  # becomes "well - known"; 13a splits only a fixed ASCII set without "-".
  hyp, ref = ["it is well-known to us now"], ["it is well - known to us now"]
  intl, _ = bleu.corpus_bleu(hyp, ref, tokenize="intl")
  t13a, _ = bleu.corpus_bleu(hyp, ref, tokenize="13a")
  assert intl == pytest.approx(100.0)
  assert t13a < 90.0


# T2T's bleu_hook.bleu_tokenize (mteval-v14 international tokenization, §5):
# punctuation gets spaces on the sides not touching a digit, symbols always.
_NONDIGIT_PUNCT = regex.compile(r"(\P{N})(\p{P})")
_PUNCT_NONDIGIT = regex.compile(r"(\p{P})(\P{N})")
_SYMBOL = regex.compile(r"(\p{S})")


def t2t_bleu_tokenize(text):
  text = _NONDIGIT_PUNCT.sub(r"\1 \2 ", text)
  text = _PUNCT_NONDIGIT.sub(r" \1 \2", text)
  return " ".join(_SYMBOL.sub(r" \1 ", text).split())


def test_intl_is_t2t_bleu_tokenization():
  hyps = ["Der Preis: 3,50€ für well-known Äpfel, sagte er.",
          "It's 3.5 \"degrees\" (or so), isn't it?"]
  refs = ["Der Preis: 3,50€ für well-known Birnen, sagte er heute.",
          "It's 3.5 \"degrees\" (or so), is it?"]
  want = reference_bleu([t2t_bleu_tokenize(h) for h in hyps],
                        [t2t_bleu_tokenize(r) for r in refs])
  assert bleu.corpus_bleu(hyps, refs, tokenize="intl")[0] == \
      pytest.approx(want)


def test_bad_arguments():
  with pytest.raises(ValueError, match="tokenize must be one of"):
    bleu.corpus_bleu(["a"], ["a"], tokenize="moses")
  with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
    bleu.corpus_bleu(["a", "b"], ["a"])
  with pytest.raises(ValueError, match="not a single string"):
    bleu.corpus_bleu("a b c", ["a b c"])


def _write(path, lines):
  path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  return str(path)


def test_files_and_t2t_wrapper(tmp_path):
  hyps, refs = _random_corpus(3)
  hyp_file = _write(tmp_path / "hyp", hyps)
  ref_file = _write(tmp_path / "ref", refs)
  score, sig = bleu.file_bleu(hyp_file, ref_file)
  assert score == pytest.approx(reference_bleu(hyps, refs))
  # T2T's bleu_wrapper(ref, hyp) is a fraction and uncased by default.
  assert bleu.bleu_wrapper(ref_file, hyp_file) == pytest.approx(score / 100)
  short = _write(tmp_path / "short", refs[:-1])
  with pytest.raises(ValueError) as e:
    bleu.file_bleu(hyp_file, short)
  assert f"{hyp_file} has {len(hyps)} lines" in str(e.value)
  assert f"{short} has {len(refs) - 1}" in str(e.value)


@pytest.fixture
def parsed_flags():
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


def test_cli_prints_scores_and_signatures(tmp_path, capsys, parsed_flags):
  hyp_file = _write(tmp_path / "hyp", ["The Cat sat on the mat today"])
  ref_file = _write(tmp_path / "ref", ["the cat sat on the mat today"])
  with flagsaver.flagsaver(translation=hyp_file, reference=ref_file,
                           bleu_variant="both", tokenize="intl"):
    bleu_cli.main(["t2t_keras_bleu"])
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 2
  assert lines[0].startswith("BLEU_cased =  61.48  (nrefs:1|case:mixed|")
  assert lines[1].startswith("BLEU_uncased = 100.00  (nrefs:1|case:lc|")
  assert all("tok:intl" in line and "version:" in line for line in lines)
  with flagsaver.flagsaver(translation=hyp_file, reference=ref_file,
                           bleu_variant="uncased", tokenize="13a"):
    bleu_cli.main(["t2t_keras_bleu"])
  (line,) = capsys.readouterr().out.splitlines()
  assert line.startswith("BLEU_uncased = 100.00") and "tok:13a" in line
