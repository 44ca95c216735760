"""bench/ helpers whose figures the README quotes, against hand-computed cases."""

import os
import random
import sys
import textwrap

import pytest
from tensorflow.tsl.profiler.protobuf import xplane_pb2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))

import bench_bias_grad  # noqa: E402  pylint: disable=g-import-not-at-top
import bench_decode_bound  # noqa: E402  pylint: disable=g-import-not-at-top
import bench_layer_norm  # noqa: E402  pylint: disable=g-import-not-at-top
import bench_paired_train  # noqa: E402  pylint: disable=g-import-not-at-top
import bench_tied_logits  # noqa: E402  pylint: disable=g-import-not-at-top
import bench_vs_model_garden  # noqa: E402  pylint: disable=g-import-not-at-top
import mg_train_worker  # noqa: E402  pylint: disable=g-import-not-at-top
import profile_decode  # noqa: E402  pylint: disable=g-import-not-at-top
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top

import harness  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras import hparams as hparams_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.perf import flops as flops_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from t2t_keras.perf import tied_logits  # noqa: E402  pylint: disable=g-import-not-at-top


def _plane(lines):
  """An XSpace with one /host:CPU plane; `lines` = {line name: [(op, start_us, us)]}."""
  space = xplane_pb2.XSpace()
  plane = space.planes.add(name="/host:CPU")
  ids = {}
  for name, events in lines.items():
    line = plane.lines.add(name=name)
    for op, start, duration in events:
      if op not in ids:
        ids[op] = len(ids) + 1
        plane.event_metadata[ids[op]].name = op
      line.events.add(metadata_id=ids[op], offset_ps=start * 10**6,
                      duration_ps=duration * 10**6)
  return space


def test_exclusive_times_subtracts_nested_events_per_thread():
  # Thread 1: Process [0, 100) holds MatMul [10, 50) which holds Cast [20, 30),
  # then Transpose [60, 70); a StridedSlice [100, 120) starts as Process ends.
  # Thread 2: MatMul [0, 30) alone. Eager (TFE) lines are not op threads.
  space = _plane({
      "tf_executor 1": [("Process", 0, 100), ("dense:_MklMatMul", 10, 40),
                        ("cast:Cast", 20, 10), ("t:_MklTranspose", 60, 10),
                        ("s:StridedSlice", 100, 20)],
      "tf_executor 2": [("dense_1:_MklMatMul", 0, 30)],
      "TFE_Execute": [("x:_MklMatMul", 0, 1000)],
  })
  times = profile_decode.exclusive_times(space)
  seconds = {op: round(t * 1e6, 6) for op, (t, _) in times.items()}
  assert seconds == {"Process": 100 - 40 - 10, "_MklMatMul": 40 - 10 + 30, "Cast": 10,
                     "_MklTranspose": 10, "StridedSlice": 20}
  assert {op: n for op, (_, n) in times.items()} == {
      "Process": 1, "_MklMatMul": 2, "Cast": 1, "_MklTranspose": 1, "StridedSlice": 1}


def test_exclusive_times_ignores_other_planes():
  space = _plane({"tf_executor": [("a:Mul", 0, 5)]})
  space.planes.add(name="/device:GPU:0").lines.add(name="stream").events.add(
      metadata_id=1, offset_ps=0, duration_ps=10**9)
  assert {op: round(t * 1e6, 6) for op, (t, _) in
          profile_decode.exclusive_times(space).items()} == {"Mul": 5}


def test_round_ratios_divide_within_each_round():
  # Round 1: 1200 / 1000; round 2: 1100 / 1100; hand-computed.
  assert bench_vs_model_garden.round_ratios([1200.0, 1100.0], [1000.0, 1100.0]) == [1.2, 1.0]
  with pytest.raises(ValueError, match="one figure per round"):
    bench_vs_model_garden.round_ratios([1.0, 2.0], [1.0])


def test_median_interval_order_statistics():
  # n = 20: P(B <= 5) = (1 + 20 + 190 + 1140 + 4845 + 15504) / 2^20 = 21700 / 2^20 <= 2.5%
  # and P(B <= 6) = 0.0577 > 2.5%, so the interval is [x_6, x_15], coverage 1 - 2 * 21700 / 2^20.
  values = [float(v) for v in range(1, 21)]
  random.Random(0).shuffle(values)
  low, high, coverage = bench_paired_train.median_interval(values, 0.95)
  assert (low, high) == (6.0, 15.0)
  assert coverage == pytest.approx(1 - 2 * 21700 / 2**20)
  # n = 6: P(B = 0) = 1/64 <= 2.5% < P(B <= 1) = 7/64: the extremes, coverage 62/64.
  assert bench_paired_train.median_interval([6, 1, 5, 2, 4, 3], 0.95) == (1, 6, 62 / 64)
  # n = 5: P(B = 0) = 1/32 > 2.5%: no 95% interval exists.
  with pytest.raises(ValueError, match="at least 6"):
    bench_paired_train.median_interval([1, 2, 3, 4, 5], 0.95)


def test_targets_follow_the_cpu_and_verdicts_the_interval():
  avx2 = "processor : 0\nflags : fpu avx2\n"
  zen = "processor : 0\nflags : avx2 avx512f avx512_bf16\n"
  amx = "processor : 0\nflags : avx512_bf16 amx_bf16 amx_tile\n"
  target = bench_paired_train.target
  assert [target("float32:eager", c) for c in (avx2, zen, amx)] == [1.15, 1.15, 1.15]
  assert [target("bfloat16:eager", c) for c in (avx2, zen, amx)] == [None, 2.0, 3.0]
  verdict = bench_paired_train.verdict
  assert verdict(1.15, 1.4, 1.15) == "met"
  assert verdict(1.0, 1.149, 1.15) == "not met"
  assert verdict(1.1, 1.2, 1.15) == "undecided"
  assert verdict(1.1, 1.2, None) == "no target on this CPU"


FAKE_ANCHOR = textwrap.dedent("""\
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--len", type=int, default=32)
    a = p.parse_args()
    print("a library's chatter on stdout")
    calls = []
    class Loss:
      def numpy(self):
        return 0.0
    src = tgt = None
    def step(src, tgt):
      calls.append(1)
      return Loss()
    step(src, tgt)  # trace + warm-up
    raise SystemExit("the anchor's own timing must not run in the worker")
    """)


def test_model_garden_worker_runs_the_anchor_setup_and_times_on_request(tmp_path):
  anchor = tmp_path / "anchor_model_garden.py"
  anchor.write_text(FAKE_ANCHOR)
  ns = mg_train_worker.load_anchor(str(anchor), ["--batch=3"])
  assert (ns["a"].batch, ns["a"].len, ns["calls"]) == (3, 32, [])  # set-up only
  worker = bench_paired_train.ModelGardenWorker(sys.executable, str(anchor), onednn=False)
  try:
    assert worker.tokens_per_step == 2 * 64 * 32
    seconds = [worker.seconds_per_step(n) for n in (1, 3)]
    assert all(0 <= s < 1 for s in seconds)
  finally:
    worker.close()
  assert worker._process.returncode == 0  # pylint: disable=protected-access


def test_model_garden_worker_says_when_the_anchor_changed(tmp_path):
  anchor = tmp_path / "anchor_model_garden.py"
  anchor.write_text(FAKE_ANCHOR.replace("  # trace + warm-up", ""))
  with pytest.raises(SystemExit, match="the anchor changed"):
    mg_train_worker.load_anchor(str(anchor), [])


def test_layer_norm_bench_alternates_and_takes_medians(monkeypatch):
  # Fake steps that advance a fake clock: "keras" 3 ms a call, "fused" 1 ms.
  clock = [0.0]
  log = []

  class Done:
    def numpy(self):
      return 0.0

  def fake_step(name, ms):
    def step():
      log.append(name)
      clock[0] += ms / 1e3
      return Done()
    return step

  monkeypatch.setattr(harness.time, "perf_counter", lambda: clock[0])
  ms = harness.time_pair({"keras": fake_step("keras", 3.0),
                          "fused": fake_step("fused", 1.0)}, calls=2, repeats=3)
  assert ms == pytest.approx({"keras": 3.0, "fused": 1.0})
  # One untimed call each, then rounds of 2 calls, the order reversed every other round.
  assert log == ["keras", "fused"] + ["keras"] * 2 + ["fused"] * 2 + ["fused"] * 2 + \
      ["keras"] * 2 + ["keras"] * 2 + ["fused"] * 2
  with pytest.raises(ValueError, match="--depth must be >= 1"):
    bench_layer_norm.parse_args(["--depth=0"])


def test_tied_logits_bench_steps_return_the_same_gradients():
  # Both timed steps return dx[0, 0] + dtable[0, 0]; by hand: dx = dy·table and
  # dtable = dyᵀ·x, so with these ones and twos every entry is a known sum.
  x = tf.fill([3, 2], 2.0)       # rows 3, hidden 2
  table = tf.fill([5, 2], 1.0)   # vocab 5
  dy = tf.fill([3, 5], 1.0)
  want = 5 * 1.0 + 3 * 2.0       # dx[0, 0] = sum over 5 vocab; dtable[0, 0] = sum over 3 rows
  plain = lambda a, w: tf.matmul(a, w, transpose_b=True)
  for matmul in (plain, tied_logits.tied_logits_matmul):
    assert float(bench_tied_logits.make_step(matmul, x, table, dy)()) == want
  with pytest.raises(ValueError, match="--vocab must be >= 1"):
    bench_tied_logits.parse_args(["--vocab=0"])


def test_paired_sittings_pool_only_the_same_code_on_the_same_cpu(tmp_path):
  cpu, tree = "AMD EPYC (family 26 model 2)", "abc123"
  paths = []
  for k, ratios in enumerate(([1.9, 2.1, 2.2], [2.0, 2.3])):
    path = str(tmp_path / f"s{k}.json")
    bench_paired_train.write_ratios(path, {"bfloat16:eager": ratios}, cpu, tree)
    paths.append(path)
  assert sorted(os.listdir(tmp_path)) == ["s0.json", "s1.json"]  # no temporary left
  assert bench_paired_train.pool(paths, cpu) == {"bfloat16:eager": [1.9, 2.1, 2.2, 2.0, 2.3]}
  with pytest.raises(ValueError, match="this machine"):
    bench_paired_train.pool(paths, "Intel Xeon")
  with pytest.raises(ValueError, match="at least two"):
    bench_paired_train.pool(paths[:1], cpu)
  other = str(tmp_path / "other.json")
  bench_paired_train.write_ratios(other, {"bfloat16:eager": [2.5] * 3}, cpu, "def456")
  with pytest.raises(ValueError, match="library_tree"):
    bench_paired_train.pool(paths + [other], cpu)
  bench_paired_train.write_ratios(other, {"float32:eager": [1.2] * 3}, cpu, tree)
  with pytest.raises(ValueError, match="different configurations"):
    bench_paired_train.pool(paths + [other], cpu)
  # Pooling needs no Model Garden virtualenv.
  assert bench_paired_train.parse_args([f"--pool={paths[0]},{paths[1]}"]).pool == paths
  assert bench_paired_train.library_tree() != ""


def test_bias_grad_bench_prints_both_errors(capsys):
  # 2,048 rows of a positive-mean bfloat16 gradient: ours is within one bfloat16
  # rounding (2^-8) of the largest sum, plus float32's accumulation error (2047 * 2^-24
  # of the sum of magnitudes, about 2 sums here: tests/test_dense.py derives it) on
  # any CPU. TensorFlow's error is printed for the reader; its size depends on the
  # CPU's kernels, so it is only checked to be a number.
  bench_bias_grad.main(["--rows=2048", "--units=64", "--calls=1", "--repeats=1"])
  row = capsys.readouterr().out.strip().splitlines()[-1].split()
  assert row[0] == "64"
  assert 0.0 <= float(row[1]) < float("inf")
  assert float(row[2]) <= 2.0 ** -8 + 2 * 2047 * 2.0 ** -24
  with pytest.raises(ValueError, match="--rows must be >= 1"):
    bench_bias_grad.parse_args(["--rows=0"])



def test_decode_bound_formulas_hand_computed():
  # float32 decode 4 s of which matmuls 3 s; bfloat16 matmuls 2 s: 4 / (1 + 2).
  assert bench_decode_bound.bound(4.0, 3.0, 2.0) == pytest.approx(4.0 / 3.0)
  # For 1.5x the decode may take 4 / 1.5 s, 2 of them matmuls: 2/3 s for the rest.
  assert bench_decode_bound.nonmatmul_budget(4.0, 2.0, 1.5) == pytest.approx(2.0 / 3.0)
  assert bench_decode_bound.nonmatmul_budget(4.0, 3.0, 1.5) < 0


def test_graph_matmul_flops_counts_each_kind_of_matmul():
  a, b = tf.ones([2, 3]), tf.ones([3, 4])
  bt, ab = tf.ones([4, 3]), tf.ones([3, 2])
  x, y = tf.ones([5, 2, 3]), tf.ones([5, 3, 4])
  fn = tf.function(lambda: (tf.reduce_sum(tf.matmul(a, b)) +
                            tf.reduce_sum(tf.matmul(a, bt, transpose_b=True)) +
                            tf.reduce_sum(tf.matmul(ab, b, transpose_a=True)) +
                            tf.reduce_sum(tf.matmul(x, y)) + tf.reduce_sum(a * 2.0)))
  # 2*2*4*3 three times, then 2*5*2*4*3; the element-wise product counts nothing.
  assert bench_decode_bound.graph_matmul_flops(fn) == 3 * 48 + 240


@pytest.mark.parametrize("overrides", ["", "attention_key_channels=64,num_heads=4"])
def test_decode_bound_matmul_sets_cover_the_decode_flops(overrides):
  hp = hparams_lib.create_hparams("transformer_tiny", overrides)
  batch, beam, length, steps, vocab = 3, 2, 5, 7, 50
  fns = bench_decode_bound.matmul_fns(hp, vocab, batch, beam, length, steps, tf.float32,
                                      jit_compile=False)
  counted = (steps * bench_decode_bound.graph_matmul_flops(fns["step"]) +
             bench_decode_bound.graph_matmul_flops(fns["batch"]))
  assert counted == flops_lib.decode_flops(hp, vocab, batch, length, steps, beam)
  assert tf.math.is_finite(fns["decode"]())
