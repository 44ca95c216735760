"""Trainer semantics: replicas, accumulation, resume after SIGKILL, failures."""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.hparams import create_hparams
from t2t_keras.rundir import model_factory, settings
from t2t_keras.rundir.settings import ModelSpec
from t2t_keras.training import schedules
from t2t_keras.training.trainer import NonFiniteLossError, Trainer, create_strategy
from tests.support import t2t_numpy_training as t2t_np
from tests.support.env import ENV, REPO, free_ports
from tests.support.step_utils import (LINEAR_ADAM, SPEC, batches, concat, one_step, t2t_decayed,
                                      t2t_loss_grads)
from tests.support.tiny_problem import make_tiny_problem
from tests.support.trainer_process import start_slow, wait_for


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return make_tiny_problem(str(tmp_path_factory.mktemp("tiny")))


def _trainer_cmd(data_dir, output_dir, *extra):
  return [sys.executable, "-m", "t2t_keras.cli.trainer", "--problem=translate_from_files",
          f"--data_dir={data_dir}", f"--output_dir={output_dir}",
          "--hparams_set=transformer_tiny",
          "--hparams=batch_size=256,learning_rate_warmup_steps=50,num_hidden_layers=1",
          "--schedule=train", "--log_every_steps=1", *extra]


def test_mirrored_two_cpus_equals_one_device():
  out = subprocess.run([sys.executable, os.path.join(REPO, "tests/scripts/mirrored_step.py"),
                        REPO], env=ENV, capture_output=True, text=True, timeout=300)
  match = re.search(r"REPLICAS (\d+) DIFF (\S+) MOVED (\S+)", out.stdout)
  assert match, out.stdout + out.stderr
  assert int(match.group(1)) == 2
  assert float(match.group(3)) > 1e-3  # the step did move the weights
  assert float(match.group(2)) < 1e-5


def test_accumulation_is_t2t_multistep_adam():
  """3 updates of 3 micro-batches each equal T2T's optimize + MultistepAdamOptimizer
  (NumPy port, tests/support/t2t_numpy_training.py): the mean of each micro-batch's clipped
  (own-token-mean + weight decay) gradient, Adam with TF1's bias correction, and the
  learning rate at T2T's global step (k + 1) * 3 - 1 divided by 3."""
  n = 3
  hp = create_hparams("transformer_tiny", "num_hidden_layers=1,hidden_size=16,filter_size=32,"
                      "num_heads=2,layer_prepostprocess_dropout=0,attention_dropout=0,"
                      "relu_dropout=0,learning_rate_warmup_steps=4,label_smoothing=0.1,"
                      f"optimizer_multistep_accumulate_steps={n},clip_grad_norm=0.5,"
                      "weight_decay=0.01,optimizer_adam_epsilon=1e-3")
  tf.keras.utils.set_random_seed(0)
  trainer = Trainer(hp, SPEC, create_strategy("one_device"), train_steps=100)
  oracle = model_factory.build_model(hp, SPEC)
  model = trainer.model
  start = [v.numpy() for v in model.trainable_variables]
  reference = t2t_np.MultistepAdam(start, t2t_decayed(model), hp.to_dict(), train_steps=100)
  parts = batches(3 * n, seed=5)
  tokens = [np.count_nonzero(p["targets"]) for p in parts]
  assert len(set(tokens[:n])) == n  # unequal micro-batches: a token mean would differ
  clipped = 0
  for k in range(3):
    group = parts[k * n:(k + 1) * n]
    got = one_step(trainer, group)
    micro_losses = []
    for part in group:
      loss, grads = t2t_loss_grads(oracle, reference.weights, part, hp.label_smoothing)
      micro_losses.append(loss)
      lr = reference.micro_step(grads)
    norms = reference.norms[-n:]
    clipped += sum(x > hp.clip_grad_norm for x in norms)
    assert trainer.step == k + 1
    assert lr == pytest.approx(hp.learning_rate_constant * ((k + 1) * n - 1) / n / 4 / 2 / 4,
                               rel=1e-12)  # constant * warmup s/4 * rsqrt(4) * rsqrt(16)
    np.testing.assert_allclose(got["loss"], np.mean(micro_losses), rtol=1e-5)
    np.testing.assert_allclose(got["grad_norm"], np.mean(norms), rtol=1e-5)
    # Gradients summed in another float32 order differ by ~1e-7 of the largest
    # gradient (~1): with epsilon 1e-3 in Adam's lr * m / (sqrt(v) + eps), an
    # element moves by at most lr * 1e-7 / 1e-3 = 1e-4 lr more, near-zero gradients
    # included. A wrong average, rate or clip moves elements by ~lr.
    tolerance = 2e-4 * lr + 5e-7
    for v, want in zip(model.trainable_variables, reference.weights):
      np.testing.assert_allclose(v.numpy(), want, rtol=0, atol=tolerance, err_msg=v.path)
  assert clipped >= 3  # clipping was active
  moved = max(np.abs(a - b).max() for a, b in zip(reference.weights, start))
  assert moved > 100 * tolerance


def test_kill_mid_run_then_resume(data_dir, tmp_path):
  output_dir = str(tmp_path / "run")
  cmd = _trainer_cmd(data_dir, output_dir, "--train_steps=40", "--local_eval_frequency=5")
  proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
  deadline = time.time() + 240
  try:
    while time.time() < deadline:
      ckpt = tf.train.latest_checkpoint(output_dir)
      if ckpt and int(ckpt.rsplit("-", 1)[1]) >= 10:
        break
      time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
  finally:
    proc.wait(timeout=30)
  killed_at = tf.train.latest_checkpoint(output_dir)
  assert killed_at, "no checkpoint before the kill"
  steps_before = int(killed_at.rsplit("-", 1)[1])
  assert steps_before < 40
  out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  restored = re.search(r"Restored \S+ at step (\d+)", out.stdout)
  assert restored and int(restored.group(1)) >= steps_before
  assert tf.train.latest_checkpoint(output_dir).endswith("ckpt-40")
  # Every checkpoint in the index loads.
  hparams, _, spec = settings.load_run_files(output_dir)
  for path in tf.train.get_checkpoint_state(output_dir).all_model_checkpoint_paths:
    trainer = Trainer(hparams, spec, create_strategy("one_device"))
    tf.train.Checkpoint(model=trainer.model, optimizer=trainer.optimizer).restore(
        path).assert_existing_objects_matched()


def test_hparams_mismatch_is_an_error(tmp_path):
  hp = create_hparams("transformer_tiny")
  settings.save_or_check_run_files(str(tmp_path), hp, "p", SPEC)
  settings.save_or_check_run_files(str(tmp_path), hp, "p", SPEC)  # same run: fine
  with pytest.raises(ValueError, match="num_heads: 4 in the run, 8 given"):
    settings.save_or_check_run_files(str(tmp_path), hp.replace(num_heads=8), "p", SPEC)
  with pytest.raises(ValueError, match="holds a run of"):
    settings.save_or_check_run_files(str(tmp_path), hp, "other_problem", SPEC)


def test_non_finite_loss_stops_and_keeps_last_checkpoint(data_dir, tmp_path):
  output_dir = str(tmp_path / "nan")
  hp = create_hparams("transformer_tiny", "batch_size=256,learning_rate_schedule=constant,"
                      "learning_rate_constant=1e30,num_hidden_layers=1")
  spec = ModelSpec(*_vocab(data_dir), 0)
  trainer = Trainer(hp, spec, create_strategy("one_device"))
  config = schedules.RunConfig(output_dir=output_dir, train_steps=50, local_eval_frequency=1,
                                log_every_steps=1)
  run = schedules.Experiment(trainer, config, os.path.join(data_dir, "*train*"), None,
                              log=lambda line: None)
  with pytest.raises(NonFiniteLossError, match=r"at step (\d+)") as err:
    run.train()
  bad_step = int(re.search(r"at step (\d+)", str(err.value)).group(1))
  latest = tf.train.latest_checkpoint(output_dir)
  assert latest and int(latest.rsplit("-", 1)[1]) == bad_step - 1
  fresh = Trainer(hp, spec, create_strategy("one_device"))
  tf.train.Checkpoint(model=fresh.model).restore(latest).expect_partial()
  assert all(np.isfinite(w).all() for w in fresh.model.get_weights())


def _vocab(data_dir):
  from data_gen import registry
  enc = registry.problem("translate_from_files", data_dir).feature_encoders(data_dir)
  return enc["inputs"].vocab_size, enc["targets"].vocab_size


def test_multi_worker_mirrored_two_processes_stop_together(data_dir, tmp_path):
  """Two workers train; SIGTERM to the non-chief alone stops both after the same step,
  and the chief saves that step (the stop decision is all-reduced every step)."""
  import json
  ports = free_ports(2)
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  output_dir = str(tmp_path / "mw")
  procs, seen = [], [[], []]
  try:
    for index in range(2):
      env = dict(ENV, TF_CONFIG=json.dumps({"cluster": cluster,
                                            "task": {"type": "worker", "index": index}}))
      procs.append(start_slow(1.5, _trainer_cmd(
          data_dir, output_dir, "--train_steps=50", "--local_eval_frequency=100",
          "--distribution_strategy=multi_worker_mirrored", "--random_seed=1")[3:], env=env))
    wait_for(procs[1], "step 2/50", seen[1], timeout=400)
    procs[1].send_signal(signal.SIGTERM)  # arrives during step 3, on worker 1 only
    outputs = ["".join(s) + p.communicate(timeout=200)[0] for s, p in zip(seen, procs)]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for p, out in zip(procs, outputs):
    assert p.returncode == 128 + signal.SIGTERM, out[-4000:]
    assert "2 replica(s)" in out
    assert "step 3/50" in out and "step 4/50" not in out
  assert tf.train.latest_checkpoint(output_dir).endswith("ckpt-3")
  with open(os.path.join(output_dir, "run.json")) as f:
    assert json.load(f)["stop_reason"] == "signal"
  assert not os.path.exists(os.path.join(output_dir, "tmp_worker_1", "ckpt-3.index"))


def test_average_checkpoints_is_the_mean(tmp_path):
  from t2t_keras.rundir.averaging import average_checkpoints
  hp = create_hparams("transformer_tiny", "num_hidden_layers=1")
  paths, weights = [], []
  for seed in range(3):
    tf.keras.utils.set_random_seed(seed)
    trainer = Trainer(hp, SPEC, create_strategy("one_device"))
    ckpt = tf.train.Checkpoint(model=trainer.model, optimizer=trainer.optimizer)
    paths.append(ckpt.write(str(tmp_path / f"ckpt-{seed}")))
    weights.append(trainer.model.get_weights())
  target = Trainer(hp, SPEC, create_strategy("one_device")).model
  out = average_checkpoints(target, paths, str(tmp_path / "avg" / "averaged.ckpt"))
  check = Trainer(hp, SPEC, create_strategy("one_device")).model
  tf.train.Checkpoint(model=check).restore(out).expect_partial()
  for got, *ws in zip(check.get_weights(), *weights):
    np.testing.assert_allclose(got, np.mean(ws, axis=0), rtol=1e-5, atol=1e-7)


def test_checkpoint_restores_every_model_and_optimizer_variable(tmp_path):
  # Exact on every CPU: restored values are read back from the checkpoint file (a round trip).
  hp = create_hparams("transformer_tiny", LINEAR_ADAM + ",num_hidden_layers=2")
  source = Trainer(hp, SPEC, create_strategy("one_device"))
  one_step(source, batches(1, seed=5))
  config = schedules.RunConfig(output_dir=str(tmp_path), train_steps=1)
  run = schedules.Experiment(source, config, None, None, log=lambda line: None)
  run.save()
  tf.keras.utils.set_random_seed(123)  # a different initialization to overwrite
  target = Trainer(hp, SPEC, create_strategy("one_device"))
  schedules.Experiment(target, config, None, None, log=lambda line: None).restore()
  assert target.step == source.step == 1
  names = [v.path for v in source.model.weights]
  assert len(names) == len(set(names)) == len(target.model.weights)
  for name, a, b in zip(names, source.model.get_weights(), target.model.get_weights()):
    np.testing.assert_array_equal(a, b, err_msg=name)
  for a, b in zip(source.optimizer.variables, target.optimizer.variables):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)
  # The decoder's path: a model-only Checkpoint restores every weight too.
  tf.keras.utils.set_random_seed(7)
  alone = Trainer(hp, SPEC, create_strategy("one_device")).model
  tf.train.Checkpoint(model=alone).restore(
      tf.train.latest_checkpoint(str(tmp_path))).expect_partial()
  for name, a, b in zip(names, source.model.get_weights(), alone.get_weights()):
    np.testing.assert_array_equal(a, b, err_msg=name)


def test_xla_train_step_equals_default():
  parts = batches(1, seed=9)
  hp = create_hparams("transformer_tiny", LINEAR_ADAM + ",num_hidden_layers=1")
  plain = Trainer(hp, SPEC, create_strategy("one_device"))
  xla = Trainer(hp, SPEC, create_strategy("one_device"), jit_compile=True)
  xla.model.set_weights(plain.model.get_weights())
  a, b = one_step(plain, parts), one_step(xla, parts)
  np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
  for x, y in zip(plain.model.get_weights(), xla.model.get_weights()):
    np.testing.assert_allclose(x, y, atol=1e-5)


def test_clipping_by_the_global_norm_of_the_summed_gradient():
  """clip_grad_norm: the update equals an unclipped one with gradients scaled by c / norm."""
  # LINEAR_ADAM's epsilon makes the update ~ learning rate * gradient; a rate of 1e4
  # lifts the clipped update (~1e-4) far above the float32 rounding of the weights.
  hp = create_hparams("transformer_tiny", LINEAR_ADAM + ",num_hidden_layers=1").replace(
      learning_rate_constant=1e4)
  strategy = create_strategy("one_device")
  plain = Trainer(hp, SPEC, strategy)
  clipped = Trainer(hp.replace(clip_grad_norm=1e-3), SPEC, strategy)
  clipped.model.set_weights(plain.model.get_weights())
  start = [np.array(w) for w in plain.model.get_weights()]
  batch = {k: tf.constant(v) for k, v in batches(1, seed=3)[0].items()}
  dens = strategy.run(plain._replica_dens, args=(batch,))
  assert float(dens[0]) == np.count_nonzero(batch["targets"])
  grads, loss, _ = strategy.run(plain._replica_grads, args=(batch, dens[0]))
  norm = float(tf.linalg.global_norm(grads))  # of the token-mean gradient
  assert norm > 1e-2  # far above the clip: clipping matters
  reduced, _, reported = strategy.run(clipped._replica_reduce, args=(grads, loss))
  assert float(reported) == pytest.approx(norm, rel=1e-5)  # the norm before clipping
  strategy.run(clipped._replica_update, args=(reduced,))
  strategy.run(plain._replica_update, args=([g * (1e-3 / norm) for g in grads],))
  for x, y, s in zip(plain.model.get_weights(), clipped.model.get_weights(), start):
    # The updates are read off float32 weights: allow 2 ulps of each weight.
    ulps = 2 * np.spacing(np.abs(s).astype(np.float32))
    assert np.all(np.abs(y - x) <= 1e-3 * np.abs(x - s) + ulps), np.abs(y - x).max()
    assert np.abs(x - s).max() > 10 * ulps.max()  # the update is visible above rounding


def test_one_schedule_object_drives_the_optimizer_and_the_reported_rate():
  hp = create_hparams("transformer_tiny", "num_hidden_layers=1,learning_rate_warmup_steps=100")
  trainer = Trainer(hp, SPEC, create_strategy("one_device"), train_steps=1000)
  trainer.optimizer.iterations.assign(37)
  # T2T's base schedule: constant * linear_warmup * rsqrt_decay * rsqrt_hidden_size.
  want = hp.learning_rate_constant * 37 / 100 / np.sqrt(100) / np.sqrt(hp.hidden_size)
  assert trainer.learning_rate() == pytest.approx(want, rel=1e-5)
  assert float(trainer.optimizer.learning_rate) == pytest.approx(want, rel=1e-5)
  assert type(trainer.optimizer).__name__ == "ReducedAdam"


def _fake_cpuinfo(flags):
  return f"processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: Fake EPYC\nflags\t\t: {flags}\n"


@pytest.fixture
def policy_reset(monkeypatch):
  from t2t_keras.perf import precision
  monkeypatch.setattr(precision, "_warned_slow_bfloat16", False)
  yield precision
  precision.set_mixed_precision("none")


def test_bfloat16_without_native_support_warns_once(policy_reset, caplog):
  precision = policy_reset
  avx2 = _fake_cpuinfo("fpu sse2 avx avx2 fma")
  with caplog.at_level("WARNING", logger="t2t_keras.perf.precision"):
    precision.set_mixed_precision("bfloat16", cpuinfo=avx2)
    precision.set_mixed_precision("bfloat16", cpuinfo=avx2)
  warnings = [r.getMessage() for r in caplog.records if r.name == "t2t_keras.perf.precision"]
  assert len(warnings) == 1, warnings
  assert "Fake EPYC (family 25 model 17); native bfloat16: no" in warnings[0]
  assert "slower" in warnings[0]
  import keras
  assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"


@pytest.mark.parametrize("mode,flags", [("bfloat16", "fpu avx2 avx512f avx512_bf16"),
                                        ("bfloat16", "fpu avx2 amx_bf16 amx_tile"),
                                        ("none", "fpu avx2"), ("float16", "fpu avx2")])
def test_no_bfloat16_warning_where_it_is_native_or_not_used(policy_reset, caplog, mode, flags):
  with caplog.at_level("WARNING", logger="t2t_keras.perf.precision"):
    policy_reset.set_mixed_precision(mode, cpuinfo=_fake_cpuinfo(flags))
  assert not [r for r in caplog.records if r.name == "t2t_keras.perf.precision"]


def test_more_gpus_than_visible_is_refused():
  with pytest.raises(ValueError, match=r"worker_gpu=2 but only 0 GPUs are visible"):
    create_strategy(None, num_gpus=2)
  with pytest.raises(ValueError, match="distribution_strategy must be"):
    create_strategy("parameter_server")
  assert isinstance(create_strategy(None), tf.distribute.OneDeviceStrategy)
