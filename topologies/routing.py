"""Routes for every switch of a topology: one /32 per host along a shortest path.

Where several shortest paths exist (leaf-spine), the next hop is chosen by the destination host's
number, so traffic to different hosts spreads over the spines and every run picks the same paths.
"""

from __future__ import annotations

from collections import deque

from mininet.topo import Topo

from pcnlab.controller.endpoints import PortQueue, Route
from pcnlab.rates import rate_pps


def _distances_to(topo: Topo, target: str) -> dict[str, int]:
    dist = {target: 0}
    todo = deque([target])
    while todo:
        node = todo.popleft()
        for peer in topo.g[node]:
            # Hosts do not forward: paths may end at a host but never pass through one.
            if peer not in dist and (node == target or topo.isSwitch(node)):
                dist[peer] = dist[node] + 1
                todo.append(peer)
    return dist


def compute_routes(topo: Topo) -> dict[str, list[Route]]:
    routes: dict[str, list[Route]] = {sw: [] for sw in topo.switches()}
    hosts = topo.traffic_hosts() if hasattr(topo, "traffic_hosts") else topo.hosts()
    for index, host in enumerate(hosts):
        info = topo.nodeInfo(host)
        ip = info["ip"].split("/")[0]
        mac = info["mac"]
        dist = _distances_to(topo, host)
        for sw in topo.switches():
            if sw not in dist:
                continue
            hops = sorted(
                peer for peer in topo.g[sw]
                if dist.get(peer) == dist[sw] - 1 and (peer == host or topo.isSwitch(peer))
            )
            nxt = hops[index % len(hops)]
            port = topo.port(sw, nxt)[0]
            routes[sw].append(Route(f"{ip}/32", port, mac))
    return routes


def ports_of(topo: Topo, switch: str) -> dict[int, str]:
    return {topo.port(switch, peer)[0]: peer for peer in sorted(topo.g[switch])}


def port_queues(topo: Topo, switch: str) -> list[PortQueue]:
    """The egress queue of each of the switch's ports, from the options of the link behind it."""
    queues = []
    for port, peer in ports_of(topo, switch).items():
        opts = topo.linkInfo(switch, peer)
        bw, depth = opts.get("bw"), opts.get("max_queue_size")
        if bw is not None or depth is not None:
            queues.append(PortQueue(port, rate_pps(bw) if bw is not None else None, depth))
    return queues
