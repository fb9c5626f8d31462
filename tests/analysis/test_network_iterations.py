"""What the network's finder reads of network.json (analysis/network_iterations.py)."""

from __future__ import annotations

from pcnlab.analysis.network_iterations import attached_switch, port_peer

NETWORK = {"switches": {"s1": {"ports": {"1": "h1", "2": "h2", "5": "m1"}}, "s2": {"ports": {"1": "h3"}}}}


def test_each_host_is_attached_to_its_switch_and_each_port_names_its_far_end():
    assert attached_switch(NETWORK) == {"h1": "s1", "h2": "s1", "m1": "s1", "h3": "s2"}
    assert port_peer(NETWORK, "s1", 1) == "h1" and port_peer(NETWORK, "s2", 1) == "h3"
    assert port_peer(NETWORK, "s1", 9) is None and port_peer(NETWORK, "s9", 1) is None and port_peer({}, "s1", 1) is None
