"""Plain descriptions of the switches the controller drives: what crosses from topologies/ to controller/."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Route:
    """Send packets for `prefix` (a.b.c.d/len) out of `port`, rewriting the destination MAC."""

    prefix: str
    port: int
    dst_mac: str


@dataclass(frozen=True)
class PortQueue:
    """BMv2's egress queue on one port: its drain rate (packets/s) and depth (packets); None keeps BMv2's."""

    port: int
    rate_pps: int | None = None
    depth_pkts: int | None = None


@dataclass(frozen=True)
class SwitchEndpoint:
    """One running BMv2 switch as the controller sees it."""

    name: str
    device_id: int
    grpc_address: str  # host:port of its P4Runtime server
    thrift_port: int
    ports: dict[int, str] = field(default_factory=dict)  # port number -> the peer node's name
    routes: tuple[Route, ...] = ()
    queues: tuple[PortQueue, ...] = ()


def save_endpoints(endpoints: list[SwitchEndpoint], path: Path) -> None:
    """Written into a run folder, so `pcnlab controller` can drive a network it did not start."""
    Path(path).write_text(json.dumps([asdict(ep) for ep in endpoints], indent=1))


def load_endpoints(path: Path) -> list[SwitchEndpoint]:
    out = []
    for raw in json.loads(Path(path).read_text()):
        raw["ports"] = {int(k): v for k, v in raw["ports"].items()}
        raw["routes"] = tuple(Route(**r) for r in raw["routes"])
        raw["queues"] = tuple(PortQueue(**q) for q in raw["queues"])
        out.append(SwitchEndpoint(**raw))
    return out
