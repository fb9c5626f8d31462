"""What a real run leaves for the people who read it, on real BMv2: results owned by the user behind
`sudo` (finished or stopped), provenance in versions.json, the tables as Parquet, and per-port pcaps
whose telemetry frames the shipped Wireshark dissector reads as the collector did."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import needs_bmv2, require_trusted
from dissector import needs_tshark, struct_fields, tshark_fields

pytestmark = [needs_bmv2, pytest.mark.slow]

USER = 65534          # nobody: an unprivileged uid/gid, as sudo's SUDO_UID/SUDO_GID would name
PROJECT = Path(__file__).resolve().parents[2]

TINY = """
name: owned
topology: {{kind: dumbbell, left: 2, right: 1, bw: 20, bottleneck_bw: 10, queue: 60}}
switch: {{pcap: true}}
mode: {{kind: ecn, K: 20}}
telemetry: 1
jobs:
  - {{name: gen, kind: generator, pattern: ps, ps: h3, workers: [h1], burst_bytes: 30000, reply_bytes: 0,
     period_ms: 300, iterations: 8, burst_gap_us: 20000}}
background:
  - {{src: h2, dst: h3}}
duration_s: {duration}
warmup_s: 1
"""


def _as_sudo_child(*args, **kwargs):
    env = {**os.environ, "SUDO_UID": str(USER), "SUDO_GID": str(USER)}
    return [sys.executable, "-m", "pcnlab.app.cli", *args], env


def _owners(root: Path) -> dict[str, tuple[int, int]]:
    """Every file, folder and link under root (root included), lstat's owner."""
    out = {str(root): (root.lstat().st_uid, root.lstat().st_gid)}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(Path(top) / name)
            out[str(Path(top) / name)] = (st.st_uid, st.st_gid)
    return out


@pytest.fixture(scope="module")
def base():
    """A folder everyone may traverse (pytest's own tmp folders are root's alone), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="pcnlab-owned-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def finished(base):
    """One finished run, started as `sudo pcnlab run` would be: its results folder did not exist."""
    spec = base / "owned.yaml"
    spec.write_text(TINY.format(duration=4))
    cmd, env = _as_sudo_child("run", str(spec), "--results", str(base / "results"))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return base / "results", base / "results" / "owned" / "latest" / "run"


def test_a_finished_run_belongs_to_the_invoking_user(finished, base):
    results, run = finished
    require_trusted(json.loads((run / "fidelity.json").read_text()))   # the report draws trusted runs only
    owners = _owners(results)
    assert len(owners) > 40 and (results / "owned" / "latest").is_symlink()
    assert {p: o for p, o in owners.items() if o != (USER, USER)} == {}
    sweep = (results / "owned" / "latest").resolve()
    for made in ("report.md", "summary.json", "headline.png", "run/metrics.json", "run/queue-s1.csv",
                 "run/s1-eth1_in.pcap", "run/versions.json", "run/started.json"):
        assert str(sweep / made) in owners, made
    # ... so the user reads and re-plots it without root (what failed with a traceback before).
    home = base / "home"
    home.mkdir(exist_ok=True)
    os.chown(home, USER, USER)
    as_user = subprocess.run(["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups",
                              sys.executable, "-m", "pcnlab.app.cli", "queues", str(run), "--around-iteration", "2"],
                             env={**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(home)},
                             capture_output=True, text=True, timeout=120)
    assert as_user.returncode == 0, as_user.stdout + as_user.stderr
    plot = next(run.glob("queue-s1-p*-iteration2.png"))
    assert plot.stat().st_uid == USER


def test_a_stopped_run_belongs_to_the_invoking_user(base):
    spec = base / "long.yaml"
    spec.write_text(TINY.format(duration=60).replace("name: owned", "name: stopped"))
    results = base / "results-stopped"
    cmd, env = _as_sudo_child("run", str(spec), "--results", str(results))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not list(results.glob("stopped/*/run/events.jsonl")):
        time.sleep(0.5)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, out + err
    run = next(results.glob("stopped/*/run"))
    assert json.loads((run / "status.json").read_text())["status"] == "aborted"
    assert {p: o for p, o in _owners(results).items() if o != (USER, USER)} == {}


def test_versions_json_names_the_commit_and_the_packages(finished):
    _, run = finished
    versions = json.loads((run / "versions.json").read_text())
    head = subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    if head.returncode == 0:
        assert versions["git"]["commit"] == head.stdout.strip() and isinstance(versions["git"]["dirty"], bool)
    assert versions["packages"]["pcnlab"] and versions["packages"]["pandas"] == pd.__version__
    assert versions["bmv2"] and versions["p4c"].startswith("p4c")


def test_export_writes_the_results_tables_as_parquet(finished, tmp_path):
    results, run = finished
    out = tmp_path / "parquet"
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "export", str(results / "owned"), "--parquet",
                           str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    queue = pd.read_parquet(out / "queue.parquet")
    raw = pd.concat([pd.read_csv(p) for p in sorted(run.glob("queue-s*.csv"))], ignore_index=True)
    assert len(queue) == len(raw) > 1000 and set(queue["run"]) == {"run"}
    assert sorted(zip(queue["switch"], queue["seq"])) == sorted(zip(raw["switch"], raw["seq"]))
    assert {"ingress_ns", "egress_ns", "src", "dst"} <= set(queue.columns)   # the host clock applied
    assert set(queue["src"].dropna()) <= {"h1", "h2", "h3"}
    events = pd.read_parquet(out / "events.parquet")
    assert len(events) == len((run / "events.jsonl").read_text().splitlines())
    iterations = pd.read_parquet(out / "iterations.parquet")
    assert set(iterations["role"]) == {"worker", "ps"} and iterations["iter"].max() >= 5
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "export", str(results / "owned"), "--parquet",
                           "/proc/parquet"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and "cannot make /proc/parquet" in proc.stderr
    assert len(pd.read_parquet(out / "flows.parquet")) > 0
    assert len(pd.read_parquet(out / "iteration_table.parquet")) == len(pd.read_csv(run / "iterations.csv"))
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert list(metrics["run"]) == ["run"] and list(metrics["status"]) == ["finished"]
    assert metrics["iterations.count"].iloc[0] == json.loads((run / "metrics.json").read_text())["iterations"]["count"]

    missing = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "export", str(tmp_path / "nothing"),
                              "--parquet", str(out)], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "does not exist" in missing.stderr and "Traceback" not in missing.stderr


@needs_tshark
def test_the_dissector_reads_real_telemetry_frames_as_the_collector_did(finished):
    from scapy.utils import rdpcap

    _, run = finished
    ports = json.loads((run / "network.json").read_text())["switches"]["s1"]["ports"]
    monitor = next(p for p, peer in ports.items() if peer == "m1")
    pcap = run / f"s1-eth{monitor}_out.pcap"       # what s1 sent its monitor host: the telemetry clones
    frames = [bytes(p) for p in rdpcap(str(pcap))]
    assert len(frames) > 1000 and all(len(f) == 58 for f in frames)
    dissected = tshark_fields(pcap)
    assert dissected == [struct_fields(f) for f in frames]
    # ... and they are the records the collector logged, field for field.
    logged = pd.read_csv(run / "queue-s1.csv").set_index("seq")
    matched = 0
    for seq, _, port, cls, job, _, ingress, egress, enq, deq, delay, length, payload, src, dst in dissected:
        if seq in logged.index:
            row = logged.loc[seq]
            assert (row["port"], row["class"], row["job"], row["ingress_us"], row["egress_us"], row["enq_qdepth"],
                    row["deq_qdepth"], row["queue_delay_us"], row["packet_length"], row["payload_bytes"],
                    row["src_host"], row["dst_host"]) == (port, "ddl" if cls == 1 else "background", job, ingress,
                                                          egress, enq, deq, delay, length, payload, src, dst)
            matched += 1
    assert matched >= 0.99 * len(dissected)
