"""The fidelity check on real runs (`pcnlab run` on BMv2), judged against this machine's own calibration
(measured once per session: conftest.machine_calibration): a light run is trusted; the same run with its
switches starved of CPU (pinned to one core beside CPU hogs of higher priority) is not, and says so
about the switches, not only about the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import STARVED_WAIT, needs_bmv2, require_trusted, starved

pytestmark = [needs_bmv2, pytest.mark.slow]

LIGHT = """
name: light
topology: {kind: dumbbell, left: 3, right: 1, bw: 20, bottleneck_bw: 10, queue: 60}
mode: {kind: ecn, K: 20}
telemetry: 1
jobs:
  - {name: gen, kind: generator, pattern: ps, ps: h4, workers: [h1, h2], burst_bytes: 30000, period_ms: 300,
     iterations: 40, burst_gap_us: 20000}
background:
  - {src: h3, dst: h4}
duration_s: 10
warmup_s: 1
"""

HOG = "while True: pass"


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    spec = tmp_path / "light.yaml"
    spec.write_text(LIGHT)
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "pcnlab.app.cli", "run", str(spec), "--results", str(results), "--no-plots"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, results / "light"


def _verdict(experiment: Path) -> tuple[Path, dict]:
    run = next(experiment.glob("latest/run"))
    return run, json.loads((run / "fidelity.json").read_text())


def test_light_run_is_trusted(tmp_path, machine_calibration):
    proc, experiment = _start(tmp_path)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "calibrating" not in out          # the session's calibration belongs to this machine: used as it is
    run, fidelity = _verdict(experiment)
    require_trusted(fidelity)
    assert "fidelity: trusted" in out
    checks = fidelity["checks"]
    # Judged by this machine's measure, recorded beside the verdict.
    assert json.loads((run / "calibration.json").read_text())["measured"] == machine_calibration["measured"]
    assert checks["calibration"]["source"] == machine_calibration["path"]
    assert checks["calibration"]["idle_lag_p95_us"] == machine_calibration["idle_lag_us"]["p95"]
    assert checks["lag_us"]["s1"]["limit_us"] == pytest.approx(5 * machine_calibration["idle_lag_us"]["p95"])
    assert checks["cpu"]["steal"]["n"] > 0 and checks["cpu"]["runnable"]["max"] >= 1
    assert checks["cpu"]["bmv2"]["s1"]["wake_us"]["n"] > 0 and checks["cpu"]["bmv2"]["s1"]["wake_us"]["p50"] >= 0
    neck = next(p for p in checks["ports"] if (p["switch"], p["port"]) == ("s1", 4))
    assert neck["bottleneck"] and neck["backlogged_s"] > 5 and 0.95 <= neck["share"] <= 1.05
    assert set(checks["cpu"]["bmv2"]) == {"s1", "s2"} and set(checks["lag_us"]) == {"s1", "s2"}
    assert {"gen/worker0@h1", "gen/worker1@h2", "gen/ps@h4"} <= set(checks["cpu"]["workers"])
    cpu = pd.read_csv(run / "cpu.csv")
    assert {"bmv2", "collector", "background", "worker", "ps", "runner", "machine", "sampler"} <= set(cpu["role"])
    assert cpu.loc[cpu["role"] == "sampler", "cpu"].mean() < 0.02


def _bmv2_pids(experiment: Path, want: int, timeout: float = 300) -> list[int]:
    """The BMv2 processes of the run, from its ledger, once all `want` of them have started (the run may
    first wait for another network on this machine to finish)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ledger in experiment.glob("*/run/started.json"):
            try:
                processes = json.loads(ledger.read_text())["processes"]
            except (OSError, ValueError):
                continue
            pids = [p["pid"] for p in processes if p["what"].startswith("simple_switch_grpc")]
            if len(pids) == want:
                return pids
        time.sleep(0.1)
    raise AssertionError("the run's switches did not start")


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores: one to starve, one for the rest")
def test_starved_switch_is_untrusted(tmp_path, machine_calibration):
    proc, experiment = _start(tmp_path)
    hogs: list[subprocess.Popen] = []
    try:
        for pid in _bmv2_pids(experiment, want=2):
            subprocess.run(["taskset", "-a", "-p", "-c", "0", str(pid)], check=True, capture_output=True)
        for _ in range(2):
            # Each hog in a session of its own, at a higher priority than the switches: with the kernel's
            # autogroup scheduling a session's priority is its group's, so it is set there too.
            hog = subprocess.Popen(["taskset", "-c", "0", "nice", "-n", "-10", sys.executable, "-c", HOG],
                                   start_new_session=True)
            hogs.append(hog)
            autogroup = Path(f"/proc/{hog.pid}/autogroup")
            if autogroup.exists():
                autogroup.write_text("-10")
        out, _ = proc.communicate(timeout=300)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    _, fidelity = _verdict(experiment)
    assert fidelity["trusted"] is False
    assert "fidelity: UNTRUSTED" in out
    # The switches themselves fell behind: a port short of its rate while backlogged, or a lag far above idle.
    about_switches = [r for r in fidelity["reasons"] if r.startswith(("s1 ", "s2 "))]
    assert about_switches, fidelity["reasons"]
    checks = fidelity["checks"]
    short = [p for p in checks["ports"] if p["bottleneck"] and not p["ok"]]
    slow = [s for s, lag in checks["lag_us"].items() if not lag["ok"]]
    assert short or slow
    # The sampler saw them starved: their threads waited for a CPU a large part of the time.
    assert max(b["wait"]["p95"] for b in checks["cpu"]["bmv2"].values()) > STARVED_WAIT
    assert starved(fidelity)
    # And the verdict puts a slow switch down to the machine: idle threads that waited for a CPU.
    assert all(checks["lag_us"][s]["machine"] for s in slow), [checks["lag_us"][s] for s in slow]
