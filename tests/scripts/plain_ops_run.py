"""Trains through the real t2t_keras_trainer, then beam-decodes (tests/test_plain_ops.py).

  python tests/scripts/plain_ops_run.py <out.npz> <source sentences file> <trainer flags...>

Records each step's loss (a wrapper around `Trainer.train_step`, as in
slow_trainer.py), then loads the run's last checkpoint as t2t_keras_decoder
does and beam-decodes the sentences (beam 4, all beams returned, cached, in a
graph: `decoding.make_decode_fn`). Writes to <out.npz>: "loss" per step,
"ids" `[sentences, 4, length]` and "scores" `[sentences, 4]`, and each weight
under "w:" + its variable path.
"""

import os
import sys

from t2t_keras.training import trainer as trainer_lib

_real_step, _losses = trainer_lib.Trainer.train_step, []


def _recording_step(self, iterator):
  out = _real_step(self, iterator)
  _losses.append(out["loss"])
  return out


def main(out_path: str, source_path: str, trainer_flags: list) -> None:
  trainer_lib.Trainer.train_step = _recording_step
  sys.argv = ["t2t_keras_trainer", *trainer_flags]
  from t2t_keras.cli import trainer
  try:
    trainer.run()
  except SystemExit as e:
    if e.code:
      raise
  import numpy as np
  import tensorflow as tf

  from data_gen import registry
  from t2t_keras.decoding import seq2seq
  from t2t_keras.hparams import create_decode_hparams
  from t2t_keras.rundir import model_factory
  flags = dict(f[2:].split("=", 1) for f in trainer_flags)
  model, _, problem, _, _ = model_factory.load_trained_model(flags["output_dir"])
  encoder = registry.problem(problem, flags["data_dir"]).feature_encoders(
      flags["data_dir"])["inputs"]
  with open(source_path, encoding="utf-8") as f:
    rows = [encoder.encode(line.strip()) + [1] for line in f]  # EOS = 1
  inputs = np.zeros([len(rows), max(map(len, rows))], np.int32)
  for i, row in enumerate(rows):
    inputs[i, :len(row)] = row
  decode_hp = create_decode_hparams("beam_size=4,alpha=0.6,extra_length=10,return_beams=true")
  ids, scores = seq2seq.make_decode_fn(model, decode_hp, use_cache=True)(tf.constant(inputs))
  arrays = {"loss": np.array(_losses), "ids": ids.numpy(), "scores": scores.numpy()}
  arrays.update({"w:" + v.path: v.numpy() for v in model.weights})
  temporary = out_path + ".tmp.npz"
  np.savez(temporary, **arrays)
  os.replace(temporary, out_path)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2], sys.argv[3:])
