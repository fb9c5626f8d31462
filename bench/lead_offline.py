"""The lead chooser (controller/lead.py) driven offline by what real runs measured, for trying a lead
rule or its settings before running the experiment again:

    .venv/bin/python bench/lead_offline.py results/<experiment>/*/mode=pcn [--fixed 20 28 36] \
        [--set tolerance=0 --set recent=16] [--runs 400]

From the given pcn runs, every covered iteration start at the bottleneck (iterations.csv, and the
window in force for it that had been open longest, as the analysis' `covered` finds it and the
controller judges a start by it): how long that window had been open when it came, its
offset (that time less the lead planned: the forecast's early reach and its error) and the queue it
met. Then `--runs` runs of as many iterations are simulated: iterations 0-4 meet the standing queue
the runs' uncovered starts met, as the switch reported them; from iteration 5 a start's offset is
drawn from those measured in the same phase (5-19, 20 on), and the queue it meets from the measured
starts whose time open fell in the same bin. The chooser has the controller's default settings
(K_pre 10 packets). Printed: the mean start queue per phase, for the chooser (with `--set` LeadConfig
fields changed) and for each fixed lead.

A guide, not a measurement: a start's queue depends only on its time open here, while in a run the
background's state carries from one window to the next. Hand-written: no library models this.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from pcnlab.analysis import iterations as it
from pcnlab.analysis.results import RunData, load_run, on_port
from pcnlab.controller.lead import LeadConfig, LeadTracker
from pcnlab.controller.modes import WINDOW_MODES
from pcnlab.controller.windows import PlannerConfig
from pcnlab.errors import UsageError
from pcnlab.cmdline import OneLineParser, count, non_negative

WARM = 20          # iterations 5-19: the chain and G still settling; 20 on: steady
BINS_MS = (0, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 70, 80, 90, 100, 115, 130, 160, 200, 10_000)


def measured(runs: list[RunData]) -> tuple[pd.DataFrame, list[int], float, float]:
    """(covered starts: iteration, open_ms, offset_ms, queue), the queues the uncovered starts met
    (as the switch reported them: what the controller's first lead is drawn from), the port's
    packets/s and the median period (us)."""
    rows, first, rates, periods = [], [], [], []
    for run in runs:
        neck = run.metrics["bottleneck"]
        port = (neck["switch"], int(neck["port"]))
        rates.append(float(neck["rate_pps"]))
        starts, events = run.iteration_table, run.events
        periods.append(starts.first_in_us.diff().median())
        # The window each start had (the analysis' `covered`), and how long it had been open.
        window = it.covering(starts, it.window_intervals(events), port)
        opened = (starts.first_in_us - window.start_us) / 1000
        took = window.start_us.notna() & (starts.iteration >= 5)
        rows.append(pd.DataFrame({"iteration": starts.iteration, "open_ms": opened,
                                  "offset_ms": opened - window.lead_us / 1000, "queue": starts.start_queue})[took])
        reports = events[on_port(events, *port) & (events["type"] == "report")]
        first += list(reports[(reports["kind"] != "sub-burst") & (reports["covered"] == False)].queue_pkts)  # noqa: E712
    table = pd.concat(rows, ignore_index=True)
    return table, first, float(np.median(rates)), float(np.median(periods))


class Fixed:
    def __init__(self, lead_us: int):
        self.lead_us = lead_us

    def observe(self, *args) -> None:
        pass

    def lead(self, period_us: float) -> int:
        return self.lead_us


def simulate(make, table: pd.DataFrame, first: list[int], period_us: float, iterations: int, seed: int):
    rng = np.random.default_rng(seed)
    offsets = {warm: table[(table.iteration < WARM) == warm].offset_ms.to_numpy() for warm in (True, False)}
    pools = [table[(table.open_ms > lo) & (table.open_ms <= hi)].queue.to_numpy()
             for lo, hi in zip(BINS_MS[:-1], BINS_MS[1:])]
    drawn = [i for i, pool in enumerate(pools) if len(pool) >= 5] or [i for i, pool in enumerate(pools) if len(pool)]
    tracker, met = make(), []
    for it in range(iterations):
        if it < 5:
            met.append(int(rng.choice(first)))
            tracker.observe(met[-1], False)
            continue
        lead_ms = tracker.lead(period_us) / 1000
        opened = lead_ms + rng.choice(offsets[it < WARM])
        if opened <= 0:
            met.append(int(rng.choice(first)))
            tracker.observe(met[-1], False)
            continue
        b = min(max(int(np.searchsorted(BINS_MS, opened)) - 1, 0), len(pools) - 1)
        b = min(drawn, key=lambda i: abs(i - b))   # a bin too thin to draw from: the nearest that is not
        met.append(int(rng.choice(pools[b])))
        # The lead judged as windows.WindowPlanner.observe_start judges it: the lead the start had.
        tracker.observe(met[-1], True, round(max(min(lead_ms, opened), 0.001) * 1000))
    return np.mean(met), np.mean(met[5:WARM]), np.mean(met[WARM:])


def main() -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="pcn run folders (mode=pcn...)")
    parser.add_argument("--fixed", nargs="*", type=non_negative, default=[], help="fixed leads to compare (ms)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a LeadConfig field for the chooser (e.g. tolerance=0)")
    parser.add_argument("--runs", dest="count", type=count, default=400, help="simulated runs per rule")
    args = parser.parse_args()
    runs = []
    for path in dict.fromkeys(run.resolve() for run in args.runs):   # a `latest` link names a run twice
        try:
            run = load_run(path)
        except UsageError as e:
            parser.error(str(e))
        if run.mode not in WINDOW_MODES or run.iteration_table.empty or "bottleneck" not in run.metrics:
            parser.error(f"{path} is no finished pcn run with iterations: give the folders of pcn runs (mode=pcn...)")
        runs.append(run)
    table, first, rate, period = measured(runs)
    if not table.open_ms.gt(0).any() or not first:
        parser.error("these runs have no covered iteration start from iteration 5 on, or no uncovered one: "
                     "give the folders of pcn runs (mode=pcn...)")
    fields = {f.name: f.type for f in dataclasses.fields(LeadConfig)}
    changes = {}
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in fields:
            parser.error(f"--set {item}: LeadConfig has no field {name!r} (it has {', '.join(fields)})")
        try:
            changes[name] = float(value) if fields[name] in ("float", float) else int(value)
        except ValueError:
            parser.error(f"--set {item}: {name} takes a {fields[name]}, not {value!r}")
    iterations = int(table.iteration.max()) + 1
    print(f"{len(runs)} runs, {len(table)} covered starts, port {rate:.0f} packets/s, period {period / 1000:.0f} ms, "
          f"{iterations} iterations per simulated run, {args.count} runs per rule")
    print("queue met by time open (ms): " + "  ".join(
        f"{lo}-{hi}: {table[(table.open_ms > lo) & (table.open_ms <= hi)].queue.mean():.1f}"
        for lo, hi in zip(BINS_MS[:-1], BINS_MS[1:]) if ((table.open_ms > lo) & (table.open_ms <= hi)).sum() >= 5))
    config = dataclasses.replace(PlannerConfig().lead_config(), **changes)   # as the controller's (run_controller.py)
    rules = {"chooser" + (f" {' '.join(args.set)}" if args.set else ""): lambda: LeadTracker(rate, config)}
    rules |= {f"fixed {ms:g} ms": (lambda ms=ms: Fixed(round(ms * 1000))) for ms in args.fixed}
    print(f"{'rule':32s} {'all':>6s} {'5-19':>6s} {'20 on':>6s}")
    for name, make in rules.items():
        result = np.array([simulate(make, table, first, period, iterations, seed) for seed in range(args.count)])
        print(f"{name:32s} " + " ".join(f"{x:6.2f}" for x in result.mean(axis=0)))


if __name__ == "__main__":
    main()
