"""The demo's time budget and its closing report (pure functions; no TensorFlow).

`make demo` promises a total wall time (default 20 minutes). Set-up, data
generation, decoding, export and pictures take what they take; training gets
the rest through `t2t_keras_trainer --train_seconds`. What comes after training
is estimated before it starts, from the test-split size and the model, with
rates measured on this project's slowest machine (a 2-core AVX2 AMD EPYC, quiet)
times a safety margin, so that the whole fits the budget on a slow CPU; a
faster machine finishes a little early.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence

# Seconds measured by a fresh-clone `make demo` of transformer_tiny (hidden 128,
# 2 layers) on a 2-core AVX2-only AMD EPYC, quiet machine:
# test decoding of 968 sentences with beam 4 took 82 s (process start-up, model
# build and tracing about 15 s of it), export 27 s, pictures 12 s, averaging 9 s.
DECODE_STARTUP_S = 15.0
DECODE_S_PER_SENTENCE = 0.07  # beam 4, transformer_tiny; an under-trained model runs long.
REFERENCE_HIDDEN_SIZE = 128
REFERENCE_LAYERS = 2
REFERENCE_BEAM = 4
FIXED_STAGES_S = {
    "trainer start-up and final evaluation": 45.0,  # outside --train_seconds
    "averaging": 10.0,
    "BLEU": 10.0,  # sacreBLEU and the paper's Moses-tokenized BLEU, 1k lines
    "export": 30.0,
    "SavedModel check": 12.0,
    "pictures": 15.0,
}
SAFETY_MARGIN = 1.5
MIN_TRAIN_SECONDS = 60.0


class BudgetTooSmallError(ValueError):
  """The budget leaves less than the minimum training time."""


def after_training_estimates(test_sentences: int, hidden_size: int, num_hidden_layers: int,
                             beam_size: int) -> Dict[str, float]:
  """Seconds each stage after (and around) training takes on the slow reference CPU.

  Decoding scales with the number of test sentences, the beam, and (linearly, an
  over-estimate: transformer_small decoded in 1.5x tiny's time, not 2x) with the
  hidden size and the number of layers.
  """
  for name, value in (("test_sentences", test_sentences), ("hidden_size", hidden_size),
                      ("num_hidden_layers", num_hidden_layers), ("beam_size", beam_size)):
    if value < (0 if name == "test_sentences" else 1):
      raise ValueError(f"{name} must be {'>= 0' if name == 'test_sentences' else '>= 1'}, "
                       f"got {value!r}.")
  size = (max(1.0, hidden_size / REFERENCE_HIDDEN_SIZE) *
          max(1.0, num_hidden_layers / REFERENCE_LAYERS) * max(1.0, beam_size / REFERENCE_BEAM))
  decode = DECODE_STARTUP_S + test_sentences * DECODE_S_PER_SENTENCE * size
  return {"test decoding": decode, **FIXED_STAGES_S}


def train_seconds(budget_s: float, elapsed_s: float, estimates: Mapping[str, float],
                  margin: float = SAFETY_MARGIN, minimum_s: float = MIN_TRAIN_SECONDS) -> float:
  """Training wall time that keeps the whole demo within `budget_s`.

  Args:
    budget_s: the total budget, seconds.
    elapsed_s: seconds already spent (set-up, data generation).
    estimates: seconds of each stage still to come besides training.
    margin: factor applied to `estimates` (they vary with the CPU and its load).
    minimum_s: the least training worth running.
  Returns:
    budget_s - elapsed_s - margin * sum(estimates), at least `minimum_s`.
  Raises:
    BudgetTooSmallError: when that is below `minimum_s`, saying the budget needed.
    ValueError: for a non-positive budget or margin < 1.
  """
  if budget_s <= 0:
    raise ValueError(f"budget_s must be positive, got {budget_s!r}.")
  if margin < 1:
    raise ValueError(f"margin must be >= 1, got {margin!r}.")
  reserved = margin * sum(estimates.values())
  left = budget_s - max(elapsed_s, 0.0) - reserved
  if left < minimum_s:
    needed = max(elapsed_s, 0.0) + reserved + minimum_s
    raise BudgetTooSmallError(
        f"A {budget_s / 60:.1f}-minute budget leaves {max(left, 0):.0f} s of training after "
        f"{elapsed_s:.0f} s spent and {reserved:.0f} s reserved for the stages after training "
        f"(estimates x{margin:g}); at least {minimum_s:.0f} s are needed. Give "
        f"DEMO_MINUTES={int(needed // 60) + 1} or more (--budget_minutes).")
  return left


def seconds_to_train(target_s: float, trained_s: float, available_s: float,
                     minimum_s: float = MIN_TRAIN_SECONDS / 2) -> float:
  """Training still owed to a budget's target; 0 when what is left is too short to run.

  Args:
    target_s: the training time this budget gives the model in total.
    trained_s: training time earlier runs of the demo already did.
    available_s: what this run's budget leaves for training.
    minimum_s: a shorter remainder is not worth the trainer's start-up.
  """
  owed = min(target_s - trained_s, available_s)
  return owed if owed >= minimum_s else 0.0


@dataclasses.dataclass(frozen=True)
class Stage:
  name: str
  seconds: float
  note: str = ""


def format_duration(seconds: float) -> str:
  """`42 s` below two minutes, else `12.3 min`."""
  return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def checkpoints_to_average(steps: Sequence[int], fraction: float, limit: int) -> List[int]:
  """The checkpoint steps in the last `fraction` of training, newest first, at most `limit`.

  At least the newest one. A short run moves fast: averaging checkpoints from its
  first half would mix in a much worse model.
  """
  if not steps:
    raise ValueError("steps must name at least one checkpoint, got [].")
  if not 0 < fraction <= 1 or limit < 1:
    raise ValueError(f"fraction must be in (0, 1] and limit >= 1, got {fraction!r}, {limit!r}.")
  newest = max(steps)
  chosen = sorted((s for s in steps if s >= newest * (1 - fraction)), reverse=True)
  return chosen[:limit]


STOP_REASONS = {"train_seconds": "its time budget was used up",
                "train_steps": "it reached --train_steps",
                "signal": "it was interrupted",
                "diverged": "it diverged",
                "early_stopping": "its dev metric stopped improving (early stopping)"}


def format_summary(stages: Sequence[Stage], budget_s: float, steps: Optional[int],
                   stop_reason: Optional[str], bleu_lines: Sequence[str],
                   paths: Mapping[str, str], bleu_title: str = "Test BLEU") -> str:
  """The report the demo ends with: stage times, training, BLEU and where things are."""
  total = sum(s.seconds for s in stages)
  width = max([len(s.name) for s in stages] + [5])
  lines = ["", "=" * 72, f"Summary: {format_duration(total)} of a {budget_s / 60:g}-minute "
           "budget" + ("" if total <= budget_s else " (OVER BUDGET)"), ""]
  for s in stages:
    lines.append(f"  {s.name:<{width}}  {format_duration(s.seconds):>9}" +
                 (f"  {s.note}" if s.note else ""))
  lines.append(f"  {'total':<{width}}  {format_duration(total):>9}")
  if steps is not None:
    why = STOP_REASONS.get(stop_reason or "", stop_reason or "unknown")
    lines += ["", f"Training: {steps:,} steps in total; the last training stopped because {why}."]
  if bleu_lines:
    lines += ["", bleu_title + ":"] + [f"  {line}" for line in bleu_lines]
  if paths:
    lines.append("")
    width = max(len(k) for k in paths)
    lines += [f"{k + ':':<{width + 1}} {v}" for k, v in paths.items()]
  lines.append("=" * 72)
  return "\n".join(lines)
