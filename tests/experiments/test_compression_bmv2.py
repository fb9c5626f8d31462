"""Gradient compression and the adaptive policy on real BMv2 (`pcnlab run`, real PyTorch workers, real
packets): the bytes on the wire shrink by the codec's factor (the switch's own telemetry and counters
against the workers' TCP_INFO), and the adaptive policy stays uncompressed on an idle link, compresses
once a `schedule:` drops the PS's port from 100 to 2 Mbit/s, and the model still learns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_bmv2
from pcnlab.analysis.results import RunData, run_folders
from pcnlab.rates import rate_pps
from pcnlab.workloads.compression import HEADER_BYTES, Codec

pytestmark = [needs_bmv2, pytest.mark.slow]

GLOO_FRAMING = 144          # bytes gloo adds to each message (measured: TCP_INFO bytes minus the payload)
N = 9610                    # digits-mlp's parameters
IDLE_MBIT = 100             # the PS's port before the adaptive test's drop

JOB = """
name: {name}
topology: {{kind: star, hosts: 3, bw: {bw}, queue: 60}}
mode: {{kind: ecn, K: 40}}
telemetry: {telemetry}
jobs:
  - name: train
    kind: ps
    ps: h1
    workers: [h2, h3]
    model: digits-mlp
    lr: 0.2
    iterations: {iterations}
    eval_every: 10
    compute_ms: {compute_ms}
    compression: none
    compression_ratio: 0.01
    burst_gap_us: 50000
{schedule}
duration_s: {duration}
warmup_s: 0
sweep:
  jobs.0.compression: [{methods}]
"""


def run(tmp_path: Path, **fields) -> list[RunData]:
    path = tmp_path / f"{fields['name']}.yaml"
    path.write_text(JOB.format(**fields))
    # --no-pilot: these tests count bytes and judge what a run's verdict does not (the wire test takes untrusted
    # runs), so an untrusted first run must not stop the sweep (experiments/pilot.py)
    done = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "run", str(path), "--no-plots", "--no-pilot"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [RunData(p) for p in run_folders(tmp_path / "results" / fields["name"])]


def workers(run: RunData):
    table = run.iterations
    return table[table["role"] == "worker"]


def switch_payload_per_iteration(run: RunData, first: int, last: int) -> float:
    """DDL L4 payload bytes the switch forwarded (telemetry on every packet) between the workers'
    iteration `first` and `last` communication starts, per iteration."""
    w = workers(run)
    start = w.loc[w["iter"] == first, "comm_start_ns"].min()
    end = w.loc[w["iter"] == last, "comm_start_ns"].min()
    q = run.queue
    ddl = q[(q["class"] == "ddl") & q["data"] & (q["ingress_ns"] >= start) & (q["ingress_ns"] < end)]
    return float(ddl["payload_bytes"].sum()) / (last - first)


def tcp_per_iteration(run: RunData, first: int, last: int) -> float:
    """What the workers' TCP sent and received per iteration (TCP_INFO of gloo's connections), summed
    over the workers."""
    w = workers(run)
    rows = w[(w["iter"] >= first) & (w["iter"] < last)]
    return float(sum(t["bytes_sent"] + t["bytes_received"] for t in rows["tcp"])) / (last - first)


def test_bytes_on_the_wire_shrink_by_the_codecs_factor(tmp_path):
    runs = {r.config["sweep"]["jobs.0.compression"]: r for r in run(
        tmp_path, name="wire", bw=20, telemetry=1, iterations=24, compute_ms=50, schedule="", duration=60,
        methods="none, int8, topk")}
    for r in runs.values():
        # What this test counts are bytes, which a slow switch does not change, so it asks for the switch's
        # telemetry (its side of the count) to be complete, not for a trusted run: BMv2's processing lag
        # with every packet cloned reached 17-22 x idle in full suites, and 6-17 x in this test's runs alone,
        # as much before the loss table as after it (2026-11-27, docs/results.md): 2 of 9 runs above the 15 x
        # this test once required, both without the table.
        assert r.status["status"] == "finished", r.status
        telemetry = r.fidelity["checks"]["telemetry"]["s1"]
        assert telemetry["ok"] and telemetry["records"] > 0, telemetry      # at most 1 % of records lost
    switch = {m: switch_payload_per_iteration(r, 5, 20) for m, r in runs.items()}
    tcp = {m: tcp_per_iteration(r, 5, 20) for m, r in runs.items()}
    for method in runs:
        # The switch saw what the workers' TCP says they moved (every DDL packet passes s1 once).
        assert switch[method] == pytest.approx(tcp[method], rel=0.03), (method, switch, tcp)
    for method, codec in (("int8", Codec("int8")), ("topk", Codec("topk", 0.01))):
        # A message is the codec's payload, our 8-byte header and gloo's framing; 2 workers x (up + down).
        expected = (4 * N + HEADER_BYTES + GLOO_FRAMING) / (codec.wire_bytes(N) + HEADER_BYTES + GLOO_FRAMING)
        assert switch["none"] / switch[method] == pytest.approx(expected, rel=0.05), (method, switch)
        # The app-level log agrees: what each worker handed to gloo.
        logged = workers(runs[method])["bytes_sent"].iloc[5:].to_numpy()
        assert set(logged) == {codec.wire_bytes(N) + HEADER_BYTES}
    # Whole frames, ACKs and headers included (the switch's counters), shrink too.
    frames = {m: sum(c["bytes"] for c in r.counters["s1"] if c["class"] == "ddl" and c["counter"] == "tx")
              for m, r in runs.items()}
    assert frames["none"] / frames["int8"] > 3.0 and frames["none"] / frames["topk"] > 10


def test_adaptive_stays_uncompressed_when_idle_compresses_after_the_rate_drops_and_learns(tmp_path):
    schedule = "schedule:\n  - {at_s: 8, link: s1-h1, bw: 2}"
    # Before the drop the link must be idle in the policy's eyes. At 50 Mbit/s it was not: the PS's port
    # queued 5-7 ms of every exchange (srtt - min_rtt over QUEUE_DELAY_US: "congested") and sign
    # compression was predicted 1.08x the progress of none, 7 % below the 1.15 hysteresis: one exchange
    # slowed by 12 ms on a loaded CI machine flipped it. At 100 Mbit/s the margin is 3x that.
    r, = run(tmp_path, name="adapt", bw=IDLE_MBIT, telemetry=10, iterations=70, compute_ms=200, schedule=schedule,
             duration=50, methods="adaptive")
    assert r.status["status"] == "finished"
    events = r.events
    change = events[(events["type"] == "schedule") & (events["action"] == "rate")].iloc[0]
    assert (change["switch"], change["peer"], change["rate_pps"]) == ("s1", "h1", 165)
    assert abs(change["applied_s"] - 8) < 0.3
    w = workers(r).sort_values(["host", "iter"])
    level = w["compression"].map(lambda c: c["level"]).to_numpy()
    before = (w["compute_start_ns"] < change["host_ns"] - 0.5e9).to_numpy() & (w["iter"] >= 3).to_numpy()
    assert before.sum() >= 40 and set(level[before]) == {0}            # none while 100 Mbit/s keeps up
    # The first exchange that began after the drop ran at 2 Mbit/s from its first byte (one that ended
    # after it may have been mostly over at 100 Mbit/s, and then sensed nothing).
    drop_iter = w.loc[w["comm_start_ns"] > change["host_ns"], "iter"].min()
    after = (w["iter"] >= drop_iter + 2).to_numpy()
    assert after.sum() >= 10 and (level[after] > 0).all()               # compressed once the rate fell
    # What the policy sensed at the drop: a slow exchange, and (on each worker, in that exchange or the
    # next: TCP's smoothed RTT follows the queue with a lag) the queue it built: srtt above min_rtt by more
    # than 10 ms (two full frames at 2 Mbit/s take 12).
    first_slow = w[w["iter"] == drop_iter]
    assert all(p["limited"] for p in first_slow["policy"])
    slow = w[w["iter"].isin([drop_iter, drop_iter + 1])]
    queued = slow.assign(q=[t["srtt_us"] - t["min_rtt_us"] for t in slow["tcp"]]).groupby("host")["q"].max()
    assert (queued > 10_000).all(), queued.to_dict()
    # The model still learns: held-out accuracy rises to above 85 %.
    acc = r.iterations.dropna(subset=["accuracy"]).sort_values("iter")["accuracy"].to_numpy()
    assert acc[0] < 0.8 and acc[-1] > 0.85 and np.all(np.isfinite(acc))
    # Each step of the port's rate was judged against its own rate.
    steps = [p for p in r.fidelity["checks"]["ports"] if p["switch"] == "s1" and p["port"] == change["port"]]
    assert [p["rate_pps"] for p in steps] == [rate_pps(IDLE_MBIT), rate_pps(2)]
