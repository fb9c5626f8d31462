"""`pcnlab run` end to end on real BMv2: every artefact of a run kept, metrics and plots drawn from
them, `report` and `queues` reading them back; Ctrl-C stops cleanly and leaves earlier runs intact."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import needs_bmv2
from pcnlab.jsonlines import read_json_lines
from pcnlab.ledger import LedgerData, is_running

pytestmark = [needs_bmv2, pytest.mark.slow]

TINY = """
name: tiny
topology:
  kind: dumbbell
  left: 3
  right: 1
  bw: 20
  bottleneck_bw: 10
  queue: 60
mode:
  kind: ecn
  K: 20
  K_pre: 5
telemetry: 1
jobs:
  - name: gen
    kind: generator
    pattern: ps
    ps: h4
    workers: [h1, h2]
    burst_bytes: 30000
    reply_bytes: 0
    period_ms: 300
    iterations: 12
    burst_gap_us: 20000
background:
  - src: h3
    dst: h4
duration_s: {duration}
warmup_s: 1
sweep:
  mode: [ecn, pcn]
"""


def pcnlab(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "pcnlab.app.cli", *args], capture_output=True, text=True,
                          timeout=kwargs.pop("timeout", 300), **kwargs)


def test_run_keeps_every_artefact_and_reports(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.format(duration=8))
    proc = pcnlab("run", str(spec), "--results", str(tmp_path / "results"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    latest = tmp_path / "results" / "tiny" / "latest"
    runs = {p.name: p for p in latest.iterdir() if p.is_dir()}
    assert set(runs) == {"mode=ecn", "mode=pcn"}
    for name, run in runs.items():
        for artefact in ("config.yaml", "versions.json", "status.json", "started.json", "network.json",
                         "endpoints.json", "events.jsonl", "queue-s1.csv", "queue-s1.summary.json",
                         "counters.json", "metrics.json", "background.json"):
            assert (run / artefact).exists(), f"{name}: {artefact} missing"
        assert json.loads((run / "status.json").read_text())["status"] == "finished"
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["bottleneck"]["switch"] == "s1"
        # Every iteration the workers logged inside the queue log's span was seen at the bottleneck.
        assert metrics["iterations"]["count"] >= 5 and metrics["iterations"]["consistent"], metrics["iterations"]
        _check_iterations_against_the_raw_queue_log(run, metrics)
        assert metrics["throughput_mbps"]["ddl"] > 0 and metrics["throughput_mbps"]["background"] > 0
        assert metrics["telemetry"]["records"] > 1000
        assert list(run.glob("queue-s1-p*.png")), "no queue plot"
        assert list((run / "jobs").rglob("*.jsonl")), "no generator logs"
        # Nothing of the run is left running.
        ledger = LedgerData.from_json((run / "started.json").read_text())
        assert not [p for p in ledger.processes if is_running(p.pid, p.start_time)]
    pcn = json.loads((runs["mode=pcn"] / "metrics.json").read_text())
    assert pcn["controller"]["reports"] >= 5 and "arm_write_ms" in pcn["controller"]
    for plot in ("bct-cdf.png", "headline.png", "peak-to-mean.png", "report.md"):
        assert (latest / plot).exists()

    report = pcnlab("report", str(tmp_path / "results" / "tiny"))
    assert report.returncode == 0 and "mode=ecn" in report.stdout and "mode=pcn" in report.stdout
    assert "start queue (pkts)" in report.stdout
    zoom = pcnlab("queues", str(runs["mode=pcn"]), "--around-iteration", "2")
    assert zoom.returncode == 0, zoom.stderr
    assert "iteration 2 " in zoom.stdout and (runs["mode=pcn"] / "queue-s1-p4-iteration2.png").exists()


def _check_iterations_against_the_raw_queue_log(run: Path, metrics: dict) -> None:
    """The generator's 12 iterations, seen at the congested port, checked without the attribution code:
    in the raw queue log a new iteration is a data packet after more than 100 ms of DDL data silence
    (the period is 300 ms), and its start queue is that packet's enqueue depth."""
    table = pd.read_csv(run / "iterations.csv")
    raw = pd.read_csv(run / "queue-s1.csv")
    at = raw[(raw["port"] == metrics["bottleneck"]["port"]) & (raw["class"] == "ddl")]
    acks = at[at["payload_bytes"] == 0]
    data = at[at["payload_bytes"] >= 64].sort_values(["ingress_us", "seq"])  # the 8-byte hellos are not
    assert len(acks) > 0, "the workers' ACKs of the PS's answers cross this port too"
    starts = data[data["ingress_us"].diff().fillna(1e9) > 100_000]
    # Every iteration the workers ran inside the log (all 12 here, the run outlasts the job) ...
    assert abs(len(table) - 12) <= 1 and len(starts) == len(table)
    # ... starts with the packet the raw log shows, and its start queue is that packet's enqueue depth.
    assert list(table["first_in_us"]) == list(starts["ingress_us"])
    assert list(table["start_queue"]) == list(starts["enq_qdepth"])
    # Only data counts: 2 workers x ceil(30016 / 1448) = 42 segments an iteration (more if retransmitted).
    assert table["packets"].sum() == len(data) and (table["packets"] >= 42).all()
    # Towards the workers only the PS's ACKs and its empty answers (a 16-byte header) flow: DDL packets
    # there, but none with data enough to start a burst, so the switch reported none there.
    workers = {int(metrics_port) for metrics_port in _ports_towards(run, ("h1", "h2"))}
    towards = raw[raw["port"].isin(workers) & (raw["class"] == "ddl")]
    assert len(towards) > 100 and (towards["payload_bytes"] < 64).all()
    reports = [e for e in read_json_lines(run / "events.jsonl")[1] if e["type"] == "report" and e["switch"] == "s1"]
    assert reports and not [e for e in reports if e["port"] in workers]


def _ports_towards(run: Path, hosts) -> list[int]:
    endpoints = json.loads((run / "endpoints.json").read_text())
    s1 = next(ep for ep in endpoints if ep["name"] == "s1")
    return [int(p) for p, peer in s1["ports"].items() if peer in hosts]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_cleanly_and_keeps_earlier_results(tmp_path, stop):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.format(duration=60))
    results = tmp_path / "results"
    earlier = results / "tiny" / "2000-01-01T00-00-00" / "mode=ecn"
    earlier.mkdir(parents=True)
    (earlier / "status.json").write_text('{"status": "finished"}')
    proc = subprocess.Popen([sys.executable, "-m", "pcnlab.app.cli", "run", str(spec), "--results", str(results), "--no-plots"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    run_dir = None
    while time.monotonic() < deadline and run_dir is None:
        found = [p for p in (results / "tiny").glob("*/mode=ecn/events.jsonl") if "2000" not in str(p)]
        run_dir = found[0].parent if found else None
        time.sleep(0.5)
    assert run_dir is not None, "the run did not start"
    time.sleep(4)  # well into the run: jobs and background are going
    proc.send_signal(stop)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "aborted"
    assert not (run_dir.parent / "mode=pcn").exists()  # the sweep stopped there
    ledger = LedgerData.from_json((run_dir / "started.json").read_text())
    assert ledger.processes and not [p for p in ledger.processes if is_running(p.pid, p.start_time)]
    assert not [n for n in ledger.namespaces if is_running(n.pid, n.start_time)]
    assert json.loads((earlier / "status.json").read_text())["status"] == "finished"


def test_a_failing_analysis_keeps_the_run_and_the_sweep_goes_on(tmp_path, monkeypatch):
    """A defect in reading one run's files (here: the analysis raises) fails that run with one line
    saying so and how to read it again; its files stay, and the next run of the sweep still runs."""
    from pcnlab.analysis import metrics as analysis
    from pcnlab.experiments.config import load_experiment
    from pcnlab.experiments.runner import ExperimentRunner

    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.format(duration=5))
    real = analysis.analyse_run

    def broken(path, *args, **kwargs):
        if "mode=ecn" in str(path):
            raise KeyError("bytes_filled")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(analysis, "analyse_run", broken)
    said: list[str] = []
    outcomes = ExperimentRunner(load_experiment(spec, []), tmp_path / "results", say=said.append, plots=False).run_all()
    assert [o.status for o in outcomes] == ["failed", "finished"]
    assert "analysing its files failed (KeyError: 'bytes_filled')" in outcomes[0].error
    assert "--recompute" in outcomes[0].error
    assert (outcomes[0].path / "events.jsonl").is_file() and (outcomes[0].path / "queue-s1.csv").is_file()
    assert json.loads((outcomes[0].path / "status.json").read_text())["status"] == "failed"
    # Once the analysis is mended, `report --recompute` reads the run again and it counts.
    monkeypatch.undo()
    from pcnlab.app.cli import main

    assert main(["report", str(outcomes[0].path.parent), "--recompute"]) == 0
    status = json.loads((outcomes[0].path / "status.json").read_text())
    assert status["status"] == "finished" and not status["analysis_failed"]
    assert (outcomes[0].path / "metrics.json").is_file()


def test_a_sweep_run_without_plots_has_none_until_the_report_draws_them(first_run):
    """`pcnlab run --no-plots` (the session's first run, conftest.py): the tables only; `pcnlab report`
    then draws the sweep's plots and each run's view from the same files."""
    from pcnlab.app.cli import main

    assert first_run.proc.returncode == 0, first_run.proc.stdout + first_run.proc.stderr
    sweep = next((first_run.results / "tiny").glob("2*"))
    assert (sweep / "report.md").is_file() and (sweep / "run" / "metrics.json").is_file()
    assert not list(sweep.rglob("*.png")) and not list(sweep.rglob("view.html"))
    assert "no plots: pcnlab report " in first_run.proc.stdout
    assert main(["report", str(sweep)]) == 0
    assert (sweep / "run" / "view.html").is_file() and "## Each run, interactive" in (sweep / "report.md").read_text()
