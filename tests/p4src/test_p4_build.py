"""The committed BMv2 JSON and P4Info are what p4c makes of p4src/ now (else: `make p4`)."""

from __future__ import annotations

import pytest

from conftest import needs_p4c
from pcnlab.p4src import BUILD_DIR, P4SRC_DIR, PROGRAMS
from pcnlab.toolchain import compile_p4


@needs_p4c
@pytest.mark.parametrize("main", PROGRAMS)
def test_committed_outputs_are_fresh(tmp_path, main):
    json_path, p4info = compile_p4(P4SRC_DIR, main, tmp_path)
    for fresh in (json_path, p4info):
        committed = BUILD_DIR / fresh.name
        assert committed.exists(), f"{committed} is not committed: run `make p4`"
        assert committed.read_bytes() == fresh.read_bytes(), f"{committed} is stale: run `make p4`"


def test_p4info_names_what_the_controller_uses():
    """Every table, action, digest and counter the controller addresses by name is in the P4Info."""
    text = (BUILD_DIR / "pcn.p4info.txtpb").read_text()
    for name in ("ipv4_routes", "forward", "ddl_pairs", "traffic_class", "set_ddl",
                 "port_mode", "mode_droptail", "mode_ecn", "mode_pcn", "mode_pcn_host", "predrain_windows",
                 "window_open", "pcn_start_codepoint", "burst_digest_t",
                 "to_queue_port_class", "tx_port_class", "marked_port_class",
                 "dropped_port_class"):
        assert f'"{name}"' in text or f'.{name}"' in text, name
