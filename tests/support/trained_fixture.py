"""A small Transformer trained on the tiny word-for-word problem (shared test helper).

`train_tiny_run(root)` -> (run_dir, data_dir): the pattern of `tests/test_decoding.py`'s
`trained` fixture, as a function so several test modules can build one per module.
"""

import os

import tensorflow as tf

from tests.support.tiny_problem import make_tiny_problem

SMALL = ("num_hidden_layers=2,hidden_size=64,filter_size=128,num_heads=4,batch_size=512,"
         "learning_rate_warmup_steps=100,learning_rate_constant=0.5")


def train_tiny_run(root: str, steps: int = 400, overrides: str = SMALL, seed: int = 0,
                   data_dir: str = None):
  """Generates the tiny problem under `root` (or reuses `data_dir`'s) and trains
  `steps` steps from random seed `seed`.

  Returns:
    (run_dir, data_dir): run_dir holds hparams.json, run.json and checkpoints.
  """
  from data_gen import registry
  from t2t_keras.hparams import create_hparams
  from t2t_keras.rundir import settings
  from t2t_keras.training import schedules
  from t2t_keras.training.trainer import Trainer, create_strategy
  data_dir = data_dir or make_tiny_problem(root)
  problem = registry.problem("translate_from_files", data_dir)
  enc = problem.feature_encoders(data_dir)
  hp = create_hparams("transformer_tiny", overrides)
  spec = settings.ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size, 0)
  output_dir = os.path.join(root, "run")
  settings.save_or_check_run_files(output_dir, hp, "translate_from_files", spec,
                                  settings.vocab_record(problem, data_dir, enc), data_dir=data_dir)
  tf.keras.utils.set_random_seed(seed)
  trainer = Trainer(hp, spec, create_strategy("one_device"), train_steps=steps)
  config = schedules.RunConfig(output_dir=output_dir, train_steps=steps,
                                local_eval_frequency=steps, random_seed=seed)
  schedules.Experiment(trainer, config, problem.filepattern(data_dir, "train"), None,
                        log=lambda line: None).train()
  return output_dir, data_dir
