"""The repository's path, the environment of the commands tests start, and free ports."""

import os
import socket

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A subprocess imports this checkout (not an installed copy) and logs only warnings.
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)


def free_ports(n):
  """`n` TCP ports of 127.0.0.1 that were free a moment ago (bound, then released)."""
  socks = [socket.socket() for _ in range(n)]
  for s in socks:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in socks]
  for s in socks:
    s.close()
  return ports
