"""The demo's budget split and closing report (pure functions; the demo itself is not run)."""

import pathlib
import re

import pytest

from t2t_keras.cli import demo, demo_budget
from t2t_keras.cli.demo_budget import Stage

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_training_gets_what_the_budget_leaves():
  # 20 minutes, 150 s spent; 100 + 50 s estimated after training, x1.5 -> 225 s reserved.
  assert demo_budget.train_seconds(1200, 150, {"a": 100, "b": 50}) == pytest.approx(825)
  assert demo_budget.train_seconds(1200, 150, {"a": 100, "b": 50}, margin=1.0) == 900
  # Exactly the minimum is still enough.
  assert demo_budget.train_seconds(1000, 0, {"a": 600}, margin=1.5, minimum_s=100) == 100


def test_a_budget_too_small_says_what_budget_is_needed():
  # 200 s spent + 150 s reserved + 60 s minimum = 410 s: 7 minutes.
  with pytest.raises(demo_budget.BudgetTooSmallError, match=r"DEMO_MINUTES=7 "):
    demo_budget.train_seconds(300, 200, {"decoding": 100})
  with pytest.raises(demo_budget.BudgetTooSmallError, match="leaves 99 s"):  # below minimum
    demo_budget.train_seconds(1000, 1, {"a": 600}, margin=1.5, minimum_s=100)
  with pytest.raises(demo_budget.BudgetTooSmallError):  # never negative
    demo_budget.train_seconds(60, 3600, {})
  with pytest.raises(ValueError, match="budget_s"):
    demo_budget.train_seconds(0, 0, {})
  with pytest.raises(ValueError, match="margin"):
    demo_budget.train_seconds(1200, 0, {}, margin=0.5)


def test_the_whole_fits_when_every_stage_takes_its_estimate_times_the_margin():
  # A slow CPU: each stage after training takes 1.5x its estimate.
  estimates = demo_budget.after_training_estimates(968, 128, 2, 4)
  elapsed = 102 + 26  # the fresh-clone figures: install 1.7 min, datagen 26 s
  train = demo_budget.train_seconds(1200, elapsed, estimates)
  total = elapsed + train + demo_budget.SAFETY_MARGIN * sum(estimates.values())
  assert total == pytest.approx(1200)
  assert 600 < train < 900  # most of the 20 minutes


def test_decoding_estimate_matches_the_measured_demo_and_scales_with_the_model():
  tiny = demo_budget.after_training_estimates(968, 128, 2, 4)["test decoding"]
  assert tiny == pytest.approx(82, abs=2)  # the measured fresh-clone demo: 968 sentences decoded in 82 s (demo_budget.py)
  small = demo_budget.after_training_estimates(968, 256, 2, 4)["test decoding"]
  assert small == pytest.approx(15 + 2 * (tiny - 15))
  assert small >= 116  # transformer_small measured 116 s: the estimate is not below it
  assert demo_budget.after_training_estimates(0, 128, 2, 4)["test decoding"] == 15
  with pytest.raises(ValueError, match="hidden_size"):
    demo_budget.after_training_estimates(968, 0, 2, 4)


def test_a_second_run_trains_only_what_its_budget_still_owes():
  # Same budget, training done (or a remainder too short for the trainer's start-up).
  assert demo_budget.seconds_to_train(800, 800, 900) == 0
  assert demo_budget.seconds_to_train(800, 790, 900) == 0
  # A larger budget trains the difference; a killed first run trains its target.
  assert demo_budget.seconds_to_train(2000, 800, 2100) == 1200
  assert demo_budget.seconds_to_train(800, 0, 850) == 800
  # Never more than this run's budget leaves; a smaller budget trains nothing.
  assert demo_budget.seconds_to_train(2000, 800, 500) == 500
  assert demo_budget.seconds_to_train(500, 800, 500) == 0


def test_checkpoints_of_the_last_part_of_training_are_averaged():
  assert demo_budget.checkpoints_to_average([250, 500, 750, 812], 0.3, 5) == [812, 750]
  steps = list(range(250, 2501, 250)) + [2610]
  assert demo_budget.checkpoints_to_average(steps, 0.3, 5) == [2610, 2500, 2250, 2000]
  assert demo_budget.checkpoints_to_average(steps, 0.3, 2) == [2610, 2500]
  assert demo_budget.checkpoints_to_average([250, 300], 0.01, 5) == [300]
  with pytest.raises(ValueError, match="steps"):
    demo_budget.checkpoints_to_average([], 0.3, 5)


def test_the_demo_flagfile_is_transformer_tiny_with_the_papers_beam():
  assert demo.model_size(str(REPO / "flags" / "demo.flags")) == (128, 2, 4)


def test_summary_reads_like_a_report():
  stages = [Stage("set-up (virtualenv, corpora)", 102), Stage("data generation", 26),
            Stage("training", 812, "--train_seconds=786, stopped at step 1,450"),
            Stage("test decoding", 82, "968 sentences"), Stage("pictures", 12)]
  bleu = ["BLEU_cased =  13.40  (nrefs:1|case:mixed|eff:no|tok:intl|smooth:exp|version:2.6.0)"]
  text = demo_budget.format_summary(stages, 1200, 1450, "train_seconds", bleu,
                                    {"Pictures": "/w/plots", "SavedModel": "/w/export/17"})
  lines = text.splitlines()
  assert "Summary: 17.2 min of a 20-minute budget" in lines  # 1,034 s
  assert "  training                       13.5 min  --train_seconds=786, stopped at step 1,450" \
      in lines
  assert "  data generation                    26 s" in lines
  assert "  total                          17.2 min" in lines
  assert ("Training: 1,450 steps in total; the last training stopped because its time "
          "budget was used up.") in lines
  assert "  " + bleu[0] in lines
  assert "Pictures:   /w/plots" in lines and "SavedModel: /w/export/17" in lines
  over = demo_budget.format_summary(stages, 900, None, None, [], {})
  assert "Summary: 17.2 min of a 15-minute budget (OVER BUDGET)" in over
  assert "Training:" not in over and "Test BLEU" not in over


def test_format_duration():
  assert [demo_budget.format_duration(s) for s in (0, 42.4, 119, 120, 1074)] == [
      "0 s", "42 s", "119 s", "2.0 min", "17.9 min"]



def _demo_figures(text, steps_pattern, *bleu_patterns):
  """({steps}, {BLEU}) figures of `text` found by the patterns (one group each)."""
  steps = {int(n.replace(",", "")) for n in re.findall(steps_pattern, text)}
  bleu = {float(b) for pattern in bleu_patterns for b in re.findall(pattern, text)}
  return steps, bleu


def test_the_demo_figures_agree_in_the_flagfile_the_readme_and_performance_md():
  """The demo's steps and test BLEU are stated in flags/demo.flags' comments, in the
  README's table and in docs/performance.md's latest demo row: one run, one pair of
  figures. Any BLEU figure in the flagfile's comments (an older run's) must be it."""
  root = pathlib.Path(__file__).resolve().parent.parent
  comments = [line for line in (root / "flags" / "demo.flags").read_text().splitlines()
              if line.startswith("#")]
  with_bleu = "\n".join(line for line in comments if "BLEU" in line)
  flag_figures = _demo_figures(with_bleu, r"(\d[\d,]*) steps\b", r"BLEU (\d+\.\d+)",
                               r"(\d+\.\d+) (?:test )?BLEU")
  readme = (root / "README.md").read_text()
  row = readme[readme.index("| CPU | Python | wall time | training | test BLEU"):].splitlines()[2]
  readme_figures = _demo_figures(row, r"(\d[\d,]*) steps of transformer_tiny",
                                 r"\| (\d+\.\d+) cased")
  performance = (root / "docs" / "performance.md").read_text()
  demo_rows = [line for line in performance.splitlines()
               if line.startswith("|") and "`make demo" in line]
  performance_figures = _demo_figures(demo_rows[0], r"(\d[\d,]*) steps of transformer_tiny",
                                      r"test BLEU (\d+\.\d+) cased")
  assert len(readme_figures[0]) == len(readme_figures[1]) == 1, row
  assert flag_figures == readme_figures == performance_figures, (
      flag_figures, readme_figures, performance_figures)
