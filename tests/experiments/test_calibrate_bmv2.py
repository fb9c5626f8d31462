"""`pcnlab calibrate` stopped by SIGTERM (`kill`, a timeout) the way Ctrl-C stops it: exit 130, every
process and namespace it started gone, no calibration file written. Before, a SIGTERM left its BMv2
switch running."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from conftest import needs_bmv2
from pcnlab.ledger import LedgerData, is_running


@needs_bmv2
def test_sigterm_stops_calibrate_and_leaves_nothing(tmp_path):
    out = tmp_path / "calibration.json"
    proc = subprocess.Popen([sys.executable, "-m", "pcnlab.cli", "calibrate", "--results", str(tmp_path / "results"),
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
