"""The switches' control ports during a run (topologies/control_ports.py): thrift answers on loopback
and from nowhere else (this machine's own non-loopback address, a Mininet host); the guard goes with
the network, and `pcnlab clean` removes it after a run that died."""

from __future__ import annotations

import socket
import time
from pathlib import Path
import subprocess

import pytest

from conftest import needs_bmv2
from pcnlab.ledger import LedgerData
from pcnlab.topologies.cleanup import clean_ledger
from pcnlab.topologies import control_ports
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology


def _outside_address() -> str | None:
    """This machine's first global IPv4 address (not loopback)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True,
                         text=True).stdout.split()
    return next((w.split("/")[0] for w in out if "/" in w and not w.startswith("127.")), None)


def _connects(address: str, port: int, timeout: float = 1.0) -> bool:
    with socket.socket() as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((address, port)) == 0


def test_the_ruleset_drops_all_but_loopback():
    rules = control_ports.ruleset("pcnlab_x", [9090, 9091, 9090])
    assert "tcp dport { 9090, 9091 } ip daddr != 127.0.0.0/8 drop" in rules
    assert "tcp dport { 9090, 9091 } ip6 daddr != ::1 drop" in rules and "hook input" in rules
    assert control_ports.table_name("own-2026-11-24T14-00-00-mode=pcn,rep=1-123").startswith("pcnlab_own_2026")


@needs_bmv2
def test_thrift_answers_on_loopback_only_while_the_network_runs(run_folder):
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    with PcnNetwork(make_topology("dumbbell", left=1, right=1), run_folder.path, run_folder.ledger,
                    NetworkOptions(switch="bmv2")) as net:
        table = control_ports.table_name(run_folder.ledger.data.run_id)
        assert control_ports.exists(table) and run_folder.ledger.data.nft_tables == [table]
        for sw in net.bmv2_switches:
            listening = subprocess.run(["ss", "-ltnH", f"sport = :{sw.thrift_port}"], capture_output=True,
                                       text=True).stdout
            assert "0.0.0.0:" in listening or "*:" in listening   # BMv2 itself binds every address
            assert _connects("127.0.0.1", sw.thrift_port)
            assert not _connects(outside, sw.thrift_port)
            assert not _connects(outside, sw.grpc_port)
            probe = (f"import socket; s = socket.socket(); s.settimeout(1); "
                     f"print(s.connect_ex(({outside!r}, {sw.thrift_port})))")
            code = net.host("h1").cmd(f"python3 -c \"{probe}\"").strip()
            assert code != "0", code                                 # from a Mininet host: no
    assert not control_ports.exists(table)                           # gone with the network


@needs_bmv2
def test_clean_removes_a_dead_runs_guard(run_folder):
    table = control_ports.table_name(run_folder.ledger.data.run_id + "-dead")
    run_folder.ledger.add_nft_table(table)
    control_ports.guard(table, [65001])
    assert control_ports.exists(table)
    report = clean_ledger(LedgerData.from_json(run_folder.ledger.path.read_text()))   # as read back after a crash
    assert report.removed_nft_tables == [table] and "1 nftables tables" in report.summary()
    assert not control_ports.exists(table)


@needs_bmv2
def test_p4runtime_over_tls_as_documented(tmp_path):
    """docs/guide.md "P4Runtime over TLS": certificates by scripts/tls-certs.sh, BMv2 with
    --grpc-server-ssl and client authentication, finsy with GRPCCredentialsTLS. A client with the
    certificates becomes primary; one without them never gets a channel."""
    import asyncio

    import finsy as fy

    from pcnlab.topologies.bmv2 import free_port
    from pcnlab.toolchain import bmv2_build

    certs = tmp_path / "certs"
    subprocess.run(["bash", str(Path(__file__).resolve().parents[2] / "scripts" / "tls-certs.sh"), str(certs)],
                   check=True, capture_output=True, timeout=60)
    grpc = f"127.0.0.1:{free_port()}"
    switch = subprocess.Popen([str(bmv2_build(False).switch), "--no-p4", "--device-id", "1", "--thrift-port",
                               str(free_port()), "--", "--grpc-server-addr", grpc, "--grpc-server-ssl",
                               "--grpc-server-cacert", str(certs / "ca.pem"), "--grpc-server-cert",
                               str(certs / "server.pem"), "--grpc-server-key", str(certs / "server.key"),
                               "--grpc-server-with-client-auth"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        host, port = grpc.rsplit(":", 1)
        deadline = time.monotonic() + 15
        while not _connects(host, int(port), 0.2):
            assert time.monotonic() < deadline and switch.poll() is None, "BMv2 did not start"
            time.sleep(0.1)
        tls = fy.GRPCCredentialsTLS(cacert=certs / "ca.pem", cert=certs / "client.pem",
                                    private_key=certs / "client.key")

        async def primary(credentials) -> bool | str:
            options = fy.SwitchOptions(channel_credentials=credentials, initial_election_id=5)
            try:
                async with asyncio.timeout(5):
                    async with fy.Switch("tls", grpc, options) as sw:
                        return sw.is_primary
            except Exception as exc:   # noqa: BLE001 -- which error it was is the point
                return f"{type(exc).__name__}: {exc}"

        assert asyncio.run(primary(tls)) is True
        refused = asyncio.run(primary(None))
        assert isinstance(refused, str) and "UNAVAILABLE" in refused, refused
    finally:
        switch.terminate()
        switch.wait(10)
