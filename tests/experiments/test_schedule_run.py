"""`schedule:` starting and stopping background flows in a real run (Mininet with Linux bridges, real
TCP): a flow named in a start waits for it, one named only in a stop runs from the start and ends
there, each change is an event at its time, and the flows' logs show it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import needs_mininet
from pcnlab.jsonlines import read_json_lines
from pcnlab.analysis.results import RunData, run_folders

pytestmark = [needs_mininet, pytest.mark.slow]

FILE = """
name: sched
topology: {kind: star, hosts: 3, bw: 20}
switch: bridge
mode: droptail
telemetry: off
jobs:
  - {name: gen, kind: generator, ps: h1, workers: [h2], burst_bytes: 20000, period_ms: 200, iterations: 40}
background:
  - {name: late, src: h2, dst: h1}
  - {name: early, src: h3, dst: h1}
schedule:
  - {at_s: 2, start: late}
  - {at_s: 5, stop: late}
  - {at_s: 3, stop: early}
duration_s: 8
warmup_s: 1
"""


def test_flows_start_and_stop_on_schedule(tmp_path):
    (tmp_path / "sched.yaml").write_text(FILE)
    done = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "run", "sched.yaml", "--no-plots"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = RunData(run_folders(tmp_path / "results" / "sched")[0])
    events = run.events
    changes = events[events["type"] == "schedule"].sort_values("host_ns")
    assert [(r.action, r.flow) for r in changes.itertuples()] == [("start", "late"), ("stop", "early"),
                                                                  ("stop", "late")]
    assert all(abs(r.applied_s - r.at_s) < 0.3 for r in changes.itertuples())
    jobs_start = events.loc[events["type"] == "job_started", "host_ns"].iloc[0]
    t = {r.action + "-" + r.flow: r.host_ns for r in changes.itertuples()}

    def received(flow):
        intervals = [r for r in read_json_lines(run.path / "flows" / f"{flow}.receiver.jsonl")[1]
                     if r["type"] == "interval" and r["bytes"] > 0]
        return intervals[0]["start_ns"], intervals[-1]["end_ns"]

    first, last = received("late")
    assert first >= t["start-late"] - 0.2e9 and last <= t["stop-late"] + 0.5e9     # only between its changes
    first, last = received("early")
    assert first < jobs_start and last <= t["stop-early"] + 0.5e9                   # from the warm-up to its stop
    assert set(json.loads((run.path / "background.json").read_text())) == {"late", "early"}
