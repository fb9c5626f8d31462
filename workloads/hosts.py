"""Where workloads run: the Mininet hosts of one network, or this machine's loopback (no network).

`Hosts` starts processes in a host, gives its address and interface, and keeps what lives as long as
the network: the per-host kernel settings the workloads made (ECN, a PyTorch job's default congestion
control: Linux keeps both per network namespace, so two jobs on one host must agree) and the ports it
handed out. On loopback every "host" is 127.0.0.N and no host setting may be made.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

from pcnlab.errors import PcnLabError, UsageError

ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
TCP_ECN = "net.ipv4.tcp_ecn"
TCP_ECN_FALLBACK = "net.ipv4.tcp_ecn_fallback"
TCP_CC = "net.ipv4.tcp_congestion_control"
FIRST_PORT = 20000       # ports handed out in a Mininet network, counting up


def allow_congestion_control(cc: str) -> None:
    """A network namespace other than the first may only default to an *allowed* congestion control
    (the kernel says EPERM otherwise, even to root); the allowed list is machine-wide, so add it there."""
    try:
        allowed = ALLOWED_CC.read_text().split()
        if cc not in allowed:
            ALLOWED_CC.write_text(" ".join(allowed + [cc]))
    except OSError:
        pass  # not root, or no such file: the check after the sysctl says what went wrong


def ecn_value(on: bool) -> str:
    # 1: request ECN on outgoing connections (and accept it); 2 (the kernel default): only accept it.
    return "1" if on else "2"


class Hosts:
    """The hosts of `net` (a running PcnNetwork), or this machine's loopback when net is None."""

    def __init__(self, net=None):
        self.net = net
        self.settings: dict[tuple[str, str], tuple[str, str]] = {}  # (host, key) -> (value, owner)
        self.next_port = FIRST_PORT

    @property
    def loopback(self) -> bool:
        return self.net is None

    def check(self, names) -> None:
        if self.net is None:
            return
        known = set(self.net.net.nameToNode)
        for name in names:
            if name not in known or name not in {h.name for h in self.net.net.hosts}:
                raise UsageError(f"unknown host {name!r}; this network's hosts are "
                                 f"{', '.join(h.name for h in self.net.net.hosts)}")

    def ip(self, name: str) -> str:
        if self.net is None:
            m = re.fullmatch(r"h(\d+)", name)
            n = int(m.group(1)) if m else (sum(name.encode()) % 250)
            return f"127.0.{n // 250}.{n % 250 + 1}"
        return self.net.host(name).IP()

    def iface(self, name: str) -> str:
        return "lo" if self.net is None else self.net.host(name).defaultIntf().name

    def netns_pid(self, name: str) -> int:
        """A process in host `name`'s network namespace (its Mininet shell; on loopback: this one), which
        a container joins (`--network ns:/proc/<pid>/ns/net`)."""
        return os.getpid() if self.net is None else self.net.host(name).pid

    def popen(self, name: str, argv: list[str], **kwargs) -> subprocess.Popen:
        if self.net is None:
            return subprocess.Popen(argv, **kwargs)
        return self.net.host(name).popen(argv, **kwargs)

    def port(self, wanted: int = 0) -> int:
        """`wanted`, or a port no earlier workload of this network was given (on loopback: one the
        kernel says is free now)."""
        if wanted:
            return wanted
        if self.loopback:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                return s.getsockname()[1]
        self.next_port += 1
        return self.next_port - 1

    # --- per-host kernel settings ----------------------------------------------------------------

    def plan_settings(self, owner: str, wanted: dict[tuple[str, str], str]) -> list[tuple[str, str, str]]:
        """Check per-host settings against what earlier jobs and flows set; return the ones to apply."""
        todo = []
        for (host, key), value in wanted.items():
            if self.loopback:
                what = "ECN" if key == TCP_ECN else "a PyTorch job's congestion control"
                raise UsageError(f"{owner}: {what} is set per host network namespace; on loopback that would "
                                 f"change this machine, so run it in a Mininet network (or leave it unset)")
            previous = self.settings.get((host, key))
            if previous is not None and previous[0] != value:
                raise UsageError(f"{owner}: host {host} already has {key}={previous[0]} for {previous[1]}; "
                                 f"Linux sets it per host (network namespace), so put these on different hosts")
            todo.append((host, key, value))
        return todo

    def apply_settings(self, owner: str, todo: list[tuple[str, str, str]]) -> None:
        for host, key, value in todo:
            self.sysctl(host, key, value)
            self.settings.setdefault((host, key), (value, owner))
            if key == TCP_ECN and value == ecn_value(True):
                # Linux drops ECN from a connection whose SYN had to be sent again (RFC 3168's fallback):
                # behind a full queue that made one background flow in six non-ECT, silently, and the
                # ecn and pcn runs it fell in met a drop-tail queue. A host asked for ECN keeps it.
                self.sysctl(host, TCP_ECN_FALLBACK, "0")

    def sysctl(self, name: str, key: str, value: str) -> None:
        host = self.net.host(name)
        if key == TCP_CC:
            allow_congestion_control(value)
        host.cmd(f"sysctl -qw {key}={value}")
        got = host.cmd(f"cat /proc/sys/{key.replace('.', '/')}").strip()
        if got != value:
            raise PcnLabError(f"could not set {key}={value} in host {name} (it reads {got!r})")
