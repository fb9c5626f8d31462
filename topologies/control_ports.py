"""The switches' control ports, reachable from this machine's loopback only.

BMv2's thrift server listens on every address (simple_switch_grpc has `--thrift-port` and no address
option) and thrift has no authentication: anyone who reaches the machine could add table entries,
change queue rates or load another pipeline into a running experiment. gRPC (P4Runtime) is bound to
127.0.0.1 by the switch's command line already. Of the ways to close thrift (a patch to BMv2's build,
a preloaded bind() shim, packet filtering), filtering needs no rebuild, works with any BMv2 binary
(p4tools' build, Ubuntu's p4lang packages) and on every supported system (nftables is Linux's
firewall on Debian 12 and Ubuntu 24.04): one nftables table per network drops TCP to the switches'
thrift and gRPC ports unless addressed to loopback. Mininet hosts live in their own namespaces and have no
route to this one; a connection from this machine to its own non-loopback address arrives on `lo` with
that address as destination, and is dropped like one from outside.

The table is recorded in the run's ledger before it is made, so `pcnlab clean` removes it after a
killed run, and removed when the network stops.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable

from pcnlab.errors import PcnLabError

TABLE_PREFIX = "pcnlab_"
_TABLE = re.compile(r"^pcnlab_[A-Za-z0-9_]+$")
_NFT_TIMEOUT_S = 10.0


def table_name(run_id: str) -> str:
    """The nftables table of one run's network (nft names: letters, digits, _)."""
    return TABLE_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", run_id)[-48:]


def ruleset(table: str, ports: Iterable[int], this_machine: bool = False) -> str:
    """The nft script that makes `table`: TCP to `ports` dropped unless addressed to loopback, or
    (`this_machine`) unless it comes from this machine itself, to any of its addresses (it arrives on
    `lo`): a server that connects to itself by the machine's address (Ray) keeps working."""
    listed = ", ".join(str(p) for p in sorted(set(ports)))
    rules = ([f'    tcp dport {{ {listed} }} iifname != "lo" drop\n'] if this_machine else
             [f"    tcp dport {{ {listed} }} ip daddr != 127.0.0.0/8 drop\n",
              f"    tcp dport {{ {listed} }} ip6 daddr != ::1 drop\n"])
    return (f"table inet {table} {{\n"
            f"  chain input {{\n"
            f"    type filter hook input priority -10; policy accept;\n"
            + "".join(rules) +
            f"  }}\n"
            f"}}\n")


def why_unguarded() -> str | None:
    """None when nftables can guard the ports here, or one line saying why not and what fixes it."""
    if shutil.which("nft") is None:
        return "nft (nftables) is not installed: `make deps`"
    probe = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, timeout=_NFT_TIMEOUT_S)
    if probe.returncode != 0:
        return f"nftables does not work here ({(probe.stderr.strip().splitlines() or ['no output'])[-1]})"
    return None


def guard(table: str, ports: Iterable[int], this_machine: bool = False) -> None:
    """Make the table (replacing one of the same name); PcnLabError in one line if nft refuses."""
    ports = list(ports)
    if not _TABLE.match(table) or not ports:
        raise PcnLabError(f"control-port guard: bad table {table!r} or no ports")
    why = why_unguarded()
    if why is not None:
        raise PcnLabError(f"cannot close the switches' thrift ports to the network: {why}")
    remove(table)
    made = subprocess.run(["nft", "-f", "-"], input=ruleset(table, ports, this_machine), capture_output=True, text=True,
                          timeout=_NFT_TIMEOUT_S)
    if made.returncode != 0:
        raise PcnLabError(f"nft refused the control-port table {table}: "
                          f"{(made.stderr.strip().splitlines() or ['no output'])[-1]}")


def exists(table: str) -> bool:
    if shutil.which("nft") is None:
        return False
    return subprocess.run(["nft", "list", "table", "inet", table], capture_output=True,
                          timeout=_NFT_TIMEOUT_S).returncode == 0


def remove(table: str) -> bool:
    """Delete the table if it is there; True when it was."""
    if not _TABLE.match(table) or not exists(table):
        return False
    subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True, timeout=_NFT_TIMEOUT_S)
    return not exists(table)
