"""Workloads in Mininet hosts, over Linux bridges and (where installed) BMv2 switches: real PyTorch
jobs, the generator's bursts measured on the wire, background flows at the link rate, and a killed
worker ending its job cleanly."""

from __future__ import annotations

import statistics
import time

import pytest

from conftest import needs_bmv2, needs_mininet
from pcnlab.errors import UsageError
from pcnlab.jsonlines import read_json_lines
from pcnlab.workloads import PCN_START_DSCP, FlowSpec, JobSpec, WorkloadError, Workloads
from workload_checks import (bursts, capture, check_log_format, check_ps_sync, check_ring_sync, losses, network,
                             pids_alive, processes_in_namespaces, read_pcap)

pytestmark = [needs_mininet, pytest.mark.root, pytest.mark.slow]
SWITCHES = ["bridge", pytest.param("bmv2", marks=[needs_bmv2, pytest.mark.bmv2])]
LR = 0.2


# Over BMv2 only (22 s a run; the jobs are the same over bridges, whose forwarding the other tests here cover).
@pytest.mark.parametrize("switch", SWITCHES[1:])
def test_ps_and_ring_jobs_train_in_their_hosts(run_folder, switch):
    ps = JobSpec(name="ps", kind="ps", servers=("h1", "h2"), workers=("h3", "h4", "h5"), iterations=3,
                 model="mlp", batch=64, lr=LR, dump_tensors=True)
    # The ring carries ResNet-50's gradient profile (1 MB per iteration).
    model = "profile:resnet50"
    ring = JobSpec(name="ring", kind="ring", workers=("h6", "h7", "h8"), iterations=3, model=model,
                   profile_scale=0.01, lr=LR, bucket_mb=0.25, compute_ms=10, dump_tensors=True)
    with network(run_folder, switch, "star", hosts=8) as net:
        workloads = Workloads(run_folder.path, net=net, ledger=run_folder.ledger)
        jobs = [workloads.start_job(spec) for spec in (ps, ring)]
        try:
            for job in jobs:
                job.wait(timeout=120)
        finally:
            for job in jobs:
                job.stop()
        recorded = {p.pid for p in run_folder.ledger.data.processes}
        assert {p.pid for job in jobs for p in job.procs} <= recorded
    ps_job, ring_job = jobs
    for job in jobs:
        for p in job.procs:
            check_log_format(p.log, 3)
            assert read_json_lines(p.log)[0]["host"] == p.host
    check_ps_sync(ps_job, 3, LR)
    check_ring_sync(ring_job, 3, LR)
    for run in losses(ps_job):
        assert run[-1] < run[0], run
    assert ring_job.records("worker0")[0]["bytes_sent"] == round(2 * 2 / 3 * 4 * 255_573)


@pytest.mark.parametrize("switch", SWITCHES)
def test_generator_bursts_on_the_wire(run_folder, switch):
    burst, period_ms, iterations = 150_000, 250, 6
    spec = JobSpec(name="gen", kind="burst", servers=("h1",), workers=("h2", "h3", "h4"), iterations=iterations,
                   burst_bytes=burst, reply_bytes=50_000, period_ms=period_ms, cc="cubic", ecn=True,
                   pcn_start=True)
    with network(run_folder, switch, "star", hosts=4, bw=50) as net:
        with capture(net, run_folder.ledger, "h1", run_folder.path / "h1.pcap") as pcap:
            with Workloads(run_folder.path, net=net, ledger=run_folder.ledger).start_job(spec) as job:
                job.wait(timeout=60)
            time.sleep(0.2)
        assert net.host("h2").cmd("cat /proc/sys/net/ipv4/tcp_ecn").strip() == "1"
    packets = read_pcap(pcap)
    ps_ip, port = "10.0.0.1", read_json_lines(job.logs["ps"])[0]["config"]["port"]
    for n, worker in enumerate(("h2", "h3", "h4")):
        ip = f"10.0.0.{n + 2}"
        data = [p for p in packets if p.src == ip and p.dst == ps_ip and p.proto == 6 and p.payload > 0]
        assert data[0].payload == 8  # the worker's hello on connecting, before any burst
        data = data[1:]
        seen = bursts(data, gap_s=period_ms / 3e3)
        assert len(seen) == iterations, seen
        for _, size in seen:
            assert abs(size - burst) <= 0.1 * burst, (worker, seen)
        periods = [b[0] - a[0] for a, b in zip(seen, seen[1:])]
        print(f"{switch} {worker}: bursts {[size for _, size in seen]} B, periods "
              f"{[round(p * 1e3, 1) for p in periods]} ms")
        assert abs(statistics.mean(periods) - period_ms / 1e3) <= 0.1 * period_ms / 1e3, periods
        assert abs(statistics.median(periods) - period_ms / 1e3) <= 0.1 * period_ms / 1e3, periods
        # PCN-START: one datagram per burst, DSCP PCN_START_DSCP, to the PS's port, before the burst.
        announced = [p for p in packets if p.src == ip and p.proto == 17]
        assert len(announced) == iterations
        assert all(p.tos >> 2 == PCN_START_DSCP and p.dst == ps_ip and p.dport == port for p in announced)
        assert all(a.t < start for a, (start, _) in zip(announced, seen)), \
            [(round(a.t, 4), round(start, 4)) for a, (start, _) in zip(announced, seen)]
        assert all(p.tos >> 2 != PCN_START_DSCP for p in data)
        # ECN was negotiated: the data segments are ECN-capable (ECT(0) or ECT(1)).
        assert sum(p.tos & 3 in (1, 2) for p in data) > 0.9 * len(data)


@pytest.mark.parametrize("switch", SWITCHES)
def test_background_flows_alone_reach_the_link_rate(run_folder, switch):
    rate = 20.0
    # Two flows between disjoint pairs, so each is alone on its links (ACKs included).
    specs = [FlowSpec("h2", "h1", cc="bbr", duration_s=4, interval_ms=250),
             FlowSpec("h3", "h4", cc="reno", ecn=True, duration_s=4, interval_ms=250)]
    with network(run_folder, switch, "star", hosts=4, bw=rate) as net:
        with Workloads(run_folder.path, net=net, ledger=run_folder.ledger).start_flows(specs) as flows:
            flows.wait(timeout=30)
        # A host asked for ECN keeps it even when its SYN has to be sent again (no RFC 3168 fallback).
        assert net.host("h3").cmd("cat /proc/sys/net/ipv4/tcp_ecn_fallback").strip() == "0"
        assert net.host("h2").cmd("cat /proc/sys/net/ipv4/tcp_ecn_fallback").strip() == "1"
    for name, cc, ecn in (("h2-h1", "bbr", False), ("h3-h4", "reno", True)):
        intervals = flows.throughput()[name]
        assert sum(i["end_ns"] - i["start_ns"] for i in intervals) > 3.5e9
        steady = [i for i in intervals if i["start_ns"] > intervals[0]["start_ns"] + 0.5e9]
        mbps = sum(i["bytes"] for i in steady) * 8e3 / sum(i["end_ns"] - i["start_ns"] for i in steady)
        print(f"{switch} {name} {cc}: {mbps:.2f} Mbit/s on a {rate:g} Mbit/s link")
        assert 0.85 * rate <= mbps <= 1.05 * rate, (name, mbps, [i["mbps"] for i in intervals])
        connected = next(r for r in read_json_lines(flows.logs[f"{name}.sender"])[1] if r["type"] == "connected")
        assert connected["cc"] == cc and connected["ecn"] is ecn, connected


def test_killing_a_worker_ends_the_job_and_leaves_nothing(run_folder):
    spec = JobSpec(name="doomed", kind="ps", servers=("h1",), workers=("h2", "h3", "h4"), iterations=100_000,
                   compute_ms=20, timeout_s=60, cc="reno", ecn=True)
    with network(run_folder, "bridge", "star", hosts=4) as net:
        shells = {h.pid for h in net.net.hosts}
        inodes = {ns.inode for ns in run_folder.ledger.data.namespaces}
        workloads = Workloads(run_folder.path, net=net, ledger=run_folder.ledger)
        job = workloads.start_job(spec)
        try:
            # gloo's sockets take the hosts' defaults: the job set them in every one of its hosts.
            for h in ("h1", "h4"):
                assert net.host(h).cmd("cat /proc/sys/net/ipv4/tcp_congestion_control").strip() == "reno"
                assert net.host(h).cmd("cat /proc/sys/net/ipv4/tcp_ecn").strip() == "1"
            with pytest.raises(UsageError, match="host h2 already has net.ipv4.tcp_ecn=1 for job doomed"):
                workloads.start_job(JobSpec(name="other", kind="burst", servers=("h1",), workers=("h2",), ecn=False))
            victim = next(p for p in job.procs if p.label == "worker1")
            deadline = time.monotonic() + 90
            while not (victim.log.exists() and job.records(victim.label)):
                assert time.monotonic() < deadline, "the job never ran an iteration"
                assert job.check() is False
                time.sleep(0.1)
            victim.popen.kill()
            with pytest.raises(WorkloadError) as info:
                job.wait(timeout=30)
        finally:
            job.stop()
        message = str(info.value)
        print(message)
        assert "\n" not in message
        assert message.startswith("job doomed: rank 2 (worker1 on h3) was killed by SIGKILL; stopped the rest"), message
        assert str(job.folder) in message
        assert pids_alive([p.pid for p in job.procs]) == []
        assert processes_in_namespaces(inodes, exclude=shells) == []
    assert all(job.records(p.label) for p in job.procs)  # every log kept its iterations
