"""time_scale on real experiment files: the shipped smoke, pcn-training and pcn-paper files loaded at 2
against 1 (with --set for the keys they leave out: a schedule, a background rate, leads), every rate
halved and every time of the regime doubled, everything else (thresholds in packets, bytes, shares, the
machine's own limits) unchanged; the scaled run written to config.yaml and read back; a sweep over
it; bad values and scaled values out of bounds as one line, exit 2."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from config_files import MINIMAL, write_file

from pcnlab.analysis.fidelity_limits import FidelityConfig
from pcnlab.app.cli import main
from pcnlab.errors import UsageError
from pcnlab.experiments.config import RunConfig, load_experiment
from pcnlab.experiments.config.runs import BackgroundFlowConfig, Change, JobConfig, ModeConfig
from pcnlab.experiments.config.schema import KEPT, RATE, SECTIONS, TIME, TOPOLOGY_PARAMS
from pcnlab.rates import rate_pps

ROOT = Path(__file__).resolve().parents[2]

# What the issue names, written out here (not read from the schema's marks, so a wrong mark fails).
TIMES = re.compile(r"(duration_s|warmup_s|mode\.(lead_us|guard_us|announce_hold_us)|fidelity\.min_backlog_s"
                   r"|jobs\.\d+\.(compute_ms|period_ms|jitter_ms|pcn_start_lead_us|burst_gap_us|ltp_deadline_ms)"
                   r"|schedule\.\d+\.at_s)")
RATES = re.compile(r"(topology\.\w*bw|background\.\d+\.rate|schedule\.\d+\.bw)")
QUEUE_RATES = re.compile(r"topology\.queue_rates_pps\.(\w+)")

# Each file with the keys it leaves at their defaults or out set, so every kind of scaled key is seen.
FILES = {
    "smoke": ["mode.lead_us=3000", "jobs.0.jitter_ms=50", "jobs.0.pcn_start_lead_us=2000", "background.0.rate=8",
              "schedule=[{at_s: 5, link: s1-s2, bw: 5}, {at_s: 8, link: s1-s2, bw: 10}]"],
    "pcn-training": ["jobs.0.burst_gap_us=30000", "jobs.0.ltp_deadline_ms=300", "fidelity.min_backlog_s=2"],
    "pcn-paper": [],
}


def flat(data, prefix: str = "") -> dict:
    """Dotted path -> value of every leaf of a to_dict()."""
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in flat(value, f"{prefix}{key}.").items()}
    if isinstance(data, list) and any(isinstance(v, (dict, list)) for v in data):
        return {k: v for i, value in enumerate(data) for k, v in flat(value, f"{prefix}{i}.").items()}
    return {prefix[:-1]: data}


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@pytest.mark.parametrize("stem", FILES)
def test_a_shipped_file_at_time_scale_2_halves_every_rate_and_doubles_every_time(stem):
    path = ROOT / "experiments" / f"{stem}.yaml"
    ones = load_experiment(path, FILES[stem]).runs()
    twos = load_experiment(path, [*FILES[stem], "time_scale=2"]).runs()
    assert [r.name for r in ones] == [r.name for r in twos] and ones
    changed = set()
    for one, two in zip(ones, twos):
        assert (one.time_scale, two.time_scale) == (1, 2)
        a, b = flat(one.to_dict()), flat(two.to_dict())
        assert a.keys() == b.keys()
        for key, before in a.items():
            after = b[key]
            if key == "overrides" or key == "time_scale":
                continue
            if TIMES.fullmatch(key) and number(before):
                assert after == pytest.approx(2 * before), key
                assert type(after) is type(before), key        # whole microseconds stay whole
            elif RATES.fullmatch(key) and number(before):
                assert after == pytest.approx(before / 2), key
            elif QUEUE_RATES.fullmatch(key):
                bw = QUEUE_RATES.fullmatch(key).group(1)
                assert after == rate_pps(b[f"topology.{bw}"]) == rate_pps(a[f"topology.{bw}"] / 2), key
                assert abs(2 * after - before) <= 2, key
            else:
                assert after == before, key                  # packets, bytes, shares, names, the machine's
            if after != before:
                changed.add(re.sub(r"\.\d+\.", ".N.", key))
        assert (two.mode.K, two.mode.K_pre, two.topology.queue) == (one.mode.K, one.mode.K_pre, one.topology.queue)
        assert two.fidelity.max_controller_lag_ms == one.fidelity.max_controller_lag_ms
    # The test saw what it claims: every rate and time these files carry (non-zero) changed.
    expected = {"duration_s", "warmup_s", "topology.bw", "fidelity.min_backlog_s", "mode.announce_hold_us",
                "mode.guard_us"}
    expected |= {"smoke": {"topology.bottleneck_bw", "jobs.N.period_ms", "jobs.N.jitter_ms", "jobs.N.burst_gap_us",
                           "jobs.N.pcn_start_lead_us", "jobs.N.ltp_deadline_ms", "mode.lead_us",
                           "background.N.rate", "schedule.N.at_s", "schedule.N.bw"},
                 "pcn-training": {"jobs.N.compute_ms", "jobs.N.burst_gap_us", "jobs.N.ltp_deadline_ms"},
                 "pcn-paper": {"topology.uplink_bw", "jobs.N.period_ms", "jobs.N.ltp_deadline_ms"}}[stem]
    assert expected <= changed, expected - changed


def test_the_scaled_run_is_written_and_read_back(tmp_path):
    run = load_experiment(ROOT / "experiments" / "smoke.yaml", [*FILES["smoke"], "time_scale=2.5"]).runs()[1]
    data = yaml.safe_load(yaml.safe_dump(run.to_dict()))       # as config.yaml holds it
    assert data["time_scale"] == 2.5 and data["duration_s"] == 50 and data["topology"]["bw"] == 8
    assert data["jobs"][0]["period_ms"] == 1250 and data["schedule"][0] == {"at_s": 12.5, "link": "s1-s2", "bw": 2}
    assert RunConfig.from_dict(data) == run
    data.pop("time_scale")                                     # a run folder from before the key
    assert RunConfig.from_dict(data).time_scale == 1


def test_a_sweep_over_time_scale_names_its_runs_and_scales_each(tmp_path):
    text = MINIMAL + "duration_s: 10\nsweep:\n  time_scale: [1, 2, 1.5]\n"
    runs = load_experiment(write_file(tmp_path, text)).runs()
    assert [r.name for r in runs] == ["time_scale=1", "time_scale=2", "time_scale=1.5"]
    assert [r.duration_s for r in runs] == [10, 20, 15]
    assert [r.topology.params["bw"] for r in runs] == [20, 10, pytest.approx(20 / 1.5)]
    assert [r.mode.guard_us for r in runs] == [1000, 2000, 1500]
    # --set fixes a swept time_scale like any other key.
    runs = load_experiment(write_file(tmp_path, text), ["time_scale=3"]).runs()
    assert [(r.name, r.duration_s) for r in runs] == [("run", 30)]


@pytest.mark.parametrize("value, message", [
    ("0", "time_scale: must be at least 1, got 0"), ("-2", "time_scale: must be at least 1, got -2"),
    ("0.5", "time_scale: must be at least 1, got 0.5"), ("nan", "time_scale: expected a number, got 'nan'"),
    (".nan", "time_scale: expected a number, got nan"), ("two", "time_scale: expected a number, got 'two'"),
    ("true", "time_scale: expected a number, got True"), ("1e6", "time_scale: must be at most 100, got 1e+06")])
def test_a_bad_time_scale_is_one_line_and_exit_2(tmp_path, capsys, value, message):
    path = write_file(tmp_path, MINIMAL)
    assert main(["run", str(path), "--dry-run", "--set", f"time_scale={value}"]) == 2
    err = capsys.readouterr().err
    assert err == f"pcnlab: --set time_scale={value}: {message}\n"
    with pytest.raises(UsageError) as caught:                  # in the file: its line
        load_experiment(write_file(tmp_path, MINIMAL + f"time_scale: {value}\n"))
    assert str(caught.value) == f"{path}:6: {message}" and caught.value.exit_code == 2


def test_a_scaled_value_out_of_its_keys_bounds_is_one_line_naming_time_scale(tmp_path):
    text = MINIMAL + "schedule:\n  - {at_s: 1, link: s1-h1, bw: 2}\ntime_scale: 50\n"
    with pytest.raises(UsageError) as caught:
        load_experiment(write_file(tmp_path, text))
    assert str(caught.value) == (f"{tmp_path / 'exp.yaml'}:8: time_scale: schedule.0.bw 2 Mbit/s / time_scale 50 = "
                                 "0.04 Mbit/s is below the least allowed, 0.1 Mbit/s; choose a smaller time_scale "
                                 "or change schedule.0.bw")
    with pytest.raises(UsageError, match=r"^--set time_scale=3: time_scale: duration_s 40000 s x time_scale 3 = "
                                         r"120000 s is above the most allowed, 86400 s;"):
        load_experiment(write_file(tmp_path, MINIMAL + "duration_s: 40000\n"), ["time_scale=3"])


def test_every_time_and_rate_of_the_schema_is_decided_and_reaches_its_typed_config():
    """A new key in Mbit/s, s, ms or us must say whether time_scale changes it (RATE, TIME, or KEPT: the
    machine's, not the regime's), and a scaled key must be a field of the config it is carried in."""
    typed = {"mode": ModeConfig, "fidelity": FidelityConfig, "jobs": JobConfig, "background": BackgroundFlowConfig,
             "schedule": Change, "": RunConfig}
    keys = [(s, k) for s, ks in SECTIONS.items() for k in ks] + [("topology", k) for ks in TOPOLOGY_PARAMS.values()
                                                                 for k in ks]
    for section, key in keys:
        if key.unit in ("Mbit/s", "s", "ms", "us"):
            assert key.scales in (RATE, TIME, KEPT), (section, key.name)
        else:
            assert key.scales == "", (section, key.name)
        if key.scales in (RATE, TIME) and section != "topology":
            assert key.name in {f.name for f in fields(typed[section])}, (section, key.name)
    assert {k.name for s, k in keys if k.scales == KEPT} == {"max_controller_lag_ms"}
