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


# The names the controller addresses in the P4Info, with their fields and parameters:
# tests/controller/test_p4info_names.py.
