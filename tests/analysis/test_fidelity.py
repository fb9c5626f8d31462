"""The fidelity check's figures on hand-made queue logs and event logs whose answers are known by
construction; the verdict of a hand-made run folder; the CPU sampler on real processes; the
`fidelity:` settings and the calibration warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pcnlab.controller.telemetry import COLUMNS
from pcnlab.errors import UsageError
from pcnlab.calibration import capacity_pps, load_calibration, save_calibration
from pcnlab.experiments.config import load_experiment
from pcnlab.analysis.fidelity import backlogged_rate, check_run, controller_lag, telemetry_loss, verdict_line
from pcnlab.experiments.sampler import CpuSampler, classify
from pcnlab.ledger import ProcessEntry, RunLedger, process_start_time

T0_NS = 10**12  # the host clock at the switch's time 0, in these hand-made logs


def _records(count: int, gap_us: int, left: int, start_us: int = 0, seq0: int = 0, port: int = 4, enq: int = 5,
             lag_us: int = 20, delay_us: int = 100, switch: str = "s1") -> list[dict]:
    """`count` departures from a port, `gap_us` apart, each leaving `left` packets queued behind it."""
    rows = []
    for i in range(count):
        egress = start_us + i * gap_us
        rows.append({"host_ns": T0_NS + egress * 1000 + 50_000, "switch": switch, "seq": seq0 + i, "port": port,
                     "class": "background", "job": 0, "ingress_us": egress - delay_us - lag_us, "egress_us": egress,
                     "enq_qdepth": enq, "deq_qdepth": left, "queue_delay_us": delay_us, "packet_length": 1514,
                     "payload_bytes": 1448, "src_host": 3, "dst_host": 4, "marked": 0, "dropped": 0,
                     "burst_start": 0, "in_window": 0, "ect": 1})
    return rows


def _frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(COLUMNS))


# --- the rate while backlogged -------------------------------------------------------------------

def test_rate_while_backlogged_is_departures_over_busy_time():
    busy = _records(2001, gap_us=1000, left=3)          # 1000 packets/s for 2 s
    busy[-1]["deq_qdepth"] = 0                          # the queue emptied after the last one
    idle = _records(10, gap_us=50_000, left=0, start_us=2_000_000 + 50_000, seq0=2001)
    got = backlogged_rate(_frame(busy + idle))
    assert got == {"pps": pytest.approx(1000.0), "seconds": pytest.approx(2.0), "intervals": 2000}


def test_a_slow_switch_shows_as_a_lower_rate():
    got = backlogged_rate(_frame(_records(1001, gap_us=1250, left=10)))
    assert got["pps"] == pytest.approx(800.0) and got["seconds"] == pytest.approx(1.25)


def test_sampled_telemetry_counts_every_nth_packet_and_needs_that_many_queued():
    # 1 record in 10 packets: records 10 ms apart are 10 departures at 1000 packets/s ...
    assert backlogged_rate(_frame(_records(201, gap_us=10_000, left=12)), every=10)["pps"] == pytest.approx(1000.0)
    # ... but with fewer than 10 left behind, the queue may have emptied in between: not counted.
    assert backlogged_rate(_frame(_records(201, gap_us=10_000, left=5)), every=10) == \
        {"pps": None, "seconds": 0.0, "intervals": 0}


def test_an_interval_across_a_lost_record_is_left_out():
    log = _frame(_records(2001, gap_us=1000, left=3))
    log = log[log["seq"] != 500]                        # the record of packet 500 never arrived
    with_seqs = backlogged_rate(log, 1, log["seq"].to_numpy())
    assert with_seqs["intervals"] == 1998 and with_seqs["pps"] == pytest.approx(1000.0)
    # Without the sequence numbers the gap would read as one slow departure.
    assert backlogged_rate(log)["pps"] == pytest.approx(1999 / 2.0)


# --- telemetry loss, controller lag ----------------------------------------------------

def test_telemetry_loss_does_not_count_records_that_arrived_late():
    from pcnlab.controller.collector import CollectorSummary

    # 1000 records; 25 never sent on (gaps), 10 of those arrive later, out of order: 15 never arrived.
    summary = CollectorSummary("s1")
    late = list(range(100, 110))
    for seq in range(1000):
        if seq in late or 500 <= seq < 515:
            continue
        summary.note(seq)
        if seq == 300:
            for s in late:
                summary.note(s)
    assert (summary.records, summary.lost, summary.out_of_order) == (985, 15, 10)
    assert telemetry_loss(summary.to_dict()) == {"records": 985, "lost": 15, "share": pytest.approx(15 / 1000)}


def test_controller_lag_runs_from_a_report_to_the_window_write_it_caused():
    events = pd.DataFrame([
        {"type": "report", "host_ns": 1_000_000_000, "switch": "s1", "port": 4, "job": 1, "t_us": 5000},
        {"type": "arm", "host_ns": 1_003_000_000, "switch": "s1", "port": 4, "job": 1, "decided_us": 5000,
         "write_ms": 1.5},
        {"type": "report", "host_ns": 2_000_000_000, "switch": "s1", "port": 4, "job": 1, "t_us": 905_000},
        {"type": "arm", "host_ns": 2_007_000_000, "switch": "s1", "port": 4, "job": 1, "decided_us": 905_000,
         "write_ms": 2.5},
        # a timer's write, caused by no report
        {"type": "arm", "host_ns": 2_500_000_000, "switch": "s1", "port": 4, "job": 1, "decided_us": 1_400_000,
         "write_ms": 3.5},
    ])
    got = controller_lag(events)
    assert got["lag_ms"]["n"] == 2 and got["lag_ms"]["min"] == pytest.approx(3.0) and got["lag_ms"]["max"] == pytest.approx(7.0)
    assert got["write_ms"]["n"] == 3 and got["write_ms"]["p50"] == pytest.approx(2.5)


# --- the verdict of a run folder -------------------------------------------------------------------------

def _run_folder(path: Path, fidelity: dict | None = None, steal: float | None = None) -> Path:
    """A run whose s1 port 4 (10 Mbit/s: 826 packets/s) sent one packet per 1514 µs while backlogged
    (660.5 packets/s: 80 %), BMv2 s1 at 95 % of a core, the machine 2 % idle, 20 of 1000 telemetry
    records lost, and a window written 80 ms after its report."""
    path.mkdir(parents=True)
    (path / "status.json").write_text('{"status": "finished"}')
    config = {"mode": {"kind": "pcn"}, "telemetry": {"every": 1}}
    if fidelity is not None:
        config["fidelity"] = fidelity
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    (path / "endpoints.json").write_text(json.dumps([{"name": "s1", "queues": [
        {"port": 4, "rate_pps": 826, "depth_pkts": 60}, {"port": 1, "rate_pps": 1651, "depth_pkts": 60}]}]))
    busy = _records(1322, gap_us=1514, left=4, enq=3)
    lag = _records(200, gap_us=1000, left=0, enq=0, port=1, lag_us=40, delay_us=0, start_us=2_100_000, seq0=1322)
    _frame(busy + lag).to_csv(path / "queue-s1.csv", index=False)
    (path / "queue-s1.summary.json").write_text(json.dumps({"switch": "s1", "records": 980, "lost": 20,
                                                            "out_of_order": 0}))
    events = [{"type": "anchor", "host_ns": T0_NS, "wall_time": 0},
              {"type": "report", "host_ns": T0_NS + 10**9, "switch": "s1", "port": 4, "job": 1, "t_us": 1_000_000},
              {"type": "arm", "host_ns": T0_NS + 10**9 + 80_000_000, "switch": "s1", "port": 4, "job": 1,
               "decided_us": 1_000_000, "write_ms": 1.2}]
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    cpu = []
    for i in range(1, 9):
        t = T0_NS + i * 250_000_000
        cpu.append({"host_ns": t, "pid": 10, "role": "bmv2", "name": "s1", "label": "simple_switch_grpc s1",
                    "cpu": 0.95, "top_thread": 0.4, "wait": 0.3})
        cpu.append({"host_ns": t, "role": "machine", "name": "machine", "label": "all cores", "cpu": 1.96,
                    "idle": 0.02, "load1": 4.2, **({"steal": steal, "runnable": 5} if steal is not None else {})})
    pd.DataFrame(cpu).to_csv(path / "cpu.csv", index=False)
    return path


def test_a_run_that_did_not_keep_up_is_untrusted_with_its_reasons(tmp_path):
    out = check_run(_run_folder(tmp_path / "run"), calibration={"idle_lag_us": {"p95": 50.0}})
    assert json.loads((tmp_path / "run" / "fidelity.json").read_text()) == out
    assert out["trusted"] is False
    assert out["reasons"][0] == ("s1 port 4 achieved 80 % of its 10 Mbit/s while backlogged (661 of 826 packets/s "
                                 "over 2.0 s): BMv2 s1 at 95 % of a core, its threads waiting for a CPU up to 30 % "
                                 "of the time, machine 2 % idle (p5)")
    rest = " | ".join(out["reasons"][1:])
    assert "BMv2 s1 used 95 % of a core" in rest and "idle" not in rest.split(":")[0]
    # A busy machine alone is a warning: the switches' own figures say whether the emulation kept up.
    assert out["warnings"] == ["the machine was 2 % idle at its busiest (p5), load average up to 4.2"]
    assert "s1 lost 2 % of its telemetry records (20 of 1000" in rest
    assert "the controller took 80 ms from a burst report to its window write" in rest
    checks = out["checks"]
    port4 = next(p for p in checks["ports"] if p["port"] == 4)
    assert port4["bottleneck"] and port4["achieved_pps"] == pytest.approx(1e6 / 1514)
    assert port4["share"] == pytest.approx(1e6 / 1514 / 826)
    assert checks["lag_us"]["s1"]["p50"] == 40.0 and checks["lag_us"]["s1"]["limit_us"] == 250.0
    assert checks["lag_us"]["s1"]["ok"] and checks["cpu"]["bmv2"]["s1"]["p95"] == pytest.approx(0.95)
    assert verdict_line(out).startswith("UNTRUSTED: s1 port 4 achieved 80 %") and "more in fidelity.json" in verdict_line(out)


def test_thresholds_come_from_the_runs_config(tmp_path):
    relaxed = {"min_rate_pct": 75, "max_bmv2_cpu_pct": 99, "min_idle_pct": 1, "max_telemetry_loss_pct": 5,
               "max_controller_lag_ms": 100}
    out = check_run(_run_folder(tmp_path / "run", relaxed), calibration={}, write=False)
    assert out["trusted"] is True and out["reasons"] == []
    assert out["checks"]["thresholds"]["min_rate_pct"] == 75
    assert out["checks"]["idle_lag_p95_us"]["source"] == "default (not calibrated)"
    # A lag over max_lag_factor x the calibrated idle value is a reason too.
    strict = check_run(_run_folder(tmp_path / "run2", {**relaxed, "max_lag_factor": 2}),
                       calibration={"idle_lag_us": {"p95": 10.0}}, write=False)
    assert strict["reasons"] == ["s1 took 40 µs to process a packet (p95, packets that met an empty queue), 4 x its "
                                 "idle 10 µs (at most 2 x): BMv2 s1 at 95 % of a core, its threads waiting for a "
                                 "CPU up to 30 % of the time, machine 2 % idle (p5)"]


def test_steal_is_recorded_and_named_in_the_findings_it_took_part_in(tmp_path):
    stolen = check_run(_run_folder(tmp_path / "stolen", steal=0.12), calibration={}, write=False)
    assert stolen["checks"]["cpu"]["steal"]["p95"] == pytest.approx(0.12)
    assert stolen["checks"]["cpu"]["runnable"]["max"] == 5
    assert stolen["reasons"][0].endswith("machine 2 % idle (p5), CPU steal up to 12 % of the machine (p95: its "
                                         "hypervisor ran something else)")
    # No steal (bare metal), or a cpu.csv from before steal was sampled: not a word of it.
    for name, steal in (("none", 0.0), ("old", None)):
        out = check_run(_run_folder(tmp_path / name, steal=steal), calibration={}, write=False)
        assert not any("steal" in r for r in out["reasons"]), out["reasons"]
        assert (out["checks"]["cpu"]["steal"] is None) == (steal is None)


def test_the_calibration_that_judged_a_run_is_the_one_it_recorded(tmp_path):
    path = _run_folder(tmp_path / "run")
    recorded = {"path": "/var/lib/pcnlab/calibration.json", "kind": "quick", "measured": "2026-11-28T10:00:00",
                "idle_lag_us": {"p95": 8.0}, "forward_pps": {"off": 9000.0}}
    (path / "calibration.json").write_text(json.dumps(recorded))
    out = check_run(path, write=False)
    assert out["checks"]["calibration"]["source"] == recorded["path"]
    assert out["checks"]["calibration"]["measured"] == recorded["measured"]
    assert out["checks"]["calibration"]["idle_lag_p95_us"] == 8.0
    assert out["checks"]["lag_us"]["s1"]["limit_us"] == 40.0      # 5 x the recorded 8 µs, whatever this machine's


# --- the sampler ------------------------------------------------------------------------------------------

def test_labels_become_roles_and_short_names():
    assert classify("simple_switch_grpc s2") == ("bmv2", "s2")
    assert classify("job gen: rank 1 (worker1 on h2)") == ("worker", "gen/worker1@h2")
    assert classify("job train: rank 0 (ps0 on h1)") == ("ps", "train/ps0@h1")
    assert classify("job gen: ps on h4") == ("ps", "gen/ps@h4")
    assert classify("background flows background: h3-h4.sender on h3") == ("background", "h3-h4.sender@h3")
    assert classify("collector for s1") == ("collector", "s1")
    assert classify("iperf3 server on h2") == ("other", "iperf3 server on h2")


def test_sampler_measures_the_ledgers_processes_and_never_a_recycled_pid(tmp_path):
    ledger = RunLedger("sampler-test", tmp_path / "run", state_dir=tmp_path / "state")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        ledger.add_process(hog.pid, "simple_switch_grpc s1")
        # The same PID recorded with another start time: an earlier process whose PID was reused.
        ledger.data.processes.append(ProcessEntry(hog.pid, process_start_time(hog.pid) - 1, "simple_switch_grpc s9"))
        sampler = CpuSampler(ledger, tmp_path / "cpu.csv", period_s=0.25).start()
        time.sleep(3)
        cost = sampler.stop()
    finally:
        hog.kill()
        hog.wait()
    cpu = pd.read_csv(tmp_path / "cpu.csv")
    s1 = cpu[cpu["name"] == "s1"]
    assert len(s1) >= 8 and s1["cpu"].median() > 0.5 and s1["top_thread"].median() > 0.5
    assert cpu[cpu["name"] == "s9"].empty
    machine = cpu[cpu["role"] == "machine"]
    assert len(machine) == len(s1) and machine["idle"].between(0, 1).all() and (machine["load1"] >= 0).all()
    assert machine["steal"].between(0, 1).all() and (machine["runnable"] >= 1).all()   # the sampler itself runs
    assert machine["cpu"].median() > 0.5      # the hog is part of the machine's busy time
    # Cheap: the sampling thread's own CPU time is a small fraction of a core.
    assert cost.samples >= 8 and cost.share < 0.02, cost


WAKER = """
import os, time
os.nice(19)
while True:
    time.sleep(0.0005)
    end = time.perf_counter() + 0.00005
    while time.perf_counter() < end:
        pass
"""


def test_the_wait_per_wake_is_what_the_machine_adds_to_a_switch_that_sleeps_between_packets(tmp_path):
    """A process that wakes every 0.5 ms, pinned to one core, for 2 s alone and then 2 s beside a CPU hog
    on that core: the sampler's wake_us (its threads' mean wait for a CPU each time they ran) grows."""
    core = min(os.sched_getaffinity(0))
    ledger = RunLedger("wake-test", tmp_path / "run", state_dir=tmp_path / "state")
    waker = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", WAKER])
    hog = None
    try:
        ledger.add_process(waker.pid, "simple_switch_grpc s1")
        sampler = CpuSampler(ledger, tmp_path / "cpu.csv", period_s=0.25).start()
        time.sleep(2)
        beside = time.monotonic_ns()
        hog = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"])
        time.sleep(2)
        sampler.stop()
    finally:
        for proc in (waker, hog):
            if proc is not None:
                proc.kill()
                proc.wait()
    cpu = pd.read_csv(tmp_path / "cpu.csv").dropna(subset=["wake_us"])
    alone, with_hog = cpu[cpu["host_ns"] < beside]["wake_us"], cpu[cpu["host_ns"] > beside + 300_000_000]["wake_us"]
    assert len(alone) >= 5 and len(with_hog) >= 5 and (alone >= 0).all()
    assert with_hog.median() > alone.median(), (alone.tolist(), with_hog.tolist())


# --- settings and calibration ------------------------------------------------------------------------------

EXPERIMENT = """\
name: fid
topology: {kind: star, hosts: 3, bw: 100}
jobs:
  - {kind: generator, ps: h1, workers: 2}
"""


def test_fidelity_settings_are_read_checked_and_not_swept(tmp_path):
    path = tmp_path / "fid.yaml"
    path.write_text(EXPERIMENT + "fidelity: {min_rate_pct: 90}\n")
    run = load_experiment(path, ["fidelity.max_lag_factor=8"]).runs()[0]
    assert run.fidelity.min_rate_pct == 90 and run.fidelity.max_lag_factor == 8
    assert run.to_dict()["fidelity"]["min_idle_pct"] == 0.0
    path.write_text(EXPERIMENT + "fidelity: {min_rate_pct: 95%}\n")
    with pytest.raises(UsageError, match=r"fid.yaml:5: fidelity.min_rate_pct: expected a number in percent.*"
                                         r"write the number alone"):
        load_experiment(path)
    path.write_text(EXPERIMENT + "fidelity: {min_rate_pct: 120}\n")
    with pytest.raises(UsageError, match="must be at most 100"):
        load_experiment(path)
    path.write_text(EXPERIMENT)
    with pytest.raises(UsageError, match="cannot be swept"):
        load_experiment(path, ["sweep.fidelity.min_rate_pct=[90, 95]"])


def test_capacity_with_sampled_telemetry_lies_between_the_two_measured_figures():
    calibration = {"forward_pps": {"off": 5000.0, "every1": 3000.0}}
    assert capacity_pps(calibration, None) == 5000.0 and capacity_pps(calibration, 1) == pytest.approx(3000.0)
    assert capacity_pps(calibration, 10) == pytest.approx(1 / (1 / 5000 + (1 / 3000 - 1 / 5000) / 10))


def test_dry_run_says_once_that_runs_will_not_keep_up_with_the_calibration(tmp_path):
    path = tmp_path / "fid.yaml"
    path.write_text(EXPERIMENT)
    calibration_file = tmp_path / "calibration.json"
    save_calibration({"forward_pps": {"off": 9000.0, "every1": 6000.0}}, calibration_file)
    assert load_calibration(calibration_file)["forward_pps"]["every1"] == 6000.0
    env = dict(os.environ, PCNLAB_CALIBRATION=str(calibration_file))
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "run", str(path), "--dry-run"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout.splitlines()
    assert said[0].startswith(f"calibration: full calibration {calibration_file}")
    verdicts = [line for line in said if line.startswith("will not keep up here")]
    assert len(verdicts) == 1 and "the 6,000 one BMv2 switch forwards here" in verdicts[0], said
    assert "--set time_scale=" in verdicts[0]


def test_a_background_flow_that_lost_its_ecn_is_a_reason(tmp_path):
    """A sender asked for ECN whose connection went without it (its SYN was resent, and Linux then drops
    ECN unless told not to): its packets are non-ECT, and the run is not the experiment asked for."""
    from pcnlab.jsonlines import JsonLines

    path = _run_folder(tmp_path / "run", {"min_rate_pct": 75, "max_bmv2_cpu_pct": 99, "max_telemetry_loss_pct": 5,
                                          "max_controller_lag_ms": 100})
    config = yaml.safe_load((path / "config.yaml").read_text())
    config["background"] = [{"name": "h4-h1", "ecn": True}, {"name": "h5-h1", "ecn": True},
                            {"name": "h6-h1", "ecn": False}]
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    (path / "flows").mkdir()
    for flow, ecn in (("h4-h1", True), ("h5-h1", False), ("h6-h1", False)):
        log = JsonLines(path / "flows" / f"{flow}.sender.jsonl")
        log.write("connected", cc="cubic", ecn=ecn)
        log.close()
    out = check_run(path, calibration={}, write=False)
    assert out["checks"]["ecn"] == {"asked": ["h4-h1", "h5-h1"], "without": ["h5-h1"]}
    assert out["reasons"] == ["background flow h5-h1 asked for ECN but connected without it: non-ECT traffic "
                              "no mode marks"]
