"""Routes and queue settings computed from a topology (no Mininet run needed)."""

from __future__ import annotations

import pytest

from pcnlab.errors import UsageError
from pcnlab.rates import rate_pps
from pcnlab.topologies.routing import compute_routes, port_queues
from pcnlab.topologies.topos import make_topology


def test_tree_matches_the_paper():
    topo = make_topology("tree", workers_per_leaf=2, background_per_leaf=3)
    assert topo.switches() == ["s1", "s2", "s3"]
    assert len(topo.roles["ps"]) == 1 and len(topo.roles["workers"]) == 4
    assert len(topo.roles["background"]) == 6
    # The PS hangs off the root; every worker is behind a leaf.
    assert ("s1", topo.roles["ps"][0]) in {tuple(sorted(link)) for link in topo.links()} or \
        (topo.roles["ps"][0], "s1") in set(topo.links())


def test_every_switch_routes_every_host_towards_it():
    topo = make_topology("leaf-spine", leaves=3, spines=2, hosts_per_leaf=2)
    routes = compute_routes(topo)
    hosts = topo.hosts()
    for sw, table in routes.items():
        assert sorted(r.prefix for r in table) == sorted(f"{topo.nodeInfo(h)['ip'].split('/')[0]}/32" for h in hosts)
    # Follow each route hop by hop: it must reach the host without loops.
    for dst in hosts:
        ip = topo.nodeInfo(dst)["ip"].split("/")[0] + "/32"
        for start in topo.switches():
            node, seen = start, set()
            while node != dst:
                assert node not in seen
                seen.add(node)
                port = next(r.port for r in routes[node] if r.prefix == ip)
                node = next(peer for peer in topo.g[node] if topo.port(node, peer)[0] == port)


def test_equal_cost_paths_spread_over_spines():
    topo = make_topology("leaf-spine", leaves=2, spines=2, hosts_per_leaf=2)
    leaf = "s3"
    uplinks = {topo.port(leaf, spine)[0] for spine in ("s1", "s2")}
    used = {r.port for r in compute_routes(topo)[leaf] if r.port in uplinks}
    assert used == uplinks


def test_queue_rates_from_link_rates():
    assert rate_pps(12.112) == 1000  # 1000 full-size frames of 1514 bytes
    topo = make_topology("dumbbell", bw=20, bottleneck_bw=10, queue=60)
    queues = {q.port: q for q in port_queues(topo, "s1")}
    bottleneck = topo.port("s1", "s2")[0]
    assert queues[bottleneck].rate_pps == rate_pps(10) and queues[bottleneck].depth_pkts == 60
    assert all(q.rate_pps == rate_pps(20) for p, q in queues.items() if p != bottleneck)


def test_bad_topology_parameters_are_usage_errors():
    with pytest.raises(UsageError, match="unknown topology 'ring'"):
        make_topology("ring")
    with pytest.raises(UsageError, match="topology 'star'.*hostz"):
        make_topology("star", hostz=3)
