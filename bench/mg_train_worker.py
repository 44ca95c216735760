"""Model Garden's training anchor kept alive, timing steps on request (bench_paired_train.py).

Runs with the Model Garden virtualenv's python, not ours: it imports nothing of
this project. It executes `anchor_model_garden.py` (see bench_vs_model_garden.py) up to its
warm-up line, so the model, optimizer, batch and step function are the anchor's
own, then warms the step up twice and serves one request per stdin line:

  "<n>"   run n steps, reply the seconds per step (after the last step's loss is read);
  "quit"  or end of input: exit.

Its replies start with "@@ " (whatever else the anchor's libraries print is skipped);
the first is "@@ ready tokens_per_step=<source + target tokens>".

  PATH/TO/mg-venv/bin/python bench/mg_train_worker.py --anchor=PATH/TO/anchors/anchor_model_garden.py
"""

import argparse
import sys
import time

# The line of anchor_model_garden.py where its set-up ends and its timing begins.
WARMUP_LINE = "step(src, tgt)  # trace + warm-up"
REPLY = "@@ "  # marks this worker's replies on stdout
READY = "ready tokens_per_step="  # its first reply, before the token count


def load_anchor(path: str, anchor_flags):
  """The anchor's namespace after its set-up (model, optimizer, src, tgt, step, a)."""
  with open(path, encoding="utf-8") as f:
    source = f.read()
  setup, found, _ = source.partition(WARMUP_LINE)
  if not found:
    raise SystemExit(f"{path} has no line {WARMUP_LINE!r}: the anchor changed; update "
                     "WARMUP_LINE in bench/mg_train_worker.py.")
  namespace = {"__name__": "anchor_model_garden", "__file__": path}
  sys.argv = [path, *anchor_flags]
  exec(compile(setup, path, "exec"), namespace)  # pylint: disable=exec-used
  return namespace


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--anchor", required=True, help="path of anchor_model_garden.py")
  args, anchor_flags = p.parse_known_args()
  ns = load_anchor(args.anchor, anchor_flags)
  step, src, tgt, a = ns["step"], ns["src"], ns["tgt"], ns["a"]
  for _ in range(2):  # trace + warm-up, as the anchor does
    step(src, tgt).numpy()
  print(f"{REPLY}{READY}{2 * a.batch * a.len}", flush=True)
  for line in sys.stdin:
    request = line.strip()
    if request == "quit":
      break
    n = int(request)
    start = time.perf_counter()
    for _ in range(n):
      loss = step(src, tgt)
    loss.numpy()
    print(f"{REPLY}{(time.perf_counter() - start) / n:.6f}", flush=True)


if __name__ == "__main__":
  main()
