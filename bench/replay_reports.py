"""Replay a run's burst reports through the current predictor, offline: what it makes of them (the
report kinds) and how many of the workers' true iteration starts came near a confident forecast. For
trying a predictor change on real traffic before running it again:

    .venv/bin/python bench/replay_reports.py results/pcn-training/latest/mode=pcn,rep=1 [--switch s1 --port 1 --job 1]

"Near": within twice the forecast's jitter plus 10 ms (a window planned from it would cover the start).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import pandas as pd

from pcnlab.controller.bursts import BurstKey, BurstReport
from pcnlab.controller.predictor import BurstPredictor

SLACK_US = 10_000


def replay(run: Path, switch: str, port: int, job: int) -> tuple[dict, int, int]:
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    reports = [e for e in events if e.get("type") == "report"
               and (e.get("switch"), e.get("port"), e.get("job")) == (switch, port, job)]
    starts = pd.read_csv(run / "iterations.csv").query("job == @job").first_in_us.to_numpy()
    predictor = BurstPredictor(BurstKey(switch, port, job))
    kinds: collections.Counter = collections.Counter()
    near, forecast, i = 0, None, 0
    for r in reports:
        t = r["t_us"]
        while i < len(starts) and starts[i] <= t + 1000:  # starts up to this report, judged on the forecast before it
            if forecast is not None and forecast.confident and \
                    abs(forecast.next_start_us - starts[i]) <= 2 * forecast.jitter_us + SLACK_US:
                near += 1
            i += 1
        kinds[predictor.observe(BurstReport(switch, port, job, t, r["queue_pkts"])).kind] += 1
        forecast = predictor.forecast(t)
    return dict(kinds), near, len(starts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder (events.jsonl and iterations.csv)")
    ap.add_argument("--switch", default="s1")
    ap.add_argument("--port", type=int, default=1)
    ap.add_argument("--job", type=int, default=1)
    args = ap.parse_args(argv)
    if not (args.run / "events.jsonl").is_file() or not (args.run / "iterations.csv").is_file():
        print(f"{args.run}: not a run folder with events.jsonl and iterations.csv (give one run, e.g. "
              "results/pcn-paper/latest/mode=pcn,rep=1)", file=sys.stderr)
        return 2
    kinds, near, total = replay(args.run, args.switch, args.port, args.job)
    print(f"{args.run.name}: reports {kinds}; true starts near a confident forecast: {near} of {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
