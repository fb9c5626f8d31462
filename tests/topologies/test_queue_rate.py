"""BMv2's egress queue rate, set through the thrift wrapper, holds TCP to the link rate."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import needs_bmv2
from pcnlab.controller.sessions import ControllerThread, PcnController
from pcnlab.controller.program import P4Program
from pcnlab.controller.thrift_runtime import SwitchThrift
from pcnlab.topologies.network import NetworkOptions, PcnNetwork, fair_host_pacing
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


RECEIVE = ("import socket, sys, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
           "s.bind(('0.0.0.0', 7000)); n = int(sys.argv[1]); print('ready', flush=True)\n"
           "for _ in range(n): s.recv(2048)\n"
           "print(time.monotonic_ns(), flush=True)")
SEND = ("import socket, sys, time; n = int(sys.argv[1]); t0 = time.monotonic_ns()\n"
        "socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in sys.argv[2:]]\n"
        "for s, ip in zip(socks, sys.argv[2:]):\n"
        "    for _ in range(n): s.sendto(b'x' * 1400, (ip, 7000))\n"
        "print(t0, flush=True)")
DATAGRAMS = 80   # per destination: each socket's 80 datagrams fit its send buffer, none waits on sendto


def _finish_times(net, sender: str, receivers: list[str]) -> list[float]:
    """Seconds from the start of sending until each receiver has all its datagrams, when `sender` writes
    every datagram of the first receiver, then every datagram of the next (one socket each)."""
    procs = [net.host(r).popen([sys.executable, "-c", RECEIVE, str(DATAGRAMS)], text=True) for r in receivers]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        out = net.host(sender).cmd(f"{sys.executable} -c \"{SEND}\" {DATAGRAMS} "
                                   + " ".join(net.host(r).IP() for r in receivers))
        t0 = int(out.split()[-1])   # after the shell's continuation prompts
        return [(int(p.stdout.readline()) - t0) / 1e9 for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


@needs_bmv2
@pytest.mark.parametrize("host_queue", ["fifo", "fair"])
def test_a_paced_hosts_fair_queue_delivers_concurrent_sends_together(run_folder, host_queue):
    """host_queue fair: a host that writes to two hosts at once (a PS pushing its parameters) reaches
    both at the end of the whole exchange, a share each of its 10 Mbit/s; fifo: the first in half the
    time, the second only after it."""
    topo = make_topology("star", hosts=3, bw=10, queue=64)
    options = NetworkOptions(switch="bmv2", pace_hosts=True, host_queue=host_queue)
    with PcnNetwork(topo, run_folder.path, run_folder.ledger, options) as net:
        assert json.loads((run_folder.path / "network.json").read_text())["host_queue"] == host_queue
        with ControllerThread(PcnController(net.endpoints(), P4Program.named())):
            first, second = _finish_times(net, "h1", ["h2", "h3"])
            stats = net.host("h1").cmd("tc -s qdisc show dev h1-eth0")
    whole = 2 * DATAGRAMS * 1442 * 8 / 10e6           # both sends at 10 Mbit/s (1400 B + UDP/IP/Ethernet)
    assert 0.8 * whole < second < 1.6 * whole, (first, second, whole)
    if host_queue == "fair":
        assert "htb" in stats and first > 0.8 * second, (first, second, stats)
    else:
        assert "tbf" in stats and first < 0.65 * second, (first, second, stats)


def test_fair_pacing_is_one_short_command_per_step_with_a_class_per_peer():
    """A host's shell reads lines of at most 4095 bytes: 16 peers' commands joined overran it (a run of
    17 hosts failed with `Cannot find device "h1-e"`); each command stands alone, one filter per peer."""
    peers = [f"10.0.{n // 256}.{n % 256}" for n in range(2, 42)]
    cmds = fair_host_pacing("h1-eth0", 100, peers)
    assert all(len(c) < 300 and "&&" not in c for c in cmds)
    filters = [c for c in cmds if " filter " in c]
    assert [c.split("match ip dst ")[1].split("/")[0] for c in filters] == peers
    assert len({c.split("flowid ")[1] for c in filters}) == len(peers)
