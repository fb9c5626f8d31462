"""The calibration file (pcnlab/calibration.py): whose it is, and what happens to one that is not this
machine's. The measuring itself runs on real BMv2 in tests/experiments/test_calibrate_bmv2.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pcnlab.calibration import (describe, load_calibration, machine_identity, provenance, read_calibration,
                                save_calibration, set_aside)

SLOW_VM = Path(__file__).resolve().parents[3] / "shared" / "machines" / "slow-vm-calibration.json"


def _figures() -> dict:
    return {"kind": "quick", "forward_pps": {"off": 12000.0, "every1": 5000.0},
            "idle_lag_us": {"p50": 69.0, "p95": 296.0, "n": 1425, "at_pps": 500}}


def test_this_machine_is_named_by_host_cpu_cores_and_boot():
    here = machine_identity()
    assert set(here) == {"host", "cpu_model", "cpus", "boot_id"}
    assert here["cpus"] >= 1 and here["host"]
    assert here["cpu_model"] and here["boot_id"]        # Linux: /proc/cpuinfo and the boot id
    assert machine_identity() == here                     # the same machine, the same name


def test_a_file_written_here_belongs_here(tmp_path):
    path = save_calibration(_figures(), tmp_path / "calibration.json")
    found = read_calibration(path)
    assert found.state == "ok", found.why
    assert found.data["machine"] == machine_identity() and found.data["path"] == str(path)
    assert load_calibration(path)["idle_lag_us"]["p95"] == 296.0


@pytest.mark.parametrize("field, value, said", [
    ("host", "elsewhere", "host 'elsewhere'"),
    ("cpu_model", "Another CPU", "CPU model 'Another CPU'"),
    ("cpus", 64, "core count 64"),
    ("boot_id", "0000", "before this machine's last boot"),
])
def test_a_file_of_another_machine_is_foreign_and_says_why(tmp_path, field, value, said):
    path = save_calibration(_figures(), tmp_path / "calibration.json")
    data = json.loads(path.read_text())
    data["machine"][field] = value
    path.write_text(json.dumps(data))
    found = read_calibration(path)
    assert found.state == "foreign" and said in found.why, found.why
    assert load_calibration(path) is None                 # never used to judge a run here
    assert str(path) in found.line() and said in found.line()


def test_the_slow_vms_calibration_is_not_this_machines():
    if not SLOW_VM.exists():
        pytest.skip(f"{SLOW_VM} is not beside this checkout")
    found = read_calibration(SLOW_VM)
    assert found.state == "foreign" and "names no machine" in found.why


@pytest.mark.parametrize("text, said", [
    ("{not json", "is not JSON"),
    ("[1, 2]", "is not a calibration"),
    ('{"forward_pps": 7}', "is not a calibration"),
    ("", "is not JSON"),
])
def test_a_damaged_file_is_named_and_set_aside_whole(tmp_path, text, said):
    path = tmp_path / "calibration.json"
    path.write_text(text)
    found = read_calibration(path)
    assert found.state == "damaged" and said in found.why
    kept = set_aside(found)
    assert not path.exists() and kept.parent == tmp_path and kept.read_text() == text   # nothing lost
    assert kept.name.startswith("calibration.damaged-") and kept.suffix == ".json"
    assert read_calibration(path).state == "absent"


def test_an_unreadable_file_is_damaged_not_a_traceback(tmp_path):
    (tmp_path / "calibration.json").mkdir()
    found = read_calibration(tmp_path / "calibration.json")
    assert found.state == "damaged" and "cannot be read" in found.why


def test_absent_says_the_first_run_measures(tmp_path):
    found = read_calibration(tmp_path / "none.json")
    assert found.state == "absent" and found.data is None
    assert "the first run measures this machine" in found.line()


def test_what_a_verdict_records_of_its_calibration(tmp_path):
    data = load_calibration(save_calibration(_figures(), tmp_path / "c.json"))
    record = provenance(data)
    assert record["source"] == str(tmp_path / "c.json") and record["kind"] == "quick"
    assert record["idle_lag_p95_us"] == 296.0 and record["measured"] == data["measured"]
    assert record["machine"] == machine_identity()
    assert provenance(None) == {"source": "default (not calibrated)"}
    line = describe(data)
    assert "quick calibration" in line and "idle lag p95 296 µs" in line and "12,000 packets/s" in line

