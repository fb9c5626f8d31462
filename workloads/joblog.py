"""The per-process logs of every workload: JSON lines, one record per iteration (or interval).

The lines follow the schema of every run log (pcnlab/jsonlines.py: "type", "host_ns" on the host's
monotonic clock, an anchor first). A workload's anchor, written when the process starts, adds

    "pid", "hostname", "host": "h2", "job": "j1", "role": "worker", "rank": 1, "config": {...}

and the record types after it are:

- "iteration": a `pcnlab.jsonlines.Iteration` (`log.iteration(Iteration(...))`): iter, compute_start_ns,
  compute_end_ns, comm_start_ns, comm_end_ns, bytes_sent, bytes_recv, loss (null where nothing trains),
  plus what the workload adds in its `extra` (params_sha, srtt_us, ...)
- "interval" (background flows): start_ns, end_ns, bytes, mbps (+ sender's cwnd, srtt_us, retrans)
- "connected" (a flow's connection), "announce" (PCN-START sent or received; host_ns: when), "shift"
  (a time shift from the controller received, or applied before iteration `iter`: shift_us),
  "error" (message), and "end" (status).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pcnlab.jsonlines import JsonLines


class JsonLog(JsonLines):
    """A workload process's log: the anchor names the process; `end` is written on closing."""

    def __init__(self, path: str | Path, **anchor):
        super().__init__(path, pid=os.getpid(), hostname=socket.gethostname(), **anchor)

    def error(self, message: str) -> None:
        self.write("error", message=message)

    def close(self, status: str = "ok") -> None:
        if not self.closed:
            self.write("end", status=status)
            super().close()

    def __enter__(self) -> "JsonLog":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and exc_type is not SystemExit:
            self.error(f"{exc_type.__name__}: {exc}")
            self.close("failed")
        else:
            self.close()

