"""Per-iteration metrics on a hand-made run folder whose answers are known: the queue log, the workers'
logs, the network description and the controller's events are written here, then read back through
pcnlab.analysis.results and measured by analysis/iterations.py and analyse_run."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from pcnlab.controller.telemetry import COLUMNS
from pcnlab.analysis import iterations as it
from pcnlab.analysis.metrics import analyse_run
from pcnlab.analysis.results import SwitchClock, load_run
from pcnlab.analysis.traffic_stats import theil_sen

OFFSET_NS = 5_000_000_000      # host clock = switch clock + this (plus the collector's delay)
PORT = 3                       # s1's port towards the PS h3
RATE_PPS = 1000                # 1 ms a packet
ITER_US = (100_000, 300_000, 500_000)   # each iteration starts here (switch clock)


def _row(seq, t_in, t_out, cls, src, dst, enq, payload, length=1514, delay_ns=20_000, job=None, announce=0):
    return {"host_ns": OFFSET_NS + t_out * 1000 + delay_ns, "switch": "s1", "seq": seq, "port": PORT,
            "class": cls, "job": job if job is not None else (1 if cls == "ddl" else 0), "ingress_us": t_in,
            "egress_us": t_out, "enq_qdepth": enq, "deq_qdepth": max(enq - 1, 0), "queue_delay_us": t_out - t_in,
            "packet_length": length, "payload_bytes": payload, "src_host": src, "dst_host": dst, "marked": 0,
            "dropped": 0, "burst_start": 0, "in_window": 0, "ect": 1, "announce": announce}


@pytest.fixture
def run_dir(tmp_path):
    """Three iterations of a two-worker job (h1, h2 -> PS h3) through s1 port 3, behind background from
    h4; each iteration: 5 data packets per worker, 1 ms apart, plus pure ACKs that must not count."""
    run = tmp_path / "mode=pcn"
    run.mkdir()
    rows, seq = [], 0
    # Background throughout: one packet every 2 ms, 1000 bytes.
    for t in range(0, 700_000, 2000):
        rows.append(_row(seq, t, t + 500, "background", 4, 3, 10, 946, length=1000, delay_ns=20_000 + t % 7000))
        seq += 1
    expected = []
    for k, start in enumerate(ITER_US):
        queue_at = [20 - 5 * k + i for i in range(10)]   # the queue each data packet meets: start 20, 15, 10
        first_in = start + 300                            # the first packet reaches the switch 300 us in
        for i in range(10):
            src = 1 if i % 2 == 0 else 2
            t_in = first_in + i * 1000
            rows.append(_row(seq, t_in, t_in + 40_000, "ddl", src, 3, queue_at[i], 1448))
            seq += 1
        rows.append(_row(seq, first_in - 100, first_in + 39_000, "ddl", 1, 3, 99, 0, length=66))  # an ACK
        # A PCN-START for the next iteration, 150 ms later: a datagram, but no part of this iteration.
        rows.append(_row(seq + 1, first_in + 150_000, first_in + 151_000, "ddl", 2, 3, 99, 70, length=112,
                         announce=1))
        seq += 2
        expected.append({"start_queue": queue_at[0], "max_queue": max(queue_at), "first_in": first_in,
                         "last_out": first_in + 9 * 1000 + 40_000})
    rows.sort(key=lambda r: r["ingress_us"])
    with open(run / "queue-s1.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (run / "queue-s1.summary.json").write_text(json.dumps({"switch": "s1", "records": len(rows), "lost": 0}))
    hosts = {f"h{n}": {"ip": f"10.0.0.{n}"} for n in range(1, 5)}
    (run / "network.json").write_text(json.dumps({"hosts": hosts}))
    (run / "endpoints.json").write_text(json.dumps([{"name": "s1", "queues": [{"port": PORT, "rate_pps": RATE_PPS}]}]))
    (run / "status.json").write_text(json.dumps({"status": "finished"}))
    config = {"run": "mode=pcn", "sweep": {"mode": "pcn"}, "mode": {"kind": "pcn", "K": 40, "K_pre": 10},
              "telemetry": {"every": 1},
              "jobs": [{"id": 1, "name": "gen", "kind": "generator", "ps": ["h3"], "workers": ["h1", "h2"],
                        "burst_gap_us": 10_000}]}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    jobs = run / "jobs" / "gen"
    jobs.mkdir(parents=True)
    for rank, host in enumerate(("h1", "h2")):
        lines = [{"type": "anchor", "host_ns": 0, "wall_time": 0, "job": "gen", "role": "worker", "rank": rank,
                  "host": host}]
        for k, start in enumerate(ITER_US):
            comm = OFFSET_NS + start * 1000   # the worker starts sending at `start`
            lines.append({"type": "iteration", "iter": k, "compute_start_ns": comm - 1000, "compute_end_ns": comm,
                          "comm_start_ns": comm, "comm_end_ns": comm + 60_000_000})
        (jobs / f"worker{rank}-{host}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    # The controller armed a window before iterations 1 and 2; the one for iteration 2 opens too late.
    events = [{"type": "anchor", "host_ns": 0, "wall_time": 0},
              {"type": "arm", "host_ns": OFFSET_NS + 250_000_000, "switch": "s1", "port": PORT, "job": 1,
               "start_us": 290_000, "end_us": 310_000, "write_ms": 1.0},
              {"type": "arm", "host_ns": OFFSET_NS + 450_000_000, "switch": "s1", "port": PORT, "job": 1,
               "start_us": 500_400, "end_us": 520_000, "write_ms": 1.0}]
    (run / "events.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return run, expected


def test_switch_clock_is_the_lower_envelope_of_the_collector_stamps():
    egress = pd.Series(range(0, 5_000_000, 1000))
    delay = 20_000 + (egress % 7) * 3000           # the collector's delay: 20 us at best
    clock = SwitchClock.fit("s1", (OFFSET_NS + egress * 1000 + delay).to_numpy(), egress.to_numpy())
    assert clock.to_host_ns(1_000_000) == pytest.approx(OFFSET_NS + 1_000_000_000 + 20_000, abs=1000)
    assert clock.error_us < 1 and clock.to_switch_us(clock.to_host_ns(123_456)) == pytest.approx(123_456)


def test_a_second_in_which_the_collector_was_held_up_does_not_tilt_the_clock():
    """Over 40 s, the collector fell 30 ms behind during the last second (the machine was busy): the
    map still puts every packet within a few microseconds of its true time."""
    egress = pd.Series(range(0, 40_000_000, 1000))
    delay = 20_000 + (egress % 7) * 3000
    delay[egress >= 39_000_000] += 30_000_000
    clock = SwitchClock.fit("s1", (OFFSET_NS + egress * 1000 + delay).to_numpy(), egress.to_numpy())
    for t in (0, 20_000_000, 39_500_000):
        assert clock.to_host_ns(t) == pytest.approx(OFFSET_NS + t * 1000 + 20_000, abs=5_000)


def test_iterations_at_the_bottleneck_have_the_known_answers(run_dir):
    path, expected = run_dir
    run = load_run(path)
    attributed = it.attribute(run.queue, run.iterations, run.jobs)
    assert (attributed["payload_bytes"] > 0).all()           # the ACKs are not data ...
    assert (attributed["announce"] == 0).all()               # ... nor are the announcements
    assert it.bottleneck(attributed) == ("s1", PORT)
    table = it.per_iteration(attributed, run.queue, ("s1", PORT), RATE_PPS)
    assert list(table["iteration"]) == [0, 1, 2] and list(table["workers"]) == [2, 2, 2]
    for row, want in zip(table.itertuples(), expected):
        assert row.start_queue == want["start_queue"] and row.max_queue == want["max_queue"]
        assert row.first_in_us == want["first_in"] and row.last_out_us == want["last_out"]
        assert row.packets == 10 and row.bytes == 10 * 1514
        bct_us = want["last_out"] - want["first_in"]
        assert row.bct_ms == pytest.approx(bct_us / 1000)
        assert row.ideal_ms == pytest.approx(10.0)              # 10 frames at 1000 packets/s
        assert row.ddl_mbps == pytest.approx(10 * 1514 * 8 / bct_us)
        # Background: 1000 bytes every 2 ms leaves the port (500 us after arrival) inside the BCT.
        inside = sum(1 for t in range(0, 700_000, 2000) if want["first_in"] <= t + 500 <= want["last_out"])
        assert row.background_mbps == pytest.approx(inside * 1000 * 8 / bct_us)


def test_coverage_counts_only_windows_written_before_the_first_packet(run_dir):
    path, _ = run_dir
    metrics = analyse_run(path, plots=False)
    table = pd.read_csv(path / "iterations.csv")
    # Iteration 0: no window; 1: window [290, 310) ms armed at 250 ms holds 300.3 ms; 2: its window
    # opens at 500.4 ms, after the first packet (500.3 ms).
    assert list(table["covered"]) == [False, True, False]
    assert metrics["controller"]["iteration_coverage"] == pytest.approx(1 / 3)
    span_us = 698_000   # the port's first and last arrival: background at 0 and 698 ms
    assert metrics["controller"]["window_open_share"] == pytest.approx((20_000 + 19_600) / span_us, rel=1e-3)
    assert metrics["iterations"]["count"] == metrics["iterations"]["expected"] == 3
    assert metrics["iterations"]["consistent"]
    assert metrics["iterations"]["start_queue_pkts"]["mean"] == pytest.approx(15)
    text = (path / "metrics.json").read_text()
    assert "NaN" not in text and json.loads(text)["bottleneck"]["rate_pps"] == RATE_PPS


def test_a_window_removed_on_the_report_of_its_start_covered_that_start():
    """The controller removes a window on the report of the start it was for (an awaited window when
    the start comes; an unconfident one), and decides it at that start's switch time: the window was in
    force when the start began, as the controller's own verdict says."""
    table = pd.DataFrame({"first_in_us": [300_300], "first_in_ns": [0]})

    def windows(removed_us: float) -> pd.DataFrame:
        return pd.DataFrame([{"switch": "s1", "port": PORT, "job": 1, "start_us": 290_000, "end_us": 310_000,
                              "armed_ns": 0, "removed_ns": 0, "armed_us": 250_000.0, "removed_us": removed_us}])

    assert list(it.covered(table, windows(300_300.0), ("s1", PORT))) == [True]
    assert list(it.covered(table, windows(300_299.0), ("s1", PORT))) == [False]
    assert list(it.covered(table, windows(float("nan")), ("s1", PORT))) == [True]


def test_the_window_a_start_had_is_the_one_in_force_open_longest():
    """The controller judges a start's lead by the window in force for it that had been open longest
    (windows.py); the analysis finds the same one, and its lead, for `bench/lead_offline.py`."""
    table = pd.DataFrame({"first_in_us": [300_300, 400_000], "first_in_ns": [0, 0]})
    windows = pd.DataFrame([
        {"switch": "s1", "port": PORT, "job": 1, "start_us": 270_000, "end_us": 301_000, "armed_ns": 0,
         "removed_ns": 0, "armed_us": 250_000.0, "removed_us": float("nan"), "lead_us": 25_000.0},
        {"switch": "s1", "port": PORT, "job": 1, "start_us": 290_000, "end_us": 310_000, "armed_ns": 0,
         "removed_ns": 0, "armed_us": 250_000.0, "removed_us": float("nan"), "lead_us": 8_000.0},
        {"switch": "s1", "port": PORT, "job": 1, "start_us": 260_000, "end_us": 320_000, "armed_ns": 0,
         "removed_ns": 0, "armed_us": 300_301.0, "removed_us": float("nan"), "lead_us": 40_000.0}])  # written late
    found = it.covering(table, windows, ("s1", PORT))
    assert found.start_us.iloc[0] == 270_000 and found.lead_us.iloc[0] == 25_000
    assert found.iloc[1].isna().all() and list(it.covered(table, windows, ("s1", PORT))) == [True, False]
    arm = {"type": "arm", "host_ns": 1, "switch": "s1", "port": PORT, "job": 1, "start_us": 270_000,
           "end_us": 301_000, "decided_us": 250_000, "write_ms": 1.0, "lead_us": 25_000}
    assert it.window_intervals(pd.DataFrame([arm])).lead_us.tolist() == [25_000.0]   # the lead it was planned with


def test_the_controller_counts_no_start_before_the_jobs_first_iteration():
    """A PyTorch job's set-up exchanges reach the PS's port as bursts the switch reports before
    iteration 0: the controller judged them (uncovered), but they are no iteration, so its own coverage
    leaves them out as the analysis does; another port's and another job's reports are their own."""
    def report(t_us, covered, job=1, port=PORT):
        return {"type": "report", "switch": "s1", "port": port, "job": job, "t_us": t_us, "kind": "match",
                "covered": covered}

    events = pd.DataFrame([report(50_000, False), report(80_000, False), report(100_000, True),
                           report(300_000, True), report(500_000, False), report(60_000, False, job=2),
                           report(90_000, False, port=PORT + 1)])
    table = pd.DataFrame({"job": [1, 1, 1], "iteration": [0, 1, 2], "first_in_us": list(ITER_US)})
    assert it.controller_coverage(events, ("s1", PORT)) == (2, 6)
    assert it.controller_coverage(events, ("s1", PORT), table) == (2, 4)   # job 2 logged no iteration: kept


def test_a_missing_iteration_at_the_bottleneck_is_reported(run_dir):
    path, _ = run_dir
    rows = list(csv.DictReader(open(path / "queue-s1.csv")))
    kept = [r for r in rows if not (r["class"] == "ddl" and 300_000 <= int(r["ingress_us"]) < 400_000)]
    with open(path / "queue-s1.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(kept)
    metrics = analyse_run(path, plots=False)
    # 2 seen of 3 is within the cut ends' tolerance; the note appears only beyond it.
    assert metrics["iterations"]["count"] == 2 and metrics["iterations"]["expected"] == 3
    assert it.count_check(pd.DataFrame({"job": [1], "iteration": [0]}), {1: 3}) == {
        "count": 1, "expected": 3, "consistent": False,
        "note": "job 1: 1 iterations at the bottleneck, 3 in the workers' logs"}


def test_the_clocks_line_is_scipys_theil_sen():
    """traffic_stats.theil_sen (hand-written: scipy.stats' import cost each run 1.3 s) gives what
    scipy.stats.theilslopes does: on a line with outliers, on ties in x, and on points out of order."""
    from scipy.stats import theilslopes

    rng = np.random.default_rng(47)
    x = np.sort(rng.uniform(0, 40e9, 60))
    y = 20_000 + 3e-6 * x + rng.normal(0, 500, 60)
    y[-3:] += 3e7                                    # seconds in which the collector was held up
    for xs, ys in ((x, y), (np.round(x / 1e9) * 1e9, y), (x[::-1], y[::-1]), (x[:2], y[:2])):
        slope, intercept = theil_sen(ys, xs)
        expected = theilslopes(ys, xs)
        assert (slope, intercept) == (pytest.approx(expected[0], rel=1e-12), pytest.approx(expected[1], rel=1e-12))
