"""A parameter-server job rank: `python -m pcnlab.workloads.ps --kind ps --rank R --world N ...`.

Ranks 0..servers-1 are PS shards; the others are workers. Each parameter tensor belongs to one shard
(greedy by size, the same on every rank). Every iteration each worker computes real gradients on its
own batch, sends each shard its part (gloo send), and receives the shard's parameters back; each
shard averages the workers' gradients, takes the optimizer step and sends the new parameters.

A shard's log: comm_start_ns when it posts its receives (so it includes the workers' compute),
recv_end_ns when every worker's gradient is in, compute (averaging and the step) up to send_start_ns,
comm_end_ns when gloo has sent the parameters to every worker.

Test accuracy (real models; every eval_every iterations and after the last) is measured by the PS
after it has sent the parameters, while the workers compute, and logged in its iteration record
(`accuracy`, `test_loss`). With several shards no one shard holds the model, so the first worker
measures it after receiving the parameters. With pcn_start each worker announces its gradients to
every shard one RTT before sending them (announce.py); the shards absorb the announcements.
"""

from __future__ import annotations

import time

from pcnlab.jsonlines import Iteration
from pcnlab.workloads.adaptive import RankCompression
from pcnlab.workloads.catalog import is_profile
from pcnlab.workloads.process_config import TRANSPORTS, TrainConfig, parse_config
from pcnlab.workloads.tcpsense import HostTcpCounters
from pcnlab.workloads.models import Task, build_model, compute_gradients
from pcnlab.workloads.training_common import (Dumper, announcer, listen_on_job_port, digest, flat, held_out_accuracy,
                                       offsets, peers, run_main, setup_process, timed_compute, unflatten_into)


def shard_of_params(sizes: list[int], shards: int) -> list[list[int]]:
    """Parameter indices per shard: largest first onto the least loaded shard (ties: lowest index)."""
    load = [0] * shards
    owned: list[list[int]] = [[] for _ in range(shards)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        s = min(range(shards), key=lambda s: (load[s], s))
        owned[s].append(i)
        load[s] += sizes[i]
    return [sorted(o) for o in owned]


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(TrainConfig, argv)
    cfg.kind = "ps"
    if cfg.transport not in TRANSPORTS:
        raise SystemExit(f"--transport {cfg.transport!r}: choose one of {', '.join(TRANSPORTS)}")
    run_main(cfg, lambda log: _run(cfg, log))


def _run(cfg: TrainConfig, log) -> None:
    shifts = listen_on_job_port(cfg, log)
    torch, dist = setup_process(cfg)
    model = build_model(cfg.model, cfg.seed, cfg.profile_scale)
    names, params = zip(*model.named_parameters())
    shards = shard_of_params([p.numel() for p in params], cfg.servers)
    workers = list(range(cfg.servers, cfg.world))
    dump = Dumper(cfg)
    if not workers:
        raise ValueError("a parameter-server job needs at least one worker rank")
    evaluator = cfg.rank == (0 if cfg.servers == 1 else cfg.servers)
    test = Task(cfg.model, cfg.seed, train=False) if evaluator and not is_profile(cfg.model) else None
    if cfg.transport == "ltp":  # gradients as LTP datagrams (ltp_ps.py), parameters back over gloo
        from pcnlab.workloads import ltp_ps as ltp

        if cfg.role() == "ps":
            ltp.serve(cfg, log, torch, dist, model, names, params, shards[cfg.rank], workers, dump, test)
        else:
            ltp.work(cfg, log, torch, dist, model, names, params, shards, dump, test, _task(cfg),
                     announcer(cfg, log, peers(cfg)[:cfg.servers], 4 * sum(p.numel() for p in params)), shifts)
    elif cfg.role() == "ps":
        _serve(cfg, log, torch, dist, model, names, params, shards[cfg.rank], workers, dump, test)
    else:
        _work(cfg, log, torch, dist, model, names, params, shards, dump, test, shifts)


def _serve(cfg, log, torch, dist, model, names, params, mine, workers, dump, test) -> None:
    own = [params[i] for i in mine]
    optimizer = torch.optim.SGD(own, lr=cfg.lr, momentum=cfg.momentum)
    size = sum(p.numel() for p in own)
    buffers = {w: torch.zeros(size) for w in workers}
    comp = RankCompression(cfg, [size])
    sync = comp.shard_sync(flat([p.detach() for p in own])) if comp.compressed else None
    level, nbytes = 0, 4 * size * len(workers)
    recv_bytes = nbytes
    host_tcp = HostTcpCounters()   # this host's RTOs and tail-loss probes, per iteration (tcpsense.py)
    for it in range(cfg.iterations):
        comm_start = time.monotonic_ns()
        if sync is not None:  # compressed (gradsync.py): decoded gradients in, parameters' change out
            buffers, levels, recv_bytes = sync.gather(dist, it, workers)
        else:
            pending = [dist.irecv(buffers[w], src=w, tag=it) for w in workers]
            for req in pending:
                req.wait()
        recv_end = time.monotonic_ns()
        with torch.no_grad():
            avg = torch.stack([buffers[w] for w in workers]).mean(0)
            grads = [g.clone() for g in (avg[o:o + p.numel()].view_as(p)
                                         for o, p in zip(offsets(own), own))]
        for p, g in zip(own, grads):
            p.grad = g
        optimizer.step()
        step_end = time.monotonic_ns()
        out = flat([p.detach() for p in own])
        if sync is not None:  # at the most compressed level any worker used
            level = max(levels)
            nbytes = sync.broadcast(dist, it, out, workers, level)
        else:
            sent = [dist.isend(out, dst=w, tag=it) for w in workers]
            for req in sent:
                req.wait()
        comm_end = time.monotonic_ns()
        dump(f"ps{cfg.rank}_it{it}_avg", {names[i]: g for i, g in zip(mine, grads)})
        dump(f"ps{cfg.rank}_it{it}_param", {names[i]: params[i] for i in mine})
        log.iteration(Iteration(
            iter=it, compute_start_ns=recv_end, compute_end_ns=step_end, comm_start_ns=comm_start,
            comm_end_ns=comm_end, bytes_sent=nbytes, bytes_recv=recv_bytes,
            extra=dict(recv_end_ns=recv_end, send_start_ns=step_end, params_sha=digest(own),
                       **held_out_accuracy(cfg, model, test, it), **host_tcp.delta(),
                       **comp.record(level, (step_end - recv_end) / 1e9, (comm_end - comm_start) / 1e9, nbytes,
                                     recv_bytes))))


def _task(cfg: TrainConfig) -> Task | None:
    """This worker's training data (None for a gradient profile)."""
    return None if is_profile(cfg.model) else Task(cfg.model, cfg.seed, shard=cfg.rank - cfg.servers,
                                                   shards=cfg.world - cfg.servers)


def _work(cfg, log, torch, dist, model, names, params, shards, dump, test, shifts) -> None:
    task = _task(cfg)
    dump(f"w{cfg.rank}_init_param", dict(zip(names, params)))
    per_shard = [[params[i] for i in owned] for owned in shards]
    received = [torch.zeros(sum(p.numel() for p in ps)) for ps in per_shard]
    ann = announcer(cfg, log, peers(cfg)[:cfg.servers], 4 * sum(p.numel() for p in params))
    comp = RankCompression(cfg, [sum(p.numel() for p in ps) for ps in per_shard])
    sync = comp.worker_sync() if comp.compressed else None
    host_tcp = HostTcpCounters()   # this host's RTOs and tail-loss probes, per iteration (tcpsense.py)
    for it in range(cfg.iterations):
        c0, c1, loss = timed_compute(cfg, lambda: compute_gradients(model, task, cfg.batch, cfg.rank, it,
                                                                     cfg.seed),
                                     announce=(lambda t: ann.before(t, it)) if ann else None,
                                     shifts=shifts, log=log, it=it)
        comm_start = time.monotonic_ns()
        outgoing = [flat([p.grad for p in ps]) for ps in per_shard]
        level = comp.level
        if sync is not None:  # compressed (gradsync.py): gradients encoded up, parameters or their change down
            current = [flat([p.detach() for p in ps]) for ps in per_shard]
            received, sent_bytes, recv_bytes = sync.exchange(dist, it, outgoing, current, level)
        else:
            reqs = [dist.isend(g, dst=s, tag=it) for s, g in enumerate(outgoing)]
            reqs += [dist.irecv(buf, src=s, tag=it) for s, buf in enumerate(received)]
            for req in reqs:
                req.wait()
            sent_bytes = recv_bytes = 4 * sum(g.numel() for g in outgoing)
        with torch.no_grad():
            for buf, ps in zip(received, per_shard):
                unflatten_into(buf, ps)
        comm_end = time.monotonic_ns()
        dump(f"w{cfg.rank}_it{it}_grad", {n: p.grad for n, p in zip(names, params)})
        dump(f"w{cfg.rank}_it{it}_param", dict(zip(names, params)))
        log.iteration(Iteration(
            iter=it, compute_start_ns=c0, compute_end_ns=c1, comm_start_ns=comm_start, comm_end_ns=comm_end,
            bytes_sent=sent_bytes, bytes_recv=recv_bytes, loss=loss,
            extra=dict(params_sha=digest(params), **({"announce_ns": ann.last_ns} if ann else {}),
                       **held_out_accuracy(cfg, model, test, it), **host_tcp.delta(),
                       **comp.record(level, (c1 - c0) / 1e9, (comm_end - comm_start) / 1e9, sent_bytes, recv_bytes))))


if __name__ == "__main__":
    main()
