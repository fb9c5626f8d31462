"""The program's facts (p4src/facts.py): build/facts.json is what the program says now, its values reach
the controller and the collector from there, and a change in the P4 source changes them."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import needs_p4c
from pcnlab.controller import dataplane, telemetry
from pcnlab.p4src import BUILD_DIR, MAIN_SOURCE, P4SRC_DIR, facts
from pcnlab.toolchain import compile_p4


@needs_p4c
def test_committed_facts_are_the_programs(tmp_path):
    json_path, _ = compile_p4(P4SRC_DIR, MAIN_SOURCE, tmp_path)
    committed = json.loads((BUILD_DIR / facts.FACTS_FILE).read_text())
    assert committed == facts.extract(P4SRC_DIR, json_path), "p4src/build/facts.json is stale: run `make p4`"


def test_the_controller_and_the_collector_take_them_from_the_program():
    f = facts.program_facts()
    assert (dataplane.MAX_PORTS, dataplane.MAX_JOBS) == (f["MAX_PORTS"], f["MAX_JOBS"]) == (64, 16)
    assert dataplane.CLASS_NAMES == {f["CLASS_BACKGROUND"]: "background", f["CLASS_DDL"]: "ddl"}
    assert f["CLASSES"] == len(dataplane.CLASS_NAMES)          # the counters' slots: port * CLASSES + class
    assert telemetry.ETHERTYPE_PCN_TELEMETRY == f["ETHERTYPE_PCN_TELEMETRY"] == 0x88B5
    # The record: its size in the struct the collector unpacks, in the layout, and in the clone's truncation.
    assert telemetry.RECORD.size == f.telemetry_bytes == f["TELEMETRY_FRAME_BYTES"] - telemetry.ETH_HEADER == 44
    assert [x.offset for x in f.telemetry[:3]] == [0, 4, 6] and f.telemetry[-1].offset == 42
    assert telemetry.FLAG_ANNOUNCE == f["TEL_ANNOUNCE"] and telemetry.FLAG_BEHIND == f["TEL_BEHIND"]
    assert len(f.prefixed("TEL_")) == 7


def test_a_change_in_the_source_is_a_change_in_the_facts(tmp_path):
    src = tmp_path / "p4src"
    shutil.copytree(P4SRC_DIR, src, ignore=shutil.ignore_patterns("build", "__pycache__", "*.py"))
    headers = src / "headers.p4"
    text = headers.read_text()
    assert "#define MAX_JOBS 16" in text and "ETHERTYPE_PCN_TELEMETRY = 0x88B5;" in text
    headers.write_text(text.replace("#define MAX_JOBS 16", "#define MAX_JOBS 8")
                       .replace("ETHERTYPE_PCN_TELEMETRY = 0x88B5;", "ETHERTYPE_PCN_TELEMETRY = 0x88B6;"))
    changed = facts.parse(facts.extract(src, BUILD_DIR / "pcn.json"))
    assert (changed["MAX_JOBS"], changed["ETHERTYPE_PCN_TELEMETRY"]) == (8, 0x88B6)
    with pytest.raises(KeyError, match="make p4"):
        changed["NO_SUCH"]
