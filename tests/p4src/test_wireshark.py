"""The Wireshark dissector is generated from the program's facts (p4src/wireshark.py); tshark runs it
in tests/controller/test_wireshark_dissector.py."""

from __future__ import annotations

import dataclasses

import pytest

from pcnlab.p4src import facts, wireshark


def test_the_committed_dissector_is_what_the_program_generates():
    assert wireshark.DISSECTOR.read_text() == wireshark.dissector(facts.program_facts()), \
        "docs/wireshark/pcn_telemetry.lua is stale: run `make p4`"


def test_it_follows_the_program():
    f = facts.program_facts()
    text = wireshark.dissector(f)
    assert 'DissectorTable.get("ethertype"):add(0x88B5, pcn)' in text and "local RECORD_BYTES = 44" in text
    assert 't:add(f.ingress_us, tvb(12, 6), tvb(12, 6):uint64())' in text and "t:add(f.dst_host, tvb(42, 2))" in text
    moved = facts.ProgramFacts({**f.constants, "ETHERTYPE_PCN_TELEMETRY": 0x88B6, "TEL_ECT": 0x40}, f.telemetry)
    text = wireshark.dissector(moved)
    assert "add(0x88B6, pcn)" in text and '"ECN-capable on arrival", 8, nil, 0x40)' in text


def test_a_field_without_a_label_stops_the_generator():
    f = facts.program_facts()
    extra = facts.ProgramFacts(f.constants, f.telemetry + (dataclasses.replace(f.telemetry[-1], name="hops", offset=44),))
    with pytest.raises(ValueError, match="no label for hops"):
        wireshark.dissector(extra)
