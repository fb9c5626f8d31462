"""`pcnlab calibrate` stopped by SIGTERM (`kill`, a timeout) the way Ctrl-C stops it: exit 130, every
process and namespace it started gone, no calibration file written. Before, a SIGTERM left its BMv2
switch running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from pathlib import Path

from conftest import FOREIGN_HOST, needs_bmv2
from pcnlab.ledger import LedgerData, is_running


@needs_bmv2
def test_sigterm_stops_calibrate_and_leaves_nothing(tmp_path):
    out = tmp_path / "calibration.json"
    proc = subprocess.Popen([sys.executable, "-m", "pcnlab.app.cli", "calibrate", "--results", str(tmp_path / "results"),
                             "--out", str(out), "--max-workers", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ledger = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and ledger is None:
        for path in (tmp_path / "results").glob("calibrate/*/*/started.json"):
            data = LedgerData.from_json(path.read_text())
            if any(p.what.startswith("simple_switch_grpc") and is_running(p.pid, p.start_time) for p in data.processes):
                ledger = path
        time.sleep(0.2)
    assert ledger is not None, "calibrate started no switch"
    time.sleep(1)                           # into its first step: packets through the switch
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    data = LedgerData.from_json(ledger.read_text())
    assert data.processes and not [p for p in data.processes if is_running(p.pid, p.start_time)]
    assert not [n for n in data.namespaces if is_running(n.pid, n.start_time)]
    assert not out.exists()
    assert json.loads((ledger.parent / "status.json").read_text())["status"] == "aborted"


# --- a machine judged by its own measure ---------------------------------------------------------------



@needs_bmv2
def test_the_quick_calibration_measures_this_machine(machine_calibration):
    """What a run measures on a machine without a calibration (conftest's session file, measured once):
    this machine's name, both forwarding figures from loss-free steps, the idle lag over a light step."""
    from pcnlab.calibration import machine_identity, read_calibration
    from pcnlab.experiments.calibrate import MAX_LOSS, QUICK_LAG_S, STEPS_PPS

    assert machine_calibration["kind"] == "quick" and machine_calibration["machine"] == machine_identity()
    assert read_calibration().state == "ok"
    steps = machine_calibration["steps"]
    for label in ("off", "every1"):
        figure = machine_calibration["forward_pps"][label]
        lossless = [s["received_pps"] for s in steps if s["telemetry"] == label and s["loss"] <= MAX_LOSS]
        assert figure == max(lossless) and figure >= STEPS_PPS[0] * 0.95
    lag = machine_calibration["idle_lag_us"]
    assert 0 < lag["p50"] <= lag["p95"] and lag["n"] >= 0.8 * STEPS_PPS[0] * QUICK_LAG_S


@needs_bmv2
def test_a_foreign_calibration_is_kept_and_the_machine_measured_before_the_run(first_run, machine_calibration):
    """The session's first `pcnlab run` (conftest.py) found another machine's calibration in its file."""
    from pcnlab.calibration import read_calibration

    path = Path(machine_calibration["path"])
    proc = first_run.proc
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = proc.stdout.splitlines()
    named = [line for line in said if line.startswith("calibration: ")]
    assert len(named) == 1 and str(path) in named[0] and f"host '{FOREIGN_HOST}'" in named[0], said
    assert sum(line.startswith("calibrating: ") for line in said) == 1
    (kept,) = path.parent.glob("calibration.foreign-*.json")          # nothing lost
    assert json.loads(kept.read_text()) == first_run.foreign
    found = read_calibration(path)
    assert found.state == "ok" and found.data["kind"] == "quick"
    (run,) = (first_run.results / "tiny").glob("2*/run")
    assert json.loads((run / "calibration.json").read_text())["measured"] == found.data["measured"]
    assert json.loads((run / "fidelity.json").read_text())["checks"]["calibration"]["source"] == str(path)
