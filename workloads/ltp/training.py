"""The parameter-server job over LTP (`transport: ltp`): the same ranks, model, data and optimizer as
workloads/ps.py, but each worker's gradients reach its PS shards as LTP datagrams (sender.py), and the
shard averages what arrived (receiver.py, Early Close; fill.py, Bubble Filling). The parameters go
back to the workers reliably, over gloo's TCP connections as on the TCP path.

Per iteration the logs add, on the PS: gradient_bytes (expected), bytes_recv (arrived before the
close), bytes_lost, bytes_filled (holes filled from the other workers' mean, or 0: bytes_zero_filled),
delivered_fraction (and per rank), how the iteration closed (ltp_close: complete | threshold |
deadline; early_close and early_close_ns when it fired), the threshold in force and the loss estimate,
and the receiver's counters of dropped datagrams by reason; on a worker: bytes_sent (every
transmission's datagram bytes), ltp_acked_bytes, transmissions, retransmissions, window, RTT and
how its sending ended.
"""

from __future__ import annotations

import time

from pcnlab.workloads.ltp.earlyclose import EarlyClose
from pcnlab.workloads.ltp.fill import bubble_fill
from pcnlab.workloads.ltp.receiver import LtpServer
from pcnlab.workloads.ltp.sender import LtpSender
from pcnlab.workloads.ltp.wire import Layout, job_tag
from pcnlab.workloads.training import digest, flat, held_out_accuracy, peers, timed_compute, unflatten_into


def ltp_port(cfg, shard: int) -> int:
    """The UDP port PS shard `shard` receives gradients on."""
    return (cfg.ltp_port or cfg.master_port + 1) + shard


def _offsets(tensors) -> list[int]:
    offsets, o = [], 0
    for t in tensors:
        offsets.append(o)
        o += t.numel()
    return offsets


def serve(cfg, log, torch, dist, model, names, params, mine, workers, dump, test) -> None:
    """One PS shard: receive every worker's gradient over LTP, fill, average, step, send parameters."""
    own = [params[i] for i in mine]
    optimizer = torch.optim.SGD(own, lr=cfg.lr, momentum=cfg.momentum)
    size = sum(p.numel() for p in own)
    layout = Layout([p.numel() for p in own])
    addresses = peers(cfg)
    server = LtpServer((cfg.addr or "0.0.0.0", ltp_port(cfg, cfg.rank)), job_tag(cfg.job, cfg.master_port),
                       {w: addresses[w] for w in workers}, layout,
                       EarlyClose(cfg.ltp_deadline_ms / 1e3, cfg.ltp_theta_min))
    try:
        for it in range(cfg.iterations):
            comm_start = time.monotonic_ns()
            closed = server.wait(it, cfg.timeout_s)
            recv_end = time.monotonic_ns()
            with torch.no_grad():
                filled = bubble_fill(closed.grad, closed.mask, layout)
                grads = [g.clone() for g in (filled.average[o:o + p.numel()].view_as(p)
                                             for o, p in zip(_offsets(own), own))]
            stats = closed.stats
            server.release(it)
            for p, g in zip(own, grads):
                p.grad = g
            optimizer.step()
            step_end = time.monotonic_ns()
            out = flat([p.detach() for p in own])
            sent = [dist.isend(out, dst=w, tag=it) for w in workers]
            for req in sent:
                req.wait()
            comm_end = time.monotonic_ns()
            dump(f"ps{cfg.rank}_it{it}_avg", {names[i]: g for i, g in zip(mine, grads)})
            dump(f"ps{cfg.rank}_it{it}_param", {names[i]: params[i] for i in mine})
            log.iteration(iter=it, compute_start_ns=recv_end, compute_end_ns=step_end, comm_start_ns=comm_start,
                          comm_end_ns=comm_end, recv_end_ns=recv_end, send_start_ns=step_end,
                          bytes_sent=4 * size * len(workers), loss=None, transport="ltp",
                          bytes_filled=4 * filled.filled_elements, bytes_zero_filled=4 * filled.zero_elements,
                          **stats, params_sha=digest(own), **held_out_accuracy(cfg, model, test, it))
    finally:
        server.stop()
    log.write("ltp_counters", **server.counters())


def work(cfg, log, torch, dist, model, names, params, shards, dump, test, task, ann) -> None:
    """One worker: compute, send each shard its part over LTP, receive the parameters over gloo."""
    from pcnlab.workloads.models import compute_gradients

    dump(f"w{cfg.rank}_init_param", dict(zip(names, params)))
    per_shard = [[params[i] for i in owned] for owned in shards]
    received = [torch.zeros(sum(p.numel() for p in ps)) for ps in per_shard]
    addresses = peers(cfg)
    tag = job_tag(cfg.job, cfg.master_port)
    senders = [LtpSender((addresses[s], ltp_port(cfg, s)), tag, cfg.rank, Layout([p.numel() for p in ps]),
                         seed=cfg.seed, bind_addr=cfg.addr, idle_timeout_s=cfg.timeout_s)
               for s, ps in enumerate(per_shard)]
    try:
        for it in range(cfg.iterations):
            c0, c1, loss = timed_compute(
                cfg, lambda: compute_gradients(model, task, cfg.batch, cfg.rank, it, cfg.seed),
                announce=(lambda t: ann.before(t, it)) if ann else None)
            comm_start = time.monotonic_ns()
            outgoing = [flat([p.grad for p in ps]) for ps in per_shard]
            reqs = [dist.irecv(buf, src=s, tag=it) for s, buf in enumerate(received)]
            results = [sender.send(it, g.numpy(), cfg.ltp_deadline_ms / 1e3) for sender, g in zip(senders, outgoing)]
            sent_end = time.monotonic_ns()
            for req in reqs:
                req.wait()
            with torch.no_grad():
                for buf, ps in zip(received, per_shard):
                    unflatten_into(buf, ps)
            comm_end = time.monotonic_ns()
            dump(f"w{cfg.rank}_it{it}_grad", {n: p.grad for n, p in zip(names, params)})
            dump(f"w{cfg.rank}_it{it}_param", dict(zip(names, params)))
            fields = results[0].log_fields() if len(results) == 1 else {"ltp_shards": [r.log_fields() for r in results]}
            log.iteration(iter=it, compute_start_ns=c0, compute_end_ns=c1, comm_start_ns=comm_start,
                          comm_end_ns=comm_end, send_end_ns=sent_end, transport="ltp",
                          bytes_sent=sum(r.bytes_sent for r in results),
                          bytes_recv=4 * sum(b.numel() for b in received), loss=loss,
                          params_sha=digest(params), **fields,
                          **({"announce_ns": ann.last_ns} if ann else {}),
                          **held_out_accuracy(cfg, model, test, it))
    finally:
        for sender in senders:
            sender.close()
