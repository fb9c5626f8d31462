"""The compression report's arithmetic on hand-made figures whose answers are known: time to a target
accuracy, the scaling factor against the 1-worker run of the same rate and compression, the measured
reduction, and the point where more compression stops mattering."""

from __future__ import annotations

import pandas as pd
import pytest

from pcnlab.analysis.compression_report import KNEE_TOLERANCE, knees, netsense_table, scaling_table, time_to_accuracy


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
