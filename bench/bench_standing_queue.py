"""Does the queue stand again before each burst? (issue 11: the paper's regime needs idle gaps long
enough for the background to rebuild its standing queue.) For every run of a sweep: the bottleneck
queue of the background alone (the second before the first iteration) against the queue in the
500 ms before each later iteration, from queue-<switch>.csv and iterations.csv.

    .venv/bin/python bench/bench_standing_queue.py results/pcn-paper/latest [--switch s1 --port 1]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from pcnlab.cmdline import OneLineParser, natural

ALONE_US, BEFORE_US = 1_000_000, 500_000


def standing(run: Path, switch: str, port: int) -> dict:
    q = pd.read_csv(run / f"queue-{switch}.csv", usecols=["port", "ingress_us", "enq_qdepth"])
    q = q[q.port == port]
    starts = pd.read_csv(run / "iterations.csv").first_in_us

    def mean_before(t: int, span: int) -> float:
        return q[(q.ingress_us >= t - span) & (q.ingress_us < t)].enq_qdepth.mean()

    before = pd.Series([mean_before(t, BEFORE_US) for t in starts.iloc[1:]])
    return {"run": run.name, "alone": mean_before(starts.iloc[0], ALONE_US), "before_mean": before.mean(),
            "before_min": before.min(), "iterations": len(starts)}


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", type=Path, help="a sweep folder (its runs' subfolders hold iterations.csv)")
    ap.add_argument("--switch", default="s1")
    ap.add_argument("--port", type=natural, default=1, help="the bottleneck port (the PS's: 1)")
    args = ap.parse_args(argv)
    runs = sorted(p.parent for p in args.sweep.glob("*/iterations.csv"))
    if not runs:
        print(f"{args.sweep}: no run folder with iterations.csv in it; give a sweep folder such as "
              "results/pcn-paper/latest", file=sys.stderr)
        return 2
    table = pd.DataFrame([standing(r, args.switch, args.port) for r in runs])
    print(f"queue at {args.switch} port {args.port} (packets): background alone, and before each later iteration")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
