"""The host's TCP counters a PS rank logs per iteration (tcpsense.HostTcpCounters): parsed from the
kernel's /proc/net/netstat and /proc/net/snmp, and counting a real retransmission timeout and tail-loss
probe in a network namespace of the test's own (nftables drops a connection's data for a second)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import needs_root
from pcnlab.workloads.tcpsense import HOST_COUNTERS, HostTcpCounters, parse_proc_counters

NETSTAT = """TcpExt: SyncookiesSent TCPLossProbes TCPTimeouts TCPLossProbeRecovery
TcpExt: 0 7 3 2
IpExt: InNoRoutes InOctets
IpExt: 0 12345
"""
SNMP = """Tcp: RtoAlgorithm RtoMin RtoMax MaxConn RetransSegs
Tcp: 1 200 120000 -1 41
"""


def test_counters_are_read_from_each_header_and_its_values():
    found = parse_proc_counters(NETSTAT)
    assert found[("TcpExt", "TCPTimeouts")] == 3 and found[("IpExt", "InOctets")] == 12345
    assert parse_proc_counters(SNMP)[("Tcp", "MaxConn")] == -1


def test_delta_is_the_increase_and_a_missing_counter_counts_zero(tmp_path):
    netstat, snmp = tmp_path / "netstat", tmp_path / "snmp"
    netstat.write_text(NETSTAT)
    snmp.write_text(SNMP)
    counters = HostTcpCounters((str(netstat), str(snmp)))
    netstat.write_text(NETSTAT.replace("0 7 3 2", "0 9 4 2"))
    snmp.write_text(SNMP.replace("-1 41", "-1 50"))
    assert counters.delta() == {"tcp_timeouts": 1, "tcp_loss_probes": 2, "tcp_loss_probe_recoveries": 0,
                                "tcp_spurious_rtos": 0, "tcp_retrans_segs": 9}
    assert set(counters.delta().values()) == {0} and len(HOST_COUNTERS) == 5


SCRIPT = textwrap.dedent("""
    import json, socket, subprocess, time
    from pcnlab.workloads.tcpsense import HostTcpCounters
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    peer, _ = server.accept()
    client.sendall(b"x" * 1000); peer.recv(4096)          # an RTT measured: the timers are armed from it
    counters = HostTcpCounters()
    subprocess.run(["nft", "-f", "-"], check=True, input=(
        "table inet t { chain inp { type filter hook input priority 0; tcp dport %d drop; }; }" % port).encode())
    client.sendall(b"y" * 1000)                            # the tail of a flight, lost
    time.sleep(1.0)
    subprocess.run(["nft", "delete", "table", "inet", "t"], check=True)
    time.sleep(0.6)
    print(json.dumps(counters.delta()))
""")


@needs_root
@pytest.mark.skipif(shutil.which("nft") is None or shutil.which("unshare") is None, reason="needs nft and unshare")
def test_a_lost_tail_is_counted_as_a_loss_probe_then_timeouts_in_its_namespace():
    try:
        out = subprocess.run(["unshare", "--net", sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                             timeout=30)
    except PermissionError:
        pytest.skip("needs root (a network namespace of its own)")
    if out.returncode != 0 and "Operation not permitted" in out.stderr:
        pytest.skip("needs root (a network namespace of its own)")
    assert out.returncode == 0, out.stderr[-2000:]
    moved = json.loads(out.stdout.strip().splitlines()[-1])
    # One probe ~2 RTTs after the loss, then timeouts from 200 ms, doubling: 200 + 400 ms within the second.
    assert moved["tcp_loss_probes"] >= 1 and moved["tcp_timeouts"] >= 2, moved
    assert moved["tcp_retrans_segs"] >= moved["tcp_timeouts"], moved
