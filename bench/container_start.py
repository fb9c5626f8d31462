"""How long a PyTorch process's container took to start, per rank, from finished runs' ledgers.

    .venv/bin/python bench/container_start.py results/pcn-training/<time> [more run or sweep folders]

A run's ledger (started.json) records the podman client of each process in a container and, once the
container runs, its own process, each with the kernel's start time (clock ticks since boot). The
difference is what podman and the runtime took to make and start the container: the image's Python
has not run yet. Prints one line per run and the spread over all ranks (p50, p95, max).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from pcnlab.cmdline import OneLineParser
from pcnlab.errors import UsageError
from pcnlab.ledger import LedgerData

CLIENT = "podman client of "
TICKS = os.sysconf("SC_CLK_TCK")


def start_seconds(ledger: LedgerData) -> list[float]:
    """Per process in a container: its start minus its podman client's, in seconds."""
    starts = {p.what: p.start_time for p in ledger.processes}
    return [(starts[what[len(CLIENT):]] - tick) / TICKS for what, tick in starts.items()
            if what.startswith(CLIENT) and what[len(CLIENT):] in starts]


def main() -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run or sweep folders")
    args = parser.parse_args()
    ledgers = sorted({p for f in args.folders for p in ([f / "started.json"] if (f / "started.json").exists()
                                                         else f.rglob("started.json"))})
    if not ledgers:
        raise UsageError(f"no run folder (started.json) under {', '.join(map(str, args.folders))}; give run or "
                         "sweep folders")
    every = []
    for path in ledgers:
        seconds = start_seconds(LedgerData.from_json(path.read_text()))
        if seconds:
            every += seconds
            print(f"{path.parent}: {len(seconds)} containers, start {np.median(seconds):.2f} s p50, "
                  f"{max(seconds):.2f} s max")
    if not every:
        raise UsageError("none of those runs had a process in a container")
    p50, p95 = np.percentile(every, [50, 95])
    print(f"{len(every)} containers: start p50 {p50:.2f} s, p95 {p95:.2f} s, max {max(every):.2f} s "
          f"(clock ticks of 1/{TICKS} s)")


if __name__ == "__main__":
    try:
        main()
    except UsageError as exc:
        print(f"bench/container_start.py: {exc}", file=sys.stderr)
        sys.exit(2)
