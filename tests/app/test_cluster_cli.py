"""`pcnlab cluster` (app/cluster_cli.py): the ports a loopback head takes, and the fence around them,
tested for real from another network namespace (as another machine would reach this one): closed from
there, open from this machine itself at any of its addresses, which Ray needs (it connects to itself by
the machine's address). Ray itself is not started here: tests/experiments/test_cluster_ray.py runs clusters."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid

import pytest

from conftest import needs_root
from pcnlab.app.cluster_cli import WORKER_PORTS, fence_table, ray_ports
from pcnlab.topologies import control_ports


def test_a_head_takes_its_port_and_the_ones_after_it_each_once():
    ports = ray_ports(6400)
    singles = [v for k, v in ports.items() if not k.endswith("worker-port")]
    assert ports["port"] == 6400 and len(set(singles)) == len(singles) and max(singles) < 6400 + 16
    assert (ports["min-worker-port"], ports["max-worker-port"]) == (6416, 6416 + WORKER_PORTS - 1)
    assert fence_table(6400) == "pcnlab_ray_6400"
    assert 'tcp dport { 6400, 6401 } iifname != "lo" drop' in control_ports.ruleset("pcnlab_x", [6401, 6400],
                                                                                       this_machine=True)


@pytest.fixture
def other_machine():
    """A network namespace joined to this one by a veth pair (10.98.x.2 there, 10.98.x.1 here)."""
    holder = subprocess.Popen(["unshare", "--net", "sleep", "120"])
    name = f"pcnc{uuid.uuid4().hex[:6]}"
    subnet = f"10.98.{int(name[-2:], 16)}"
    try:
        time.sleep(0.2)
        run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True)  # noqa: E731
        run("ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}p")
        run("ip", "link", "set", f"{name}p", "netns", str(holder.pid))
        run("ip", "addr", "add", f"{subnet}.1/30", "dev", name)
        run("ip", "link", "set", name, "up")
        inside = ["nsenter", "-t", str(holder.pid), "-n"]
        run(*inside, "ip", "addr", "add", f"{subnet}.2/30", "dev", f"{name}p")
        run(*inside, "ip", "link", "set", f"{name}p", "up")
        run(*inside, "ip", "link", "set", "lo", "up")
        yield inside, f"{subnet}.1"
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["ip", "link", "del", name], capture_output=True)


def _from(inside: list[str], address: str, port: int) -> bool:
    probe = f"import socket; s = socket.socket(); s.settimeout(1.5); print(s.connect_ex(({address!r}, {port})))"
    return subprocess.run([*inside, "python3", "-c", probe], capture_output=True, text=True).stdout.strip() == "0"


@needs_root
def test_the_fence_closes_a_loopback_heads_ports_to_other_machines_only(other_machine):
    inside, here = other_machine
    servers = [socket.create_server(("0.0.0.0", 0)) for _ in range(2)]      # Ray binds every address too
    fenced, open_port = (s.getsockname()[1] for s in servers)
    table = f"pcnlab_ray_test_{uuid.uuid4().hex[:6]}"
    try:
        assert _from(inside, here, fenced)                                # reachable before the fence
        control_ports.guard(table, [fenced], this_machine=True)
        assert not _from(inside, here, fenced)                            # another machine: dropped
        assert _from(inside, here, open_port)                             # other ports untouched
        for address in ("127.0.0.1", here):                               # this machine, any of its addresses
            with socket.create_connection((address, fenced), timeout=2):
                pass
    finally:
        control_ports.remove(table)
        for s in servers:
            s.close()
    assert not control_ports.exists(table)
