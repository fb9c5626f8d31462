"""The P4Runtime latency of arming a pre-drain window on BMv2 (one `predrain_windows` insert, as the
scheduler writes it), p50 and p99 over N writes, each followed by its delete.

    sudo .venv/bin/python bench/bench_arm_latency.py [--writes 500] [--out bench/results]
"""

from __future__ import annotations

import json
import statistics
import tempfile

from pathlib import Path

from pcnlab.controller.sessions import ControllerThread, PcnController
from pcnlab.controller.dataplane import DataPlaneConfig, PortMode
from pcnlab.controller.program import P4Program
from pcnlab.experiments.rundir import RunFolder
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology
from pcnlab.cmdline import OneLineParser, count


def main(argv: list[str] | None = None) -> dict:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=count, default=500)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, RunFolder.create(Path(tmp), "bench-arm", "star") as run:
        topo = make_topology("star", hosts=2)
        with PcnNetwork(topo, run.path, run.ledger, NetworkOptions(switch="bmv2")) as net:
            endpoint = net.endpoints()[0]
            config = DataPlaneConfig(switch_id=1, modes={p: PortMode("pcn") for p in endpoint.ports})
            controller = PcnController([endpoint], P4Program.named(), dataplane={"s1": config})
            with ControllerThread(controller) as thread:
                latencies = []
                for i in range(args.writes):
                    start = 10_000_000 + i * 1000
                    latencies.append(thread.call(controller.arm_window("s1", 1, start, start + 500), 10))
                    thread.call(controller.remove_window("s1", 1, start, start + 500), 10)
    ms = sorted(x * 1e3 for x in latencies)
    report = {"writes": len(ms), "p50_ms": statistics.median(ms), "p99_ms": ms[int(0.99 * (len(ms) - 1))],
              "max_ms": ms[-1]}
    print(f"arming write on BMv2: p50 {report['p50_ms']:.2f} ms, p99 {report['p99_ms']:.2f} ms over {len(ms)} writes")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "arm_latency.json").write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
