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
from pcnlab.experiments.config.timescale import rescaled
from pcnlab.experiments.pilot import WORTH, chosen, heaviest, known, order, refused, shape

from conftest import ROOT, starved
from small_experiment import small_experiment

CALIBRATION = {"measured": "2026-11-29T07:00:00", "forward_pps": {"off": 12000, "every1": 5000},
               "idle_lag_us": {"p50": 60, "p95": 90, "n": 100}}


def _runs(tmp_path, text: str, *overrides: str):
    spec = tmp_path / "e.yaml"
    spec.write_text(text)
    return load_experiment(spec, list(overrides)).runs()


def test_a_shape_leaves_out_the_name_and_seed_but_not_the_regime_or_length(tmp_path):
    runs = _runs(tmp_path, small_experiment("shapes", "ecn", 10, 20, "repetitions: 2\nsweep:\n  mode: [ecn, pcn]\n"))
    by_mode = {}
    for run in runs:
        by_mode.setdefault(run.mode.kind, set()).add(shape(run))
    assert len(by_mode["ecn"]) == 1 and len(by_mode["pcn"]) == 1       # its repetitions: one shape
    assert by_mode["ecn"] != by_mode["pcn"]
    slower = _runs(tmp_path, small_experiment("shapes", "ecn", 10, 20), "time_scale=2")[0]
    longer = _runs(tmp_path, small_experiment("shapes", "ecn", 10, 40))[0]
    assert len({shape(runs[0]), shape(slower), shape(longer)}) == 3
    assert shape(rescaled(runs[0], 2)) == shape(slower)           # as --set time_scale=2 makes it


def test_the_heaviest_run_goes_first_in_a_sweep_of_worth_runs(tmp_path):
    runs = _runs(tmp_path, small_experiment("heavy", "ecn", 10, 60, "sweep:\n  topology.bottleneck_bw: [5, 10, 8]\n"))
    assert len(runs) == WORTH
    fits = estimate(runs, CALIBRATION)
    first = heaviest(runs, fits)
    assert first is max(zip(runs, fits), key=lambda pair: pair[1].share)[0] and first is runs[1]
    assert chosen(runs, CALIBRATION, asked=False) is first and order(runs, first) == [runs[1], runs[0], runs[2]]
    assert chosen(runs[:2], CALIBRATION, asked=False) is None and chosen(runs[:2], CALIBRATION, asked=True) is runs[1]
    assert chosen(runs, None, asked=True) is None                      # not calibrated: nothing to judge by


def test_a_shape_judged_here_is_not_judged_again_and_one_refused_is_refused_at_once(tmp_path):
    runs = _runs(tmp_path, small_experiment("k", "ecn", 10, 6), )
    run = runs[0]
    assert known(CALIBRATION, run) is None and refused(chosen(runs, CALIBRATION, asked=True), CALIBRATION) is None
    verdict = {"trusted": False, "reason": "r", "folder": "f", "time_scale": 1.0, "measured": "m"}
    slower = {**verdict, "trusted": True, "reason": "", "folder": "g", "time_scale": 2.0}
    judged = {**CALIBRATION, "pilots": {shape(run): verdict, shape(rescaled(run, 2)): slower}}
    assert known(judged, run).reason == "r"
    assert refused(chosen(runs, judged, asked=True), judged) == ("will not keep up here: its first run was untrusted here (r; f); at "
                                                 "time_scale 2 it was trusted (g): add --set time_scale=2; or --force "
                                                 "to run it anyway")
    trusted = {**CALIBRATION, "pilots": {shape(run): {**verdict, "trusted": True}}}
    assert chosen(runs, trusted, asked=True) is None and refused(chosen(runs, trusted, asked=True), trusted) is None


def _setup(machine_calibration: dict, tmp_path, name: str, sweep: str = ""):
    """The session's calibration as a file of the test's own, without the verdicts other tests' sweeps
    left; the environment that names it; a 4 s small experiment `name` with `sweep`."""
    data = json.loads(open(machine_calibration["path"]).read())
    data.pop("pilots", None)
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps(data))
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(small_experiment(name, "ecn", 10, 4, sweep))
    return calibration, {**os.environ, "PCNLAB_CALIBRATION": str(calibration)}, spec


def _pcnlab(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pcnlab.app.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


@pytest.mark.root
@pytest.mark.bmv2
@pytest.mark.slow
def test_an_untrusted_first_run_stops_the_sweep_in_one_line_naming_what_it_tried(machine_calibration, tmp_path):
    # min_idle_pct 100: a verdict no machine passes (never idle at its busiest), measured for real. The
    # baseline is a point the stopped sweep never ran: its report goes without it, and the refusal is the error.
    calibration, env, spec = _setup(machine_calibration, tmp_path, "piloted",
                                    "baseline: mode=pcn\nsweep:\n  mode: [ecn, pcn]\n")
    results = tmp_path / "results"
    args = ["run", str(spec), "--results", str(results), "--pilot", "--no-plots", "--set", "fidelity.min_idle_pct=100"]
    proc = _pcnlab(*args, env=env)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("pcnlab: will not keep up here: its first run was untrusted here ("), lines[0]
    assert "; at time_scale 2 too (" in lines[0] and "use fewer processes" in lines[0]
    assert "pilot: mode=ecn was untrusted; the sweep stops here; rehearsing it at time_scale 2 (8 s)" in proc.stdout
    sweep = (results / "piloted" / "latest").resolve()
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["mode=ecn"]    # stopped after its pilot
    assert (sweep / "report.md").is_file()                                          # what ran is reported
    assert "report: the baseline mode=pcn has no trusted run in this sweep" in proc.stdout
    judged = [sweep / "mode=ecn", *(results / "piloted-pilot").glob("2*/mode=ecn")]
    assert len(judged) == 2
    for run in judged:
        reasons = json.loads((run / "fidelity.json").read_text())["reasons"]
        assert any(r.startswith("the machine was ") and "at least 100 %" in r for r in reasons), reasons
    kept = json.loads(calibration.read_text())["pilots"]
    assert sorted((v["time_scale"], v["trusted"]) for v in kept.values()) == [(1.0, False), (2.0, False)]
    started = time.monotonic()                                                  # once per calibration
    again = _pcnlab(*args, env=env)
    assert again.returncode == 2 and again.stderr == proc.stderr and time.monotonic() - started < 20
    assert len(list(results.glob("*/2*/mode=*"))) == 2                          # nothing ran again
    dry = _pcnlab(*args, "--dry-run", env=env)
    assert dry.returncode == 0 and "pilot: mode=ecn's shape was judged here " in dry.stdout, dry.stdout


@pytest.mark.root
@pytest.mark.bmv2
@pytest.mark.slow
def test_a_trusted_first_run_lets_the_sweep_go_on(machine_calibration, tmp_path):
    calibration, env, spec = _setup(machine_calibration, tmp_path, "light")
    proc = _pcnlab("run", str(spec), "--results", str(tmp_path / "results"), "--pilot", "--no-plots", env=env)
    if proc.returncode == 2:
        why = starved(json.loads(next((tmp_path / "results" / "light").glob("2*/run/fidelity.json")).read_text()))
        if why:
            pytest.skip(why)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "[1/1] run  (sweep 0 s so far; the pilot: if it is untrusted here the sweep stops)" in proc.stdout
    assert [v["trusted"] for v in json.loads(calibration.read_text())["pilots"].values()] == [True]
    assert "pilot:" not in _pcnlab("run", str(spec), "--dry-run", "--pilot", env=env).stdout   # judged: no pilot
