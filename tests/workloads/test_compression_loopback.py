"""Compressed PyTorch jobs on this machine's loopback (real processes, real gloo, no root): ring
replicas stay identical, the PS's answer keeps workers in step, bytes handed to gloo are the codec's,
TCP_INFO of gloo's connections counts them, the adaptive policy logs its inputs and decisions, and the
models learn."""

from __future__ import annotations

import pytest

from pcnlab.jsonlines import read_json_lines
from pcnlab.workloads import JobSpec, Workloads
from pcnlab.workloads.compression import HEADER_BYTES, Codec
from pcnlab.workloads.netsense import LADDER

N = 9610            # digits-mlp's parameters
GLOO_FRAMING = 144  # what gloo adds to a message on the wire (TCP_INFO minus payload, measured)


def run(tmp_path, **spec):
    fields = dict(name="j", workers=("h2", "h3"), iterations=30, model="digits-mlp", batch=32, lr=0.2,
                  eval_every=10, compute_ms=10)
    fields.update(spec)
    return Workloads(tmp_path).start_job(JobSpec(**fields)).wait(timeout=120)


def accuracies(records):
    return [r["accuracy"] for r in records if "accuracy" in r]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["topk", "sign"])
def test_compressed_ring_keeps_replicas_identical_and_learns(tmp_path, method):
    job = run(tmp_path, kind="ring", compression=method, compression_ratio=0.01)
    logs = [job.records(p.label) for p in job.procs]
    assert [r["params_sha"] for r in logs[0]] == [r["params_sha"] for r in logs[1]]
    codec = Codec(method, 0.01)
    for records in logs:
        assert {r["compression"]["codec"] for r in records} == {codec.name}
        # An all_gather of two ranks carries each payload once to the other rank.
        assert {r["bytes_sent"] for r in records} == {codec.wire_bytes(N)}
        assert all(r["tcp"]["bytes_sent"] >= codec.wire_bytes(N) for r in records[1:])
    acc = accuracies(logs[0])
    assert acc[-1] > acc[0] + 0.1 and acc[-1] > 0.6


@pytest.mark.slow
def test_compressed_ps_sends_the_codecs_bytes_and_tcp_counts_them(tmp_path):
    job = run(tmp_path, kind="ps", servers=("h1",), workers=("h2",), compression="int8")
    worker, ps = job.records("worker0"), job.records("ps0")
    message = Codec("int8").wire_bytes(N) + HEADER_BYTES
    assert {r["bytes_sent"] for r in worker} == {message} and {r["bytes_recv"] for r in worker} == {message}
    for r in worker[1:]:
        assert r["tcp"]["bytes_sent"] == message + GLOO_FRAMING
        assert r["tcp"]["total_retrans"] == 0 and r["tcp"]["connections"] == 1
    acc = accuracies(ps)
    assert acc[-1] > acc[0] + 0.1


@pytest.mark.slow
def test_adaptive_logs_what_it_sensed_and_decided(tmp_path):
    job = run(tmp_path, kind="ps", servers=("h1",), workers=("h2",), compression="adaptive", compute_ms=100)
    worker = job.records("worker0")
    assert [r["compression"]["level"] for r in worker[:3]] == [0, len(LADDER) - 1, 0]   # the bootstrap
    for r in worker:
        policy = r["policy"]
        assert policy["codec"] == LADDER[policy["level"]].name and policy["reason"]
        assert len(policy["predicted_s"]) == len(LADDER) and policy["floor_s"] > 0
        assert {"srtt_us", "min_rtt_us", "total_retrans", "delivered_ce", "bytes_sent"} <= set(r["tcp"])
    # Loopback is no bottleneck against 100 ms of compute: after the bootstrap it stays uncompressed.
    assert {r["compression"]["level"] for r in worker[3:]} == {0}
    # The PS answers at the level the worker used.
    assert [r["compression"]["level"] for r in job.records("ps0")] == [r["compression"]["level"] for r in worker]


@pytest.mark.slow
def test_a_ps_job_without_error_feedback_tells_its_ranks_and_sends_the_codecs_bytes_both_ways(tmp_path):
    job = run(tmp_path, kind="ps", servers=("h1",), workers=("h2",), compression="topk", compression_ratio=0.01,
              error_feedback=False, iterations=10)
    assert all(read_json_lines(log)[0]["config"]["error_feedback"] is False for log in job.logs.values())
    message = Codec("topk", 0.01).wire_bytes(N) + HEADER_BYTES
    worker = job.records("worker0")
    assert len(worker) == 10
    assert {r["bytes_sent"] for r in worker} == {message} and {r["bytes_recv"] for r in worker} == {message}
