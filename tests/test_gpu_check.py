"""bench/gpu_check.py, the check a user runs before a long GPU run, on 2 logical CPUs."""

import os
import re
import subprocess
import sys

from tests.support.env import ENV, REPO


def test_gpu_check_passes_on_two_logical_cpus_and_reports_every_figure():
  out = subprocess.run(
      [sys.executable, os.path.join(REPO, "bench", "gpu_check.py"), "--cpu_devices=2",
       "--hparams_set=transformer_tiny", "--precisions=float32", "--steps=3",
       "--warmup_steps=1", "--num_examples=400", "--vocab_size=500",
       "--hparams=num_hidden_layers=1,hidden_size=32,filter_size=64,batch_size=512"],
      env={k: v for k, v in ENV.items() if k != "XLA_FLAGS"}, capture_output=True, text=True,
      timeout=300)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  text = out.stdout
  assert "devices: ['/device:CPU:0', '/device:CPU:1']" in text
  tokens = float(re.search(r"tokens/s\s+([\d,]+)", text).group(1).replace(",", ""))
  mfu = float(re.search(r"MFU\s+([\d.]+)%", text).group(1))
  assert tokens > 0 and 0 < mfu < 100
  compiled, most, bound = map(int, re.search(
      r"XLA compilations\s+(\d+)\s+\(\d+ functions, at most (\d+) for one; bound: \d+ "
      r"buckets x 2 devices = (\d+)\)", text).groups())
  assert compiled >= 1 and most <= bound  # the fused layer norm and xent compiled
  off, checked = map(int, re.search(r"ops off their replica\s+(\d+)\s+\((\d+) ops", text).groups())
  assert off == 0 and checked > 100  # replica 1's ops were seen, and stayed on CPU:1
  assert re.search(r"no GPU kernel\s+0", text)
  assert "gpu_check: passed" in text
