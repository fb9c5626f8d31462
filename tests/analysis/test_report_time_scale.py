"""The report of runs made with time_scale: metrics.json holds what was measured (times x k, rates / k),
and the report, summary.json and the sweep plots' tables give them back in the experiment's own units,
saying so in one line; packets and shares are left as they are; a damaged time_scale in config.yaml is
one line naming the file."""

from __future__ import annotations

import json

import pytest
import yaml

from pcnlab.analysis.comparison import HEADLINE, TIME_SCALE_POWER
from pcnlab.analysis.plots import _own_units
from pcnlab.analysis.report import build_report, format_report, summary
from pcnlab.analysis.results import load_run, run_folders
from pcnlab.app.cli import main
from pcnlab.errors import UsageError

# One regime's figures in its own units, per repetition.
OWN = [{"start": 6.0, "bct_ms": 120.0, "iteration_ms": 500.0, "ddl_mbps": 12.0, "background": 8.0, "delay_us": 900.0,
        "per_s": 2.0, "coverage": 0.9},
       {"start": 8.0, "bct_ms": 140.0, "iteration_ms": 520.0, "ddl_mbps": 10.0, "background": 9.0, "delay_us": 1100.0,
        "per_s": 1.9, "coverage": 0.8}]


def make_run(sweep, scale, rep: int, own: dict, config_scale=...):
    """A finished run at time_scale `scale`: metrics.json and iterations.csv as measured (times x scale,
    rates / scale); config.yaml records the scale (`config_scale` overrides what it says)."""
    name = f"time_scale={scale:g},rep={rep}"
    path = sweep / name
    path.mkdir(parents=True)
    (path / "status.json").write_text(json.dumps({"status": "finished"}))
    config = {"experiment": "hand", "run": name, "index": rep, "repetition": rep, "sweep": {"time_scale": scale},
              "mode": {"kind": "pcn", "K": 40, "K_pre": 10}, "time_scale": scale if config_scale is ... else config_scale}
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    metrics = {"workers": 4,
               "iterations": {"start_queue_pkts": {"mean": own["start"]}, "bct_ms": {"mean": own["bct_ms"] * scale},
                              "ddl_mbps": {"mean": own["ddl_mbps"] / scale}},
               "throughput_mbps": {"background": own["background"] / scale},
               "queue_delay_us": {"ddl": {"mean": own["delay_us"] * scale}},
               "training": {"iteration_ms": {"mean": own["iteration_ms"] * scale},
                            "iterations_per_s": own["per_s"] / scale},
               "controller": {"iteration_coverage": own["coverage"]}}
    (path / "metrics.json").write_text(json.dumps(metrics))
    (path / "iterations.csv").write_text("job,iteration,start_queue,bct_ms\n" + "".join(
        f"1,{k},{own['start']},{(own['bct_ms'] + k) * scale}\n" for k in range(3)))
    return path


@pytest.fixture
def sweep(tmp_path):
    folder = tmp_path / "hand" / "2026-11-23T10-00-00"
    for scale in (1, 2):
        for rep, own in enumerate(OWN, 1):
            make_run(folder, scale, rep, own)
    return folder


KEYS = {"iterations.start_queue_pkts.mean": "start", "iterations.bct_ms.mean": "bct_ms",
        "iterations.ddl_mbps.mean": "ddl_mbps", "throughput_mbps.background": "background",
        "queue_delay_us.ddl.mean": "delay_us", "training.iteration_ms.mean": "iteration_ms",
        "training.iterations_per_s": "per_s", "controller.iteration_coverage": "coverage"}


def test_the_report_gives_times_and_rates_back_in_the_experiments_units(sweep):
    report = build_report(run_folders(sweep), baseline="time_scale=1")
    assert [p.name for p in report.points] == ["time_scale=1", "time_scale=2"]
    for key, field in KEYS.items():
        own = sum(o[field] for o in OWN) / len(OWN)
        for point in ("time_scale=1", "time_scale=2"):
            assert report.cells[point][key]["mean"] == pytest.approx(own), (key, point)
        assert report.cells["time_scale=2"][key]["delta"] == pytest.approx(0, abs=1e-9), key
    # metrics.json keeps what was measured.
    measured = load_run(sweep / "time_scale=2,rep=1").metrics
    assert measured["iterations"]["bct_ms"]["mean"] == 240.0 and measured["throughput_mbps"]["background"] == 4.0
    text = format_report(report, markdown=True)
    line = ("times divided and rates multiplied by each run's time_scale (1, 2): in the experiment's own units "
            "(metrics.json holds what was measured; packets unchanged)")
    assert text.count(line) == 1
    assert summary(report)["time_scales"] == [1, 2]


def test_one_scaled_run_says_its_factor_and_unscaled_runs_say_nothing(tmp_path, capsys):
    run = make_run(tmp_path / "s", 2.5, 1, OWN[0])
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "times divided and rates multiplied by time_scale 2.5: in the experiment's own units" in out
    assert "BCT (ms)" in out and " 120.0" in out and " 300.0" not in out
    plain = make_run(tmp_path / "p", 1, 1, OWN[0])
    assert "divided" not in format_report(build_report([plain])) and summary(build_report([plain]))["time_scales"] == [1]
    before = plain / "config.yaml"                       # a run from before the key: 1
    before.write_text(yaml.safe_dump({k: v for k, v in yaml.safe_load(before.read_text()).items() if k != "time_scale"}))
    assert load_run(plain).time_scale == 1.0


def test_the_sweep_plots_draw_bct_in_the_experiments_units(sweep):
    for scale in (1, 2):
        table = _own_units(load_run(sweep / f"time_scale={scale},rep=1"))
        assert list(table["bct_ms"]) == [120.0, 121.0, 122.0] and set(table["run"]) == {f"time_scale={scale},rep=1"}
        assert list(table["start_queue"]) == [6.0] * 3


@pytest.mark.parametrize("bad", [0, -1, "two", True, float("nan"), None])
def test_a_damaged_time_scale_is_one_line_naming_the_file(tmp_path, capsys, bad):
    run = make_run(tmp_path / "s", 2, 1, OWN[0], config_scale=bad)
    with pytest.raises(UsageError, match=r"config.yaml: time_scale .* is not a number of at least 1; this run's own "
                                         "record is damaged"):
        load_run(run).time_scale
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config.yaml: time_scale" in err


def test_every_headline_time_and_rate_is_given_back():
    """A headline metric in a unit of time or a rate (its key or title says so) has its power listed."""
    for key, title, _ in HEADLINE:
        timed = any(u in key for u in ("_ms", "_us")) or title.endswith(("(ms)", "(µs)"))
        rate = "mbps" in key or "per_s" in key
        assert TIME_SCALE_POWER.get(key, 0) == (1 if timed else -1 if rate else 0), key
