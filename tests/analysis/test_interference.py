"""Interference between jobs at a shared port (analysis/interference.py) on hand-made iteration tables whose
answers are known, and the report's section (analysis/interference_report.py) on hand-made run folders:
each job shared beside the same job alone, with the report's intervals."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from pcnlab.analysis.interference import interference_metrics, interleave_metrics, job_figures, overlap_us, start_gaps_ms
from pcnlab.analysis.report import build_report, format_report, summary
from pcnlab.analysis.results import run_folders
from pcnlab.analysis.traffic_stats import diff_ci95, mean_ci95

MS = 1000


def table(rows):
    """An iterations.csv-like table at one port: (job id, iteration, first_in_us, last_out_us) per row; the
    switch's clock is the host's here (first_in_ns = first_in_us x 1000)."""
    return pd.DataFrame([{"job": j, "iteration": k, "first_in_us": a, "last_out_us": b, "first_in_ns": a * 1000}
                         for j, k, a, b in rows])


def workers(rows):
    """Workers' iteration records: (job, host, iter, comm_start_ms, comm_end_ms)."""
    return pd.DataFrame([{"job": j, "host": h, "role": "worker", "iter": k, "comm_start_ns": a * 1e6,
                          "comm_end_ns": b * 1e6} for j, h, k, a, b in rows])


def test_overlap_is_the_time_another_job_communicated_too():
    t = table([(1, 0, 0, 100 * MS), (1, 1, 1000 * MS, 1100 * MS), (2, 0, 50 * MS, 150 * MS),
               (2, 1, 2000 * MS, 2100 * MS), (3, 0, 60 * MS, 70 * MS)])
    # job 1's first iteration meets job 2 from 50 to 100 ms (job 3's 60-70 ms inside that); job 3 is all shared
    assert overlap_us(t).tolist() == [50 * MS, 0, 50 * MS, 0, 10 * MS]


JOBS = {1: {"name": "a", "kind": "ps"}, 2: {"name": "b", "kind": "generator", "period_ms": 900}}


def test_stretch_is_what_overlap_added_over_the_clean_iterations_and_never_more_than_the_overlap():
    # job a: three clean iterations of 100 ms, one of 160 ms that overlapped b for 50 ms (so at most 50 of
    # its extra 60 ms are the overlap's); job b: one iteration of 80 ms, overlapped for 50 ms, none clean,
    # and a second whose packets at the port outlast what its workers logged (a cut end): left out
    t = table([(1, 0, 0, 100 * MS), (1, 1, 1000 * MS, 1100 * MS), (1, 2, 2000 * MS, 2100 * MS),
               (1, 3, 3000 * MS, 3160 * MS), (2, 0, 3110 * MS, 3190 * MS), (2, 1, 4010 * MS, 4500 * MS)])
    logs = workers([("a", "h2", k, 1000 * k, 1000 * k + (170 if k == 3 else 110)) for k in range(4)]
                   + [("b", "h7", 0, 3110, 3200), ("b", "h7", 1, 4010, 4100)])
    out = interference_metrics(t, JOBS, logs, ("s1", 1))
    a, b = out["jobs"]["a"], out["jobs"]["b"]
    assert a["overlap_fraction"] == pytest.approx(50 / 460) and a["overlapped_iterations"] == 1
    assert a["clean_bct_ms"] == pytest.approx(100) and a["stretch_ms"] == pytest.approx(50 / 4)
    assert a["ideal_iteration_ms"] == pytest.approx(1000 - 12.5) and a["iteration_ms"] == pytest.approx(1000)
    assert a["comm_ms"] == pytest.approx(125) and a["bct_ms"] == pytest.approx(460 / 4) and a["left_out"] == 0
    assert a["period_ms"] == pytest.approx(1000) and a["plan_comm_ms"] == pytest.approx(100)
    assert a["last_start_us"] == 3000 * MS
    assert b["iterations"] == 1 and b["left_out"] == 1 and b["iteration_ms"] == pytest.approx(900)
    assert b["overlap_fraction"] == pytest.approx(50 / 80) and b["clean_bct_ms"] is None
    assert b["stretch_ms"] is None and b["ideal_iteration_ms"] is None and b["plan_comm_ms"] == pytest.approx(80)
    assert out["overlap_fraction"] == pytest.approx(100 / 540) and out["port"] == {"switch": "s1", "port": 1}


def test_a_job_that_logs_nothing_is_what_the_others_overlapped_as_the_network_found_it():
    # ddp is an unmodified script: its rows at the port hold its compute silence (up to its next iteration's
    # first small messages), none closed by a log; the network's finder gives its communication, 500-560 ms
    # and 1060-1160 ms: a's second iteration (1000-1100 ms) met it for 40 ms. Before, a's overlap was 0.
    t = table([(1, 0, 0, 100 * MS), (1, 1, 1000 * MS, 1100 * MS), (2, 0, 500 * MS, 1050 * MS),
               (2, 1, 1060 * MS, 1900 * MS)])
    logs = pd.concat([workers([("a", "h2", k, 1000 * k, 1000 * k + 110) for k in range(2)]).assign(source="log"),
                      workers([("ddp", "h1", 0, 500, 560), ("ddp", "h1", 1, 1060, 1160)]).assign(source="network")])
    out = interference_metrics(t, {1: JOBS[1], 2: {"name": "ddp", "kind": "torchrun"}}, logs, ("s1", 1))
    assert out["jobs"]["a"]["overlap_fraction"] == pytest.approx(40 / 200)
    assert out["jobs"]["a"]["overlapped_iterations"] == 1 and out["jobs"]["ddp"]["left_out"] == 2
    # The script's other rank, on h9 at the port's far end, sent over 0-100 ms: away from the port, so
    # a's first iteration did not meet it there; counted, it would have (140 of a's 200 ms).
    far = pd.concat([logs, workers([("ddp", "h9", 0, 0, 100)]).assign(source="network")])
    jobs = {1: JOBS[1], 2: {"name": "ddp", "kind": "torchrun"}}
    assert interference_metrics(t, jobs, far, ("s1", 1), port_host="h9")["jobs"]["a"]["overlap_fraction"] \
        == pytest.approx(40 / 200)
    assert interference_metrics(t, jobs, far, ("s1", 1))["jobs"]["a"]["overlap_fraction"] == pytest.approx(140 / 200)


def test_iteration_times_count_from_communication_starts():
    # a generator logs as compute start the previous answer's arrival: its first gap would be short
    logs = workers([("b", "h7", 0, 0, 300), ("b", "h7", 1, 2000, 2300), ("b", "h7", 2, 4000, 4300)])
    logs["compute_start_ns"] = [0.0, 300e6, 2300e6]
    assert start_gaps_ms(logs) == {"b": [2000.0, 2000.0]}


def test_a_job_clocked_by_its_period_keeps_it_as_its_ideal():
    rows = table([(1, 0, 0, 100 * MS), (1, 1, 2000 * MS, 2300 * MS)]).assign(overlap_us=[0.0, 200 * MS])
    assert job_figures(rows, [2000.0], [], 2000.0)["ideal_iteration_ms"] == 2000.0   # stretch 100 ms absorbed
    assert job_figures(rows, [2000.0], [], 0.0)["ideal_iteration_ms"] == pytest.approx(1900.0)


# --- the report -------------------------------------------------------------------------------------------

def make_run(folder, name, rep, index, jobs: dict, alone=None):
    """A finished run folder whose metrics.json holds an interference section (per job: iteration_ms, comm_ms,
    overlap_fraction, stretch_ms, ideal_iteration_ms)."""
    path = folder / f"{name},rep={rep}"
    path.mkdir(parents=True)
    (path / "status.json").write_text(json.dumps({"status": "finished"}))
    config = {"experiment": "hand", "run": path.name, "index": index, "repetition": rep, "sweep": {},
              "mode": {"kind": "ecn"}, **({"alone": alone} if alone else {})}
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    fractions = [f["overlap_fraction"] for f in jobs.values()]
    metrics = {"run": path.name, "mode": "ecn", "training": {"iteration_ms": {"mean": 1.0}},
               "interference": {"jobs": jobs, "overlap_fraction": float(np.mean(fractions))}}
    (path / "metrics.json").write_text(json.dumps(metrics))


A_SHARED, A_ALONE = [1100.0, 1150.0, 1120.0], [1000.0, 1010.0, 990.0]
B_SHARED, B_ALONE = [700.0, 720.0, 690.0], [650.0, 655.0, 640.0]


def figures(iteration, overlap):
    return {"iteration_ms": iteration, "comm_ms": iteration / 10, "overlap_fraction": overlap,
            "stretch_ms": 5.0, "ideal_iteration_ms": iteration - 5.0}


@pytest.fixture
def sweep(tmp_path):
    folder = tmp_path / "hand" / "2026-11-29T04-00-00"
    for rep in range(1, 4):
        base = 3 * (rep - 1)
        make_run(folder, "mode=ecn", rep, base, {"a": figures(A_SHARED[rep - 1], 0.3),
                                                 "b": figures(B_SHARED[rep - 1], 0.4)})
        make_run(folder, "mode=ecn,alone=a", rep, base + 1, {"a": figures(A_ALONE[rep - 1], 0.0)}, alone="a")
        make_run(folder, "mode=ecn,alone=b", rep, base + 2, {"b": figures(B_ALONE[rep - 1], 0.0)}, alone="b")
    return folder


def test_the_report_sets_each_job_shared_beside_the_same_job_alone(sweep):
    report = build_report(run_folders(sweep))
    rows = {(r["point"], r["job"]): r for r in report.interference}
    assert set(rows) == {("mode=ecn", "a"), ("mode=ecn", "b")}       # the alone points are no shared point
    a = rows[("mode=ecn", "a")]
    assert a["alone_point"] == "mode=ecn,alone=a"
    assert (a["iteration_ms"]["mean"], a["iteration_ms"]["ci95"]) == pytest.approx(mean_ci95(A_SHARED))
    assert a["alone_iteration_ms"]["mean"] == pytest.approx(np.mean(A_ALONE))
    assert a["iteration_ms"]["delta_ci95"] == pytest.approx(list(diff_ci95(A_SHARED, A_ALONE)))
    assert a["iteration_ms"]["delta_pct"] == pytest.approx((np.mean(A_SHARED) / np.mean(A_ALONE) - 1) * 100)
    assert a["iteration_ms_slowdown"] == pytest.approx(np.mean(A_SHARED) / np.mean(A_ALONE))
    assert a["comm_ms_slowdown"] == pytest.approx(np.mean(A_SHARED) / np.mean(A_ALONE))
    assert rows[("mode=ecn", "b")]["overlap_fraction"]["mean"] == pytest.approx(0.4)
    text = format_report(report)
    assert "Interference at the shared port" in text
    line = next(x for x in text.splitlines() if x.startswith("a ") and "mode=ecn" in x)
    assert f"{np.mean(A_SHARED) / np.mean(A_ALONE):.3f}" in line and "30.0%" in line
    assert "communication overlapped by another job" in text          # the headline row, per point
    assert "| b | mode=ecn |" in format_report(report, markdown=True)
    data = json.loads(json.dumps(summary(report), allow_nan=False))
    assert [r["job"] for r in data["interference"]] == ["a", "b"]


def test_without_runs_alone_the_shared_figures_stand_alone(sweep):
    report = build_report([p for p in run_folders(sweep) if "alone" not in p.name])
    (row,) = [r for r in report.interference if r["job"] == "a"]
    assert row["alone_point"] is None and row["alone_iteration_ms"]["n"] == 0
    assert "delta" not in row["iteration_ms"] and np.isnan(row["iteration_ms_slowdown"])
    assert "Interference at the shared port" in format_report(report)


def test_the_plans_the_shifts_and_the_jobs_left_alone_by_name():
    events = pd.DataFrame([
        {"type": "report", "job": 1},
        {"type": "interleave_plan", "plan": 1, "switch": "s1", "port": 1, "t_us": 7_000_000, "holds_us": 7_050_000,
         "reason": "first plan", "shifts_us": {"1": 0, "2": 134_486}, "overlap_before": {"1": 0.2, "2": 0.21},
         "overlap_after": {"1": 0.0, "2": 0.0}},
        {"type": "shift", "plan": 1, "job": 2, "shift_us": 134_486, "hosts": {"h4": "sent", "h5": "refused"}},
        {"type": "interleave_skip", "job": 3},
        {"type": "interleave_ended", "job": 1},        # it had answered its probe: it finished
    ])
    jobs = {1: {"name": "a"}, 2: {"name": "b"}, 3: {"name": "c"}}
    assert interleave_metrics(events, jobs) == {
        "plans": [{"plan": 1, "switch": "s1", "port": 1, "t_us": 7_000_000, "holds_us": 7_050_000, "reason": "first plan",
                   "shifts_ms": {"a": 0.0, "b": 134.486}, "overlap_before": {"a": 0.2, "b": 0.21},
                   "overlap_after": {"a": 0.0, "b": 0.0}}],
        "shifts": [{"plan": 1, "job": "b", "shift_ms": 134.486, "hosts": 2, "sent": 1, "refused": ["h5"]}],
        "left_alone": ["c"], "ended": ["a"]}
    assert interleave_metrics(pd.DataFrame(), jobs) == {"plans": [], "shifts": [], "left_alone": [], "ended": []}
    older = events.drop(columns=["holds_us"])            # a run from before plans said when they hold
    assert interleave_metrics(older, jobs)["plans"][0]["holds_us"] == 7_000_000
