"""The pilot (experiments/pilot.py): which run it rehearses, when, for how long; and on real BMv2, a sweep
refused up front by its own rehearsal, naming what it tried, remembered per calibration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from pcnlab.experiments.config import load_experiment
from pcnlab.experiments.fit import estimate
from pcnlab.experiments.pilot import PILOT_S, WORTH, heaviest, known, rehearsal, shape, worth

from conftest import ROOT, starved
from small_experiment import small_experiment

CALIBRATION = {"measured": "2026-11-29T07:00:00", "forward_pps": {"off": 12000, "every1": 5000},
               "idle_lag_us": {"p50": 60, "p95": 90, "n": 100}}


def _runs(tmp_path, text: str, *overrides: str):
    spec = tmp_path / "e.yaml"
    spec.write_text(text)
    return load_experiment(spec, list(overrides)).runs()


def test_a_shape_leaves_out_the_name_seed_and_length_but_not_the_regime(tmp_path):
    runs = _runs(tmp_path, small_experiment("shapes", "ecn", 10, 20, "repetitions: 2\nsweep:\n  mode: [ecn, pcn]\n"))
    by_mode = {}
    for run in runs:
        by_mode.setdefault(run.mode.kind, set()).add(shape(run))
    assert len(by_mode["ecn"]) == 1 and len(by_mode["pcn"]) == 1       # its repetitions: one shape
    assert by_mode["ecn"] != by_mode["pcn"]
    slower = _runs(tmp_path, small_experiment("shapes", "ecn", 10, 20), "time_scale=2")[0]
    longer = _runs(tmp_path, small_experiment("shapes", "ecn", 10, 40))[0]
    assert shape(longer) == shape(runs[0]) != shape(slower)


def test_the_heaviest_run_is_rehearsed_for_a_pilots_length_with_the_schedule_inside_it(tmp_path):
    text = small_experiment("heavy", "ecn", 10, 60, "sweep:\n  topology.bottleneck_bw: [5, 10]\n")
    runs = _runs(tmp_path, text + "schedule:\n  - {at_s: 5, link: s1-s2, bw: 8}\n  - {at_s: 50, link: s1-s2, bw: 9}\n")
    fits = estimate(runs, CALIBRATION)
    chosen = heaviest(runs, fits)
    assert chosen is max(zip(runs, fits), key=lambda pair: pair[1].share)[0]
    short = rehearsal(chosen)
    assert short.duration_s == chosen.warmup_s + PILOT_S and short.name == f"pilot-{chosen.name}"
    assert [c.at_s for c in short.schedule] == [5]
    assert rehearsal(_runs(tmp_path, small_experiment("brief", "ecn", 10, 6))[0]).duration_s == 6


def test_a_sweep_is_piloted_when_it_is_at_least_worth_pilots_long(tmp_path):
    assert worth(_runs(tmp_path, small_experiment("long", "ecn", 10, WORTH * PILOT_S)))
    assert not worth(_runs(tmp_path, small_experiment("short", "ecn", 10, WORTH * PILOT_S / 2 - 1,
                                                      "repetitions: 2\n")))
    run = _runs(tmp_path, small_experiment("k", "ecn", 10, 6))[0]
    assert known(CALIBRATION, run) is None
    verdict = {"trusted": False, "reason": "r", "folder": "f", "time_scale": 1.0, "measured": "m"}
    assert known({**CALIBRATION, "pilots": {shape(run): verdict}}, run).reason == "r"


def _pcnlab(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pcnlab.app.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


@pytest.mark.root
@pytest.mark.bmv2
@pytest.mark.slow
def test_an_untrusted_pilot_refuses_the_sweep_in_one_line_naming_what_it_tried(machine_calibration, tmp_path):
    # min_idle_pct 100: a verdict no machine passes (never idle at its busiest), measured for real
    calibration = tmp_path / "calibration.json"
    calibration.write_text(open(machine_calibration["path"]).read())
    env = {**os.environ, "PCNLAB_CALIBRATION": str(calibration)}
    spec = tmp_path / "piloted.yaml"
    spec.write_text(small_experiment("piloted", "ecn", 10, 4))
    args = ["run", str(spec), "--results", str(tmp_path / "results"), "--pilot", "--no-plots", "--set", "fidelity.min_idle_pct=100"]
    proc = _pcnlab(*args, env=env)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("pcnlab: will not keep up here: its pilot was untrusted ("), lines[0]
    assert "; at time_scale 2 too (" in lines[0] and "use fewer processes" in lines[0]
    assert not (tmp_path / "results" / "piloted").exists()                      # no run of the sweep started
    pilots = sorted((tmp_path / "results" / "piloted-pilot").glob("2*/pilot-*/fidelity.json"))
    for pilot in pilots:
        reasons = json.loads(pilot.read_text())["reasons"]
        assert any(r.startswith("the machine was ") and "at least 100 %" in r for r in reasons), reasons
    assert len(pilots) == 2
    kept = json.loads(calibration.read_text())["pilots"]
    assert sorted(v["time_scale"] for v in kept.values()) == [1.0, 2.0]
    started = time.monotonic()                                                  # once per calibration
    again = _pcnlab(*args, env=env)
    assert again.returncode == 2 and again.stderr == proc.stderr
    assert time.monotonic() - started < 20 and len(list((tmp_path / "results").glob("*/2*/pilot-*"))) == 2
    dry = _pcnlab(*args, "--dry-run", env=env)
    assert dry.returncode == 0 and "pilot: run's shape was rehearsed here " in dry.stdout and ": untrusted (" in dry.stdout, dry.stdout


@pytest.mark.root
@pytest.mark.bmv2
@pytest.mark.slow
def test_a_trusted_pilot_lets_the_sweep_run(machine_calibration, tmp_path):
    calibration = tmp_path / "calibration.json"
    calibration.write_text(open(machine_calibration["path"]).read())
    env = {**os.environ, "PCNLAB_CALIBRATION": str(calibration)}
    spec = tmp_path / "light.yaml"
    spec.write_text(small_experiment("light", "ecn", 10, 4))
    proc = _pcnlab("run", str(spec), "--results", str(tmp_path / "results"), "--pilot", "--no-plots", env=env)
    if proc.returncode == 2:
        pilot = next((tmp_path / "results" / "light-pilot").glob("2*/pilot-*/fidelity.json"))
        why = starved(json.loads(pilot.read_text()))
        if why:
            pytest.skip(why)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "pilot: run for 4 s" in proc.stdout and "pilot: trusted" in proc.stdout
    assert list((tmp_path / "results" / "light").glob("latest/*/metrics.json"))
    assert [v["trusted"] for v in json.loads(calibration.read_text())["pilots"].values()] == [True]
