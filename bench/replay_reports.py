"""Replay a run's burst reports through the current scheduler core, offline: every port's reports in
switch-clock order (a chain's causes are other ports' reports), the model each key chose, and how many
of the workers' true iteration starts at one port (iterations.csv) a replayed window covered. For
trying a predictor change on real traffic before running it again:

    .venv/bin/python bench/replay_reports.py results/pcn-training/latest/mode=pcn,rep=1 [--switch s1 --port 1]

Without --switch/--port, the run's bottleneck (metrics.json). "Covered": the start fell inside a
window armed at least --write-ms before it, as the live controller needs (its writes take 2-10 ms).
The reports are what the switch saw under the run's own windows, so a replay of another model is a
guide, not a measurement: the run it would have made shapes different queues. In particular, once a
replay leaves a few starts uncovered that the run covered, those starts met the run's small queues,
and the lead tracker may decide that no queue stands at the port (`LeadTracker.needed`) and arm
nothing after: a long run of misses at the end of a replay is that, not the model (live, an uncovered
start meets the standing queue and the windows come back).
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pandas as pd

from pcnlab.controller.predictor_types import BurstKey, BurstReport
from pcnlab.controller.scheduler_core import WindowScheduler, replay
from pcnlab.controller.windows import PlannerConfig, WindowPlanner
from pcnlab.cmdline import OneLineParser, natural, non_negative

LEARNING = 5  # as the analysis: a model's first iterations are left out of "after learning"


def replay_run(run: Path, switch: str, port: int, rate_pps: float, write_us: int) -> dict:
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    reports = [BurstReport(e["switch"], e["port"], e["job"], e["t_us"], e.get("queue_pkts", 0), e.get("idle_us"))
               for e in events if e.get("type") == "report" and e.get("switch") == switch]
    ends = [(BurstKey(e["switch"], e["port"], e["job"]), e["t_us"], e["seen_us"])
            for e in events if e.get("type") == "end" and e.get("switch") == switch]
    core = WindowScheduler(planner=WindowPlanner(PlannerConfig(rate_pps=rate_pps)))
    result = replay(reports, core, write_latency_us=write_us, ends=ends)
    armed_at = {c.window: c.at_us for c in result.changes if c.op == "arm"}
    windows = [w for w in armed_at if (w.switch, w.port) == (switch, port)]
    table = pd.read_csv(run / "iterations.csv")
    out = {}
    for job, rows in table.groupby("job"):
        starts = rows["first_in_us"].to_numpy()
        hits = [any(w.job == job and w.contains(int(t)) and armed_at[w] + write_us <= t for w in windows)
                for t in starts]
        models = collections.Counter(s.observation.model for s in result.steps
                                     if s.observation.report.key == (switch, port, job)
                                     and s.observation.kind != "sub-burst")
        open_us = sum(w.length_us for w in windows if w.job == job)
        span = starts.max() - starts.min() if len(starts) > 1 else 0
        out[int(job)] = {"starts": len(starts), "covered": sum(hits), "after_learning": sum(hits[LEARNING:]),
                         "judged_after_learning": len(hits[LEARNING:]), "models": dict(models),
                         "windows": sum(w.job == job for w in windows),
                         "open_share": open_us / span if span else None}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder (events.jsonl, iterations.csv, metrics.json)")
    ap.add_argument("--switch", help="default: the run's bottleneck")
    ap.add_argument("--port", type=natural, help="default: the run's bottleneck")
    ap.add_argument("--write-ms", type=non_negative, default=3.0, help="a window counts if armed this long before (3)")
    args = ap.parse_args(argv)
    needed = [args.run / f for f in ("events.jsonl", "iterations.csv", "metrics.json")]
    if not all(f.is_file() for f in needed):
        print(f"{args.run}: not a finished run folder with events.jsonl, iterations.csv and metrics.json "
              "(give one run, e.g. results/pcn-training/latest/mode=pcn,rep=1)", file=sys.stderr)
        return 2
    neck = json.loads((args.run / "metrics.json").read_text()).get("bottleneck") or {}
    switch, port = args.switch or neck.get("switch"), args.port or neck.get("port")
    if switch is None or port is None:
        print(f"{args.run}: no bottleneck in metrics.json: give --switch and --port", file=sys.stderr)
        return 2
    rate = float(neck.get("rate_pps") or 1000.0)
    for job, r in replay_run(args.run, switch, int(port), rate, int(args.write_ms * 1000)).items():
        share = f"{r['open_share']:.1%}" if r["open_share"] is not None else "-"
        print(f"{args.run.name} {switch}:{port} job {job}: covered {r['covered']} of {r['starts']} true starts, "
              f"{r['after_learning']} of {r['judged_after_learning']} after {LEARNING}; models {r['models']}; "
              f"{r['windows']} windows, open {share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
