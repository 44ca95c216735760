"""Best checkpoints by a dev metric (best/) and early stopping by T2T's plateau rule.

A tiny model trains one step per checkpoint while its evaluation is replaced by a
scripted metric sequence: the checkpoints kept in best/ and the step training stops
at are compared with expectations computed here, independently, from the sequence
(a brute-force ranking, and T2T's plateau rule restated). approx_bleu is checked
against a BLEU counted by hand with Counters. A short real run keeps the best two
checkpoints by BLEU, and decoding the dev set with each (open_run, and the decoder
command given best/ as --checkpoint_path) gives the BLEU recorded for it.
"""

import collections
import hashlib
import json
import math
import os

import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

import t2t_keras
from data_gen import registry
from t2t_keras import checkpoints
from t2t_keras.hparams import create_hparams
from t2t_keras.rundir import best, settings
from t2t_keras.training import early_stopping, metrics, schedules
from t2t_keras.training.trainer import Trainer, create_strategy
from tests.support.cli import run_cli_output
from tests.support.tiny_problem import ONE_LAYER, make_tiny_problem

PROBLEM = "translate_from_files"
LINES = 6  # dev lines decoded for BLEU in the real run


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return make_tiny_problem(str(tmp_path_factory.mktemp("best")), train=200, dev=12)


@pytest.fixture(scope="module")
def trainer(data_dir):
  """One tiny trainer for the scripted runs (its step is reset for each run)."""
  problem = registry.problem(PROBLEM, data_dir)
  enc = problem.feature_encoders(data_dir)
  spec = settings.ModelSpec(enc["inputs"].vocab_size, enc["targets"].vocab_size, 0)
  hp = create_hparams("transformer_tiny", ONE_LAYER)
  return Trainer(hp, spec, create_strategy("one_device"), train_steps=100), spec


# -- Independent expectations ------------------------------------------------------

def expected_stop(values, num_steps, delta, minimize, last_step):
  """The step T2T's EarlyStoppingHook stops at, one evaluation per step from 1:
  at step k, take the newest evaluation at least num_steps back; stop when every
  evaluation since then (it included) is less than delta better than it."""
  for k in range(1, last_step + 1):
    back = [s for s in range(1, k + 1) if s <= k - num_steps]
    if k < 2 or not back:
      continue
    start = back[-1]
    better = [(values[start] - values[s]) if minimize else (values[s] - values[start])
              for s in range(start, k + 1)]
    if max(better) < delta:
      return k
  return last_step


def expected_best(values, keep, minimize, last_step):
  """The `keep` best steps up to `last_step`, best first; of equal values the earlier."""
  steps = [s for s in values if s <= last_step]
  steps.sort(key=lambda s: (values[s] if minimize else -values[s], s))
  return steps[:keep]


# -- Scripted runs ------------------------------------------------------------------

def scripted_run(trainer_spec, data_dir, output_dir, values, train_steps, stopping,
                 lines=None, reset=True):
  """Trains to `train_steps` (one checkpoint per step, keep_checkpoint_max=1), each
  evaluation returning values[step] for every metric; returns (summary, digests of
  each step's checkpoint data when it was saved)."""
  trainer, spec = trainer_spec
  problem = registry.problem(PROBLEM, data_dir)
  settings.save_or_check_run_files(output_dir, trainer.hparams, PROBLEM, spec)
  if reset:
    trainer.optimizer.iterations.assign(0)
  config = schedules.RunConfig(output_dir=output_dir, train_steps=train_steps,
                                local_eval_frequency=1, keep_checkpoint_max=1,
                                log_every_steps=1000)
  lines = [] if lines is None else lines
  tracker = early_stopping.MetricTracker(stopping, output_dir, True, lines.append)
  exp = schedules.Experiment(trainer, config, problem.filepattern(data_dir, "train"),
                              problem.filepattern(data_dir, "dev"), log=lines.append,
                              tracker=tracker)
  digests = {}

  def scripted_evaluate():
    step = trainer.step
    with open(os.path.join(output_dir, f"ckpt-{step}.data-00000-of-00001"), "rb") as f:
      digests[step] = hashlib.sha256(f.read()).hexdigest()
    return {name: values[step] for name in ("loss", "accuracy", "bleu")}

  exp.evaluate = scripted_evaluate
  return exp.run("continuous_train_and_eval"), digests


def check_best_dir(output_dir, want, values, digests):
  """best/ holds exactly the checkpoints of `want` (best first), each the one saved."""
  best_dir = os.path.join(output_dir, "best")
  with open(os.path.join(best_dir, "best.json")) as f:
    index = json.load(f)
  assert [e["step"] for e in index["checkpoints"]] == want
  assert [e["value"] for e in index["checkpoints"]] == [values[s] for s in want]
  present = {p.split(".")[0] for p in os.listdir(best_dir) if p.startswith("ckpt-")}
  assert present == {f"ckpt-{s}" for s in want}
  assert tf.train.latest_checkpoint(best_dir) == os.path.join(best_dir, f"ckpt-{want[0]}")
  # What the decoder, exporter and open_run read for --checkpoint_path=<run>/best.
  assert best.loadable(best_dir) == (os.path.join(best_dir, f"ckpt-{want[0]}"), [])
  for step in want:
    prefix = os.path.join(best_dir, f"ckpt-{step}")
    checkpoints.verify_checkpoint(prefix, full_read=True)
    with open(prefix + ".data-00000-of-00001", "rb") as f:
      assert hashlib.sha256(f.read()).hexdigest() == digests[step]


LOSS = {1: 5.0, 2: 4.0, 3: 3.5, 4: 3.45, 5: 3.3, 6: 3.38, 7: 3.25, 8: 3.3, 9: 3.26,
        10: 3.24, 11: 3.3, 12: 3.1}
ACCURACY = {1: 0.1, 2: 0.3, 3: 0.3, 4: 0.36, 5: 0.2, 6: 0.36, 7: 0.37, 8: 0.38, 9: 0.39,
            10: 0.4, 11: 0.41, 12: 0.42}


@pytest.mark.parametrize("metric,values,num_steps,delta,keep", [
    ("loss", LOSS, 3, 0.1, 2),  # minimized; a tie for second place
    ("accuracy", ACCURACY, 2, 0.05, 3),  # maximized (minimize unset); ties
    ("bleu", LOSS, None, 0.1, 3),  # best only, no early stopping: to train_steps
])
def test_scripted_metric_keeps_the_best_and_stops_by_the_plateau_rule(
    trainer, data_dir, tmp_path, metric, values, num_steps, delta, keep):
  output_dir = str(tmp_path / "run")
  stopping = early_stopping.check_settings(
      num_steps, metric, delta, None, keep, problem=PROBLEM,
      schedule="continuous_train_and_eval", hook_metrics=("bleu",), has_dev=True,
      output_dir=output_dir)
  minimize = metric == "loss"
  assert stopping.minimize == minimize
  lines = []
  summary, digests = scripted_run(trainer, data_dir, output_dir, values, 12, stopping, lines)
  stop = expected_stop(values, num_steps, delta, minimize, 12) if num_steps else 12
  assert stop < 12 or num_steps is None
  assert trainer[0].step == stop
  assert summary["stop_reason"] == ("early_stopping" if num_steps else "train_steps")
  with open(os.path.join(output_dir, "run.json")) as f:
    assert json.load(f)["stop_reason"] == summary["stop_reason"]
  want = expected_best(values, keep, minimize, stop)
  check_best_dir(output_dir, want, values, digests)
  assert summary["best"] == {"metric": metric, "best_value": values[want[0]],
                             "best_step": want[0]}
  if num_steps:
    assert f"best {values[want[0]]:.4f} at step {want[0]}" in lines[-1], lines[-1]
    assert lines[-1].startswith(f"Stopped at step {stop} (early stopping: {metric}")


def test_a_resumed_run_keeps_its_best_and_its_history(trainer, data_dir, tmp_path):
  """Split at step 5, the run keeps what one run would (step 5's best included) and
  stops where one run would (the plateau's anchor is from before the resume)."""
  output_dir = str(tmp_path / "run")
  stopping = early_stopping.check_settings(
      3, "loss", 0.1, None, 2, problem=PROBLEM, schedule="train_and_evaluate",
      hook_metrics=(), has_dev=True, output_dir=output_dir)
  first, digests = scripted_run(trainer, data_dir, output_dir, LOSS, 5, stopping)
  assert first["stop_reason"] == "train_steps"
  check_best_dir(output_dir, expected_best(LOSS, 2, True, 5), LOSS, digests)
  summary, more = scripted_run(trainer, data_dir, output_dir, LOSS, 12, stopping, reset=False)
  stop = expected_stop(LOSS, 3, 0.1, True, 12)
  assert trainer[0].step == stop and summary["stop_reason"] == "early_stopping"
  want = expected_best(LOSS, 2, True, stop)
  assert 5 in want  # a best from before the resume
  check_best_dir(output_dir, want, LOSS, {**digests, **more})


def test_bad_settings_are_refused_in_one_line(tmp_path):
  def check(**changes):
    args = dict(steps=3, metric="loss", delta=0.1, minimize=None, keep_best=2)
    args.update(changes)
    with pytest.raises(ValueError) as e:
      early_stopping.check_settings(
          *args.values(), problem=PROBLEM, schedule="train_and_evaluate", hook_metrics=(),
          has_dev=True, output_dir=str(tmp_path))
    assert "\n" not in str(e.value)
    return str(e.value)

  assert "--eval_bleu" in check(metric="bleu")
  assert "would keep" in check(metric="accuracy", minimize=True)
  assert "would keep" in check(metric="loss", minimize=False)
  assert "not a metric" in check(metric="rouge")
  assert "names problem" in check(metric="metrics-other/targets/accuracy")
  assert ">= 1" in check(steps=0)
  assert "delta" in check(delta=0.0)
  key = early_stopping.metric_key(f"metrics-{PROBLEM}/targets/approx_bleu_score", PROBLEM)
  assert key == "approx_bleu"
  with pytest.raises(ValueError, match="--schedule=train makes none"):
    early_stopping.check_settings(3, "loss", 0.1, None, 0, problem=PROBLEM, schedule="train",
                                  hook_metrics=(), has_dev=True, output_dir=str(tmp_path))
  assert early_stopping.check_settings(None, "bleu", 0.1, None, 0, problem=PROBLEM,
                                       schedule="train", hook_metrics=(), has_dev=True,
                                       output_dir=str(tmp_path)) is None


# -- approx_bleu -------------------------------------------------------------------

def hand_bleu(references, hypotheses):
  """T2T's compute_bleu, counted with Counters (4-grams, its smoothing, brevity penalty)."""
  matches, possible = [0] * 4, [0] * 4
  for ref, hyp in zip(references, hypotheses):
    for n in range(1, 5):
      r = collections.Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
      h = collections.Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
      matches[n - 1] += sum(min(c, r[g]) for g, c in h.items())
      possible[n - 1] += sum(h.values())
  smooth, logs = 1.0, []
  for m, p in zip(matches, possible):
    if p and m:
      logs.append(math.log(m / p))
    elif p:
      smooth *= 2
      logs.append(math.log(1 / (smooth * p)))
  ratio = sum(map(len, hypotheses)) / sum(map(len, references))
  penalty = 1.0 if ratio >= 1 else math.exp(1 - 1 / ratio)
  return math.exp(sum(logs) / 4) * penalty if logs else 0.0


def one_hot_logits(ids, vocab):
  return (np.eye(vocab, dtype=np.float32)[np.asarray(ids)] * 5.0)


def test_approx_bleu_is_t2ts_bleu_of_the_argmax_counted_by_hand():
  # By hand: 4/5 unigrams, 3/4 bigrams, 2/3 trigrams, 1/2 4-grams match.
  labels = np.array([[3, 4, 5, 6, 7, 0, 0]])
  hyp = np.array([[3, 4, 5, 6, 8, 2, 2]])  # what the argmax says at padding does not count
  sums = metrics.metric_sums(one_hot_logits(hyp, 9), labels)
  assert metrics.finalize(sums)["approx_bleu"] == pytest.approx(
      (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25, rel=1e-6)
  # Repeated n-grams are clipped; an order without a match is smoothed as T2T's.
  rng = np.random.RandomState(3)
  lengths = [12, 9, 5, 3, 1, 8]
  labels = rng.randint(2, 6, (6, 12))
  hyp = np.where(rng.rand(6, 12) < 0.6, labels, rng.randint(2, 6, (6, 12)))
  for row, n in enumerate(lengths):
    labels[row, n:] = 0
  refs = [list(labels[r, :n]) for r, n in enumerate(lengths)]
  hyps = [list(hyp[r, :n]) for r, n in enumerate(lengths)]
  want = hand_bleu(refs, hyps)
  sums = {k: float(v) for k, v in metrics.metric_sums(one_hot_logits(hyp, 6), labels).items()}
  assert metrics.finalize(sums)["approx_bleu"] == pytest.approx(want, rel=1e-6)
  # As sums, two halves (two batches, or two replicas) add up to the whole.
  halves = [metrics.metric_sums(one_hot_logits(hyp[i:i + 3], 6), labels[i:i + 3])
            for i in (0, 3)]
  added = {k: float(halves[0][k]) + float(halves[1][k]) for k in metrics.SUM_KEYS}
  assert metrics.finalize(added)["approx_bleu"] == pytest.approx(want, rel=1e-6)
  # Packed: rows 2 and 3 in one row count as the two examples they are.
  packed_labels = np.zeros((1, 12), np.int64)
  packed_hyp = np.full((1, 12), 2)
  packed_labels[0, :5], packed_labels[0, 5:8] = refs[2], refs[3]
  packed_hyp[0, :5], packed_hyp[0, 5:8] = hyps[2], hyps[3]
  segments = np.array([[1] * 5 + [2] * 3 + [0] * 4])
  packed = metrics.metric_sums(one_hot_logits(packed_hyp, 6), packed_labels,
                               segments=segments)
  assert metrics.finalize({k: float(v) for k, v in packed.items()})["approx_bleu"] == \
      pytest.approx(hand_bleu(refs[2:4], hyps[2:4]), rel=1e-6)


# -- A real run by BLEU ---------------------------------------------------------------

def test_best_by_bleu_is_what_the_decoder_scores(data_dir, tmp_path, capsys):
  output_dir = str(tmp_path / "run")
  summary = {}
  t2t_keras.train(
      PROBLEM, "transformer_tiny", data_dir, output_dir,
      hparams="num_hidden_layers=1,hidden_size=32,filter_size=64,num_heads=2,batch_size=256,"
      "learning_rate_warmup_steps=8,learning_rate_constant=1.0",
      train_steps=24, local_eval_frequency=8, eval_steps=0, random_seed=1, eval_bleu=True,
      eval_bleu_max_lines=LINES,
      decode_hparams="beam_size=1", eval_early_stopping_metric="bleu", keep_best_checkpoints=2,
      keep_checkpoint_max=1, log=lambda line: None, summary=summary)
  best_dir = os.path.join(output_dir, "best")
  with open(os.path.join(best_dir, "best.json")) as f:
    kept = json.load(f)["checkpoints"]
  with open(os.path.join(output_dir, "evaluations.json")) as f:
    history = {e["step"]: e["metrics"]["bleu"] for e in json.load(f)["evaluations"]}
  assert sorted(history) == [8, 16, 24]
  assert [e["step"] for e in kept] == expected_best(history, 2, False, 24)
  assert summary["best"]["best_step"] == kept[0]["step"]
  problem = registry.problem(PROBLEM, data_dir)
  with open(problem.text_file(data_dir, "dev", "inputs"), encoding="utf-8") as f:
    source = str(tmp_path / "dev.en")  # the lines the hook decoded
    with open(source, "w", encoding="utf-8") as out:
      out.write("".join(line + "\n" for line in f.read().splitlines()[:LINES]))
  with open(problem.text_file(data_dir, "dev", "targets"), encoding="utf-8") as f:
    references = f.read().splitlines()[:LINES]

  def bleu_of(lines):
    return sacrebleu.corpus_bleu(lines, [references], tokenize="intl").score

  # The second best through open_run, the best through the decoder given best/ alone.
  second = kept[1]
  run = t2t_keras.open_run(output_dir, checkpoint=os.path.join(best_dir, second["name"]))
  out = run.translate_file(source, str(tmp_path / "second.de"), "beam_size=1")
  assert bleu_of(out) == pytest.approx(second["value"], abs=1e-9)
  out_file = str(tmp_path / "best.de")
  code, _, err = run_cli_output(
      "t2t_keras.cli.decoder", [f"--checkpoint_path={best_dir}", f"--data_dir={data_dir}",
                                f"--decode_from_file={source}", f"--decode_to_file={out_file}",
                                "--decode_hparams=beam_size=1"], capsys)
  assert code == 0, err[-3000:]
  assert f"Loaded {os.path.join(best_dir, kept[0]['name'])}" in err
  with open(out_file, encoding="utf-8") as f:
    assert bleu_of(f.read().splitlines()) == pytest.approx(kept[0]["value"], abs=1e-9)
