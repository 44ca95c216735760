"""Decoding: searches, the Transformer's and the language model's decoding, text in and out."""

from t2t_keras import old_paths


def __getattr__(name):
  # The names of the 0.x module this package replaced, for one release.
  return old_paths.package_getattr(__name__, name)
