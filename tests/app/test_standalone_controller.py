"""`pcnlab controller --topology RUN` drives switches it did not start, and stops cleanly on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys

from conftest import needs_bmv2
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology


@needs_bmv2
def test_standalone_controller_takes_over_running_switches(run_folder):
    topo = make_topology("dumbbell", left=1, right=1)
    with PcnNetwork(topo, run_folder.path, run_folder.ledger, NetworkOptions(switch="bmv2")) as net:
        h1, h2 = net.host("h1"), net.host("h2")
        assert " 0% packet loss" not in h1.cmd(f"ping -c1 -W1 {h2.IP()}")  # no program yet
        proc = subprocess.Popen([sys.executable, "-m", "pcnlab.app.cli", "controller", "--topology",
                                 str(run_folder.path), "--mode", "ecn"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        run_folder.ledger.add_process(proc.pid, "pcnlab controller")
        try:
            line = proc.stdout.readline()
            assert line.startswith("driving s1, s2 (mode ecn)"), line + proc.stderr.read()
            assert " 0% packet loss" in h1.cmd(f"ping -c2 -W2 {h2.IP()}")
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "stopped; no window left armed" in out
        assert (run_folder.path / "controller-events.jsonl").exists()
