"""The ceiling of adaptive compression: progress per second integrated over the schedule's phases."""

from __future__ import annotations

import json

import pytest

from pcnlab.errors import UsageError
from pcnlab.analysis.compression_plots import _progress, plot_ceiling
from pcnlab.analysis.compression_ceiling import (Phase, ceiling, efficiencies, main, phase_speeds, predict, table,
                                                 time_to)


def _bench(iterations: dict[str, list[int | None]], targets=(0.95,)) -> dict:
    rows = [{"codec": codec, "seed": s, "0.95": it} for codec, its in iterations.items() for s, it in enumerate(its)]
    return {"model": "digits-cnn", "targets": list(targets), "rows": rows}


def _run(codec: str, speeds: list[float], reached_s: float | None, starts=(0.0, 5.0, 10.0)) -> dict:
    names = ["40 Mbit/s @0s", "2.5 Mbit/s @5s", "40 Mbit/s @10s"]
    return {"codec": codec, "model": "digits-cnn", "time_to_target_s": reached_s,
            "phases": [{"phase": n, "from_s": t, "seconds": 5.0, "iterations_per_s": s}
                       for n, t, s in zip(names, starts, speeds)]}


def test_the_integral_of_a_piecewise_rate_reaches_what_is_needed_in_the_phase_it_is_crossed():
    rates = [(0.0, 10.0), (5.0, 2.0), (10.0, 10.0)]
    assert time_to(rates, 40.0) == pytest.approx(4.0)
    assert time_to(rates, 60.0) == pytest.approx(10.0)
    assert time_to(rates, 70.0) == pytest.approx(11.0)       # the last phase is held on
    assert time_to([(0.0, 0.0)], 1.0) is None


def test_efficiency_is_each_files_none_over_the_codec_and_a_codec_a_seed_never_brought_there_is_left_out():
    eff = efficiencies([_bench({"none": [200, 300], "sign": [250, 250], "topk-0.005": [400, None]}),
                        _bench({"none": [250], "sign": [250]})], 0.95)
    assert eff == pytest.approx({"none": 1.0, "sign": (1.0 + 1.0) / 2})
    with pytest.raises(UsageError, match="none never reached"):
        efficiencies([_bench({"none": [None], "sign": [100]})], 0.95)
    with pytest.raises(UsageError, match="no rows of none"):
        efficiencies([_bench({"sign": [100]})], 0.95)
    with pytest.raises(UsageError, match="--targets 0.96"):
        efficiencies([_bench({"none": [100]})], 0.96)


def test_phase_speeds_average_each_codecs_runs_per_phase_and_order_phases_by_time():
    phases, speeds = phase_speeds([_run("sign", [20, 10, 20], 5.0), _run("sign", [22, 12, 24], 5.0, (0, 5.2, 10.2)),
                                   _run("none", [10, 1, 10], 9.0)])
    assert [p.name for p in phases] == ["40 Mbit/s @0s", "2.5 Mbit/s @5s", "40 Mbit/s @10s"]
    assert phases[1].from_s == pytest.approx((5.0 + 5.2 + 5.0) / 3)
    assert speeds["sign"] == pytest.approx({"40 Mbit/s @0s": 21, "2.5 Mbit/s @5s": 11, "40 Mbit/s @10s": 22})


def test_the_ceiling_takes_each_phases_best_codec_and_is_never_later_than_a_fixed_one():
    phases = [Phase("fast", 0.0), Phase("slow", 5.0), Phase("fast again", 10.0)]
    speeds = {"none": {"fast": 20.0, "slow": 2.0, "fast again": 20.0},
              "topk-0.005": {"fast": 25.0, "slow": 18.0, "fast again": 25.0}}
    eff = {"none": 1.0, "topk-0.005": 0.6}
    best_time, best = ceiling(phases, speeds, eff, needed=250.0)
    assert [c for _, c, _ in best] == ["none", "topk-0.005", "none"]
    # 100 by 5 s with none, 10.8 a second to 10 s (154), then 20 a second: 250 at 14.8 s
    assert best_time == pytest.approx(10.0 + (250 - 154) / 20)
    for codec in speeds:
        assert predict(phases, speeds[codec], eff[codec], 250.0) >= best_time
    # A phase no run reached: what came before counts, and nothing is held on past its start.
    assert ceiling(phases + [Phase("unseen", 20.0)], speeds, eff, 250.0)[0] == pytest.approx(best_time)
    assert ceiling(phases[:2] + [Phase("unseen", 12.0)], speeds, eff, 250.0)[0] is None
    assert predict(phases, {"fast": 20.0}, 1.0, 90.0) == pytest.approx(4.5)     # reached before its runs ended
    assert predict(phases, {"fast": 20.0}, 1.0, 250.0) is None


def test_the_table_sets_each_codecs_measured_time_beside_its_prediction_and_names_the_best_fixed_one(tmp_path):
    rows = [_run("none", [20, 2, 20], 14.0), _run("topk-0.005", [25, 18, 25], 15.0),
            _run("topk-0.005", [25, 18, 25], 17.0), _run("adaptive", [24, 18, 24], 11.0)]
    t = table(rows, [_bench({"none": [250], "topk-0.005": [416]})], 0.95)
    by = {c["codec"]: c for c in t["codecs"]}
    assert by["topk-0.005"]["measured_s"] == pytest.approx(16.0) and by["topk-0.005"]["runs"] == 2
    assert by["adaptive"]["predicted_s"] is None                # no bench figure: measured only
    assert t["best_fixed"] in ("none", "topk-0.005")
    best_fixed = min(by["none"]["predicted_s"], by["topk-0.005"]["predicted_s"])
    assert t["factor"] == pytest.approx(best_fixed / t["ceiling_s"])
    assert t["factor"] > 1.0
    assert plot_ceiling(t, tmp_path / "ceiling.png").read_bytes()[:4] == b"\x89PNG"


def test_a_progress_curve_bends_at_the_phases_and_stops_at_the_first_without_a_rate():
    assert _progress([0.0, 5.0, 10.0], [10.0, 2.0, None], 20.0) == ([0.0, 5.0, 10.0], [0.0, 50.0, 60.0])
    assert _progress([0.0, 5.0, 10.0], [10.0, 2.0, 4.0], 7.0) == ([0.0, 5.0, 7.0], [0.0, 50.0, 54.0])
    assert _progress([0.0, 5.0], [10.0, 2.0], 12.0) == ([0.0, 5.0, 12.0], [0.0, 50.0, 64.0])


def test_a_bad_bench_file_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bench.json"
    bad.write_text("{not json")
    assert main([str(tmp_path), "--bench", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("compression_ceiling: cannot read the bench file")
    for text in ("[1, 2]", '{"targets": [0.95]}', '{"rows": [{"seed": 0}]}'):
        bad.write_text(text)
        assert main([str(tmp_path), "--bench", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is not a JSON file of bench/bench_compression_efficiency.py" in err[0]
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_bench({"none": [250]})))
    assert main([str(tmp_path / "missing"), "--bench", str(good)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
