"""The controller's event log: JSON lines, one event each, timed by the host's monotonic clock.

The first line is the anchor that ties that clock to wall time for the whole run:
    {"event": "anchor", "host_ns": ..., "wall": ...}
Every later line has "event" (report, prediction, arm, disarm, actual, clock, mode, switch_ready, ...),
"host_ns", and its own fields.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any


class EventLog:
    def __init__(self, path: Path | None):
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._handle = open(self.path, "a", buffering=1) if self.path else None
        self.counts: dict[str, int] = {}
        self.write("anchor", wall=time.time())

    def write(self, event: str, **fields: Any) -> None:
        self.counts[event] = self.counts.get(event, 0) + 1
        if self._handle is None:
            return
        line = json.dumps({"event": event, "host_ns": time.monotonic_ns(), **fields}, default=str)
        with self._lock:
            self._handle.write(line + "\n")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def read_events(path: Path) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]
