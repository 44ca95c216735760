"""bench/ helpers whose figures the README quotes, against hand-computed cases."""

import os
import sys

import pytest

from tensorflow.tsl.profiler.protobuf import xplane_pb2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))

import bench_vs_model_garden  # noqa: E402  pylint: disable=g-import-not-at-top
import profile_decode  # noqa: E402  pylint: disable=g-import-not-at-top


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
