"""`pcnlab report` on hand-made run folders whose answers are known: means and Student's t intervals,
differences against a baseline point with Welch's interval (computed here from the formula), strict
summary.json, the baseline error, untrusted runs left out and counted, the reference column, and the
sweep plots drawn from the same folders."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats
import yaml

from pcnlab.app.cli import main
from pcnlab.analysis.traffic_stats import diff_ci95, mean_ci95
from pcnlab.analysis.plots import mode_thresholds, plot_sweep
from pcnlab.analysis.report import build_report, format_report
from pcnlab.analysis.results import load_run, run_folders

START = "iterations.start_queue_pkts.mean"
BCT = "iterations.bct_ms.mean"


def make_run(sweep, mode, rep, start_queue, bct_ms=100.0, index=0, status="finished", fidelity=None,
             reference=None, workers=4, iteration_ms=500.0, iterations=4):
    """A finished run folder: status.json, config.yaml, metrics.json (the issue-11 schema) and
    iterations.csv whose rows average to the metrics."""
    name = f"mode={mode},rep={rep}"
    path = sweep / name
    path.mkdir(parents=True)
    (path / "status.json").write_text(json.dumps({"status": status, **({"error": "BMv2 s1 exited"}
                                                                        if status == "failed" else {})}))
    config = {"experiment": "hand", "run": name, "index": index, "repetition": rep, "sweep": {"mode": mode},
              "topology": {"kind": "dumbbell", "queue": 60}, "mode": {"kind": mode, "K": 40, "K_pre": 10}}
    if reference:
        config["reference"] = reference
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    metrics = {"run": name, "mode": mode, "sweep": {"mode": mode}, "repetition": rep, "workers": workers,
               "iterations": {"count": iterations, "expected": iterations, "consistent": True, "note": "",
                              "start_queue_pkts": {"mean": start_queue, "n": iterations},
                              "bct_ms": {"mean": bct_ms, "n": iterations}},
               "throughput_mbps": {"ddl": 1.0, "background": 18.0},
               "training": {"iteration_ms": {"mean": iteration_ms}},
               "burstiness": {"peak_to_mean": {"1ms": 30.0, "5ms": 10.0, "10ms": 6.0, "50ms": 3.0, "100ms": 2.0}}}
    (path / "metrics.json").write_text(json.dumps(metrics))
    lines = ["job,iteration,workers,first_in_us,last_out_us,start_queue,max_queue,packets,bytes,bct_ms"]
    for k in range(iterations):
        spread = (k - (iterations - 1) / 2)  # symmetric around the mean
        first = 1_000_000 + k * 500_000
        lines.append(f"1,{k},{workers},{first},{first + int(bct_ms * 1000)},{start_queue + spread},"
                     f"{start_queue + 10},100,150000,{bct_ms + spread}")
    (path / "iterations.csv").write_text("\n".join(lines) + "\n")
    if fidelity is not None:
        (path / "fidelity.json").write_text(json.dumps(fidelity))
    return path


def welch(a, b):
    """mean(a) - mean(b) and its 95 % interval, from the formula (Welch-Satterthwaite)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    dof = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = scipy.stats.t.ppf(0.975, dof) * math.sqrt(va + vb)
    d = a.mean() - b.mean()
    return d, (d - half, d + half)


DROPTAIL = [30.0, 36.0, 41.0]
PCN = [5.0, 9.0, 6.0, 12.0]


@pytest.fixture
def sweep(tmp_path):
    folder = tmp_path / "hand" / "2026-11-23T10-00-00"
    for rep, q in enumerate(DROPTAIL, 1):
        make_run(folder, "droptail", rep, q, bct_ms=200.0 + rep, index=2 * rep)
    for rep, q in enumerate(PCN, 1):
        make_run(folder, "pcn", rep, q, bct_ms=120.0 + 3 * rep, index=2 * rep + 1)
    return folder


def test_differences_against_the_baseline_match_welch(sweep, capsys):
    assert main(["report", str(sweep), "--baseline", "mode=droptail"]) == 0
    out = capsys.readouterr().out
    summary = json.loads((sweep / "summary.json").read_text())
    cell = summary["points"]["mode=pcn"]["metrics"][START]
    d, (low, high) = welch(PCN, DROPTAIL)
    assert cell["n"] == 4 and summary["points"]["mode=droptail"]["metrics"][START]["n"] == 3
    assert cell["mean"] == pytest.approx(np.mean(PCN))
    assert cell["ci95"] == pytest.approx(scipy.stats.t.ppf(0.975, 3) * np.std(PCN, ddof=1) / 2)
    assert cell["delta"] == pytest.approx(d)
    assert cell["delta_pct"] == pytest.approx(d / np.mean(DROPTAIL) * 100)
    assert cell["delta_ci95"] == pytest.approx([low, high])
    base = summary["points"]["mode=droptail"]["metrics"][START]
    assert base["delta"] is None and base["delta_ci95"] is None
    # The printed table says the same, in the metric's format.
    row = next(line for line in out.splitlines() if line.startswith("start queue"))
    assert "mode=droptail" in row and "baseline" in row
    pcn_row = out.splitlines()[out.splitlines().index(row) + 1]
    assert f"{d:+.1f}" in pcn_row and f"[{low:+.1f}, {high:+.1f}]" in pcn_row
    assert f"{d / np.mean(DROPTAIL) * 100:+.0f} %" in pcn_row
    # The same interval as scipy's own Welch test, which the implementation uses.
    assert diff_ci95(PCN, DROPTAIL) == pytest.approx((low, high))
    # Points keep the experiment's order; report.md holds the same table in Markdown; the plots are drawn.
    assert [p for p in summary["points"]] == ["mode=droptail", "mode=pcn"]
    assert "| start queue (pkts) | mode=droptail | 3 |" in (sweep / "report.md").read_text()
    for name in ("bct-cdf.png", "iterations.png", "headline.png", "peak-to-mean.png"):
        assert (sweep / name).stat().st_size > 10_000, name
    # ... and links each run's interactive view (pcnlab view), written beside the run's files.
    for run in sorted(p for p in sweep.iterdir() if p.is_dir()):
        assert f"- [{run.name}]({run.name}/view.html)" in (sweep / "report.md").read_text()
        assert "<!DOCTYPE html>" in (run / "view.html").read_text()


def test_student_t_for_every_degree_of_freedom():
    # Known quantiles t(0.975; dof): 12.7062 (1), 4.3027 (2), 2.2010 (11), 2.0423 (30): beyond any short table.
    for n, t in ((2, 12.7062), (3, 4.3027), (12, 2.2010), (31, 2.0423)):
        values = np.arange(n, dtype=float)
        mean, half = mean_ci95(values)
        assert half == pytest.approx(t * values.std(ddof=1) / math.sqrt(n), rel=1e-4)
    assert math.isnan(mean_ci95([5.0])[1]) and mean_ci95([5.0, None, float("nan")])[0] == 5.0


def test_one_run_point_is_strict_json(tmp_path):
    folder = tmp_path / "one"
    make_run(folder, "droptail", 1, 30.0)
    make_run(folder, "pcn", 1, 10.0, index=1)
    assert main(["report", str(folder), "--baseline", "mode=droptail"]) == 0
    text = (folder / "summary.json").read_text()

    def no_constants(name):
        raise AssertionError(f"{name} in summary.json")

    summary = json.loads(text, parse_constant=no_constants)
    cell = summary["points"]["mode=pcn"]["metrics"][START]
    assert cell["n"] == 1 and cell["mean"] == 10.0 and cell["ci95"] is None
    assert cell["delta"] == -20.0 and cell["delta_ci95"] == [None, None]


def test_a_baseline_that_names_no_point_is_one_line(sweep):
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "report", str(sweep), "--baseline", "mode=ecn"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "--baseline mode=ecn names no sweep point" in lines[0] and "mode=droptail, mode=pcn" in lines[0]


def test_untrusted_runs_are_left_out_and_counted(sweep, capsys):
    reason = "s1 port 1 achieved 71 % of its 20 Mbit/s while backlogged: BMv2 s1 at 98 % of a core"
    make_run(sweep, "pcn", 5, 500.0, fidelity={"trusted": False, "reasons": [reason, "another"]}, index=11)
    make_run(sweep, "pcn", 6, 7.0, fidelity={"trusted": True, "reasons": []}, index=13)
    make_run(sweep, "droptail", 4, 900.0, status="failed", index=10)
    assert main(["report", str(sweep), "--baseline", "mode=droptail"]) == 0
    out = capsys.readouterr().out
    summary = json.loads((sweep / "summary.json").read_text())
    pcn = summary["points"]["mode=pcn"]
    assert pcn["runs"] == 5 and pcn["metrics"][START]["n"] == 5
    assert pcn["metrics"][START]["mean"] == pytest.approx(np.mean(PCN + [7.0]))
    assert pcn["left_out"] == [{"run": "mode=pcn,rep=5", "reason": f"untrusted: {reason}"}]
    assert summary["points"]["mode=droptail"]["left_out"][0]["reason"] == "failed: BMv2 s1 exited"
    assert f"mode=pcn: 1 of 6 runs left out (mode=pcn,rep=5: untrusted: {reason})" in out
    # Asked for, they count.
    report = build_report(run_folders(sweep), "mode=droptail", include_untrusted=True)
    assert report.cells["mode=pcn"][START]["n"] == 6
    assert report.cells["mode=pcn"][START]["mean"] == pytest.approx(np.mean(PCN + [7.0, 500.0]))
    assert "untrusted runs are included" in format_report(report)


def test_an_untrusted_run_of_a_cluster_names_its_machine(sweep):
    reason = "s1 took 900 µs to process a packet"
    make_run(sweep, "pcn", 5, 500.0, fidelity={"trusted": False, "reasons": [reason], "checks": {"node": "lab-3"}},
             index=11)
    summary = build_report(run_folders(sweep), "mode=droptail")
    pcn = next(p for p in summary.points if p.name == "mode=pcn")
    assert pcn.left_out == [("mode=pcn,rep=5", f"untrusted on lab-3: {reason}")]


def test_the_reference_column_is_shown_where_the_experiment_declares_it(tmp_path, sweep):
    plain = format_report(build_report(run_folders(sweep), "mode=droptail"))
    assert "PCN paper" not in plain
    paper = tmp_path / "paper"
    make_run(paper, "droptail", 1, 35.0, reference="pcn-paper")
    make_run(paper, "pcn-host", 1, 5.0, reference="pcn-paper", index=1)
    titles = format_report(build_report(run_folders(paper), "mode=droptail")).splitlines()[1]
    assert titles.rstrip().endswith("PCN paper (baseline → PCN)")
    table = format_report(build_report(run_folders(paper), "mode=droptail"), markdown=True)
    assert "| start queue (pkts) | mode=droptail | 1 | 35.0 | baseline |  |  | 35 → 5 (-86 %) |" in table
    assert "| BCT (ms) | mode=droptail | 1 | 100.0 | baseline |  |  | -39 % |" in table
    assert main(["report", str(paper), "--baseline", "mode=droptail"]) == 0
    summary = json.loads((paper / "summary.json").read_text())
    assert summary["reference"]["name"] == "pcn-paper"
    assert summary["metrics"][START]["reference"] == pytest.approx({"baseline": 35, "value": 5,
                                                                    "change_pct": (5 - 35) / 35 * 100})
    assert summary["metrics"]["iterations.bct_ms.mean"]["reference"]["change_pct"] == -39


def test_scaling_factor_is_t1_over_tn(tmp_path):
    folder = tmp_path / "scaling"
    for i, (workers, iteration_ms) in enumerate(((1, 100.0), (4, 125.0))):
        path = make_run(folder, "ecn", 1, 10.0, workers=workers, iteration_ms=iteration_ms, index=i)
        path.rename(folder / f"workers={workers}")
        config = yaml.safe_load((folder / f"workers={workers}" / "config.yaml").read_text())
        config.update(run=f"workers={workers}", repetition=1, sweep={"jobs.0.workers": workers})
        (folder / f"workers={workers}" / "config.yaml").write_text(yaml.safe_dump(config))
    report = build_report(run_folders(folder))
    assert report.cells["workers=4"]["scaling"]["mean"] == pytest.approx(0.8)
    row = next(line for line in format_report(report).splitlines() if line.startswith("scaling"))
    assert "1.00" in row
    assert "0.80" in format_report(report).splitlines()[format_report(report).splitlines().index(row) + 1]


def test_a_run_folder_is_reported_without_writing(sweep, capsys):
    run = sweep / "mode=pcn,rep=2"
    assert main(["report", str(run)]) == 0
    assert "mode=pcn" in capsys.readouterr().out
    assert not (sweep / "summary.json").exists() and not (run / "summary.json").exists()
    assert load_run(run).point == "mode=pcn"


def test_queue_levels_follow_the_mode():
    config = {"topology": {"queue": 60}, "mode": {"kind": "droptail", "K": 40, "K_pre": 10}}
    assert mode_thresholds(config) == {"queue": 60}
    config["mode"]["kind"] = "ecn"
    assert mode_thresholds(config) == {"queue": 60, "K": 40}
    config["mode"]["kind"] = "pcn-host"
    assert mode_thresholds(config) == {"queue": 60, "K": 40, "K_pre": 10}


def test_sweep_plots_skip_points_without_iterations(sweep, tmp_path):
    (sweep / "mode=pcn,rep=1" / "iterations.csv").write_text("")
    written = plot_sweep(tmp_path, build_report(run_folders(sweep)))
    assert sorted(p.name for p in written) == ["bct-cdf.png", "headline.png", "iterations.png", "peak-to-mean.png"]
