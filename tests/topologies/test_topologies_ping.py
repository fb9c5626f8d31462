"""Every host pings every other across each topology: BMv2 switches programmed by our controller, and
the Linux-bridge variant."""

from __future__ import annotations

import json

import pytest

from conftest import needs_bmv2, needs_mininet
from pcnlab.experiments.pingall import run_slice
from pcnlab.topologies.network import NetworkOptions


@needs_bmv2
@pytest.mark.parametrize("topology", ["star", "dumbbell", "tree", "leaf-spine"])
def test_ping_all_through_bmv2(topology, tmp_path):
    result = run_slice(topology, NetworkOptions(switch="bmv2"), tmp_path, say=lambda *_: None)
    assert result.sent > 0
    assert result.received == result.sent
    desc = json.loads((result.run_dir / "network.json").read_text())
    # The switches really were BMv2 processes, each with its own P4Runtime port on loopback.
    grpc = [sw["grpc"] for sw in desc["switches"].values()]
    assert all(addr.startswith("127.0.0.1:") for addr in grpc) and len(set(grpc)) == len(grpc)
    assert json.loads((result.run_dir / "status.json").read_text())["status"] == "finished"


@needs_mininet
@pytest.mark.parametrize("topology", ["star", "dumbbell", "tree"])
def test_ping_all_through_linux_bridges(topology, tmp_path):
    result = run_slice(topology, NetworkOptions(switch="bridge"), tmp_path, say=lambda *_: None)
    assert result.sent > 0
    assert result.received == result.sent
