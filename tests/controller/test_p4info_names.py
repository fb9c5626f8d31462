"""Every P4Info name the controller uses is the program's: the one list of them (controller/dataplane.py:
TABLES with their match fields and actions, ACTIONS with their parameters, the counters, the digest and
its fields) held to p4src/build/pcn.p4info.txtpb; the entries are built only through that list; every
kind of entry the controller writes encodes against the P4Info (finsy's own check, no switch). And the
check finds a wrong name, a field or parameter too many or missing, an action the table lacks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

fy = pytest.importorskip("finsy")

from pcnlab.controller import dataplane  # noqa: E402
from pcnlab.controller.endpoints import Route  # noqa: E402
from pcnlab.controller.forwarding import route_entry  # noqa: E402
from pcnlab.controller.modes import MODES  # noqa: E402
from pcnlab.p4src import program_p4info  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("controller", "topologies", "workloads", "experiments", "analysis", "app", "pcnlab", "bench")
FINSY_BY_NAME = {"P4TableEntry", "P4TableAction", "P4TableMatch", "P4CounterEntry", "P4DigestEntry"}


@pytest.fixture(scope="module")
def schema():
    path = program_p4info("pcn")
    if not path.exists():
        pytest.skip(f"{path} is missing: run `make p4`")
    return fy.P4Schema(path)


def _names(entities) -> set[str]:
    return {getattr(e, "alias", None) or e.name for e in entities}


def p4info_problems(schema, tables, actions, counters, digests) -> list[str]:
    """What in the controller's lists the P4Info does not have as listed (empty: all of it)."""
    out = []
    for table, (fields, table_actions) in tables.items():
        found = schema.tables.get(table)
        if found is None:
            out.append(f"table {table}: not in the P4Info")
            continue
        if set(fields) != _names(found.match_fields):
            have = sorted(_names(found.match_fields))
            out.append(f"table {table}: match fields {sorted(fields)}, the P4Info's {have}")
        out += [f"table {table}: no action {a}" for a in table_actions if a not in _names(found.actions)]
    for action, params in actions.items():
        found = schema.actions.get(action)
        if found is None:
            out.append(f"action {action}: not in the P4Info")
        elif set(params) != _names(found.params):
            out.append(f"action {action}: parameters {sorted(params)}, the P4Info's {sorted(_names(found.params))}")
    out += [f"counter {c}: not in the P4Info" for c in counters if schema.counters.get(c) is None]
    for digest, fields in digests.items():
        found = schema.digests.get(digest)
        if found is None:
            out.append(f"digest {digest}: not in the P4Info")
        elif set(fields) != set(found.type_spec.members):
            out.append(f"digest {digest}: fields {sorted(fields)}, the P4Info's {sorted(found.type_spec.members)}")
    return out


def _controllers_lists() -> tuple:
    return (dataplane.TABLES, dataplane.ACTIONS, tuple(dataplane.PORT_COUNTERS.values()),
            {dataplane.BURST_DIGEST: dataplane.DIGEST_FIELDS})


def test_every_name_the_controller_uses_is_the_programs(schema):
    assert p4info_problems(schema, *_controllers_lists()) == []
    assert set(dataplane.MODE_ACTIONS) == set(MODES)          # every mode has its port_mode action


def test_the_check_finds_what_the_program_does_not_have(schema):
    tables, actions, counters, digests = _controllers_lists()
    broken_tables = {**tables, "port_modes": (("port",), ()),
                     "predrain_windows": (("port",), ("window_open", "window_close"))}
    broken_actions = {**actions, "mode_ecn": dataplane.SWITCH_PARAMS, "lose": ("rate_per_million", "seed")}
    problems = p4info_problems(schema, broken_tables, broken_actions, counters + ("rx_port_class",),
                               {dataplane.BURST_DIGEST: dataplane.DIGEST_FIELDS[1:]})
    assert problems == [
        "table predrain_windows: match fields ['port'], the P4Info's ['now_us', 'port']",
        "table predrain_windows: no action window_close",
        "table port_modes: not in the P4Info",
        "action lose: parameters ['rate_per_million', 'seed'], the P4Info's ['rate_per_million']",
        "action mode_ecn: parameters ['switch_id', 'telemetry_every', 'telemetry_session'], the P4Info's "
        "['k', 'k_behind', 'switch_id', 'telemetry_every', 'telemetry_session']",
        "counter rx_port_class: not in the P4Info",
        "digest burst_digest_t: fields ['idle', 'job', 'kind', 'queue', 'ts'], the P4Info's "
        "['idle', 'job', 'kind', 'port', 'queue', 'ts']",
    ]


def test_entries_are_built_only_from_the_list():
    with pytest.raises(ValueError, match="dataplane.ACTIONS"):
        dataplane.action("mode_ecn", switch_id=1, telemetry_every=0, telemetry_session=100)   # k missing
    with pytest.raises(ValueError, match="dataplane.TABLES"):
        dataplane.table_entry("port_modes", {"port": 1})
    with pytest.raises(ValueError, match="dataplane.TABLES"):
        dataplane.table_entry("gradient_loss", {"port": 1}, dataplane.action("window_open"))
    # ... and nowhere else: finsy's entries by name are made in dataplane.py alone.
    makers = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in FINSY_BY_NAME:
                    makers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert makers and all(m.startswith("controller/dataplane.py:") for m in makers), makers


def test_every_entry_the_controller_writes_encodes_against_the_p4info(schema):
    config = dataplane.DataPlaneConfig(
        switch_id=1, modes={p: dataplane.PortMode(mode) for p, mode in enumerate(MODES, start=1)},
        classes=(dataplane.FlowClass(job=1, src="10.0.0.1/32", dst="10.0.0.2/32"),
                 dataplane.FlowClass(job=2, src="10.0.0.0/24", proto=6, sport=(5000, 5100), dport=(1, 2))),
        telemetry_port=9, pcn_start_dscp=3)
    entries = [config.config_entry(), *(config.mode_entry(p, m) for p, m in config.modes.items()),
               *config.static_entries(), dataplane.window_entry(1, 100, 200), dataplane.loss_entry(1, 0.1),
               route_entry(Route("10.0.0.2/32", 2, "00:00:00:00:00:02"))]
    for entry in entries:
        entry.encode(schema)        # a name, field or parameter the P4Info lacks raises
    assert {e.table_id for e in entries if isinstance(e, fy.P4TableEntry)} == set(dataplane.TABLES)
