"""A ring all-reduce job rank: `python -m pcnlab.workloads.ring --rank R --world N ...`.

Every rank is a worker: real gradients on its own batch, then `torch.distributed.all_reduce` (gloo's
ring) over buckets of gradients filled in backward order up to `bucket_mb`, like DDP, divided by the
world size; then the same optimizer step on every replica.

Rank 0 measures test accuracy (real models; every eval_every iterations and after the last) after its
step and logs it in its iteration record (`accuracy`, `test_loss`). With pcn_start every rank
announces its communication to its ring successor (rank + 1, where gloo's ring sends) one RTT ahead
(announce.py), and absorbs its predecessor's announcements.
"""

from __future__ import annotations

import time

from pcnlab.jsonlines import Iteration
from pcnlab.workloads.adaptive import RankCompression
from pcnlab.workloads.catalog import is_profile
from pcnlab.workloads.process_config import TrainConfig, parse_config
from pcnlab.workloads.models import Task, build_model, compute_gradients
from pcnlab.workloads.training_common import (Dumper, announcer, listen_on_job_port, digest, flat, held_out_accuracy,
                                       peers, run_main, setup_process, timed_compute, unflatten_into)


def buckets(sizes: list[int], bucket_mb: float) -> list[list[int]]:
    """Parameter indices per bucket, in backward (reverse) order, each bucket up to bucket_mb of float32."""
    order = list(reversed(range(len(sizes))))
    if bucket_mb <= 0:
        return [[i] for i in order]
    cap = bucket_mb * 1e6 / 4
    out: list[list[int]] = [[]]
    filled = 0
    for i in order:
        if out[-1] and filled + sizes[i] > cap:
            out.append([])
            filled = 0
        out[-1].append(i)
        filled += sizes[i]
    return out


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(TrainConfig, argv)
    cfg.kind, cfg.servers = "ring", 0
    run_main(cfg, lambda log: _run(cfg, log))


def _run(cfg: TrainConfig, log) -> None:
    shifts = listen_on_job_port(cfg, log)
    torch, dist = setup_process(cfg)
    model = build_model(cfg.model, cfg.seed, cfg.profile_scale)
    names, params = zip(*model.named_parameters())
    task = None if is_profile(cfg.model) else Task(cfg.model, cfg.seed, shard=cfg.rank, shards=cfg.world)
    test = task if cfg.rank == 0 else None
    addresses = peers(cfg)
    successor = [addresses[(cfg.rank + 1) % cfg.world]] if addresses else []
    ann = announcer(cfg, log, successor, 4 * sum(p.numel() for p in params))
    optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum)
    plan = [[params[i] for i in b] for b in buckets([p.numel() for p in params], cfg.bucket_mb)]
    dump = Dumper(cfg)
    dump(f"w{cfg.rank}_init_param", dict(zip(names, params)))
    n = cfg.world
    comp = RankCompression(cfg, [sum(p.numel() for p in params)])
    sync = comp.ring_sync() if comp.compressed else None
    for it in range(cfg.iterations):
        c0, c1, loss = timed_compute(cfg, lambda: compute_gradients(model, task, cfg.batch, cfg.rank, it,
                                                                     cfg.seed),
                                     announce=(lambda t: ann.before(t, it)) if ann else None,
                                     shifts=shifts, log=log, it=it)
        dump(f"w{cfg.rank}_it{it}_grad", {nm: p.grad for nm, p in zip(names, params)})
        comm_start = time.monotonic_ns()
        if sync is not None:  # compressed (gradsync.py): the level agreed, payloads all-gathered, averaged
            level = sync.agree(dist, comp.level)
            avg, payload = sync.average(dist, flat([p.grad for p in params]), level)
            unflatten_into(avg, [p.grad for p in params])
        else:
            flats = [flat([p.grad for p in bucket]) for bucket in plan]
            works = [dist.all_reduce(f, op=dist.ReduceOp.SUM, async_op=True) for f in flats]
            for work, f, bucket in zip(works, flats, plan):
                work.wait()
                f.div_(n)
                unflatten_into(f, [p.grad for p in bucket])
        comm_end = time.monotonic_ns()
        dump(f"w{cfg.rank}_it{it}_avg", {nm: p.grad for nm, p in zip(names, params)})
        optimizer.step()
        dump(f"w{cfg.rank}_it{it}_param", dict(zip(names, params)))
        if sync is not None:  # an all_gather carries each payload to the N - 1 others
            ring_bytes = (n - 1) * payload if level else round(2 * (n - 1) / n * payload)
        else:
            size = 4 * sum(f.numel() for f in flats)
            ring_bytes = round(2 * (n - 1) / n * size)  # what a ring all-reduce moves per rank, each way
        log.iteration(Iteration(
            iter=it, compute_start_ns=c0, compute_end_ns=c1, comm_start_ns=comm_start, comm_end_ns=comm_end,
            bytes_sent=ring_bytes, bytes_recv=ring_bytes, loss=loss,
            extra=dict(buckets=len(plan), params_sha=digest(params), **({"announce_ns": ann.last_ns} if ann else {}),
                       **held_out_accuracy(cfg, model, test, it),
                       **comp.record(level if sync else 0, (c1 - c0) / 1e9, (comm_end - comm_start) / 1e9,
                                     ring_bytes, ring_bytes))))


if __name__ == "__main__":
    main()
