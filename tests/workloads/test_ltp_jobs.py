"""LTP jobs on this machine's loopback (real PyTorch ranks, real UDP, no root): over a clean link LTP
delivers every byte and trains bit for bit as TCP does; the generator over LTP; a worker killed
mid-run ends the job with one line and the logs kept."""

from __future__ import annotations

import time

import pytest
import torch

from pcnlab.workloads import JobSpec, WorkloadError, Workloads
from workload_checks import check_log_format, check_ps_sync, load, losses, pids_alive

LR = 0.2
ITERATIONS = 6


def _train(tmp_path, transport: str):
    spec = JobSpec(name=f"train-{transport}", kind="ps", servers=("h1",), workers=("h2", "h3", "h4"),
                   iterations=ITERATIONS, model="digits-mlp", batch=32, lr=LR, eval_every=3, dump_tensors=True,
                   transport=transport, ltp_deadline_ms=2000)
    return Workloads(tmp_path / transport).start_job(spec).wait(timeout=120)


@pytest.mark.slow
def test_ltp_on_a_clean_link_delivers_everything_and_matches_tcp_bit_for_bit(tmp_path):
    tcp, ltp = _train(tmp_path, "tcp"), _train(tmp_path, "ltp")
    for job in (tcp, ltp):
        for p in job.procs:
            check_log_format(p.log, ITERATIONS)
        check_ps_sync(job, ITERATIONS, LR)             # the PS averaged exactly what the workers computed
    ps = ltp.records("ps0")
    assert [r["delivered_fraction"] for r in ps] == [1.0] * ITERATIONS
    assert all(r["early_close"] is None and r["ltp_close"] == "complete" for r in ps)
    assert all(r["bytes_lost"] == 0 and r["bytes_filled"] == 0 for r in ps)
    assert all(r["bytes_recv"] == r["gradient_bytes"] == 3 * 4 * 9610 for r in ps)   # digits-mlp: 9,610 values
    # Early Close never fired: the parameters are TCP's, bit for bit, after every iteration.
    assert [r["params_sha"] for r in ps] == [r["params_sha"] for r in tcp.records("ps0")]
    assert [r["accuracy"] for r in ps if "accuracy" in r] == [r["accuracy"] for r in tcp.records("ps0")
                                                              if "accuracy" in r]
    final = f"ps0_it{ITERATIONS - 1}_param"
    a, b = load(tcp.folder / "tensors", final), load(ltp.folder / "tensors", final)
    assert all(torch.equal(a[k], b[k]) for k in a)
    for w in ("worker0", "worker1", "worker2"):
        recs = ltp.records(w)
        assert all(r["transport"] == "ltp" and r["ltp_acked_bytes"] == r["ltp_gradient_bytes"] for r in recs)
    for run in losses(ltp):
        assert run[-1] < run[0], run


@pytest.mark.slow
def test_generator_over_ltp(tmp_path):
    spec = JobSpec(name="gen", kind="burst", servers=("h1",), workers=("h2", "h3"), iterations=5,
                   burst_bytes=100_000, reply_bytes=10_000, period_ms=50, transport="ltp")
    job = Workloads(tmp_path).start_job(spec).wait(timeout=60)
    ps = job.records("ps")
    assert [r["bytes_recv"] for r in ps] == [200_000] * 5 and [r["bytes_sent"] for r in ps] == [20_000] * 5
    assert all(r["delivered_fraction"] == 1.0 for r in ps)
    for w in ("worker0", "worker1"):
        assert [r["bytes_recv"] for r in job.records(w)] == [10_000] * 5
        assert all(r["ltp_outcome"] == "complete" for r in job.records(w))


@pytest.mark.slow
def test_a_worker_killed_mid_run_ends_the_ltp_job_with_one_line(tmp_path):
    spec = JobSpec(name="doomed", kind="ps", servers=("h1",), workers=("h2", "h3", "h4"), iterations=100_000,
                   model="digits-mlp", compute_ms=20, timeout_s=60, transport="ltp", ltp_deadline_ms=300)
    job = Workloads(tmp_path).start_job(spec)
    try:
        victim = next(p for p in job.procs if p.label == "worker1")
        deadline = time.monotonic() + 90
        while not (victim.log.exists() and len(job.records(victim.label)) >= 3):
            assert time.monotonic() < deadline, "the job never ran an iteration"
            assert job.check() is False
            time.sleep(0.05)
        victim.popen.kill()
        with pytest.raises(WorkloadError) as info:
            job.wait(timeout=30)
    finally:
        job.stop()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("job doomed: rank 2 (worker1 on h3) was killed by SIGKILL; stopped the rest"), message
    assert str(job.folder) in message
    assert pids_alive([p.pid for p in job.procs]) == []
    assert all(len(job.records(p.label)) >= 3 for p in job.procs)   # every log kept its iterations
