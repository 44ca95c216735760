"""Training: `train()`, T2T's schedules, the trainer and what it uses.

`runner.train` is the entry point (`t2t_keras.train`, `t2t_keras_trainer`);
`schedules.Experiment` runs a schedule over a `trainer.Trainer`, which owns the
model, optimizer and the compiled step; `inputs` batches the TFRecords.
"""

from t2t_keras import old_paths

# T2T's schedules (--schedule). They live here, free of TensorFlow, so that the
# trainer's --help lists them without loading it.
TRAINING_SCHEDULES = ("train", "train_and_evaluate", "continuous_train_and_eval")
SCHEDULES = TRAINING_SCHEDULES + ("evaluate", "continuous_eval")


def __getattr__(name):
  # The names of the 0.x module this package replaced, for one release.
  return old_paths.package_getattr(__name__, name)
