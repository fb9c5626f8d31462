"""Packets per second p4src/pcn.p4 forwards on BMv2, against plain.p4 (IPv4 forwarding only), on the
same build and machine, in one run: telemetry off and telemetry on every packet.

    sudo .venv/bin/python bench/bench_dataplane.py [--seconds 5] [--rounds 2] [--out bench/results]

Each round measures every variant once, in turn, so drift of the machine hits all alike. A variant is
one UDP iperf3 flow of 1000-byte datagrams offered faster than BMv2 can forward; what arrives per
second is the rate. Goal (issue 5): pcn / plain >= 0.9.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pcnlab.controller.controller import ControllerThread, PcnController
from pcnlab.controller.dataplane import DataPlaneConfig, FlowClass, PortMode
from pcnlab.controller.program import P4Program
from pcnlab.experiments.rundir import RunFolder
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology


@dataclass(frozen=True)
class Variant:
    name: str
    program: str
    telemetry: bool


VARIANTS = (Variant("plain", "plain", False), Variant("pcn", "pcn", False),
            Variant("pcn+telemetry", "pcn", True))


def _udp_pps(net, seconds: float, size: int = 1000) -> float:
    server = net.host("h2").popen(["iperf3", "-s", "-1", "-p", "5301"])
    try:
        time.sleep(0.3)
        out = net.host("h1").cmd(f"iperf3 -c {net.host('h2').IP()} -p 5301 -u -b 2G -l {size} -t {seconds} -J")
        result = json.loads(out[out.index("{"):])
        summary = result["end"]["sum"]
        return (summary["packets"] - summary["lost_packets"]) / summary["seconds"]
    finally:
        server.terminate()
        server.wait()


def measure(variant: Variant, results: Path, seconds: float) -> float:
    topo = make_topology("star", hosts=2, monitors=variant.telemetry)
    with RunFolder.create(results, "bench-dataplane", f"{variant.name}-{time.monotonic_ns()}") as run:
        with PcnNetwork(topo, run.path, run.ledger, NetworkOptions(switch="bmv2")) as net:
            endpoint = net.endpoints()[0]
            dataplane = None
            if variant.program == "pcn":
                # The full program's work on every packet: a class lookup, ECN mode, counters.
                dataplane = {"s1": DataPlaneConfig(
                    switch_id=1, classes=(FlowClass(job=1, dst="10.0.0.99/32"),),
                    modes={p: PortMode("ecn", k=40) for p in endpoint.ports},
                    telemetry_port=topo.monitor_port("s1") if variant.telemetry else None, telemetry_every=1)}
            controller = PcnController([endpoint], P4Program.named(variant.program), dataplane=dataplane)
            collector = None
            if variant.telemetry:
                collector = net.host("m1").popen([sys.executable, "-m", "pcnlab.controller.collector",
                                                  "--interface", "m1-eth0", "--switch", "s1",
                                                  "--out", str(run.path / "queue-s1.csv")], text=True)
                run.ledger.add_process(collector.pid, "collector")
                collector.stdout.readline()
            try:
                with ControllerThread(controller):
                    return _udp_pps(net, seconds)
            finally:
                if collector is not None:
                    collector.terminate()
                    collector.wait()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    samples: dict[str, list[float]] = {v.name: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(args.rounds):
            for variant in VARIANTS:
                pps = measure(variant, Path(tmp), args.seconds)
                samples[variant.name].append(pps)
                print(f"round {round_no + 1}/{args.rounds} {variant.name:14s} {pps:9.0f} packets/s", flush=True)
    median = {name: statistics.median(values) for name, values in samples.items()}
    report = {
        "samples_pps": samples,
        "median_pps": median,
        "ratio_pcn_to_plain": median["pcn"] / median["plain"],
        "ratio_pcn_telemetry_to_plain": median["pcn+telemetry"] / median["plain"],
        "switch": "BMv2 simple_switch_grpc (no-logging build when installed)",
        "datagram_bytes": 1000,
    }
    print(f"pcn / plain = {report['ratio_pcn_to_plain']:.2f}   "
          f"pcn+telemetry(1 in 1) / plain = {report['ratio_pcn_telemetry_to_plain']:.2f}   (goal >= 0.9)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dataplane.json").write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
