"""Tests for t2t_keras/scoring/bleu.py and t2t_keras_bleu against a pure-Python BLEU."""

import collections
import math
import random
import subprocess

from absl import flags
from absl.testing import flagsaver
import pytest
import regex

from t2t_keras.cli import bleu as bleu_cli
from t2t_keras.scoring import bleu
from t2t_keras.training import bleu_hook


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


# ---- the paper's tokenized BLEU (T2T utils/get_ende_bleu.sh) -----------------

AT = "##AT##-##AT##"


def test_paper_bleu_by_hand():
  # Moses splits the final "." and ATAT splits "E-Mail":
  #   ref: Die E ##AT##-##AT## Mail kam am Montag .   (8 tokens)
  #   hyp: Die E ##AT##-##AT## Mail kam Montag .      (7 tokens)
  # 1-grams 7/7; 2-grams 5/6 (no "kam Montag"); 3-grams 3/5 (no "Mail kam
  # Montag", "kam Montag ."); 4-grams 2/4. Product 1 * 5/6 * 3/5 * 1/2 = 1/4,
  # geometric mean (1/4)**(1/4) = 1/sqrt(2); BP = exp(1 - 8/7).
  result = bleu.paper_bleu(["Die E-Mail kam Montag."], ["Die E-Mail kam am Montag."])
  assert result.score == pytest.approx(100 * math.exp(1 - 8 / 7) / math.sqrt(2))
  assert result.precisions == pytest.approx((100.0, 500 / 6, 60.0, 50.0))
  assert (result.hyp_len, result.ref_len) == (7, 8)
  assert result.brevity_penalty == pytest.approx(math.exp(-1 / 7))
  assert result.summary() == ("BLEU = 61.30, 100.0/83.3/60.0/50.0 (BP=0.867, "
                              "ratio=0.875, hyp_len=7, ref_len=8)")


@pytest.mark.parametrize("text, want", [
    ("Fußball-WM", f"Fußball {AT} WM"),
    ("E-Mail-Adresse", f"E {AT} Mail {AT} Adresse"),
    ("16-jährige", f"16 {AT} jährige"),
    ("1-2", f"1 {AT} 2"),
    # perl's s///g resumes after the consumed "2", so the second hyphen has no
    # left character of its own: only the first is split.
    ("1-2-3", f"1 {AT} 2-3"),
    ("a-b-c-d", f"a {AT} b-c {AT} d"),
    # ... but perl works on UTF-8 bytes: only the first byte of "ü" is
    # consumed, its second byte is the left character of the next match.
    ("a-ü-b", f"a {AT} ü {AT} b"),
    ("x--y", f"x {AT} -y"),
    ("-foo foo- - bar", "-foo foo- - bar"),  # hyphens at token edges stay
    ("a\u00a0-b", f"a\u00a0 {AT} b"),  # no-break space is not perl's \s
])
def test_split_compounds_as_t2t_perl(text, want):
  assert bleu.split_compounds(text) == want


def test_split_compounds_matches_perl_one_liner():
  # The same substitution run by perl itself on random strings (perl is part
  # of every Debian/Ubuntu base system).
  rng = random.Random(0)
  alphabet = ["a", "1", "-", "-", " ", "ü", "ß", "€", "\u00a0", "\t", "x"]
  lines = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
           for _ in range(300)]
  res = subprocess.run(["perl", "-ple", r"s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g"],
                       input="\n".join(lines).encode("utf-8") + b"\n",
                       capture_output=True, check=True)
  want = res.stdout.decode("utf-8").split("\n")[:-1]
  assert [bleu.split_compounds(line) for line in lines] == want


@pytest.mark.parametrize("text, language, want", [
    ('Er sagte: "Das ist gut & schön."', "de",
     ["Er", "sagte", ":", "&quot;", "Das", "ist", "gut", "&amp;", "schön", ".",
      "&quot;"]),
    # German: every apostrophe is its own token; English keeps "'s" together.
    ("Das Auto's ist 'rot'.", "de",
     ["Das", "Auto", "&apos;", "s", "ist", "&apos;", "rot", "&apos;", "."]),
    ("It's Tom & Jerry's", "en",
     ["It", "&apos;s", "Tom", "&amp;", "Jerry", "&apos;s"]),
    ("<b> [x] a|b", "de",
     ["&lt;", "b", "&gt;", "&#91;", "x", "&#93;", "a", "&#124;", "b"]),
    # Non-breaking prefixes ("Dr.", ordinal "3.") keep their dot; the Moses
    # tokenizer of T2T's time also kept it on a final prefix ("Prof.").
    ("Herr Dr. Müller kam am 3. Mai zu Prof.", "de",
     ["Herr", "Dr.", "Müller", "kam", "am", "3.", "Mai", "zu", "Prof."]),
    ("Es kostet 3,50 € (ca. 5%).", "de",
     ["Es", "kostet", "3,50", "€", "(", "ca.", "5", "%", ")", "."]),
])
def test_moses_tokenization(text, language, want):
  assert bleu.moses_tokenize(text, language).split(" ") == want


def test_replace_unicode_punctuation_then_tokenize():
  # “ ” -> ", … -> ..., ’ -> ', but the German low quote „ is left alone by
  # replace-unicode-punctuation.perl; the perl script's "１" -> '"' typo is kept.
  assert bleu.paper_tokenize("„Ja“, sagte er… ’s “gut”").split(" ") == [
      "„", "Ja", "&quot;", ",", "sagte", "er", "...", "&apos;", "s", "&quot;",
      "gut", "&quot;"]
  assert bleu.replace_unicode_punctuation("１０％（Ａ）") == '"0%(Ａ)'


def test_paper_reference_quotes_option():
  hyp, ref = ['Er sagte "Ja" .'], ["Er sagte „Ja“."]
  # Without the option the reference's „ stays a token of its own:
  # hyp  Er sagte &quot; Ja &quot; .   ref  Er sagte „ Ja &quot; .
  # 1-grams 5/6, 2-grams 3/5, 3-grams 1/4, 4-grams 0/3 -> BLEU 0.
  assert bleu.paper_bleu(hyp, ref).score == 0.0
  assert bleu.paper_bleu(hyp, ref).precisions == pytest.approx((500 / 6, 60.0, 25.0, 0.0))
  assert bleu.paper_bleu(hyp, ref, ascii_reference_quotes=True).score == pytest.approx(100.0)


def test_multi_bleu_zero_order_and_edge_cases():
  # 1-, 2- and 3-grams match, no 4-gram does: no smoothing, BLEU 0.
  result = bleu.multi_bleu(["a b c d e"], ["a b c x c d e"])
  assert result.score == 0.0 and result.precisions[3] == 0.0
  assert min(result.precisions[:3]) > 0
  # Every hypothesis shorter than 4 tokens: no 4-gram at all, BLEU 0.
  assert bleu.multi_bleu(["a b c", "d"], ["a b c", "d"]).score == 0.0
  assert bleu.multi_bleu([""], ["a b c d"]).score == 0.0
  assert bleu.multi_bleu(["a b c d"], [""]).score == 0.0
  # Tokens are split on ASCII whitespace only, as perl's split on bytes.
  result = bleu.multi_bleu(["a\u00a0b c\td  e"], ["a\u00a0b c d e"])
  assert (result.hyp_len, result.ref_len) == (4, 4)
  # Case-sensitive: "Das" is not "das".
  assert bleu.multi_bleu(["Das ist ein Haus"], ["das ist ein Haus"]).precisions[0] == 75.0


def brute_force_multi_bleu(hyps, refs):
  """multi-bleu.perl by enumeration: (score, hyp_len, ref_len), 0-100."""
  correct, total = [0] * 4, [0] * 4
  hyp_len = ref_len = 0
  for hyp, ref in zip(hyps, refs):
    h, r = hyp.split(), ref.split()
    hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
    for n in range(1, 5):
      h_grams = [h[i:i + n] for i in range(len(h) - n + 1)]
      r_grams = [r[i:i + n] for i in range(len(r) - n + 1)]
      total[n - 1] += len(h_grams)
      for gram in {tuple(g) for g in h_grams}:
        correct[n - 1] += min(h_grams.count(list(gram)), r_grams.count(list(gram)))
  if not hyp_len or 0 in correct:
    return 0.0, hyp_len, ref_len
  bp = math.exp(1 - ref_len / hyp_len) if hyp_len < ref_len else 1.0
  log_mean = sum(math.log(c / t) for c, t in zip(correct, total)) / 4
  return 100 * bp * math.exp(log_mean), hyp_len, ref_len


@pytest.mark.parametrize("seed", range(8))
def test_multi_bleu_matches_brute_force(seed):
  rng = random.Random(100 + seed)
  words = WORDS[:rng.choice([3, 6, len(WORDS)])]  # small vocabularies repeat n-grams
  hyps, refs = [], []
  for _ in range(rng.randint(1, 15)):
    refs.append(" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))))
    hyps.append(" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))))
  result = bleu.multi_bleu(hyps, refs)
  score, hyp_len, ref_len = brute_force_multi_bleu(hyps, refs)
  assert result.score == pytest.approx(score, abs=1e-9)
  assert (result.hyp_len, result.ref_len) == (hyp_len, ref_len)


def test_paper_bad_arguments():
  with pytest.raises(ValueError, match="Moses tokenizer language.*got 'tgt'"):
    bleu.paper_bleu(["a"], ["a"], language="tgt")
  with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
    bleu.paper_bleu(["a", "b"], ["a"])
  with pytest.raises(ValueError, match="not a single string"):
    bleu.multi_bleu("a b", ["a b"])
  assert bleu.paper_language("de") == "de" and bleu.paper_language("targets") is None


def test_cli_paper_and_all_variants(tmp_path, capsys, parsed_flags):
  hyps, refs = ["Die E-Mail kam Montag."], ["Die E-Mail kam am Montag."]
  hyp_file, ref_file = _write(tmp_path / "hyp", hyps), _write(tmp_path / "ref", refs)
  with flagsaver.flagsaver(translation=hyp_file, reference=ref_file,
                           bleu_variant="all", tokenize="intl"):
    bleu_cli.main(["t2t_keras_bleu"])
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 4
  assert lines[0].startswith("BLEU_cased = ") and lines[1].startswith("BLEU_uncased = ")
  want = 100 * math.exp(1 - 8 / 7) / math.sqrt(2)
  assert lines[2].startswith(f"tokenized BLEU (as in the paper) = {want:6.2f}  (")
  assert "lang:de" in lines[2] and "compounds:atat" in lines[2]
  assert "nrefs:" not in lines[2] and "smooth:" not in lines[2]  # not sacreBLEU's
  assert lines[3] == "  multi-bleu.perl: " + bleu.paper_bleu(hyps, refs).summary()
  with flagsaver.flagsaver(translation=hyp_file, reference=ref_file,
                           bleu_variant="paper", language="en"):
    bleu_cli.main(["t2t_keras_bleu"])
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 2 and "lang:en" in lines[0]


def test_bleu_hook_reports_tokenized_bleu(monkeypatch, tmp_path):
  from t2t_keras.decoding import text_decoder

  class FakeDecoder:  # the hook's decoding replaced by fixed outputs
    def __init__(self, *args, **kwargs):
      pass

    def decode_lines(self, lines):
      return ["Die E-Mail kam Montag."] * len(lines)

  monkeypatch.setattr(text_decoder, "TextDecoder", FakeDecoder)
  src = _write(tmp_path / "src", ["The e-mail came on Monday."])
  ref = _write(tmp_path / "ref", ["Die E-Mail kam am Montag."])
  hook = bleu_hook.make_bleu_hook(None, {}, None, src, ref, paper_language="de")
  scores = hook(0)
  assert scores["bleu_tokenized"] == pytest.approx(100 * math.exp(1 - 8 / 7) / math.sqrt(2))
  assert scores["bleu"] == pytest.approx(
      bleu.corpus_bleu(["Die E-Mail kam Montag."], ["Die E-Mail kam am Montag."])[0])
  assert set(bleu_hook.make_bleu_hook(None, {}, None, src, ref)(0)) == {"bleu"}


def test_fast_tokenizer_matches_sacremoses():
  import sacremoses
  rng = random.Random(1)
  alphabet = list("aZäÖß1.'\"-,&") + [" ", "Dr.", "Nr.", "3.", "usw.", "...", "ПРИ", "и"]
  lines = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(200)]
  for language in ("de", "en"):
    plain = sacremoses.MosesTokenizer(lang=language)
    assert [bleu.moses_tokenize(line, language) for line in lines] == \
        [" ".join(plain.tokenize(line, escape=True)) for line in lines]
