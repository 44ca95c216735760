"""Flags shared by t2t_keras_trainer, t2t_keras_decoder and t2t_keras_exporter.

One definition (like T2T's `utils/flags.py`) so that one flagfile from flags/
works with all three commands: each defines every flag a flagfile may set,
and ignores the ones it does not use.
"""

from absl import flags


def define_once(kind: str, name: str, default, help_text: str, enum_values=None) -> None:
  """Defines a flag unless another CLI module imported in this process did."""
  if name in flags.FLAGS:
    return
  if kind == "enum":
    flags.DEFINE_enum(name, default, enum_values, help_text)
  else:
    getattr(flags, "DEFINE_" + kind)(name, default, help_text)


# Problem, model and run directory.
define_once("string", "problem", None, "Registered problem, e.g. translate_ende_ding_bible8k.")
define_once("string", "model", "transformer", "Model name; only 'transformer'.")
define_once("string", "hparams_set", None, "Named hyperparameter set, e.g. transformer_base.")
define_once("string", "hparams", "", "Overrides in T2T syntax, e.g. 'batch_size=2048,num_heads=16'.")
define_once("string", "data_dir", None, "Directory of the problem's TFRecords and vocabulary.")
define_once("string", "output_dir", None, "Run directory: checkpoints, hparams.json, TensorBoard.")
define_once("string", "t2t_usr_dir", None, "A directory of modules registering user problems.")
# Training.
define_once("integer", "train_steps", 250000, "Total optimizer updates to reach.")
define_once("integer", "eval_steps", 100, "Dev batches per evaluation (0: the whole dev set).")
define_once("integer", "local_eval_frequency", 1000, "Checkpoint (and evaluate) every N steps.")
define_once("float", "train_seconds", 0.0,
            "Also stop after this many seconds of training wall time (0: no limit), saving "
            "and evaluating as at --train_steps. A resumed run gets a fresh budget.")
define_once("bool", "start_over", False,
            "Train from step 0 although --output_dir holds checkpoints: they are moved to "
            "<output_dir>/replaced-<time>/ (nothing is deleted).")
define_once("enum", "schedule", "continuous_train_and_eval", "What the trainer runs.",
        enum_values=["train", "evaluate", "train_and_evaluate", "continuous_train_and_eval",
                     "continuous_eval"])
define_once("integer", "keep_checkpoint_max", 20, "Checkpoints to keep.")
define_once("integer", "worker_gpu", None, "GPUs to use on this worker (default: all visible).")
define_once("integer", "random_seed", None, "Seed of initialization, dropout and data order.")
define_once("enum", "distribution_strategy", None,
        "Default: mirrored when several GPUs are used, else one_device.",
        enum_values=["one_device", "mirrored", "multi_worker_mirrored"])
define_once("enum", "mixed_precision", "none", "Mixed precision (float16 uses loss scaling).",
        enum_values=["none", "bfloat16", "float16"])
define_once("bool", "jit_compile", False,
            "Compile the train step with XLA. Off by default: on every CPU measured (README, "
            "Benchmarks) XLA's train step was slower than the default graph with oneDNN.")
# Decoding (the trainer uses them for BLEU in evaluation).
define_once("string", "decode_hparams", "", "e.g. 'beam_size=4,alpha=0.6,extra_length=50'.")
define_once("string", "decode_from_file", None, "Source sentences, one per line.")
define_once("string", "decode_to_file", None, "Where the decoder writes translations.")
define_once("string", "decode_reference", None, "Reference translations: BLEU is printed/logged "
            "(parsing problems: gold trees, one per line: EVALB F1 is printed).")
define_once("bool", "eval_bleu", False, "Trainer: decode the dev source at each evaluation and "
            "log sacreBLEU (T2T's decode hook).")
define_once("integer", "eval_bleu_max_lines", 200, "Trainer: dev lines decoded for BLEU.")
define_once("string", "checkpoint_path", None, "Checkpoint prefix (default: latest in output_dir).")


def load_trained_run():
  """Model, hparams, problem and encoders of --output_dir for decoder and exporter.

  The model computes in --mixed_precision (e.g. bfloat16 decoding).

  The model is rebuilt from the run's hparams.json; --hparams_set/--hparams and
  --problem, when given (e.g. by a flagfile), must agree with the run.
  """
  import sys

  from absl import app

  from data_gen import registry
  from t2t_keras import run_dir
  from t2t_keras.hparams import create_hparams
  FLAGS = flags.FLAGS
  for name in ("data_dir", "output_dir"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  registry.import_usr_dir(FLAGS.t2t_usr_dir)
  from t2t_keras import training
  # The model computes in the precision asked for (weights stay float32 either way).
  training.set_mixed_precision(FLAGS.mixed_precision)
  try:
    model, hparams, problem_name, _, path = run_dir.load_trained_model(
        FLAGS.output_dir, FLAGS.checkpoint_path,
        log=lambda line: print(line, file=sys.stderr, flush=True))
  except FileNotFoundError as e:  # no hparams.json / run.json: not a training run
    raise app.UsageError(str(e)) from None
  if FLAGS.hparams_set:
    wanted = create_hparams(FLAGS.hparams_set, FLAGS.hparams)
    if wanted != hparams:
      diff = sorted(k for k, v in wanted.to_dict().items() if hparams.to_dict()[k] != v)
      raise app.UsageError(f"--hparams_set/--hparams differ from {FLAGS.output_dir}/"
                           f"hparams.json in: {', '.join(diff)}. Omit them to use the run's.")
  if FLAGS.problem and FLAGS.problem != problem_name:
    raise app.UsageError(f"--problem={FLAGS.problem}, but {FLAGS.output_dir} was trained on "
                         f"{problem_name}.")
  problem = registry.problem(problem_name, FLAGS.data_dir)
  encoders = problem.feature_encoders(FLAGS.data_dir)
  print(f"Loaded {path} ({problem_name}).", file=sys.stderr, flush=True)
  return model, hparams, problem, encoders


def check_output_file(flag: str, path: str) -> None:
  """Refuses, before any work, an output file path that cannot be written.

  Raises:
    app.UsageError: `path` is a directory, or its nearest existing parent is not a
      writable directory.
  """
  import os

  from absl import app
  if os.path.isdir(path):
    raise app.UsageError(f"--{flag}={path} is a directory; give a file path.")
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise app.UsageError(f"--{flag}={path}: {parent} is a file, not a directory.")
  if not os.access(parent, os.W_OK | os.X_OK):
    raise app.UsageError(f"--{flag}={path}: {parent} is not writable.")


def run_cli(main) -> None:
  """app.run(main), but a user error (app.UsageError, a damaged checkpoint) prints one
  line `<program>: error: <message>` and exits with status 2, without the usage text
  or a traceback; other exceptions keep their traceback (they are bugs)."""
  import os
  import sys

  from absl import app

  from t2t_keras import checkpoints

  def wrapped(argv):
    try:
      return main(argv)
    except (app.UsageError, checkpoints.CheckpointError) as e:
      print(f"{os.path.basename(sys.argv[0])}: error: {e}", file=sys.stderr, flush=True)
      sys.exit(2)

  app.run(wrapped)
