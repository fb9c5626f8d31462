"""The compression report's arithmetic on hand-made figures whose answers are known: time to a target
accuracy, the scaling factor against the 1-worker run of the same rate and compression, the measured
reduction, and the point where more compression stops mattering."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from pcnlab.analysis.compression_plots import plot_netsense
from pcnlab.analysis.compression_report import (KNEE_TOLERANCE, accuracy_at, equal_times, knees, netsense_markdown,
                                                netsense_table, run_figures, scaling_table, schedule_phases,
                                                time_to_accuracy)


def test_time_to_accuracy_is_the_first_evaluation_at_or_above_the_target():
    curve = pd.DataFrame({"iter": [4, 9, 14, 19], "t_s": [1.0, 2.0, 3.0, 4.0], "accuracy": [0.5, 0.91, 0.89, 0.95]})
    assert time_to_accuracy(curve, 0.9) == (2.0, 9)
    assert time_to_accuracy(curve, 0.95) == (4.0, 19)
    assert time_to_accuracy(curve, 0.99) == (None, None)


def _row(rate, compression, workers, iteration_ms, payload):
    return {"rate_mbps": rate, "codec": compression, "workers": workers, "iteration_ms": iteration_ms,
            "compute_ms": 100.0, "payload_bytes": payload, "switch_bytes": None}


def test_scaling_factor_reduction_and_where_compression_stops_mattering():
    # 1 worker: 200 ms whatever the compression; 4 workers: the network adds what the bytes take.
    rows = [_row(5, c, 1, 200.0, b) for c, b in (("none", 400e3), ("int8", 100e3), ("sign", 12.5e3))]
    rows += [_row(5, "none", 4, 800.0, 400e3), _row(5, "int8", 4, 260.0, 100e3), _row(5, "sign", 4, 205.0, 12.5e3)]
    frame = scaling_table(rows)
    four = frame[frame["workers"] == 4].set_index("compression")
    assert four.loc["none", "scaling"] == pytest.approx(0.25) and four.loc["sign", "scaling"] == pytest.approx(200 / 205)
    assert four.loc["int8", "reduction"] == pytest.approx(4.0) and four.loc["sign", "reduction"] == pytest.approx(32.0)
    assert four.loc["none", "vs_compute"] == pytest.approx(100 / 800)
    knee, = knees(frame)
    # int8 reaches 0.77 of sign's 0.976: not within 5 %; sign is where it stops mattering.
    assert knee["knee_compression"] == "sign" and knee["knee_reduction"] == pytest.approx(32.0)
    assert knee["scaling_without"] == pytest.approx(0.25)
    # Had int8 come within the tolerance, it would be the point.
    rows[4] = _row(5, "int8", 4, 205.0 / (1 - KNEE_TOLERANCE / 2), 100e3)
    assert knees(scaling_table(rows))[0]["knee_compression"] == "int8"


def test_netsense_table_averages_a_point_and_counts_runs_that_reached_the_target():
    base = {"point": "compression=none", "iterations_per_s": 4.0, "accuracy_final": 0.9, "payload_bytes": 10.0,
            "tcp_bytes": 11.0, "switch_bytes": 30.0, "codecs": {"none": 1.0},
            "phases": [{"phase": "50 Mbit/s", "iterations_per_s": 4.0}]}
    table = netsense_table([{**base, "time_to_target_s": 10.0}, {**base, "time_to_target_s": None,
                                                                "iterations_per_s": 2.0}])
    row, = table
    assert (row["runs"], row["reached"], row["time_to_target_s"], row["iterations_per_s"]) == (2, 1, 10.0, 3.0)
    assert row["phase_names"] == ["50 Mbit/s"] and row["phases_iterations_per_s"] == [4.0]


def test_phases_cut_at_rate_changes_and_at_competing_flows():
    """A flow group starts flow by flow within a moment: one cut, labelled with every flow running."""
    s = 1e9
    ev = pd.DataFrame([
        {"type": "schedule", "action": "start", "host_ns": 5 * s, "at_s": 5.0, "flow": "a-1"},
        {"type": "schedule", "action": "start", "host_ns": 5.3 * s, "at_s": 5.0, "flow": "a-2"},
        {"type": "schedule", "action": "stop", "host_ns": 13 * s, "at_s": 13.0, "flow": "a-1"},
        {"type": "schedule", "action": "stop", "host_ns": 13.1 * s, "at_s": 13.0, "flow": "a-2"},
        {"type": "other", "action": None, "host_ns": 15 * s, "at_s": None, "flow": None},
        {"type": "schedule", "action": "rate", "host_ns": 18 * s, "at_s": 18.0, "mbps": 2.5},
        {"type": "schedule", "action": "rate", "host_ns": 99 * s, "at_s": 99.0, "mbps": 40.0}])   # after the end
    assert schedule_phases(ev, 0.0, 30 * s, 40) == [
        ("40 Mbit/s @0s", 0.0, 5 * s), ("40 Mbit/s + 2 flows @5s", 5 * s, 13 * s), ("40 Mbit/s @13s", 13 * s, 18 * s),
        ("2.5 Mbit/s @18s", 18 * s, 30 * s)]
    assert schedule_phases(pd.DataFrame(), 0.0, 30 * s, 40) == [("40 Mbit/s @0s", 0.0, 30 * s)]


def test_phases_group_a_change_by_its_planned_time_not_by_how_fast_it_was_applied():
    """8 flows that took 1.4 s to start (a busy machine) are one cut; two changes planned 0.5 s apart
    are two, however close they were applied."""
    s = 1e9
    starts = [{"type": "schedule", "action": "start", "host_ns": (5 + 0.2 * i) * s, "at_s": 5.0, "flow": f"a-{i}"}
              for i in range(8)]
    ev = pd.DataFrame(starts + [
        {"type": "schedule", "action": "rate", "host_ns": 10.0 * s, "at_s": 10.0, "mbps": 2.5},
        {"type": "schedule", "action": "rate", "host_ns": 10.5 * s, "at_s": 10.5, "mbps": 10.0}])
    assert schedule_phases(ev, 0.0, 20 * s, 40) == [
        ("40 Mbit/s @0s", 0.0, 5 * s), ("40 Mbit/s + 8 flows @5s", 5 * s, 10 * s),
        ("2.5 Mbit/s + 8 flows @10s", 10 * s, 10.5 * s), ("10 Mbit/s + 8 flows @10.5s", 10.5 * s, 20 * s)]


def test_accuracy_at_equal_time_is_the_model_each_run_had_then():
    curve = [[1.0, 0.5], [2.0, 0.8], [3.0, 0.9]]
    assert accuracy_at(curve, 0.5) is None and accuracy_at(curve, 2.5) == 0.8 and accuracy_at(curve, 30) == 0.9
    base = {"iterations_per_s": 1.0, "accuracy_final": 0.9, "payload_bytes": 1.0, "tcp_bytes": 1.0,
            "switch_bytes": 1.0, "codecs": {}, "phases": []}
    rows = [{**base, "point": "a", "time_to_target_s": 2.0, "curve": curve},
            {**base, "point": "a", "time_to_target_s": 3.0, "curve": [[1.0, 0.6], [2.0, 0.9], [3.0, 0.95]]},
            {**base, "point": "b", "time_to_target_s": None, "curve": [[1.5, 0.7], [2.5, 0.75]]}]
    assert equal_times(rows, netsense_table(rows)) == [2.5]        # a's mean 2.5 s; every run covers 2.5 s
    a, b = netsense_table(rows, [2.5])
    assert a["accuracy_at"] == [pytest.approx(0.85)] and b["accuracy_at"] == [0.75] and a["at_s"] == [2.5]
    text = netsense_markdown([a, b], 0.9)
    assert "| accuracy at 2.5 s |" in text and "| 85.0% |" in text and "| 75.0% |" in text
    # Two times that round alike get a column each, told apart: more digits, or a count.
    def at_columns(at_s):
        head = netsense_markdown(netsense_table(rows, at_s), 0.9).splitlines()[0]
        return [c.strip() for c in head.strip("|").split("|") if c.strip().startswith("accuracy at")]
    assert at_columns([2.5, 2.54]) == ["accuracy at 2.50 s", "accuracy at 2.54 s"]
    assert at_columns([2.5, 2.5]) == ["accuracy at 2.5 s (#1)", "accuracy at 2.5 s (#2)"]


def test_a_run_that_ended_early_leaves_the_later_phases_empty_not_shifted():
    base = {"iterations_per_s": 1.0, "accuracy_final": 0.9, "payload_bytes": 1.0, "tcp_bytes": 1.0,
            "switch_bytes": 1.0, "codecs": {}, "time_to_target_s": None, "curve": []}
    long = {**base, "point": "long", "phases": [{"phase": "40 Mbit/s @0s", "iterations_per_s": 16.0},
                                                {"phase": "2.5 Mbit/s @18s", "iterations_per_s": 2.0}]}
    short = {**base, "point": "short", "phases": [{"phase": "40 Mbit/s @0s", "iterations_per_s": 28.0}]}
    text = netsense_markdown(netsense_table([long, short]), 0.95)
    head, _, row_long, row_short = text.splitlines()
    assert "| it/s at 40 Mbit/s @0s | it/s at 2.5 Mbit/s @18s |" in head
    assert "| 16.00 | 2.00 | 90.0% |" in row_long and "| 28.00 | - | 90.0% |" in row_short


def test_phase_columns_follow_time_whichever_run_saw_a_phase_first():
    """A run that missed the 8 flows (it ended, or a point's runs differ) must not put the rate drop
    before them: phases are ordered by when they started."""
    base = {"iterations_per_s": 1.0, "accuracy_final": 0.9, "payload_bytes": 1.0, "tcp_bytes": 1.0,
            "switch_bytes": 1.0, "codecs": {}, "time_to_target_s": None, "curve": [], "point": "p"}
    fast, flows, drop = ({"phase": "40 Mbit/s @0s", "from_s": 0.0, "iterations_per_s": 16.0},
                         {"phase": "40 Mbit/s + 8 flows @5s", "from_s": 5.1, "iterations_per_s": 8.0},
                         {"phase": "2.5 Mbit/s @18s", "from_s": 18.0, "iterations_per_s": 2.0})
    row, = netsense_table([{**base, "phases": [fast, drop]}, {**base, "phases": [fast, flows, drop]}])
    assert row["phase_names"] == ["40 Mbit/s @0s", "40 Mbit/s + 8 flows @5s", "2.5 Mbit/s @18s"]
    assert row["phases_iterations_per_s"] == [16.0, 8.0, 2.0]
    other = {**base, "point": "q", "phases": [fast, drop]}
    head = netsense_markdown(netsense_table([other, {**base, "phases": [fast, flows, drop]}]), 0.95).splitlines()[0]
    assert head.index("8 flows @5s") < head.index("2.5 Mbit/s @18s")


def _run(job: dict, iterations: pd.DataFrame | None = None):
    return SimpleNamespace(name="r", point="p", fidelity={"trusted": True}, status={"status": "finished"},
                           config={"jobs": [job], "topology": {"bw": 40}},
                           iterations=pd.DataFrame() if iterations is None else iterations)


def test_codec_names_a_fixed_method_without_error_feedback():
    assert run_figures(_run({"compression": "topk", "compression_ratio": 0.01, "error_feedback": False,
                             "workers": ["h2"]}))["codec"] == "topk-0.01-no-ef"
    assert run_figures(_run({"compression": "topk", "compression_ratio": 0.005, "error_feedback": True}))["codec"] \
        == "topk-0.005"
    assert run_figures(_run({"compression": "int8"}))["codec"] == "int8"


def test_the_plot_takes_runs_without_phases(tmp_path):
    rows = [{"point": "compression=none", "curve": [[1.0, 0.6], [2.0, 0.9]]},
            {"point": "compression=int8", "curve": [[1.0, 0.7]], "phases": []}]
    assert plot_netsense(rows, 0.95, tmp_path / "n.png").exists()
