"""Run this before a long training on GPUs: speed, XLA compilations, host placement, memory.

On every visible GPU (MirroredStrategy, as `t2t_keras_trainer --worker_gpu=N`), or
on N logical CPU devices with `--cpu_devices=N`, trains the chosen hparams set for
`--steps` steps per precision (float32; mixed bfloat16 where the device has it;
mixed float16) on WMT-like synthetic data (log-normal lengths, mean ≈27 subwords)
read through the trainer's own input pipeline, and prints per precision:

* tokens/s (non-padding source + target tokens) after the first steps;
* model-FLOP utilization: the model's training FLOPs per second (`t2t_keras.perf.flops`)
  over a matmul peak of that dtype measured in this process (× the GPUs);
* XLA compilations during the steps (counted from XLA's module dumps), the most
  of any one function, against the buckets of the batching scheme;
* ops of the step placed on the host (from the runtime's device placement of the
  first step; the metrics returned to Python are reduced there, as they must), and ops of the step without a GPU kernel for their dtype in the installed
  TensorFlow (from its kernel registry: with `--cpu_devices` the placement cannot
  show them, since every op has a CPU kernel);
* peak memory per GPU (with `--cpu_devices`: the process's peak resident memory).

Exits 1 when any op of the step is placed on the host or lacks a GPU kernel, or a
function compiled more often than there are buckets (× devices), 0 otherwise.

With `--cpu_devices=N` the process has N logical CPU devices, one per replica, as
in the tests of MirroredStrategy; they share the CPU's cores, so their tokens/s is
not a GPU's, and the peak is the whole CPU's. CPU:0 is also the host there, so the
placement check asks instead whether replica k's ops (k >= 1) stay on its device.

Run (before `t2t_keras_trainer --worker_gpu=8 --hparams_set=transformer_big ...`):
  .venv/bin/python bench/gpu_check.py --hparams_set=transformer_big
  .venv/bin/python bench/gpu_check.py --cpu_devices=2 --hparams_set=transformer_tiny
"""

import argparse
import collections
import os
import re
import resource
import shutil
import sys
import tempfile
import time

import harness

PRECISIONS = ("float32", "bfloat16", "float16")
# Ops of a step that belong on the host: the input pipeline's hand-over, the
# function's own plumbing and cross-device copies.
HOST_PLUMBING = re.compile(
    r"^(_Arg|_Retval|_DeviceArg|_DeviceRetval|_Send|_Recv|_HostSend|_HostRecv|NoOp|Const|"
    r"Identity|"
    r"IteratorGetNext.*|MultiDeviceIterator.*|Optional.*|AnonymousIterator.*|.*Dataset.*|"
    r"_MklLayoutDependentOp|Placeholder)$")


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--hparams_set", default="transformer_base")
  parser.add_argument("--hparams", default="", help="T2T-syntax overrides, e.g. batch_size=2048")
  parser.add_argument("--steps", type=int, default=60, help="steps per precision")
  parser.add_argument("--warmup_steps", type=int, default=5,
                      help="first steps not timed (tracing, first compilations)")
  parser.add_argument("--precisions", default=",".join(PRECISIONS),
                      help="comma-separated: " + ", ".join(PRECISIONS))
  parser.add_argument("--cpu_devices", type=int, default=0,
                      help="N logical CPU devices instead of the GPUs (no GPU needed)")
  parser.add_argument("--jit_compile", action="store_true", help="as the trainer's flag")
  parser.add_argument("--vocab_size", type=int, default=32768)
  parser.add_argument("--num_examples", type=int, default=20000, help="synthetic pairs")
  args = harness.require_positive(parser.parse_args(argv), ["steps", "vocab_size",
                                                            "num_examples"])
  args.precisions = harness.choices("precisions", args.precisions, PRECISIONS)
  if args.cpu_devices < 0 or args.warmup_steps < 0 or args.warmup_steps >= args.steps:
    parser.error("--cpu_devices must be >= 0 and 0 <= --warmup_steps < --steps")
  return args


ARGS = harness.parse_or_exit(parse_args, sys.argv[1:])
DUMP_DIR = None
if "XLA_FLAGS" not in os.environ:  # XLA reads it once, at its first compilation
  DUMP_DIR = tempfile.mkdtemp(prefix="gpu_check_xla_")
  os.environ["XLA_FLAGS"] = f"--xla_dump_to={DUMP_DIR} --xla_dump_hlo_as_text"
harness.configure_process()  # as the commands do, before TensorFlow loads

import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

if ARGS.cpu_devices:
  tf.config.set_logical_device_configuration(
      tf.config.list_physical_devices("CPU")[0],
      [tf.config.LogicalDeviceConfiguration() for _ in range(ARGS.cpu_devices)])

from bench_input_pipeline import write_synthetic  # noqa: E402  pylint: disable=g-import-not-at-top
from tensorflow.python.eager import context  # noqa: E402  pylint: disable=g-import-not-at-top

from t2t_keras import perf
from t2t_keras.hparams import create_hparams  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.perf import cpu_info  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.perf import gpu_kernels  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.perf import precision  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.rundir.settings import ModelSpec  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.training import inputs, schedules
from t2t_keras.training.trainer import Trainer  # noqa: E402  pylint: disable=g-import-not-at-top

HOST = "/job:localhost/replica:0/task:0/device:CPU:0"


def devices():
  """The replica devices: every GPU, or CPU:0..N-1 with --cpu_devices."""
  if ARGS.cpu_devices:
    return [f"/device:CPU:{i}" for i in range(ARGS.cpu_devices)]
  return [d.name for d in tf.config.list_logical_devices("GPU")]


def has_bfloat16(device_names):
  """Whether the devices compute bfloat16 natively (GPUs of compute capability >= 8.0)."""
  if ARGS.cpu_devices:
    return cpu_info.native_bfloat16()
  for gpu in tf.config.list_physical_devices("GPU"):
    major = tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))[0]
    if major < 8:
      return False
  return bool(device_names)


def compilations():
  """{XLA module name: compilations so far} from the dump directory."""
  if DUMP_DIR is None:
    return None
  return collections.Counter(
      re.sub(r"^module_\d+\.", "", name[:-len(".before_optimizations.txt")])
      for name in os.listdir(DUMP_DIR) if name.endswith(".before_optimizations.txt"))


def _returned(partition):
  """Names of a partition's nodes that only compute what the function returns (`_Retval`'s
  cone): on the host those are the step's metrics, reduced over the replicas for Python."""
  nodes = {node.name: node for node in partition.node}
  todo = [n.name for n in partition.node if n.op == "_Retval"]
  seen = set()
  while todo:
    name = todo.pop()
    if name in seen or name not in nodes:
      continue
    seen.add(name)
    todo += [i.lstrip("^").split(":")[0] for i in nodes[name].input]
  return seen


def placement(trainer, iterator, replica_devices):
  """Ops of the step's first run placed off their replica's device.

  Returns ({op: count} of ops on the host outside plumbing and the metrics (on
  GPUs), or of replica k's ops (named `replica_k/`, k >= 1) placed off its
  device (with --cpu_devices, where CPU:0 is both the host and replica 0's
  device, and where ops the program leaves unplaced go to CPU:0 as on GPUs they
  go to GPU:0); the metric ops on the host; the ops per device).
  """
  ctx = context.context()
  ctx.enable_run_metadata()
  try:
    trainer.train_step(iterator)  # the runtime records placement when it first runs a function
    metadata = ctx.export_run_metadata()
  finally:
    ctx.disable_run_metadata()
  short = lambda device: device.split("device:")[-1]
  replica_of = {f"replica_{k}/": short(d) for k, d in enumerate(replica_devices) if k}
  off, per_device = collections.Counter(), collections.Counter()
  metrics = checked = 0
  for function_graph in metadata.function_graphs:
    for partition in function_graph.partition_graphs:
      returned = _returned(partition)
      for node in partition.node:
        device = short(node.device)
        per_device[device] += 1
        if HOST_PLUMBING.match(node.op):
          continue
        if ARGS.cpu_devices:
          prefix = node.name.split("/", 1)[0] + "/"
          if prefix in replica_of:
            checked += 1
            if device != replica_of[prefix]:
              off[node.op] += 1
        elif node.device == HOST:
          checked += 1
          if node.name in returned:
            metrics += 1
          else:
            off[node.op] += 1
  return off, metrics, checked, per_device


def missing_kernels(trainer, iterator):
  """Ops of the traced step without a GPU kernel (XLA functions: XLA_GPU_JIT)."""
  graph = trainer._train_fn.get_concrete_function(iterator).graph.as_graph_def()  # pylint: disable=protected-access
  library = gpu_kernels.graph_library(graph)
  functions = gpu_kernels.reachable_functions(library, ["__graph__"])
  xla = gpu_kernels.xla_functions(library, functions)
  return (gpu_kernels.missing_gpu_kernels(library, functions - xla) +
          gpu_kernels.missing_gpu_kernels(library, xla, device_types=("XLA_GPU_JIT",)))


def peak_flops(dtype, device):
  """The matmul peak of `dtype` on `device`, FLOP/s (best of 3 probes)."""
  with tf.device(device):
    probe = harness.make_peak_probe(dtype, 1024 if ARGS.cpu_devices else 8192)
    return max(probe() for _ in range(3))


def memory_peaks(replica_devices, reset=False):
  if ARGS.cpu_devices:
    return None
  names = [d.split("device:")[-1] for d in replica_devices]
  if reset:
    for name in names:
      tf.config.experimental.reset_memory_stats(name)
    return None
  return [tf.config.experimental.get_memory_info(name)["peak"] / 2**30 for name in names]


def check_precision(mode, pattern, replica_devices, buckets):
  """Trains ARGS.steps steps in `mode`; prints its figures; returns its violations."""
  precision.set_mixed_precision("none" if mode == "float32" else mode)
  hp = create_hparams(ARGS.hparams_set, ARGS.hparams)
  strategy = tf.distribute.MirroredStrategy(replica_devices)
  trainer = Trainer(hp, ModelSpec(ARGS.vocab_size, ARGS.vocab_size, 3), strategy,
                    train_steps=10**9, jit_compile=ARGS.jit_compile)
  pad = perf.step_compiles_per_shape(ARGS.jit_compile)
  dataset = strategy.distribute_datasets_from_function(
      lambda ctx: schedules.worker_dataset(pattern, hp, "train", ctx, seed=1,
                                            pad_to_bucket=pad))
  iterator = iter(dataset)
  memory_peaks(replica_devices, reset=True)
  before = compilations()
  # The runtime records a function's placement when it first runs it.
  host_ops, host_metrics, checked, per_device = placement(trainer, iterator, replica_devices)
  for _ in range(ARGS.warmup_steps - 1):
    trainer.train_step(iterator)
  tokens = flops = 0.0
  start = time.perf_counter()
  for _ in range(ARGS.steps - ARGS.warmup_steps):
    out = trainer.train_step(iterator)
    tokens += out["tokens"]
    flops += out["flops"]
  seconds = time.perf_counter() - start
  after = compilations()
  compute_dtype = {"float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16}[mode]
  peak = peak_flops(compute_dtype, replica_devices[0])
  peak_total = peak * (1 if ARGS.cpu_devices else len(replica_devices))
  missing = missing_kernels(trainer, iterator)
  precision.set_mixed_precision("none")

  print(f"\n{mode} ({'mixed ' if mode != 'float32' else ''}{ARGS.hparams_set}, "
        f"batch_size {hp.batch_size} per device, {len(replica_devices)} devices"
        f"{', jit_compile' if ARGS.jit_compile else ''})")
  print(f"  tokens/s            {tokens / seconds:12,.0f}   "
        f"({ARGS.steps - ARGS.warmup_steps} steps, {seconds / (ARGS.steps - ARGS.warmup_steps):.3f} s/step)")
  print(f"  MFU                 {flops / seconds / peak_total:12.1%}   "
        f"(model {flops / seconds / 1e12:.2f} TFLOP/s; {mode} matmul peak "
        f"{peak / 1e12:.2f} TFLOP/s{' per device' if not ARGS.cpu_devices else ''})")
  violations = []
  if after is None:
    print("  XLA compilations    n/a (XLA_FLAGS was set: unset it to count them)")
  else:
    new = after - before
    most = max(new.values(), default=0)
    bound = buckets * len(replica_devices)
    print(f"  XLA compilations    {sum(new.values()):12d}   ({len(new)} functions, at most "
          f"{most} for one; bound: {buckets} buckets x {len(replica_devices)} devices = {bound})")
    if most > bound:
      violations.append(f"{mode}: a function compiled {most} times, more than {bound}")
  where = "off their replica" if ARGS.cpu_devices else "on the host"
  print(f"  ops {where:15s} {sum(host_ops.values()):12d}   "
        + (", ".join(f"{op} x{n}" for op, n in host_ops.most_common(8)) or
           (f"({checked} ops of replicas >= 1 checked) " if ARGS.cpu_devices else
            f"({host_metrics} reduce the metrics returned to Python) ")
           + f"(ops per device: {dict(sorted(per_device.items()))})"))
  if host_ops:
    violations.append(f"{mode}: ops placed {where} inside the step: {dict(host_ops)}")
  print(f"  no GPU kernel       {len(missing):12d}   "
        + ", ".join(sorted({f"{op} {attrs}" for _, _, op, attrs in missing})[:8]))
  if missing:
    violations.append(f"{mode}: ops without a GPU kernel: "
                      + ", ".join(sorted({op for _, _, op, _ in missing})))
  peaks = memory_peaks(replica_devices)
  if peaks is None:
    print(f"  peak memory         {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:9.2f} GiB"
          "   (the process's resident peak so far: logical CPU devices have no own memory)")
  else:
    print("  peak memory (GiB)   " + ", ".join(f"{p:.2f}" for p in peaks))
  return violations


def main():
  harness.print_header()
  replica_devices = devices()
  if not replica_devices:
    print("gpu_check: no GPU visible (tf.config.list_physical_devices('GPU') is empty); "
          "run with --cpu_devices=N to check on logical CPU devices.")
    sys.exit(2)
  print(f"devices: {replica_devices}" + (" (logical CPU devices; CPU:0 is also the host)"
                                         if ARGS.cpu_devices else ""))
  print(f"TF32 for float32 matmuls: {tf.config.experimental.tensor_float_32_execution_enabled()}"
        " (the trainer's --allow_tf32; T2T's float32 is exact: --noallow_tf32)")
  modes = [m for m in ARGS.precisions if m != "bfloat16" or has_bfloat16(replica_devices)]
  if len(modes) < len(ARGS.precisions):
    print("bfloat16 skipped: these devices have no native bfloat16")
  hp = create_hparams(ARGS.hparams_set, ARGS.hparams)
  buckets = len(inputs.bucket_boundaries(hp.max_length, hp.min_length_bucket,
                                         hp.length_bucket_step)) + 1
  violations = []
  with tempfile.TemporaryDirectory() as tmp:
    pattern = write_synthetic(tmp, ARGS.num_examples, ARGS.vocab_size)
    for mode in modes:
      violations += check_precision(mode, pattern, replica_devices, buckets)
  if DUMP_DIR:
    shutil.rmtree(DUMP_DIR, ignore_errors=True)
  print()
  if violations:
    print("gpu_check: FAILED\n  " + "\n  ".join(violations))
    sys.exit(1)
  print("gpu_check: passed (no op on the host, every op has a GPU kernel, compilations "
        "bounded by the buckets)")


if __name__ == "__main__":
  main()
