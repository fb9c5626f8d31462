"""LTP through a real BMv2 switch (p4src/pcn.p4) with real PyTorch ranks: over a clean port it delivers
every byte and trains bit for bit as TCP does; with loss injected at the PS's port (a 3-packet queue)
every iteration closes within its deadline, what the PS and the workers log matches what the
switch's counters say was dropped, and the model still learns.

The job's UDP datagrams from the workers to the PS's gradient port (and only they: not gloo's TCP, not
the acknowledgements of the parameters, which go to the PS's ephemeral ports) are the DDL class, so the
switch's counters of that class at the PS's port count exactly LTP's gradient datagrams: handed to
the queue, sent, and dropped at the full queue (to_queue - tx - dropped by the program)."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import pytest
import torch

from conftest import needs_bmv2
from pcnlab.controller.sessions import ControllerThread, PcnController
from pcnlab.controller.dataplane import DataPlaneConfig, FlowClass, read_port_counters
from pcnlab.controller.program import P4Program
from pcnlab.controller.endpoints import PortQueue
from pcnlab.controller.thrift_runtime import SwitchThrift
from pcnlab.jsonlines import read_json_lines
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology
from pcnlab.workloads import JobSpec, Workloads
from pcnlab.workloads.hosts import FIRST_PORT
from pcnlab.workloads.ltp.wire import CHUNK_ELEMENTS
from workload_checks import check_ps_sync, load, losses

pytestmark = [needs_bmv2, pytest.mark.root, pytest.mark.bmv2, pytest.mark.slow]

WORKERS = ("h2", "h3", "h4")
EPHEMERAL = 32768          # Linux's first ephemeral port: the launcher's ports (from FIRST_PORT) lie below
RATE_PPS = 826             # 10 Mbit/s of full frames at the PS's port
DEEP, TINY = 300, 3        # packets: no loss for 3 workers' 81 datagrams; loss at every iteration
DEADLINE_MS = 250          # the lossy port's: every iteration must close by then
CLEAN_DEADLINE_MS = 3000   # the clean port's: long, so only a lost datagram could close one early (a
                           # rank of four PyTorch processes on 2 cores can start an iteration 250 ms late)
LR = 0.2


@contextmanager
def star_with_ps_port():
    """BMv2 star: h1 the PS, h2-h4 workers; the PS's port drains at RATE_PPS. Yields the network, the
    PS's port, the switch's thrift client and a function reading the port counters."""
    from pcnlab.experiments.rundir import RunFolder
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp, RunFolder.create(Path(tmp), "ltp", "bmv2") as run:
        topo = make_topology("star", hosts=1 + len(WORKERS), monitors=False)
        with PcnNetwork(topo, run.path, run.ledger, NetworkOptions(switch="bmv2")) as net:
            endpoint = net.endpoints()[0]
            port = next(p for p, peer in endpoint.ports.items() if peer == "h1")
            endpoint = dataclasses.replace(endpoint, queues=(PortQueue(port, RATE_PPS, DEEP),))
            ps_ip = net.host("h1").IP()
            classes = tuple(FlowClass(job=1, src=f"{net.host(w).IP()}/32", dst=f"{ps_ip}/32", proto=17,
                                      dport=(FIRST_PORT, EPHEMERAL - 1)) for w in WORKERS)
            controller = PcnController([endpoint], P4Program.named(),
                                       dataplane={"s1": DataPlaneConfig(switch_id=1, classes=classes)})
            thread = ControllerThread(controller).start()
            thrift = SwitchThrift(endpoint.thrift_port)
            try:
                yield (run, net, port, thrift,
                       lambda: thread.call(read_port_counters(controller.switches["s1"]), 10))
            finally:
                thrift.close()
                thread.stop()


def _ddl(counters: dict, port: int) -> dict[str, int]:
    return {k: counters.get((port, "ddl", k), (0, 0))[0] for k in ("to_queue", "tx", "dropped")}


def _job(run, net, name: str, transport: str, iterations: int, dump: bool = False,
         deadline_ms: float = DEADLINE_MS):
    spec = JobSpec(name=name, kind="ps", servers=("h1",), workers=WORKERS, iterations=iterations,
                   model="digits-mlp", batch=32, lr=LR, eval_every=iterations, compute_ms=10, dump_tensors=dump,
                   transport=transport, ltp_deadline_ms=deadline_ms, timeout_s=60)
    return Workloads(run.path, net=net, ledger=run.ledger).start_job(spec).wait(timeout=180)


def _ltp_datagrams(job) -> tuple[int, int, int]:
    """(datagrams the workers sent, datagrams the PS's socket read, datagrams its buffer overflowed on)."""
    sent = sum(r["ltp_datagrams"] for p in job.procs if p.label.startswith("worker") for r in job.records(p.label))
    end = next(r for r in read_json_lines(job.logs["ps0"])[1] if r["type"] == "ltp_counters")
    return sent, end["read"], end["rcvbuf_drops"]


def test_ltp_through_bmv2_clean_then_lossy():
    with star_with_ps_port() as (run, net, port, thrift, counters):
        # --- a clean port: every byte, and TCP's parameters bit for bit --------------------------------
        tcp = _job(run, net, "clean-tcp", "tcp", 6, dump=True)
        before = _ddl(counters(), port)
        ltp = _job(run, net, "clean-ltp", "ltp", 6, dump=True, deadline_ms=CLEAN_DEADLINE_MS)
        after = _ddl(counters(), port)
        ps = ltp.records("ps0")
        assert all(r["delivered_fraction"] == 1.0 and r["early_close"] is None for r in ps), \
            [{k: r.get(k) for k in ("iter", "delivered_fraction", "early_close", "ltp_close", "ltp_duplicates",
                                    "ltp_transmissions_seen", "ltp_counters")} for r in ps]
        assert [r["params_sha"] for r in ps] == [r["params_sha"] for r in tcp.records("ps0")]
        a, b = load(tcp.folder / "tensors", "ps0_it5_param"), load(ltp.folder / "tensors", "ps0_it5_param")
        assert all(torch.equal(a[k], b[k]) for k in a)
        check_ps_sync(ltp, 6, LR)
        sent, read, overflow = _ltp_datagrams(ltp)
        assert after["to_queue"] - before["to_queue"] == sent      # every datagram the workers sent, and
        assert after["tx"] - before["tx"] == read == sent           # only those, reached the PS: none lost
        assert overflow == 0

        # --- loss injected: a 3-packet queue at the PS's port -------------------------------------------
        thrift.set_queue_depth(port, TINY)
        before = _ddl(counters(), port)
        lossy = _job(run, net, "lossy-ltp", "ltp", 40)
        after = _ddl(counters(), port)
        thrift.set_queue_depth(port, DEEP)
        _check_lossy(lossy, before, after)


def _check_lossy(lossy, before: dict, after: dict) -> None:
    ps = lossy.records("ps0")
    assert len(ps) == 40
    for r in ps:  # every iteration closed by its deadline (plus the receiver's own reaction time)
        assert (r["ltp_close_ns"] - r["ltp_first_ns"]) / 1e6 <= DEADLINE_MS + 15, r
        assert r["bytes_recv"] + r["bytes_lost"] == r["gradient_bytes"] == 3 * 4 * 9610
        assert 0 < r["delivered_fraction"] <= 1 and r["delivered_fraction"] == r["bytes_recv"] / r["gradient_bytes"]
    sent, read, overflow = _ltp_datagrams(lossy)
    queued = after["to_queue"] - before["to_queue"]
    left = after["tx"] - before["tx"]
    dropped_at_full_queue = queued - left - (after["dropped"] - before["dropped"])
    print(f"lossy: {sent} datagrams sent, switch dropped {dropped_at_full_queue}, PS read {read} "
          f"(+{overflow} overflowed); delivered {[round(r['delivered_fraction'], 3) for r in ps]}; "
          f"closes {[r['ltp_close'] for r in ps]}")
    assert queued == sent                           # the switch saw every datagram the workers logged
    assert dropped_at_full_queue > 0                # loss was injected
    assert left == read + overflow                  # what the switch let through is what the PS read
    assert sent - read - overflow == dropped_at_full_queue   # the logs account for every drop exactly
    # A chunk is lost only when every transmission of it was dropped.
    lost_chunks = sum(-(-r["bytes_lost"] // (4 * CHUNK_ELEMENTS)) for r in ps)
    assert lost_chunks <= dropped_at_full_queue
    retransmitted = sum(r["ltp_retransmissions"] for w in ("worker0", "worker1", "worker2")
                        for r in lossy.records(w))
    assert retransmitted > 0
    for run_losses in losses(lossy):                # the model still learns
        assert sum(run_losses[-5:]) < sum(run_losses[:5]), run_losses
