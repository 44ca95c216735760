"""The Python API (`import t2t_keras`): the README's example against the commands.

The README's example is run as written (only its run directory is the trained test
fixture's) and its translations and scores must be the lines `t2t_keras_decoder`
writes for the same inputs; `t2t_keras.train` must train the weights the trainer
command trains with the same settings and seed, resume included; the API's errors
are the commands' one-line messages.
"""

import contextlib
import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.support.cli import run_cli_output

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_RUN = "work/train"  # the run the README's example opens (make demo's)


def readme_example() -> str:
  """The code block of the README's "Python API" section."""
  with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
    readme = f.read()
  section = readme.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
  return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _run_example(run_dir: str) -> list:
  """The example's printed lines, with its run directory replaced by `run_dir`."""
  code = readme_example()
  assert code.count(repr(README_RUN).replace("'", '"')) == 1, code
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    exec(compile(code.replace(f'"{README_RUN}"', repr(run_dir)), "README.md", "exec"), {})
  return out.getvalue().splitlines()


def test_readme_example_is_five_lines_and_uses_the_public_names():
  code = readme_example()
  assert len(code.strip().splitlines()) == 5, code
  import t2t_keras
  for name in re.findall(r"t2t_keras\.(\w+)", code):
    assert name in t2t_keras.__all__, name


def test_readme_example_gives_the_decoder_cli_lines(tiny_trained_run, tmp_path, capsys):
  # Exact on every CPU: the example and the in-process decoder command decode with the same
  # TextDecoder batches and shapes.
  run, data_dir = tiny_trained_run
  printed = _run_example(run)
  assert len(printed) == 3, printed
  code = readme_example()
  sources = eval(re.search(r"translate\((\[.*?\])\)", code).group(1))  # pylint: disable=eval-used
  score_args = re.search(r"score\((\[.*?\]), (\[.*?\])\)", code)
  score_src, score_tgt = eval(score_args.group(1)), eval(score_args.group(2))  # pylint: disable=eval-used
  # The decoder command on the same run and lines, its default decode hparams.
  src, out = tmp_path / "in.txt", tmp_path / "out.txt"
  src.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
  common = [f"--output_dir={run}", f"--data_dir={data_dir}"]
  code_, _, err = run_cli_output("t2t_keras.cli.decoder", common + [
      f"--decode_from_file={src}", f"--decode_to_file={out}"], capsys)
  assert code_ == 0, err
  assert printed[0] == repr(out.read_text(encoding="utf-8").splitlines())
  pairs = tmp_path / "pairs.tsv"
  pairs.write_text("".join(f"{s}\t{t}\n" for s, t in zip(score_src, score_tgt)),
                   encoding="utf-8")
  code_, stdout, err = run_cli_output("t2t_keras.cli.decoder", common + [
      f"--score_file={pairs}"], capsys)
  assert code_ == 0, err
  cli_scores = [float(line) for line in stdout.splitlines() if line.strip()]
  np.testing.assert_allclose(eval(printed[1]), cli_scores, rtol=0, atol=1e-6)  # pylint: disable=eval-used
  # The export: the next SavedModel version under the run's export/.
  export = printed[2]
  assert os.path.dirname(export) == os.path.join(run, "export") and os.path.basename(
      export).isdigit()
  assert os.path.isfile(os.path.join(export, "saved_model.pb"))


def test_translate_n_best_and_errors(tiny_trained_run):
  # Exact on every CPU: n-best and top-1 search on the same logits at every step in one process.
  import t2t_keras
  run = t2t_keras.open_run(tiny_trained_run[0])
  lines = ["the big house", "", "a red cat"]
  best = run.translate(lines, beam_size=3)
  nbest = run.translate(lines, beam_size=3, n_best=3)
  assert [n[0] for n in nbest] == best and nbest[1] == ["", "", ""]  # n empty hypotheses
  assert all(len(n) == 3 and len(set(n)) == 3 for n in (nbest[0], nbest[2]))
  # Each hypothesis scored by score(): the n-best is ordered by T2T's score.
  lengths = [len(run.encoders["targets"].encode(h)) + 1 for h in nbest[0]]
  log_probs = np.array(run.score([lines[0]] * 3, nbest[0]))
  t2t = log_probs / ((5 + np.array(lengths)) / 6) ** 0.6
  assert np.all(np.diff(t2t) <= 1e-4), t2t
  with pytest.raises(ValueError, match=r"n_best must be between 1 and beam_size=2, got 3"):
    run.translate(lines, beam_size=2, n_best=3)
  with pytest.raises(ValueError, match="takes a list of sentences"):
    run.translate("the big house")
  with pytest.raises(ValueError, match="one target per source: got 2 sources and 1"):
    run.score(["a", "b"], ["c"])
  with pytest.raises(ValueError, match="beam_size"):
    run.translate(lines, beam_size=0)


def test_open_run_errors_are_the_commands_messages(tiny_trained_run, tmp_path, capsys):
  import t2t_keras
  missing = str(tmp_path / "nothing")
  with pytest.raises(FileNotFoundError) as api_error:
    t2t_keras.open_run(missing)
  code, _, err = run_cli_output("t2t_keras.cli.decoder", [
      f"--output_dir={missing}", f"--data_dir={tiny_trained_run[1]}",
      "--decode_interactive"], capsys)
  assert code == 2 and err.strip().endswith(str(api_error.value)), err
  assert "\n" not in str(api_error.value)


def test_importing_the_package_loads_no_tensorflow():
  result = subprocess.run(
      [sys.executable, "-c", "import sys, t2t_keras; t2t_keras.RunDir; "
       "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"],
      capture_output=True, text=True, cwd=REPO, timeout=120)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "[]"


def test_all_lists_exactly_the_documented_names():
  import t2t_keras
  with open(os.path.join(REPO, "docs", "api.md"), encoding="utf-8") as f:
    documented = set(re.findall(r"^## `t2t_keras\.(\w+)", f.read(), re.M))
  assert documented == set(t2t_keras.__all__)
  for name in t2t_keras.__all__:
    assert getattr(t2t_keras, name) is not None


TINY = "num_hidden_layers=1,hidden_size=32,filter_size=64,num_heads=2,batch_size=256"


def _weights(run_dir: str) -> dict:
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(run_dir))
  # Model weights, Adam's slots and step: all of the training state.
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def test_train_from_python_equals_the_trainer_command(tmp_path, capsys):
  # Exact on every CPU: the same code, seed, data order and process on both sides.
  """Same settings and seed: the same weights after 3 steps and after resuming to 5."""
  import t2t_keras
  from tests.support.tiny_problem import make_tiny_problem
  data_dir = make_tiny_problem(str(tmp_path), train=300, dev=16)
  settings = dict(problem="translate_from_files", hparams_set="transformer_tiny",
                  hparams=TINY, random_seed=3, schedule="train", local_eval_frequency=2)
  python_dir, cli_dir = str(tmp_path / "python"), str(tmp_path / "cli")
  for steps in (3, 5):
    run = t2t_keras.train(data_dir=data_dir, output_dir=python_dir, train_steps=steps,
                          log=lambda line: None, **settings)
    assert run.checkpoint_path.endswith(f"ckpt-{steps}")
    code, _, err = run_cli_output("t2t_keras.cli.trainer", [
        f"--{k}={v}" for k, v in settings.items()] + [
        f"--data_dir={data_dir}", f"--output_dir={cli_dir}", f"--train_steps={steps}"], capsys)
    assert code == 0, err
    ours, theirs = _weights(python_dir), _weights(cli_dir)
    assert ours.keys() == theirs.keys() and len(ours) > 10
    for name in ours:
      np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
  assert run.translate(["the big house"])[0] == t2t_keras.open_run(cli_dir).translate(
      ["the big house"])[0]
  with pytest.raises(ValueError, match="holds a run with different hparams"):
    t2t_keras.train(data_dir=data_dir, output_dir=python_dir, train_steps=6,
                    **dict(settings, hparams=TINY.replace("num_heads=2", "num_heads=4")))


def test_generate_data_from_python_equals_the_datagen_command(tmp_path):
  import t2t_keras
  from tests.support.tiny_problem import write_parallel
  text = tmp_path / "text"
  text.mkdir()
  write_parallel(str(text / "train"), 200, seed=1)
  write_parallel(str(text / "dev"), 10, seed=2)
  files = dict(train_source=text / "train.en", train_target=text / "train.de",
               dev_source=text / "dev.en", dev_target=text / "dev.de")
  result = t2t_keras.generate_data("translate_from_files", str(tmp_path / "python"),
                                   tmp_dir=str(tmp_path / "tmp"), vocab_size=300,
                                   **{k: str(v) for k, v in files.items()})
  result_cli = subprocess.run([sys.executable, "-m", "t2t_keras.cli.datagen",
      "--problem=translate_from_files", f"--data_dir={tmp_path / 'cli'}",
      f"--tmp_dir={tmp_path / 'tmp'}", "--vocab_size=300"] + [
      f"--{k}={v}" for k, v in files.items()], capture_output=True, text=True, cwd=REPO,
      timeout=300)
  assert result_cli.returncode == 0, result_cli.stderr[-2000:]
  assert result["splits"]["train"]["examples"] == 200
  python_files = sorted(os.listdir(tmp_path / "python"))
  assert python_files == sorted(os.listdir(tmp_path / "cli"))
  for name in python_files:
    if name.endswith((".tfrecord", ".vocab")) or "-of-" in name:
      assert (tmp_path / "python" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
  with pytest.raises(ValueError, match="only apply to --problem=translate_from_files"):
    t2t_keras.generate_data("translate_ende_ding_bible8k", str(tmp_path / "x"),
                            train_source="a.en")
