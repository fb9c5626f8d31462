"""The per-process logs of every workload: JSON lines, one record per iteration (or interval).

The first line of each log is its clock anchor, written when the process starts:

    {"type": "anchor", "wall_time": <time.time()>, "monotonic_ns": <time.monotonic_ns()>, "pid": ..,
     "host": "h2", "job": "j1", "role": "worker", "rank": 1, "config": {...}}

Every later time is `time.monotonic_ns()` (one clock for all hosts of a machine: Mininet hosts share the
kernel), so `wall = anchor.wall_time + (t_ns - anchor.monotonic_ns) / 1e9`. Record types:

- "iteration": iter, compute_start_ns, compute_end_ns, comm_start_ns, comm_end_ns, bytes_sent,
  bytes_recv, loss (null where nothing trains), plus what the workload adds (params_sha, srtt_us, ...)
- "interval" (background flows): start_ns, end_ns, bytes, mbps (+ sender's cwnd, srtt_us, retrans)
- "announce" (PCN-START seen or sent), "error" (message), and "end" (monotonic_ns, status).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path


class JsonLog:
    """Appends one JSON object per line and flushes it, so a killed process keeps what it wrote."""

    def __init__(self, path: str | Path, **anchor):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", buffering=1)
        self.write(type="anchor", wall_time=time.time(), monotonic_ns=time.monotonic_ns(),
                   pid=os.getpid(), hostname=socket.gethostname(), **anchor)

    def write(self, **record) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def iteration(self, **record) -> None:
        self.write(type="iteration", **record)

    def error(self, message: str) -> None:
        self.write(type="error", monotonic_ns=time.monotonic_ns(), message=message)

    def close(self, status: str = "ok") -> None:
        if not self._file.closed:
            self.write(type="end", monotonic_ns=time.monotonic_ns(), status=status)
            self._file.close()

    def __enter__(self) -> "JsonLog":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and exc_type is not SystemExit:
            self.error(f"{exc_type.__name__}: {exc}")
            self.close("failed")
        else:
            self.close()


def read_log(path: str | Path) -> tuple[dict, list[dict]]:
    """(anchor, the records after it). A torn last line (a killed writer) is skipped."""
    anchor: dict = {}
    records: list[dict] = []
    for line in Path(path).read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") == "anchor" and not anchor:
            anchor = rec
        else:
            records.append(rec)
    return anchor, records


def iterations(path: str | Path) -> list[dict]:
    return [r for r in read_log(path)[1] if r.get("type") == "iteration"]
