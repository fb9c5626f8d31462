"""How long a switch that crashes stops forwarding (the goal: under 2 s, p95 over 20
restarts; docs/results.md, "Faults, control ports and a second user").

    sudo .venv/bin/python bench/bench_recovery.py [--restarts 20]

A dumbbell (s1 - s2), the controller as in a run; a 10 ms ping h1 -> h3 crosses both switches; s2 is
killed with SIGKILL every few seconds and started again by the network (`PcnNetwork.revive`, as the
runner does on every tick), and the controller replaces its P4Runtime session. The hole is the longest
gap between ping replies around each kill. Prints every hole and p50 / p95 / max.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from pcnlab.controller.sessions import ControllerThread, PcnController
from pcnlab.controller.program import P4Program
from pcnlab.experiments.rundir import RunFolder
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology
from pcnlab.cmdline import OneLineParser, count, positive


def main() -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=count, default=20)
    parser.add_argument("--every", type=positive, default=4.0, help="seconds between kills")
    args = parser.parse_args()
    with RunFolder.create(Path(tempfile.mkdtemp(prefix="pcnlab-recovery-")), "recovery", "bench") as run:
        with PcnNetwork(make_topology("dumbbell", left=2, right=1), run.path, run.ledger,
                        NetworkOptions(switch="bmv2")) as net:
            with ControllerThread(PcnController(net.endpoints(), P4Program.named())):
                s2 = next(sw for sw in net.bmv2_switches if sw.name == "s2")
                log = run.path / "ping.txt"   # a file: a pipe nobody reads fills and stops ping
                with open(log, "w") as out:
                    ping = net.host("h1").popen(["ping", "-D", "-i", "0.01", "-W", "1", net.host("h3").IP()],
                                                stdout=out, stderr=subprocess.DEVNULL)
                kills = []
                time.sleep(3.0)
                for _ in range(args.restarts):
                    kills.append(time.time())
                    os.kill(s2.process.pid, signal.SIGKILL)
                    while not net.revive():
                        time.sleep(0.05)
                    time.sleep(args.every)
                ping.send_signal(signal.SIGINT)
                ping.wait(timeout=10)
                out = log.read_text()
    stamps = np.array([float(m) for m in re.findall(r"^\[(\d+\.\d+)\].*time=", out, re.MULTILINE)])
    holes = []
    for kill in kills:
        before, after = stamps[stamps < kill], stamps[stamps >= kill]
        holes.append((after[0] - before[-1]) * 1e3 if len(before) and len(after) else float("inf"))
    print("holes (ms):", " ".join(f"{h:.0f}" for h in holes))
    print(f"p50 {np.percentile(holes, 50):.0f} ms, p95 {np.percentile(holes, 95):.0f} ms, max {max(holes):.0f} ms "
          f"over {len(holes)} restarts")


if __name__ == "__main__":
    main()
