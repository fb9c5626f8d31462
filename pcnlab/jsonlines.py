"""The one schema of every JSON-lines log a run writes: the controller's events (events.jsonl,
controller/events.py) and every workload process's log (jobs/<job>/*.jsonl, flows/*.jsonl,
workloads/joblog.py).

One JSON object per line. Every line has

    "type"      what the line records (anchor, report, arm, iteration, interval, error, end, ...)
    "host_ns"   when, on the host's monotonic clock in nanoseconds (`time.monotonic_ns()`: one clock for
                the whole machine, since Mininet hosts share the kernel; the queue log's host_ns is the
                same clock): when the line was written, unless the writer gives the moment it records

and then the fields of its type. The first line is the anchor, which ties that clock to wall time:

    {"type": "anchor", "host_ns": ..., "wall_time": <time.time() at the same moment>, ...}

so a line's wall time is `anchor.wall_time + (line.host_ns - anchor.host_ns) / 1e9`. Times inside a
record (an iteration's comm_start_ns, an interval's start_ns, ...) are on the same clock. A line cut
short by a killed writer is skipped on reading. Logs written before this schema ("event" and "wall",
or "monotonic_ns" and "wall_time") are not read: `read_json_lines` says so in one line.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pcnlab.errors import UsageError

ANCHOR = "anchor"
ITERATION = "iteration"
# The fields of an "iteration" line: every line has iter, the four moments and loss; bytes_sent and
# bytes_recv where the process counts them. The readers take them for granted (pcnlab.analysis.results.iterations
# always has their columns); a line without one of ITERATION_REQUIRED is refused (`Iteration.from_line`).
ITERATION_FIELDS = ("iter", "compute_start_ns", "compute_end_ns", "comm_start_ns", "comm_end_ns", "bytes_sent",
                    "bytes_recv", "loss")
ITERATION_REQUIRED = ITERATION_FIELDS[:5]
_LINE_FIELDS = ("type", "host_ns")   # every line's own: never a record's


@dataclass(frozen=True)
class Iteration:
    """One iteration of one process, as every workload logs it: its moments on the host's monotonic
    clock (ns), the payload bytes each way (None: this process does not count that way), the training
    loss (None where nothing trains), and in `extra` what a workload adds (recv_end_ns, params_sha,
    announce_ns, srtt_us, codec, ...), which may not reuse a field's name."""

    iter: int
    compute_start_ns: int
    compute_end_ns: int
    comm_start_ns: int
    comm_end_ns: int
    bytes_sent: int | None = None
    bytes_recv: int | None = None
    loss: float | None = None
    extra: Mapping = field(default_factory=dict)

    def __post_init__(self) -> None:
        clash = set(self.extra) & {*ITERATION_FIELDS, *_LINE_FIELDS}
        if clash:
            raise ValueError(f"an iteration's extra fields may not be named {', '.join(sorted(clash))}")

    def line_fields(self) -> dict:
        """The line's fields: the record's (byte counts only where counted; loss always), then `extra`."""
        out = {name: getattr(self, name) for name in ITERATION_FIELDS
               if name == "loss" or getattr(self, name) is not None}
        return {**out, **self.extra}

    @classmethod
    def from_line(cls, line: Mapping) -> "Iteration":
        """The record of an "iteration" line as read back (`read_json_lines`): a field the line lacks
        is None if optional (bytes_sent, bytes_recv, loss); every field but the record's, type and
        host_ns goes in `extra`. A ValueError naming the fields when one of ITERATION_REQUIRED is missing
        or the line is of another type."""
        if line.get("type", ITERATION) != ITERATION:
            raise ValueError(f"a {line.get('type')!r} line is not an iteration record")
        missing = [name for name in ITERATION_REQUIRED if name not in line]
        if missing:
            raise ValueError(f"an iteration line without {', '.join(missing)} (every iteration line has "
                             f"{', '.join(ITERATION_REQUIRED)})")
        return cls(**{name: line.get(name) for name in ITERATION_FIELDS},
                   extra={k: v for k, v in line.items() if k not in (*ITERATION_FIELDS, *_LINE_FIELDS)})


class JsonLines:
    """Appends one line per record and flushes it, so a killed process keeps what it wrote. The anchor
    (with `anchor_fields`) is written on opening. Safe to write from several threads."""

    def __init__(self, path: str | Path, **anchor_fields):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file = open(self.path, "a", buffering=1)
        self.write(ANCHOR, wall_time=time.time(), **anchor_fields)

    def write(self, record_type: str, /, *, host_ns: int | None = None, **fields) -> None:
        line = json.dumps({"type": record_type, "host_ns": time.monotonic_ns() if host_ns is None else host_ns,
                           **fields}, separators=(",", ":"), default=str)
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")

    def iteration(self, record: Iteration) -> None:
        self.write(ITERATION, **record.line_fields())

    def close(self) -> None:
        with self._lock:
            self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed


def read_json_lines(path: str | Path) -> tuple[dict, list[dict]]:
    """(the anchor, every line after it); ({}, []) for an empty file. A UsageError naming the file when
    its first line is not this schema's anchor (a log from an older version, or no log of ours)."""
    anchor: dict = {}
    records: list[dict] = []
    with open(path) as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not anchor and not records:
                if not (isinstance(record, dict) and record.get("type") == ANCHOR and "host_ns" in record
                        and "wall_time" in record):
                    raise UsageError(f"{path}: not in this version's log format (its first line should be "
                                     f'{{"type": "anchor", "host_ns": ..., "wall_time": ...}}); logs of runs made '
                                     f"before the format changed cannot be read: run the experiment again")
                anchor = record
                continue
            records.append(record)
    return anchor, records
