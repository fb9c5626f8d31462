"""BMv2's egress queue rate, set through the thrift wrapper, holds TCP to the link rate."""

from __future__ import annotations

import json

from conftest import needs_bmv2
from pcnlab.controller.controller import ControllerThread, PcnController
from pcnlab.controller.program import P4Program
from pcnlab.controller.thrift_runtime import SwitchThrift
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology


def _iperf_mbps(net, src: str, dst: str, seconds: int = 4) -> float:
    server = net.host(dst).popen(["iperf3", "-s", "-1", "-p", "5201"])
    try:
        net.host(src).cmd("sleep 0.3")
        out = net.host(src).cmd(f"iperf3 -c {net.host(dst).IP()} -p 5201 -t {seconds} -J")
        result = json.loads(out[out.index("{"):])
        return result["end"]["sum_received"]["bits_per_second"] / 1e6
    finally:
        server.terminate()
        server.wait()


@needs_bmv2
def test_queue_rate_holds_tcp_to_the_link_rate(run_folder):
    topo = make_topology("star", hosts=2, bw=10, queue=64)
    with PcnNetwork(topo, run_folder.path, run_folder.ledger, NetworkOptions(switch="bmv2")) as net:
        endpoints = net.endpoints()
        assert {q.rate_pps for q in endpoints[0].queues} == {826}  # 10 Mbit/s in 1514-byte frames
        with ControllerThread(PcnController(endpoints, P4Program.named())):
            limited = _iperf_mbps(net, "h1", "h2")
            # Goodput of 826 full frames/s is 9.6 Mbit/s; TCP gets close to it, never far above.
            assert 7.5 < limited < 10.5, limited
            # Lift the limit through the same wrapper (both directions: ACKs queue too) and the
            # flow runs far faster.
            with SwitchThrift(endpoints[0].thrift_port) as thrift:
                for port in endpoints[0].ports:
                    thrift.set_queue_rate(port, 100_000)
                assert thrift.elapsed_us() > 0
            unlimited = _iperf_mbps(net, "h1", "h2")
            assert unlimited > 3 * limited, (limited, unlimited)


@needs_bmv2
def test_paced_hosts_send_at_their_links_rate_with_the_switch_unlimited(run_folder):
    """pace_hosts: the host's end of its link is a 10 Mbit/s token bucket (a NIC's serialisation), so
    with every BMv2 queue rate lifted a host still sends at its link's rate, and BMv2 receives its
    packets no faster than that."""
    topo = make_topology("star", hosts=2, bw=10, queue=64)
    options = NetworkOptions(switch="bmv2", pace_hosts=True)
    with PcnNetwork(topo, run_folder.path, run_folder.ledger, options) as net:
        paced = json.loads((run_folder.path / "network.json").read_text())["paced_hosts"]
        assert paced == {"h1": {"intf": "h1-eth0", "mbps": 10.0}, "h2": {"intf": "h2-eth0", "mbps": 10.0}}
        endpoints = net.endpoints()
        with ControllerThread(PcnController(endpoints, P4Program.named())):
            with SwitchThrift(endpoints[0].thrift_port) as thrift:
                for port in endpoints[0].ports:
                    thrift.set_queue_rate(port, 100_000)
            mbps = _iperf_mbps(net, "h1", "h2")
            assert 7.5 < mbps < 10.5, mbps
            stats = net.host("h1").cmd("tc -s qdisc show dev h1-eth0")
            assert "tbf" in stats and "rate 10Mbit" in stats, stats
    saved = (run_folder.path / "host-pacing.txt").read_text()     # written at teardown
    assert saved.startswith("h1 h1-eth0\n") and "h2 h2-eth0\n" in saved and "Sent" in saved, saved
