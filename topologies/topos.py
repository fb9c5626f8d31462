"""The topologies PCN Lab ships, taking link rates (Mbit/s) and queue depths (packets), as layouts
(`TopoLayout`: hosts, switches and links in the order they were added; no Mininet, so checking an
experiment file needs none) that `make_topology` hands to Mininet (mininet_topo.py's PcnTopo).

Hosts are h1..hN with 10.0.0.N/16 and MAC 00:00:00:00:00:NN; switches s1..sM. Each topology names
the roles its hosts play (`roles`), so experiments can place jobs without knowing the numbering.
Link options use Mininet's own names: `bw` (Mbit/s) and `max_queue_size` (packets). On BMv2 they set
the switch's egress queue on that port; on the Linux-bridge variant TCLink applies them with tc.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from pcnlab.errors import UsageError

if TYPE_CHECKING:
    from pcnlab.topologies.mininet_topo import PcnTopo

# The address plan, 10.0.0.0/16: host hN is 10.0.N/256.N%256 (MAC 00:00:00:00:N/256:N%256), below
# 10.0.254.0, where the monitor host of switch sN is 10.0.254.N (MAC 00:00:00:00:fe:N).
PLAN_HOSTS = 254 * 256 - 1      # h1..h65023
PLAN_SWITCHES = 255             # m1..m255
# What one machine holds: each host is a shell in a network namespace of its own (3-4 MB each), each
# switch a BMv2 process; each switch routes every host (ipv4_routes: 1024 entries, p4src/forwarding.p4).
MAX_HOSTS = min(PLAN_HOSTS, 1000)
MAX_SWITCHES = min(PLAN_SWITCHES, 64)
# What a network of these topologies is built with (network.py's NetworkOptions): the switches, and a
# paced host's queue (host_pacing, fair_host_pacing).
SWITCH_KINDS = ("bmv2", "bridge")
HOST_QUEUES = ("fifo", "fair")


class TopoLayout:
    """A topology as its build() lays it out: numbered hosts with the role each plays, switches, and
    links with Mininet's options, each step in the order it was taken (`steps`)."""

    def build(self, *args, **kwargs):  # overridden by each topology
        raise NotImplementedError

    def __init__(self, **params):
        self.roles: dict[str, list[str]] = {}
        self.steps: list[tuple[str, tuple[str, ...], dict[str, Any]]] = []   # (host | switch | link, names, options)
        self._host_count = 0
        self._switch_count = 0
        self.build(**params)

    def _step(self, kind: str, names: tuple[str, ...], **opts) -> None:
        self.steps.append((kind, names, opts))

    def _names(self, kind: str) -> list[str]:
        return [names[0] for k, names, _ in self.steps if k == kind]

    def hosts(self) -> list[str]:
        return self._names("host")

    def switches(self) -> list[str]:
        return self._names("switch")

    def links(self) -> list[tuple[str, ...]]:
        return [names for k, names, _ in self.steps if k == "link"]

    def add_host(self, role: str) -> str:
        self._host_count += 1
        n = self._host_count
        if n > MAX_HOSTS:
            raise UsageError(f"more than {MAX_HOSTS} hosts: one machine runs at most {MAX_HOSTS} (each is a shell in "
                             "a network namespace of its own, and every switch routes every host); use fewer")
        name = f"h{n}"
        self._step("host", (name,), ip=f"10.0.{n // 256}.{n % 256}/16",
                   mac=f"00:00:00:00:{n // 256:02x}:{n % 256:02x}")
        self.roles.setdefault(role, []).append(name)
        return name

    def add_switch(self) -> str:
        self._switch_count += 1
        if self._switch_count > MAX_SWITCHES:
            raise UsageError(f"more than {MAX_SWITCHES} switches: one machine runs at most {MAX_SWITCHES} (each is "
                             "a BMv2 process of its own); use fewer")
        name = f"s{self._switch_count}"
        self._step("switch", (name,), dpid=f"{self._switch_count:016x}")
        return name

    def link(self, a: str, b: str, bw: float | None, queue: int | None) -> None:
        opts = {}
        if bw is not None:
            opts["bw"] = bw
        if queue is not None:
            opts["max_queue_size"] = queue
        self._step("link", (a, b), **opts)

    def add_monitors(self) -> None:
        """A monitor host m<N> on a port of its own on every switch: where the switch's telemetry
        clones go and the queue log collector runs. Monitors get no routes."""
        for sw in self.switches():
            n = int(sw[1:])
            name = f"m{n}"
            self._step("host", (name,), ip=f"10.0.254.{n}/16", mac=f"00:00:00:00:fe:{n:02x}")
            self.roles.setdefault("monitor", []).append(name)
            self._step("link", (sw, name))

    def traffic_hosts(self) -> list[str]:
        """Hosts that carry experiment traffic (all but the monitors)."""
        monitors = set(self.roles.get("monitor", []))
        return [h for h in self.hosts() if h not in monitors]

    def has_loops(self) -> bool:
        return len(self.links()) > len(self.hosts()) + len(self.switches()) - 1


class StarTopo(TopoLayout):
    """One switch, `hosts` hosts; h1's link may have a rate of its own (`first_bw`): a parameter server
    there can push its parameters out faster than each worker's link takes its gradients in."""

    def build(self, hosts: int = 3, bw: float | None = None, queue: int | None = None,
              first_bw: float | None = None):
        s1 = self.add_switch()
        for n in range(hosts):
            self.link(self.add_host("hosts"), s1, first_bw if n == 0 and first_bw is not None else bw, queue)


class DumbbellTopo(TopoLayout):
    """Two switches joined by one bottleneck link, `left` hosts on s1 and `right` hosts on s2."""

    def build(self, left: int = 2, right: int = 2, bw: float | None = None,
              bottleneck_bw: float | None = None, queue: int | None = None):
        s1, s2 = self.add_switch(), self.add_switch()
        for _ in range(left):
            self.link(self.add_host("left"), s1, bw, queue)
        for _ in range(right):
            self.link(self.add_host("right"), s2, bw, queue)
        self.link(s1, s2, bottleneck_bw, queue)


class PcnTreeTopo(TopoLayout):
    """The PCN paper's tree: the parameter server behind root s1, leaves s2 and s3 each with
    `workers_per_leaf` DDL workers and `background_per_leaf` background hosts."""

    def build(self, workers_per_leaf: int = 2, background_per_leaf: int = 3, bw: float | None = None,
              uplink_bw: float | None = None, queue: int | None = None):
        root = self.add_switch()
        self.link(self.add_host("ps"), root, bw, queue)
        for _ in range(2):
            leaf = self.add_switch()
            self.link(leaf, root, uplink_bw if uplink_bw is not None else bw, queue)
            for _ in range(workers_per_leaf):
                self.link(self.add_host("workers"), leaf, bw, queue)
            for _ in range(background_per_leaf):
                self.link(self.add_host("background"), leaf, bw, queue)


class LeafSpineTopo(TopoLayout):
    """`leaves` leaf switches, each linked to every one of `spines` spine switches."""

    def build(self, leaves: int = 2, spines: int = 2, hosts_per_leaf: int = 2,
              bw: float | None = None, fabric_bw: float | None = None, queue: int | None = None):
        spine_names = [self.add_switch() for _ in range(spines)]
        for _ in range(leaves):
            leaf = self.add_switch()
            for spine in spine_names:
                self.link(leaf, spine, fabric_bw if fabric_bw is not None else bw, queue)
            for _ in range(hosts_per_leaf):
                self.link(self.add_host("hosts"), leaf, bw, queue)


TOPOLOGIES: dict[str, type[TopoLayout]] = {
    "star": StarTopo,
    "dumbbell": DumbbellTopo,
    "tree": PcnTreeTopo,
    "leaf-spine": LeafSpineTopo,
}


def layout_of(name: str, monitors: bool = False, **params) -> TopoLayout:
    """Lay out a topology by its name (with a monitor host per switch if asked); an unknown name or
    parameter is a one-line UsageError."""
    cls = TOPOLOGIES.get(name)
    if cls is None:
        close = difflib.get_close_matches(name, TOPOLOGIES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"unknown topology {name!r}{hint}; choose one of {', '.join(TOPOLOGIES)}")
    try:
        topo = cls(**params)
    except TypeError as exc:
        raise UsageError(f"topology {name!r}: {exc}") from None
    if monitors:
        topo.add_monitors()
    return topo


def make_topology(name: str, monitors: bool = False, **params) -> PcnTopo:
    """The topology as Mininet's Topo (mininet_topo.py), for a network to be built from."""
    from pcnlab.topologies.mininet_topo import PcnTopo

    return PcnTopo(layout_of(name, monitors, **params))
