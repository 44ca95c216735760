"""The real t2t_keras_trainer with a sleep after each train step (signal tests).

  python tests/scripts/slow_trainer.py <seconds> <trainer flags...>

A slow step lets a test send a signal that reliably arrives during a known step.
"""

import sys
import time

from t2t_keras.training import trainer as trainer_lib

_real_step, _pause = trainer_lib.Trainer.train_step, float(sys.argv[1])


def _slow_step(self, iterator):
  out = _real_step(self, iterator)
  time.sleep(_pause)
  return out


trainer_lib.Trainer.train_step = _slow_step
sys.argv = ["t2t_keras_trainer"] + sys.argv[2:]

from t2t_keras.cli import trainer  # noqa: E402

trainer.run()
