"""The real t2t_keras_trainer without the datagen-manifest check of --data_dir (hang tests).

  python tests/scripts/unchecked_trainer.py <trainer flags...>

The manifest check refuses a shard that is not a regular file; skipping it lets
a test put a FIFO that nobody writes to among the training shards, so that
reading the first batch blocks inside TensorFlow, as on a stalled file system.
"""

import sys

from t2t_keras.cli import common_flags

common_flags.set_up_process()  # first, as the command: before TensorFlow loads
from data_gen import problem  # noqa: E402  pylint: disable=g-import-not-at-top

problem.Problem.check_data_dir = lambda self, data_dir, verify_checksums=False: {}
sys.argv = ["t2t_keras_trainer"] + sys.argv[1:]

from t2t_keras.cli import trainer  # noqa: E402

trainer.run()
