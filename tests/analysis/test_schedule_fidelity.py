"""A port whose rate the run's schedule changed is judged against the rate in force when its packets
were queued (hand-made queue and event logs whose answers are known by construction)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pcnlab.controller.telemetry import COLUMNS
from pcnlab.analysis.fidelity import check_run
from pcnlab.analysis.results import rate_timeline

T0_NS = 10**12
FAST, SLOW = 826, 165          # 10 and 2 Mbit/s in full frames


def _records(count: int, gap_us: int, start_us: int, seq0: int) -> list[dict]:
    """Departures `gap_us` apart from s1 port 4, each leaving 4 packets queued behind it."""
    rows = []
    for i in range(count):
        egress = start_us + i * gap_us
        rows.append({"host_ns": T0_NS + egress * 1000 + 50_000, "switch": "s1", "seq": seq0 + i, "port": 4,
                     "class": "ddl", "job": 1, "ingress_us": egress - 4 * gap_us - 20, "egress_us": egress,
                     "enq_qdepth": 5, "deq_qdepth": 4, "queue_delay_us": 4 * gap_us, "packet_length": 1514,
                     "payload_bytes": 1448, "src_host": 2, "dst_host": 1, "marked": 0, "dropped": 0,
                     "burst_start": 0, "in_window": 0, "ect": 1})
    return rows


def _run(path: Path, scheduled: bool) -> Path:
    """2 s at 10 Mbit/s, then (from switch time 2.1 s) 2 s at 2 Mbit/s, each rate held exactly."""
    path.mkdir(parents=True)
    (path / "status.json").write_text('{"status": "finished"}')
    (path / "config.yaml").write_text(yaml.safe_dump({"mode": {"kind": "ecn"}, "telemetry": {"every": 1}}))
    (path / "endpoints.json").write_text(json.dumps([{"name": "s1", "ports": {"4": "h1"},
                                                      "queues": [{"port": 4, "rate_pps": FAST, "depth_pkts": 60}]}]))
    fast = _records(2 * FAST, 1_000_000 // FAST, 0, 0)
    fast[-1]["deq_qdepth"] = 0
    slow = _records(2 * SLOW, 1_000_000 // SLOW, 2_200_000, len(fast))
    pd.DataFrame(fast + slow, columns=list(COLUMNS)).to_csv(path / "queue-s1.csv", index=False)
    (path / "queue-s1.summary.json").write_text(json.dumps({"switch": "s1", "records": len(fast) + len(slow),
                                                            "lost": 0, "out_of_order": 0}))
    events = [{"type": "anchor", "host_ns": T0_NS, "wall_time": 0}]
    if scheduled:
        events.append({"type": "schedule", "host_ns": T0_NS + 2_100_000_000, "action": "rate", "at_s": 2.0,
                       "applied_s": 2.0, "switch": "s1", "port": 4, "peer": "h1", "mbps": 2.0, "rate_pps": SLOW})
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_the_rate_in_force_is_read_from_the_schedule_events():
    events = pd.DataFrame([{"type": "schedule", "host_ns": 5, "action": "rate", "switch": "s1", "port": 4,
                            "rate_pps": SLOW},
                           {"type": "schedule", "host_ns": 9, "action": "start", "flow": "bulk"},
                           {"type": "schedule", "host_ns": 7, "action": "rate", "switch": "s1", "port": 4,
                            "rate_pps": FAST}])
    assert rate_timeline(events, {("s1", 4): FAST, ("s1", 1): 1651}) == {
        ("s1", 4): [(None, FAST), (5, SLOW), (7, FAST)], ("s1", 1): [(None, 1651)]}
    assert rate_timeline(pd.DataFrame(), {("s1", 4): FAST}) == {("s1", 4): [(None, FAST)]}


def test_each_step_is_judged_against_its_own_rate(tmp_path):
    out = check_run(_run(tmp_path / "run", scheduled=True), calibration={}, write=False)
    steps = [p for p in out["checks"]["ports"] if p["port"] == 4]
    assert [p["rate_pps"] for p in steps] == [FAST, SLOW]
    assert all(p["bottleneck"] and p["ok"] for p in steps)
    assert steps[0]["share"] == pytest.approx(1e6 / (1_000_000 // FAST) / FAST, rel=1e-3)
    assert steps[1]["share"] == pytest.approx(1e6 / (1_000_000 // SLOW) / SLOW, rel=1e-3)
    assert out["trusted"] is True


def test_without_the_schedule_the_slow_step_reads_as_a_switch_falling_short(tmp_path):
    out = check_run(_run(tmp_path / "run", scheduled=False), calibration={}, write=False)
    assert out["trusted"] is False
    assert out["reasons"][0].startswith("s1 port 4 achieved ") and "of its 10 Mbit/s while backlogged" in out["reasons"][0]
