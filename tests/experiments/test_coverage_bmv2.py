"""Coverage on topologies with more than one switch between the workers and the PS, on real BMv2: the
analysis (the workers' logs, the queue log) and the controller (its own verdict on each start it
reported) agree within one iteration, and the prediction error is a fraction of a period, not one
period (the analysis once judged in the host's clock and counted each start against the prediction
its own report made for the next one)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import needs_bmv2, run_experiment, starved

pytestmark = [needs_bmv2, pytest.mark.slow]

PERIOD_MS = 300

TOPOLOGIES = {
    # The paper's tree: workers on the leaves, the PS behind the root (two switches on every path).
    "tree": ("{kind: tree, workers_per_leaf: 2, background_per_leaf: 1, bw: 20, uplink_bw: 40, queue: 60}",
             "ps", "workers", "background"),
    # Leaf-spine: the PS on the first leaf, the workers on the two others (three switches on every path).
    "leaf-spine": ("{kind: leaf-spine, leaves: 3, spines: 2, hosts_per_leaf: 3, bw: 20, fabric_bw: 40, queue: 60}",
                   "h1", "[h4, h5, h7, h8]", "[h2, h3]"),
}

SPEC = """
name: cover
topology: {topology}
mode: {{kind: pcn, K: 40, K_pre: 10}}
telemetry: 1
jobs:
  - {{name: gen, kind: generator, pattern: ps, ps: {ps}, workers: {workers}, burst_bytes: 40000,
     reply_bytes: 1000, period_ms: {period}, iterations: 28, burst_gap_us: 50000, cc: cubic, ecn: true}}
background:
  - {{src: {background}, dst: {ps}, cc: cubic, ecn: true}}
duration_s: 25
warmup_s: 2
"""
# duration_s is a cap the job should not reach (the run ends when its 28 iterations do, 8.4 s of them): at
# 12 s a machine whose workers took 3.6 s from the job's start to their first iteration cut it at 18-26
# iterations in 3 of 3 runs (2026-11-30).


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_controller_and_analysis_agree_on_coverage(module_results, name):
    topology, ps, workers, background = TOPOLOGIES[name]
    text = SPEC.format(topology=topology, ps=ps, workers=workers, background=background, period=PERIOD_MS)
    run = run_experiment(text, module_results, name) / "cover" / "latest" / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    ctl = metrics["controller"]
    neck = metrics["bottleneck"]
    network = json.loads((run / "network.json").read_text())
    # The bottleneck is the PS's port, at a switch the workers reach through others.
    ps_host = ps if ps.startswith("h") else "h1"
    assert network["switches"][neck["switch"]]["ports"][str(neck["port"])] == ps_host
    table = pd.read_csv(run / "iterations.csv")
    assert len(table) >= 25
    analysis_covered = int(table["covered"].sum())
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    here = [e for e in events if (e.get("switch"), e.get("port")) == (neck["switch"], neck["port"])]
    # The starts from the job's first iteration on (reports before it would be set-up, no iteration).
    starts = [e for e in here if e["type"] == "report" and e["kind"] != "sub-burst"
              and e["t_us"] >= table["first_in_us"].min()]
    controller_covered = sum(bool(e["covered"]) for e in starts)
    # A start judged with a prediction near it says so again in its `actual` event, the same verdict.
    verdicts = {e["t_us"]: e["covered"] for e in starts}
    assert all(verdicts[e["t_us"]] == e["covered"] for e in here if e["type"] == "actual")
    assert ctl["controller_starts"] == len(starts) and abs(len(starts) - len(table)) <= 2
    assert ctl["controller_coverage"] == controller_covered / len(starts)
    # Both judge in the switch's clock: the same starts covered, but for one at either end of the run.
    assert abs(analysis_covered - controller_covered) <= 2, (analysis_covered, controller_covered, len(starts),
                                                             _disagreements(table, starts))
    # These runs load this machine's two cores (three switches, a cubic flow): most are untrusted, and
    # cover 80 % or more all the same. A miss is the prediction's unless the machine starved the switches
    # (a clean-clone suite under CPU steal: 18 of 23, 0.78): then skipped, with the measured reason.
    coverage = ctl["iteration_coverage_after_learning"]
    why = starved(json.loads((run / "fidelity.json").read_text())) if coverage < 0.8 else None
    if why:
        pytest.skip(f"covered {coverage:.0%} of the iterations after learning, but {why}")
    assert coverage >= 0.8
    # The forecasts are judged against the start they were for: errors of milliseconds, not a period.
    assert ctl["prediction_error_us"]["p50"] < PERIOD_MS * 1000 / 10


def _disagreements(table: pd.DataFrame, starts: list[dict]) -> list[tuple]:
    """The starts the two judge differently, for the failure's message: (the iteration's first packet at
    the port, µs; the analysis's verdict; the controller's report nearest it: its t_us and verdict)."""
    out = []
    for row in table.itertuples():
        near = min(starts, key=lambda e: abs(e["t_us"] - row.first_in_us))
        if bool(row.covered) != bool(near["covered"]) or abs(near["t_us"] - row.first_in_us) > 1000:
            out.append((int(row.first_in_us), bool(row.covered), near["t_us"], bool(near["covered"])))
    return out
