"""WMT14 through tensorflow-datasets' real `wmt14_translate` builder, without a network.

A local HTTP proxy (the `HTTP_PROXY` that `requests` honours) serves tiny archives in
the real statmt.org layouts for the URLs the builder asks for. Everything else is the
installed code: tfds' DownloadManager (download, checksum check, tar extraction),
`wmt.WmtTranslate._split_generators` / `_generate_examples` and its parsers of the
plain-text and SGML files, tfds' TFRecord writing and reading, then our vocabulary
and shards. The one substitution: the registered sizes and sha256 of the real
archives are replaced by those of the tiny ones (tfds still checks them).
"""

import hashlib
import http.server
import io
import os
import socket
import subprocess
import sys
import tempfile
import tarfile
import threading
from unittest import mock

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core import constants as tfds_constants
from tensorflow_datasets.core.download import checksums as tfds_checksums
from tensorflow_datasets.core.download import downloader as tfds_downloader

from data_gen import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBLEM = "translate_ende_wmt32k"

# (English, German) pairs per source; every sentence distinct, so splits can be told apart.
EUROPARL = [("The session is resumed.", "Die Sitzung ist wieder aufgenommen."),
            ("We agree with the report.", "Wir stimmen dem Bericht zu."),
            ("Thank you, Mr President.", "Vielen Dank, Herr Präsident.")]
COMMONCRAWL = [("Our hotel is near the station.", "Unser Hotel liegt nahe am Bahnhof."),
               ("Prices include breakfast.", "Die Preise schließen das Frühstück ein.")]
NEWS_COMMENTARY = [("Gold prices rose sharply.", "Die Goldpreise stiegen stark."),
                   ("Markets are nervous.", "Die Märkte sind nervös."),
                   ("Growth will be slow.", "Das Wachstum wird langsam sein.")]
NEWSTEST2013 = [("A man walks to the river.", "Ein Mann geht zum Fluss."),
                ("The weather is fine today.", "Das Wetter ist heute schön.")]
NEWSTEST2014 = [("Gutach: more safety for pedestrians", "Gutach: Mehr Sicherheit für Fußgänger"),
                ("They are not even 100 metres apart.", "Sie stehen keine 100 Meter voneinander."),
                ("Two sets of lights so close.", "Zwei Anlagen so nah beieinander.")]


def _lines(sentences):
  return ("\n".join(sentences) + "\n").encode("utf-8")


def _sgm(lang, sentences, kind):
  # The layout of WMT's newstest*.sgm files (tfds parses the <seg> lines).
  head = '<%s setid="newstest2014" srclang="any"%s>\n' % (
      kind, "" if kind == "srcset" else ' trglang="%s"' % lang)
  body = '<doc sysid="ref" docid="1012-bbc" genre="news" origlang="en">\n<p>\n'
  body += "".join('<seg id="%d">%s</seg>\n' % (i + 1, s) for i, s in enumerate(sentences))
  return (head + body + "</p>\n</doc>\n</%s>\n" % kind).encode("utf-8")


def _tgz(members):
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for name, data in members.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return buf.getvalue()


def _pairs_files(prefix, pairs):
  return {prefix + ".de": _lines(de for _, de in pairs), prefix + ".en": _lines(en for en, _ in pairs)}


# The archives `wmt14_translate/de-en` downloads, with the paths tfds' wmt.py reads in them.
ARCHIVES = {
    "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz":
        _tgz(_pairs_files("training/europarl-v7.de-en", EUROPARL)),
    "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz":
        _tgz(_pairs_files("commoncrawl.de-en", COMMONCRAWL)),
    "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz":
        _tgz(_pairs_files("training/news-commentary-v9.de-en", NEWS_COMMENTARY)),
    "http://data.statmt.org/wmt19/translation-task/dev.tgz": _tgz(dict(
        _pairs_files("dev/newstest2013", NEWSTEST2013),
        **{"dev/newstest2014-deen-src.de.sgm": _sgm("de", [de for _, de in NEWSTEST2014], "srcset"),
           "dev/newstest2014-deen-ref.en.sgm": _sgm("en", [en for en, _ in NEWSTEST2014],
                                                    "refset")})),
}


class _Proxy(http.server.ThreadingHTTPServer):
  """An HTTP proxy answering GET <absolute URL> from ARCHIVES (others: `status`)."""

  daemon_threads = True

  def __init__(self, status_for_all=None):
    self.requested = []
    self.status_for_all = status_for_all
    super().__init__(("127.0.0.1", 0), _ProxyHandler)

  @property
  def url(self):
    return "http://127.0.0.1:%d" % self.server_address[1]


class _ProxyHandler(http.server.BaseHTTPRequestHandler):

  def do_GET(self):  # pylint: disable=invalid-name
    self.server.requested.append(self.path)
    body = ARCHIVES.get(self.path)
    if self.server.status_for_all or body is None:
      self.send_error(self.server.status_for_all or 404)
      return
    self.send_response(200)
    self.send_header("Content-Length", str(len(body)))
    self.send_header("Content-Type", "application/x-gzip")
    self.end_headers()
    self.wfile.write(body)

  def log_message(self, *args):
    pass


@pytest.fixture
def proxy(monkeypatch):
  server = _Proxy()
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  _use_proxy(monkeypatch, server.url)
  yield server
  server.shutdown()
  server.server_close()


def _use_proxy(monkeypatch, url):
  for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
    monkeypatch.setenv(name, url)
  for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
    monkeypatch.delenv(name, raising=False)


def _closed_port_url():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return "http://127.0.0.1:%d" % s.getsockname()[1]


@pytest.fixture
def tiny_checksums(monkeypatch, tmp_path):
  """tfds checks the tiny archives against their own size and sha256; the default
  tfds data dir (~/tensorflow_datasets) is redirected so that a write there shows."""
  infos = {url: tfds_checksums.UrlInfo(size=tfds.core.units.Size(len(data)),
                                       checksum=hashlib.sha256(data).hexdigest(),
                                       filename=os.path.basename(url))
           for url, data in ARCHIVES.items()}
  monkeypatch.setattr(tfds.builder_cls("wmt14_translate"), "url_infos", infos)
  default_dir = tmp_path / "home_tensorflow_datasets"
  monkeypatch.setattr(tfds_constants, "DATA_DIR", str(default_dir))
  # tfds's DatasetInfo.initialize_from_bucket leaves an empty mkdtemp() folder per call.
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  return default_dir


def _decoded_split(problem, data_dir, split, encoders):
  pairs = []
  for path in tf.io.gfile.glob(problem.filepattern(data_dir, split)):
    for raw in tf.data.TFRecordDataset(path):
      feats = tf.train.Example.FromString(raw.numpy()).features.feature
      ids = {k: list(feats[k].int64_list.value) for k in ("inputs", "targets")}
      assert ids["inputs"][-1] == 1 and ids["targets"][-1] == 1  # EOS
      pairs.append((encoders["inputs"].decode(ids["inputs"][:-1]),
                    encoders["targets"].decode(ids["targets"][:-1])))
  return sorted(pairs)


def test_wmt14_builder_to_our_shards(proxy, tiny_checksums, tmp_path):
  data_dir, tmp_dir = str(tmp_path / "data"), str(tmp_path / "tmp")
  problem = registry.problem(PROBLEM)
  result = problem.generate_data(data_dir, tmp_dir, num_shards=2)

  assert sorted(proxy.requested) == sorted(ARCHIVES)  # each archive downloaded once
  encoders = problem.feature_encoders(data_dir)
  assert os.path.exists(os.path.join(data_dir, "vocab.%s.32768.subwords" % PROBLEM))
  expected = {"train": EUROPARL + COMMONCRAWL + NEWS_COMMENTARY,  # newsdev2014 is hi-en only
              "dev": NEWSTEST2013, "test": NEWSTEST2014}
  for split, pairs in expected.items():
    assert _decoded_split(problem, data_dir, split, encoders) == sorted(pairs), split
    assert result["splits"][split]["examples"] == len(pairs)
  with open(problem.text_file(data_dir, "test", "targets"), encoding="utf-8") as f:
    assert sorted(f.read().splitlines()) == sorted(de for _, de in NEWSTEST2014)

  # tfds wrote only under --tmp_dir: the archives and tfds' own prepared copy.
  assert not tiny_checksums.exists()
  downloads = [name for _, _, names in os.walk(os.path.join(tmp_dir, "downloads"))
               for name in names]
  assert len([name for name in downloads if name.endswith(".tgz")]) == len(ARCHIVES), downloads
  assert os.path.isdir(os.path.join(tmp_dir, "tensorflow_datasets", "wmt14_translate", "de-en"))

  # The 8k twin reuses tfds' prepared data in the same --tmp_dir: nothing is downloaded again.
  twin = registry.problem("translate_ende_wmt8k").tfds_builder(tmp_dir)
  assert len(proxy.requested) == len(ARCHIVES)
  assert twin.info.splits["validation"].num_examples == len(NEWSTEST2013)


def test_archives_copied_into_tmp_dir_are_used_offline(tiny_checksums, tmp_path, monkeypatch):
  # What the error message offers: archives copied into --tmp_dir under their own names.
  _use_proxy(monkeypatch, _closed_port_url())
  monkeypatch.setattr(tfds_downloader, "MAX_RETRIES", 0)
  tmp_dir = tmp_path / "tmp"
  tmp_dir.mkdir()
  for url, data in ARCHIVES.items():
    (tmp_dir / os.path.basename(url)).write_bytes(data)
  builder = registry.problem(PROBLEM).tfds_builder(str(tmp_dir))
  test = [(ex["en"].decode(), ex["de"].decode())
          for ex in builder.as_dataset(split="test").as_numpy_iterator()]
  assert sorted(test) == sorted(NEWSTEST2014)
  assert not tiny_checksums.exists()


def test_no_network_is_one_error_naming_the_archives(tiny_checksums, tmp_path, monkeypatch):
  # A proxy that refuses connections, as with no internet (tfds' ten retries would take minutes).
  _use_proxy(monkeypatch, _closed_port_url())
  monkeypatch.setattr(tfds_downloader, "MAX_RETRIES", 0)
  tmp_dir = str(tmp_path / "tmp")
  with pytest.raises(ValueError) as info:
    registry.problem(PROBLEM).generate_data(str(tmp_path / "data"), tmp_dir)
  message = str(info.value)
  assert "\n" not in message
  assert "needs internet" in message and "ProxyError for http://www.statmt.org/" in message, message
  assert ("copy dev.tgz, training-parallel-commoncrawl.tgz, training-parallel-europarl-v7.tgz, "
          "training-parallel-nc-v9.tgz into --tmp_dir %s and rerun" % tmp_dir) in message, message
  assert not tiny_checksums.exists()


def test_datagen_cli_download_failure_is_one_line_exit_2(tmp_path):
  server = _Proxy(status_for_all=403)  # e.g. a proxy that does not let the download through
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  home = tmp_path / "home"
  home.mkdir()
  env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
  env.update(HOME=str(home), TMPDIR=str(tmp_path), HTTP_PROXY=server.url, http_proxy=server.url, PYTHONPATH=ROOT,
             TF_CPP_MIN_LOG_LEVEL="3")
  env.pop("TFDS_DATA_DIR", None)
  tmp_dir = str(tmp_path / "tmp")
  try:
    proc = subprocess.run(
        [sys.executable, "-m", "t2t_keras.cli.datagen", "--problem=translate_ende_wmt8k",
         "--data_dir=" + str(tmp_path / "data"), "--tmp_dir=" + tmp_dir],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  finally:
    server.shutdown()
    server.server_close()
  assert proc.returncode == 2, proc.stderr
  assert "Traceback" not in proc.stderr, proc.stderr
  errors = [l for l in proc.stderr.splitlines() if l.startswith("t2t_keras_datagen: error:")]
  assert len(errors) == 1, proc.stderr
  assert "needs internet and failed: Failed to get url http://" in errors[0], errors[0]
  assert "HTTP code: 403. Without internet, copy dev.tgz, " in errors[0], errors[0]
  assert "into --tmp_dir %s and rerun" % tmp_dir in errors[0], errors[0]
  assert server.requested  # it did try to download, through the proxy
  assert not (home / "tensorflow_datasets").exists()
  assert os.path.isdir(os.path.join(tmp_dir, "downloads"))
