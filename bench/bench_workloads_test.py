"""Benchmarks of the workloads on the Linux-bridge variant: how close the generator's bursts and a
PyTorch parameter-server job come to what the link rate allows.

    make bench                                            # with the other benchmarks
    sudo .venv/bin/python -m pytest bench/bench_workloads_test.py -q -s

Prints, per case, the measured time and its ratio to the ideal (the bytes over the bottleneck / rate).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

import pytest

RATE_MBPS = 50.0
WORKERS = ("h2", "h3", "h4")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (Mininet)"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "Mininet is not installed"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


def _run(specs):
    from pcnlab.experiments.rundir import RunFolder
    from pcnlab.topologies.network import NetworkOptions, PcnNetwork
    from pcnlab.topologies.topos import make_topology
    from pcnlab.workloads import Workloads

    out = []
    with tempfile.TemporaryDirectory() as tmp, RunFolder.create(Path(tmp), "bench", "workloads") as run:
        topo = make_topology("star", hosts=4, bw=RATE_MBPS)
        with PcnNetwork(topo, run.path, run.ledger, NetworkOptions(switch="bridge")) as net:
            workloads = Workloads(run.path, net=net, ledger=run.ledger)
            for spec in specs:
                with workloads.start_job(spec) as job:
                    job.wait(timeout=180)
                    out.append((spec, {p.label: job.records(p.label) for p in job.procs}))
    return out


def test_bench_burst_completion_against_the_link_rate():
    from pcnlab.workloads import JobSpec

    sizes = (100_000, 400_000, 1_000_000)
    specs = [JobSpec(name=f"b{size}", kind="burst", servers=("h1",), workers=WORKERS, iterations=8,
                     burst_bytes=size, reply_bytes=size, compute_ms=50, cc="cubic") for size in sizes]
    print(f"\ngenerator, 3 workers -> 1 PS, {RATE_MBPS:g} Mbit/s links (incast on the PS's link)")
    print(f"{'B':>10} {'in (ms)':>10} {'ideal':>8} {'ratio':>6} {'in+out (ms)':>12} {'ideal':>8} {'ratio':>6}")
    for spec, records in _run(specs):
        ps = records["ps"][1:]  # the first iteration includes slow start from a cold connection
        recv = statistics.median((r["recv_end_ns"] - r["comm_start_ns"]) / 1e6 for r in ps)
        ideal = len(WORKERS) * spec.burst_bytes * 8 / (RATE_MBPS * 1e3)
        # First byte of any burst at the PS, to the last worker holding its answer (one clock for all hosts).
        answered = [max(records[f"worker{i}"][it]["comm_end_ns"] for i in range(len(WORKERS)))
                    for it in range(1, spec.iterations)]
        both = statistics.median((a - r["comm_start_ns"]) / 1e6 for a, r in zip(answered, ps))
        print(f"{spec.burst_bytes:>10} {recv:>10.1f} {ideal:>8.1f} {recv / ideal:>6.2f} {both:>12.1f} "
              f"{2 * ideal:>8.1f} {both / (2 * ideal):>6.2f}")
        assert recv >= 0.9 * ideal  # nothing beats the link


def test_bench_parameter_server_iteration_with_a_gradient_profile():
    from pcnlab.workloads import JobSpec

    spec = JobSpec(name="resnet", kind="ps", servers=("h1",), workers=WORKERS, iterations=6,
                   model="profile:resnet50", profile_scale=0.01, compute_ms=50)
    (spec, records), = _run([spec])
    nbytes = records["worker0"][0]["bytes_sent"]
    ideal = 2 * len(WORKERS) * nbytes * 8 / (RATE_MBPS * 1e3)  # gradients in, then parameters out
    comm = statistics.median((r["comm_end_ns"] - r["comm_start_ns"]) / 1e6 for r in records["worker0"][1:])
    print(f"\nPyTorch PS, ResNet-50 profile x0.01 ({nbytes / 1e6:.2f} MB per worker), 3 workers, "
          f"{RATE_MBPS:g} Mbit/s: communication {comm:.1f} ms per iteration, ideal {ideal:.1f} ms "
          f"(ratio {comm / ideal:.2f})")
    assert comm >= 0.9 * ideal
