"""Real PyTorch jobs and the generator on this machine's loopback: no root, no Mininet."""

from __future__ import annotations

import pytest

from workload_checks import check_log_format, check_ps_sync, check_ring_sync, losses
from pcnlab.jsonlines import read_json_lines
from pcnlab.workloads import JobSpec, Workloads

LR = 0.2


@pytest.mark.slow
def test_ps_two_workers_average_and_stay_in_sync(tmp_path):
    spec = JobSpec(name="ps", kind="ps", servers=("h1",), workers=("h2", "h3"), iterations=3, model="mlp",
                   batch=64, lr=LR, dump_tensors=True)
    job = Workloads(tmp_path).start_job(spec).wait(timeout=90)
    for p in job.procs:
        check_log_format(p.log, 3)
    check_ps_sync(job, 3, LR)
    for run in losses(job):
        assert run[-1] < run[0], run
    # Every rank logs its host's TCP timeouts and loss probes per iteration (tcpsense.HostTcpCounters);
    # loopback loses nothing, so none (on loopback the ranks share this machine's counters).
    for p in job.procs:
        for rec in job.records(p.label):
            assert rec["tcp_timeouts"] >= 0 and rec["tcp_retrans_segs"] >= 0 and "tcp_loss_probes" in rec


@pytest.mark.slow
def test_ring_two_workers_bucketed_average_and_stay_in_sync(tmp_path):
    spec = JobSpec(name="ring", kind="ring", workers=("h1", "h2"), iterations=3, model="cnn", batch=32, lr=LR,
                   bucket_mb=0.002, dump_tensors=True)
    job = Workloads(tmp_path).start_job(spec).wait(timeout=90)
    for p in job.procs:
        its = check_log_format(p.log, 3)
        assert all(r["buckets"] > 1 for r in its)  # 2 KB buckets: the CNN's gradients take several
    check_ring_sync(job, 3, LR)
    for run in losses(job):
        assert run[-1] < run[0], run


@pytest.mark.slow
def test_generator_on_loopback(tmp_path):
    spec = JobSpec(name="gen", kind="burst", servers=("h1",), workers=("h2", "h3"), iterations=4,
                   burst_bytes=100_000, reply_bytes=10_000, period_ms=50, cc="reno", pcn_start=True)
    job = Workloads(tmp_path).start_job(spec).wait(timeout=30)
    ps = job.records("ps")
    assert [r["bytes_recv"] for r in ps] == [200_000] * 4 and [r["bytes_sent"] for r in ps] == [20_000] * 4
    assert all(r["tcp_timeouts"] >= 0 and "tcp_loss_probes" in r for r in ps + job.records("worker0"))
    starts = [r["comm_start_ns"] for r in job.records("worker0")]
    gaps = [(b - a) / 1e6 for a, b in zip(starts, starts[1:])]
    assert all(40 < g < 60 for g in gaps), gaps
    received = [r for r in read_json_lines(job.logs["ps"])[1] if r["type"] == "announce"]
    assert len(received) == 8  # every burst of both workers was announced


@pytest.mark.slow
def test_generator_ring_on_loopback(tmp_path):
    spec = JobSpec(name="ring", kind="burst", pattern="ring", workers=("h1", "h2", "h3"), iterations=3,
                   burst_bytes=300_000, compute_ms=5)
    job = Workloads(tmp_path).start_job(spec).wait(timeout=30)
    for p in job.procs:
        its = check_log_format(p.log, 3)
        # A ring all-reduce of B over N workers: 2 (N - 1) steps of B / N each way.
        assert all(r["bytes_sent"] == r["bytes_recv"] == 4 * 100_000 for r in its)
        assert all(r["tcp_timeouts"] >= 0 and "tcp_loss_probes" in r for r in its)   # tcpsense.HostTcpCounters
