"""English→French: `translate_enfr_wmt32k` (WMT14 through tensorflow-datasets).

T2T's train set is commoncrawl, europarl-v7, news-commentary, giga-fren and
UN; tfds `wmt14_translate/fr-en` holds the same WMT14 corpora. Dev is
newstest2013, test newstest2014. Needs internet the first time; tfds downloads
and prepares under --tmp_dir, and archives copied into --tmp_dir are used instead
of downloading them (see `TfdsTranslateProblem`).
"""

from data_gen.problem import SpaceID
from data_gen.registry import register_problem
from data_gen.translate_ende import TfdsTranslateProblem


@register_problem
class TranslateEnfrWmt32k(TfdsTranslateProblem):
  """WMT14 English→French, shared 2^15 subword vocab."""

  tfds_name = "wmt14_translate/fr-en"
  num_vocab_sources = 5  # commoncrawl, europarl, news-commentary, giga-fren, UN
  approx_vocab_size = 2**15
  input_space_id = SpaceID.EN_TOK
  target_space_id = SpaceID.FR_TOK
  source_lang, target_lang = "en", "fr"
