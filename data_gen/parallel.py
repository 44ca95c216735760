"""Datagen on every core with bounded memory: worker processes that encode and shuffle.

`write_split` is how `Text2TextProblem` writes a split. The main process reads
the problem's samples lazily (`generate_samples`, or `generate_encoded_samples`
when a problem overrides it), writes the dev/test text files line by line as it
reads, and hands the samples in chunks of `CHUNK_SIZE` to `Workers`; a worker
encodes, checks and serialises a chunk (`data_gen/datagen_worker.py`). Results
come back in the order the chunks went out, and the main process writes them
round-robin to the unshuffled shards (`generator_utils.generate_files`), so the
shards hold the same records in the same order whatever the number of workers.
Then each worker shuffles whole shards (`shuffle_shards`), one at a time.

Memory does not grow with the corpus: at most `max_in_flight` chunks (2 per
worker) are sent and not yet written, so the reader is never more than
`(max_in_flight + 2) * chunk_size` samples ahead of the writer (the chunk being
read and the one being written added); a shuffle holds one shard per worker
(about twice its bytes at peak: 1% of the split with T2T's 100 train shards,
≈8 MB for WMT14 En-De).

The number of workers shapes nothing: one worker runs the same task functions in
the main process, and N workers write the same bytes (tests/test_datagen_parallel.py).
A failure in a worker (an id outside the vocabulary, a full disk) is raised in the
main process as the same exception with the same message; the workers are then
killed and waited for, and their temporaries removed. Ctrl-C reaches only the main
process's handling (workers ignore SIGINT); a killed main process takes its
workers with it (Linux's parent-death signal), and the next run removes leftovers.
"""

import contextlib
import glob
import itertools
import logging
import os
import pickle
import subprocess
import sys
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from data_gen import datagen_worker
from data_gen import file_io
from data_gen import generator_utils

CHUNK_SIZE = 1000  # samples per task: ~0.2 s of encoding, so messages are few
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WORKER_CODE = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                "from data_gen.datagen_worker import worker_main; worker_main()")


def available_cpus() -> int:
  """The CPUs this process may run on (its affinity), else the machine's count."""
  try:
    return len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    return os.cpu_count() or 1


def check_num_workers(num_workers: Optional[int]) -> int:
  """`num_workers`, or the available CPUs for None.

  Raises:
    ValueError: not an int >= 1.
  """
  if num_workers is None:
    return available_cpus()
  if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
    raise ValueError("num_workers must be an int >= 1, got %r" % (num_workers,))
  return num_workers


class Workers:
  """N worker processes running `datagen_worker.TaskRunner` tasks; one: the main process.

  Used as a context manager: leaving it normally ends the workers, leaving it by
  an exception (or Ctrl-C) kills them; either way they are waited for.
  """

  def __init__(self, num_workers: int, encoders: Dict[str, Any], features: Sequence[str],
               vocab_sizes: Dict[str, int], max_in_flight: Optional[int] = None):
    self.runner = datagen_worker.TaskRunner(encoders, features, vocab_sizes)
    self.procs: List[subprocess.Popen] = []
    self._results: List[Any] = []
    init = None
    if num_workers > 1:
      try:
        init = pickle.dumps((encoders, tuple(features), vocab_sizes),
                            protocol=pickle.HIGHEST_PROTOCOL)
      except Exception as e:  # pylint: disable=broad-except
        logging.warning("encoding in one process: the encoders cannot be sent to worker "
                        "processes (%s); give the encoder class __getstate__/__setstate__", e)
    self.max_in_flight = max_in_flight or 2 * num_workers
    if init is not None:
      try:
        for _ in range(num_workers):
          self._start(init)
      except BaseException:
        self.terminate()
        raise

  def _start(self, init: bytes) -> None:
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO, env.get("PYTHONPATH")) if p)
    try:
      proc = subprocess.Popen([sys.executable, "-c", _WORKER_CODE, str(write_fd),
                               str(os.getpid())], stdin=subprocess.PIPE, pass_fds=(write_fd,),
                              env=env)
    except BaseException:
      os.close(read_fd)
      raise
    finally:
      os.close(write_fd)  # the worker's end: EOF here once the worker is gone
    self.procs.append(proc)
    self._results.append(os.fdopen(read_fd, "rb"))
    self._send(len(self.procs) - 1, ("init", list(sys.path), init))

  @property
  def pids(self) -> List[int]:
    return [p.pid for p in self.procs]

  def _died(self, index: int) -> ChildProcessError:
    proc = self.procs[index]
    try:
      code = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
      code = None
    how = ("killed by signal %d%s" % (-code, " (out of memory?)" if code == -9 else "")
           if code is not None and code < 0 else "exit status %s" % code)
    return ChildProcessError("datagen worker process %d ended unexpectedly (%s)"
                             % (proc.pid, how))

  def _send(self, index: int, task: Tuple) -> None:
    try:
      datagen_worker.write_message(self.procs[index].stdin,
                                   pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL))
    except (BrokenPipeError, ValueError):
      raise self._died(index) from None

  def _receive(self, index: int) -> Any:
    message = datagen_worker.read_message(self._results[index])
    if message is None:
      raise self._died(index)
    status, value = pickle.loads(message)
    if status == "error":
      raise value
    return value

  def ordered(self, tasks: Iterable[Tuple]) -> Iterator[Any]:
    """Each task's result, in the tasks' order; `tasks` is read lazily, at most
    `max_in_flight` tasks ahead of the result being yielded."""
    if not self.procs:
      for task in tasks:
        yield self.runner.run(task)
      return
    pending: List[int] = []  # the worker of each task sent and not yet received, oldest first
    try:
      for number, task in enumerate(tasks):
        if len(pending) >= self.max_in_flight:
          yield self._receive(pending.pop(0))
        index = number % len(self.procs)  # round-robin: a worker's results come in order
        self._send(index, task)
        pending.append(index)
      while pending:
        yield self._receive(pending.pop(0))
    finally:
      if pending:  # abandoned or failed: results in the pipes would answer the next tasks
        self.terminate()

  def close(self) -> None:
    """Ends the workers once they finished their tasks (their input ends)."""
    for proc in self.procs:
      with contextlib.suppress(OSError):
        proc.stdin.close()
    for proc in self.procs:
      try:
        proc.wait(timeout=60)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    self._close_pipes()

  def terminate(self) -> None:
    """Kills the workers and waits for them (no orphans, no zombies)."""
    for proc in self.procs:
      with contextlib.suppress(OSError):
        proc.kill()
    for proc in self.procs:
      proc.wait()
      with contextlib.suppress(OSError):
        proc.stdin.close()
    self._close_pipes()

  def _close_pipes(self) -> None:
    for f in self._results:
      with contextlib.suppress(OSError):
        f.close()
    self._results = []
    self.procs = []

  def __enter__(self) -> "Workers":
    return self

  def __exit__(self, exc_type, exc, tb) -> None:
    if exc_type is None:
      self.close()
    else:
      self.terminate()


def _chunks(items: Iterable[Any], size: int) -> Iterator[Tuple[int, List[Any]]]:
  """(number of the chunk's first item, counting from 1; the chunk), read lazily."""
  it = iter(items)
  first = 1
  while True:
    chunk = list(itertools.islice(it, size))
    if not chunk:
      return
    yield first, chunk
    first += len(chunk)


class _TextSink:
  """The `text_sink` of `generate_encoded_samples`: writes each sample's texts at once."""

  def __init__(self, write):
    self.append = write


def _overrides_encoding(problem) -> bool:
  method = type(problem).generate_encoded_samples
  return getattr(method, "__qualname__", "") != "Text2TextProblem.generate_encoded_samples"


def write_split(problem, workers: Workers, data_dir: str, tmp_dir: str, split: str,
                encoders: Dict[str, Any], unshuffled: Sequence[str], text_paths: Sequence[str],
                max_cases: Optional[int], progress: generator_utils.Progress = None,
                chunk_size: Optional[int] = None) -> int:
  """Writes a split's unshuffled shards and its text files (one per feature, or none);
  returns the number of examples. On failure nothing of them is left."""
  features = problem.features
  with contextlib.ExitStack() as stack:
    sinks = [stack.enter_context(file_io.atomic_open(p)) for p in text_paths]

    def write_texts(values):
      for f, value in zip(sinks, values):
        f.write(value.replace("\n", " "))
        f.write("\n")

    if _overrides_encoding(problem):
      kind = "serialize"
      items = problem.generate_encoded_samples(data_dir, tmp_dir, split, encoders,
                                               _TextSink(write_texts) if sinks else None)
    else:
      kind = "encode"

      def read():
        for sample in problem.generate_samples(data_dir, tmp_dir, split):
          values = tuple(sample[k] for k in features)
          if sinks:
            write_texts(values)
          yield values

      items = read()
    if max_cases is not None:
      items = itertools.islice(items, max_cases)
    tasks = ((kind, first, split, chunk)
             for first, chunk in _chunks(items, chunk_size or CHUNK_SIZE))
    records = (record for result in workers.ordered(tasks) for record in result)
    return generator_utils.generate_files(records, unshuffled, progress=progress, stage=split)


def shuffle_shards(workers: Workers, unshuffled: Sequence[str], final: Sequence[str],
                   random_seed: int) -> None:
  """Shuffles shard i with seed `random_seed + i` into `final[i]` (T2T's `shuffle_dataset`),
  one shard per worker at a time; removes each unshuffled shard once shuffled."""
  tasks = (("shuffle", src, dst, random_seed + i)
           for i, (src, dst) in enumerate(zip(unshuffled, final)))
  try:
    for _ in workers.ordered(tasks):
      pass
  except BaseException:
    workers.terminate()  # before their temporaries go: no writer is left
    for path in final:
      for tmp in glob.glob(glob.escape(path) + ".*" + file_io.TMP_SUFFIX):
        if file_io.abandoned(tmp, 3600):
          file_io.remove_quietly([tmp])
    raise
