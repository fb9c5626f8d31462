"""A real BMv2 switch running p4src/pcn.p4 between three hosts, for data-plane tests.

h1 sends background traffic, h2 DDL traffic (job 1), both to h3 (`jobs` makes other hosts' traffic DDL);
the port towards h3 drains slowly (its BMv2 queue rate is lowered) so a queue builds; m1 is the switch's monitor host, where the queue
log collector runs on the telemetry clones.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import sys
import time
from pathlib import Path

from scapy.layers.inet import IP  # noqa: F401 -- rdpcap decodes a frame only as far as the layers loaded
from scapy.utils import rdpcap

from pcnlab.controller.sessions import ControllerThread, PcnController
from pcnlab.controller.dataplane import DataPlaneConfig, FlowClass, PortMode, read_port_counters
from pcnlab.controller.program import P4Program
from pcnlab.controller.endpoints import PortQueue
from pcnlab.controller.thrift_runtime import SwitchThrift
from pcnlab.experiments.rundir import RunFolder
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology

BLAST = str(Path(__file__).with_name("blast.py"))
PCN_START_DSCP = 3  # what the tests announce with; the code point is configuration, not P4 source


class DataPlaneRig:
    def __init__(self, results: Path, rate_pps: int = 200, depth: int = 300, burst_gap_us: int = 50_000,
                 jobs: dict[str, int] | None = None):
        self.rate_pps = rate_pps
        self.run = RunFolder.create(results, "dataplane", "rig")
        topo = make_topology("star", hosts=3, monitors=True)
        self.net = PcnNetwork(topo, self.run.path, self.run.ledger, NetworkOptions(switch="bmv2")).start()
        endpoint = self.net.endpoints()[0]
        self.port = next(p for p, peer in endpoint.ports.items() if peer == "h3")
        self.monitor_port = topo.monitor_port("s1")
        endpoint = dataclasses.replace(endpoint, queues=(PortQueue(self.port, rate_pps, depth),))
        self.config = DataPlaneConfig(
            switch_id=1,
            classes=tuple(FlowClass(job=job, src=f"{self.net.host(host).IP()}/32", burst_gap_us=burst_gap_us)
                          for host, job in (jobs or {"h2": 1}).items()),
            modes={p: PortMode("droptail") for p in endpoint.ports},
            telemetry_port=self.monitor_port, pcn_start_dscp=PCN_START_DSCP)
        self.bursts, self.ends = [], []   # the switch's burst digests: starts, and ends
        self.controller = PcnController([endpoint], P4Program.named(), dataplane={"s1": self.config},
                                        on_burst=[lambda sw, burst: (self.ends if burst.ended else self.bursts).append(burst)])
        self.thread = ControllerThread(self.controller).start()
        self.thrift = SwitchThrift(endpoint.thrift_port)

    def close(self) -> None:
        self.thrift.close()
        self.thread.stop()
        self.net.stop()
        self.run.__exit__(None, None, None)

    # --- driving it ----------------------------------------------------------------------------

    def set_mode(self, mode: PortMode) -> None:
        self.thread.call(self.controller.set_mode("s1", self.port, mode), 10)

    def set_loss(self, fraction: float) -> None:
        self.thread.call(self.controller.set_loss("s1", self.port, fraction), 10)

    def arm_window(self, start_us: int, end_us: int) -> None:
        self.thread.call(self.controller.arm_window("s1", self.port, start_us, end_us), 10)

    def remove_window(self, start_us: int, end_us: int) -> None:
        self.thread.call(self.controller.remove_window("s1", self.port, start_us, end_us), 10)

    def now_us(self) -> int:
        return self.thrift.elapsed_us()

    def counters(self) -> dict:
        return self.thread.call(read_port_counters(self.controller.switches["s1"]), 10)

    def blast(self, src: str, count: int, ecn: int = 1, dscp: int = 0, size: int = 1000, dport: int = 9000,
              announce_at: int = -1) -> None:
        """Send `count` UDP packets from `src` to h3 back to back (ecn=1: ECT(1)); packet `announce_at`
        carries the PCN-START code point instead."""
        h3 = self.net.host("h3")
        host = self.net.host(src)
        out = host.cmd(f"{sys.executable} {BLAST} {src}-eth0 {h3.MAC()} {host.IP()} {h3.IP()} "
                       f"--count {count} --ecn {ecn} --dscp {dscp} --size {size} --dport {dport} "
                       f"--announce-at {announce_at} --announce-dscp {PCN_START_DSCP}")
        assert f"sent {count}" in out, out

    def drain(self, packets: int | None = None) -> None:
        """Wait until the bottleneck queue has drained (`packets` queued at most)."""
        time.sleep((packets or 300) / self.rate_pps + 0.2)

    @contextlib.contextmanager
    def capture(self):
        """Packets h3 receives meanwhile (scapy packets), in the list yielded, filled on exit."""
        h3 = self.net.host("h3")
        pcap = self.run.path / f"h3-{time.monotonic_ns()}.pcap"
        proc = h3.popen(["tcpdump", "-i", "h3-eth0", "-U", "-w", str(pcap), "udp"])
        self.run.ledger.add_process(proc.pid, "tcpdump on h3")
        time.sleep(0.5)
        packets: list = []
        try:
            yield packets
        finally:
            time.sleep(0.2)
            proc.terminate()
            proc.wait()
            packets.extend(rdpcap(str(pcap)))

    @contextlib.contextmanager
    def queue_log(self):
        """Telemetry records the collector writes meanwhile (dicts of the CSV's columns)."""
        m1 = self.net.host("m1")
        out = self.run.path / f"queue-{time.monotonic_ns()}.csv"
        proc = m1.popen([sys.executable, "-m", "pcnlab.controller.collector", "--interface", "m1-eth0",
                         "--switch", "s1", "--out", str(out)], text=True)
        self.run.ledger.add_process(proc.pid, "collector on m1")
        assert "collector ready" in proc.stdout.readline()
        records: list = []
        summary: dict = {}
        try:
            yield records, summary
        finally:
            time.sleep(0.2)
            proc.terminate()
            proc.wait(10)
            with open(out) as handle:
                records.extend({k: (v if k in ("switch", "class") else int(v)) for k, v in row.items()}
                               for row in csv.DictReader(handle))
            import json
            summary.update(json.loads(out.with_suffix(".summary.json").read_text()))
