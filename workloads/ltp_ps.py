"""The parameter-server job over LTP (`transport: ltp`): the same ranks, model, data and optimizer as
workloads/ps.py, but each worker's gradients reach its PS shards as LTP datagrams (ltp/sender.py), the shard averages
what arrived (ltp/receiver.py, Early Close; ltp/fill.py, Bubble Filling), and the parameters go
back to the workers over LTP with full delivery: the worker's receiver never closes an iteration
before every chunk is in (theta 1, no deadline short of the job's timeout). gloo only brings the
ranks together (rendezvous, one barrier).

Why the parameters do not return over gloo's TCP: under incast the PS's port is full of gradient
datagrams, and the workers' acknowledgements of the parameters cross it. Measured on ltp-incast.yaml
with TCP for the return, one worker in five waited 90-325 ms for its parameters in 20 % of iterations
(TCP restarts from its initial window after the idle compute gap, and each further flight waits on
acknowledgements that cross the full port, or on a 200 ms timer when they are lost), and the PS
waits for the slowest worker's next gradient.

How they return instead: each worker's parameters go in one flight (the window is at least the
message, up to PARAMS_WINDOW chunks: the path is the worker's own switch port, which nothing else
crowds, and the only congestion its acknowledgements report is the incast port they cross on the way
back), the worker acknowledges them with whole bitmaps (any acknowledgement that gets through says
everything), and the PS does not wait for those acknowledgements before it receives the next
iteration: a worker's next gradient comes only from a worker that has its parameters. A send still
unacknowledged when the next one to the same worker is due is waited for (and repaired) then,
unless that worker's next gradient has arrived: it sends it only once it has its parameters, so the
send is released at once (outcome released). Measured on ltp-incast.yaml (commit 05bc099): the workers'
last acknowledgements of the parameters were lost at the full incast port and the PS waited for its
sender's timer (1.5 x a peak RTT of 130 ms and more) before it sent the next parameters: params_ms
p99 597-619 ms, 6-9 of 100 iterations over 500 ms.

Ports: PS shard s receives gradients on UDP ltp_port + s; every worker receives shard s's parameters
on UDP ltp_port + servers + s (the launcher hands out the 2 x servers ports, none another job has).

Per iteration the logs add, on the PS: gradient_bytes (expected), bytes_recv (arrived before the
close), bytes_lost, bytes_filled (holes filled from the other workers' mean, or 0: bytes_zero_filled),
delivered_fraction (and per rank), how the iteration closed (ltp_close: complete | threshold |
deadline; early_close and early_close_ns when it fired), the threshold in force and the loss estimate,
the receiver's counters of dropped datagrams by reason, and the parameters' sending (bytes_sent,
params_ms, params_retransmissions); on a worker: bytes_sent (every transmission's datagram bytes),
ltp_acked_bytes, transmissions, retransmissions, window, RTT and how its sending ended.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from pcnlab.jsonlines import Iteration
from pcnlab.workloads.ltp.earlyclose import COMPLETE, EarlyClose, hard_deadline_s
from pcnlab.workloads.ltp.fill import bubble_fill
from pcnlab.workloads.ltp.receiver import LtpServer
from pcnlab.workloads.ltp.sender import LtpSender
from pcnlab.workloads.ltp.wire import Layout, job_tag
from pcnlab.workloads.training_common import (digest, flat, held_out_accuracy, offsets, peers, timed_compute,
                                       unflatten_into)

PARAMS_WINDOW = 64     # chunks of parameters a PS sends a worker before waiting for acknowledgements


def gradient_port(cfg, shard: int) -> int:
    """The UDP port PS shard `shard` receives gradients on."""
    return (cfg.ltp_port or cfg.master_port + 1) + shard


def params_port(cfg, shard: int) -> int:
    """The UDP port every worker receives PS shard `shard`'s parameters on."""
    return gradient_port(cfg, cfg.servers + shard)


def _tags(cfg) -> tuple[int, int]:
    return job_tag(cfg.job, cfg.master_port), job_tag(f"{cfg.job}/parameters", cfg.master_port)


def serve(cfg, log, torch, dist, model, names, params, mine, workers, dump, test) -> None:
    """One PS shard: receive every worker's gradient over LTP, fill, average, step, send parameters."""
    own = [params[i] for i in mine]
    optimizer = torch.optim.SGD(own, lr=cfg.lr, momentum=cfg.momentum)
    layout = Layout([p.numel() for p in own])
    addresses = peers(cfg)
    grad_tag, param_tag = _tags(cfg)
    server = LtpServer((cfg.addr or "0.0.0.0", gradient_port(cfg, cfg.rank)), grad_tag,
                       {w: addresses[w] for w in workers}, layout,
                       EarlyClose(hard_deadline_s(cfg.ltp_deadline_ms), cfg.ltp_theta_min))
    senders = {w: LtpSender((addresses[w], params_port(cfg, cfg.rank)), param_tag, cfg.rank, layout, seed=cfg.seed,
                            bind_addr=cfg.addr, idle_timeout_s=cfg.timeout_s,
                            min_window=min(layout.chunks, PARAMS_WINDOW)) for w in workers}
    pool = ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="ltp-params")
    sending: dict = {}          # worker -> the send of its latest parameters (a future, its release)
    dist.barrier()  # every receiver listens before anyone sends (no datagram meets a closed port)
    try:
        for it in range(cfg.iterations):
            comm_start = time.monotonic_ns()
            closed = server.wait(it, cfg.timeout_s)
            recv_end = time.monotonic_ns()
            heard = {w: bool(closed.mask[server.row[w]].any()) for w in workers}   # before release
            with torch.no_grad():
                filled = bubble_fill(closed.grad, closed.mask, layout)
                grads = [g.clone() for g in (filled.average[o:o + p.numel()].view_as(p)
                                             for o, p in zip(offsets(own), own))]
            stats = closed.stats
            server.release(it)
            for p, g in zip(own, grads):
                p.grad = g
            optimizer.step()
            step_end = time.monotonic_ns()
            out = flat([p.detach() for p in own]).numpy()
            previous = _finish(sending, workers, heard)
            releases = {w: threading.Event() for w in workers}
            sending = {w: (pool.submit(senders[w].send, it, out, cfg.timeout_s, releases[w]), releases[w])
                       for w in workers}
            comm_end = time.monotonic_ns()
            dump(f"ps{cfg.rank}_it{it}_avg", {names[i]: g for i, g in zip(mine, grads)})
            dump(f"ps{cfg.rank}_it{it}_param", {names[i]: params[i] for i in mine})
            extra = {**stats}
            log.iteration(Iteration(
                iter=it, compute_start_ns=recv_end, compute_end_ns=step_end, comm_start_ns=comm_start,
                comm_end_ns=comm_end, bytes_sent=4 * layout.total * len(workers), bytes_recv=extra.pop("bytes_recv"),
                extra=dict(recv_end_ns=recv_end, send_start_ns=step_end, transport="ltp",
                           bytes_filled=4 * filled.filled_elements, bytes_zero_filled=4 * filled.zero_elements,
                           **previous, **extra, params_sha=digest(own), **held_out_accuracy(cfg, model, test, it))))
        _finish(sending, workers, {})
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        server.stop()
        for s in senders.values():
            s.close()
    log.write("ltp_counters", **server.counters())


def _finish(sending: dict, workers: list[int], heard: dict[int, bool]) -> dict:
    """Wait for the previous iteration's parameter sends, releasing those to the workers `heard` from
    in the iteration just closed (their gradient says they have the parameters); what they took."""
    if not sending:
        return {}
    for w in workers:
        if heard.get(w):
            sending[w][1].set()
    results = [sending[w][0].result() for w in workers]
    # A worker's receiver closes an iteration only once every chunk is in (theta 1; at its deadline it
    # fails the worker), so its CLOSE (the answer to a retransmission whose acknowledgement was lost)
    # says the parameters arrived; only running out of time is a failure.
    for w, r in zip(workers, results):
        if r.outcome == "deadline":
            raise ConnectionError(f"the parameters of iteration {r.iter} did not reach worker rank {w}")
    return {"params_iter": results[0].iter, "params_datagrams": sum(r.datagrams for r in results),
            "params_retransmissions": sum(r.retransmissions for r in results),
            "params_released": sum(r.outcome == "released" for r in results),
            "params_ms": round(max(r.end_ns - r.start_ns for r in results) / 1e6, 3)}


def work(cfg, log, torch, dist, model, names, params, shards, dump, test, task, ann, shifts=None) -> None:
    """One worker: compute (delayed once by each of the controller's `shifts`), send each shard its part
    over LTP, receive every shard's parameters."""
    from pcnlab.workloads.models import compute_gradients

    dump(f"w{cfg.rank}_init_param", dict(zip(names, params)))
    per_shard = [[params[i] for i in owned] for owned in shards]
    layouts = [Layout([p.numel() for p in ps]) for ps in per_shard]
    addresses = peers(cfg)
    grad_tag, param_tag = _tags(cfg)
    senders = [LtpSender((addresses[s], gradient_port(cfg, s)), grad_tag, cfg.rank, lay, seed=cfg.seed,
                         bind_addr=cfg.addr, idle_timeout_s=cfg.timeout_s) for s, lay in enumerate(layouts)]
    # Full delivery: theta 1 (never closed before every chunk is in), the job's timeout as the deadline.
    receivers = [LtpServer((cfg.addr or "0.0.0.0", params_port(cfg, s)), param_tag, {s: addresses[s]}, lay,
                           EarlyClose(cfg.timeout_s, theta_min=1.0)) for s, lay in enumerate(layouts)]
    give_up_s = hard_deadline_s(cfg.ltp_deadline_ms) or cfg.timeout_s
    dist.barrier()
    try:
        for it in range(cfg.iterations):
            c0, c1, loss = timed_compute(
                cfg, lambda: compute_gradients(model, task, cfg.batch, cfg.rank, it, cfg.seed),
                announce=(lambda t: ann.before(t, it)) if ann else None,
                shifts=shifts, log=log, it=it)
            comm_start = time.monotonic_ns()
            outgoing = [flat([p.grad for p in ps]) for ps in per_shard]
            results = [sender.send(it, g.numpy(), give_up_s) for sender, g in zip(senders, outgoing)]
            sent_end = time.monotonic_ns()
            for s, (receiver, ps) in enumerate(zip(receivers, per_shard)):
                closed = receiver.wait(it, cfg.timeout_s)
                if closed.reason != COMPLETE:
                    raise ConnectionError(f"the parameters of iteration {it} from PS shard {s} did not all arrive "
                                          f"within {cfg.timeout_s:g} s")
                with torch.no_grad():
                    unflatten_into(torch.from_numpy(closed.grad[0]), ps)
                receiver.release(it)
            comm_end = time.monotonic_ns()
            dump(f"w{cfg.rank}_it{it}_grad", {n: p.grad for n, p in zip(names, params)})
            dump(f"w{cfg.rank}_it{it}_param", dict(zip(names, params)))
            fields = results[0].log_fields() if len(results) == 1 else {"ltp_shards": [r.log_fields() for r in results]}
            log.iteration(Iteration(
                iter=it, compute_start_ns=c0, compute_end_ns=c1, comm_start_ns=comm_start, comm_end_ns=comm_end,
                bytes_sent=sum(r.bytes_sent for r in results), bytes_recv=4 * sum(lay.total for lay in layouts),
                loss=loss, extra=dict(send_end_ns=sent_end, transport="ltp", params_sha=digest(params), **fields,
                                      **({"announce_ns": ann.last_ns} if ann else {}),
                                      **held_out_accuracy(cfg, model, test, it))))
    finally:
        for sender in senders:
            sender.close()
        for receiver in receivers:
            receiver.stop()
