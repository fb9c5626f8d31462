"""How much each codec costs in learning per iteration: the parameter-server exchange of gradsync.py
(error feedback up, the model's change down) computed in one process, without a network, on the real
digits model and data, for every codec of the adaptive policy's ladder.

For each codec and seed: train digits-mlp with W workers (each on its own shard of the training split,
as the PS job does) and record the iteration after which the held-out accuracy first reaches each
target. A codec's efficiency is iterations(none) / iterations(codec) at the same target: 1.0 learns as
fast per iteration as no compression; 0.5 needs twice the iterations. netsense.EFFICIENCY holds what
this measured (the policy divides it by the predicted iteration time).

    .venv/bin/python bench/bench_compression_efficiency.py [--workers 2] [--seeds 3] [--iterations 600]
        [--targets 0.85 0.90 0.93] [--lr 0.2] [--batch 32] [--out bench/results]
        [--model digits-cnn] [--baselines]

--baselines: NetSenseML's fixed policies instead of the ladder (none; top-k 1 % and 0.1 % without
error feedback; DGC-style top-k 0.5 % and top-k 1 % with it), as netsense-competing.yaml sweeps them.

One process, one thread; about a minute.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from pcnlab.workloads.compression import Codec, unpack
from pcnlab.workloads.compression_methods import DEFAULT_ERROR_FEEDBACK
from pcnlab.workloads.gradsync import ShardSync, WorkerSync
from pcnlab.workloads.models import Task, build_model, compute_gradients, evaluate
from pcnlab.workloads.netsense import LADDER
from pcnlab.workloads.training_common import flat, unflatten_into
from pcnlab.cmdline import OneLineParser, count, fraction, positive


BASELINES = (("none", Codec("none"), True), ("topk-0.01-no-ef", Codec("topk", 0.01), False),
             ("topk-0.001-no-ef", Codec("topk", 0.001), False), ("topk-0.005", Codec("topk", 0.005), True),
             ("topk-0.01", Codec("topk", 0.01), True))


def train(codec: Codec, workers: int, seed: int, iterations: int, lr: float, batch: int, every: int,
          model_name: str = "digits-mlp",
          error_feedback: bool = DEFAULT_ERROR_FEEDBACK) -> list[tuple[int, float]]:
    """(iteration, held-out accuracy) every `every` iterations of a PS job whose every message uses `codec`."""
    ladder = (codec,)
    server = build_model(model_name, seed)
    params = list(server.parameters())
    n = sum(p.numel() for p in params)
    optimizer = torch.optim.SGD(params, lr=lr)
    replicas = [build_model(model_name, seed) for _ in range(workers)]
    syncs = [WorkerSync(ladder, [n], seed, 1 + w, error_feedback) for w in range(workers)]
    shard = ShardSync(ladder, n, flat([p.detach() for p in params]), seed, 0)
    tasks = [Task(model_name, seed, shard=w, shards=workers) for w in range(workers)]
    test = Task(model_name, seed, train=False)
    out = []
    for it in range(iterations):
        grads = []
        for w, (model, task) in enumerate(zip(replicas, tasks)):
            compute_gradients(model, task, batch, 1 + w, it, seed)
            message, = syncs[w].encode([flat([p.grad for p in model.parameters()])], 0)
            grads.append(codec.decode(unpack(message)[1], n))
        avg = torch.stack(grads).mean(0)
        with torch.no_grad():
            offset = 0
            for p in params:
                p.grad = avg[offset:offset + p.numel()].view_as(p).clone()
                offset += p.numel()
        optimizer.step()
        message = shard.encode(flat([p.detach() for p in params]), 0)
        for w, model in enumerate(replicas):
            mine = list(model.parameters())
            new = syncs[w].decode(message, flat([p.detach() for p in mine]))
            with torch.no_grad():
                unflatten_into(new, mine)
        if (it + 1) % every == 0:
            out.append((it + 1, evaluate(server, test)[0]))
    return out


def first_reaching(curve: list[tuple[int, float]], target: float) -> int | None:
    return next((it for it, acc in curve if acc >= target), None)


def main(argv=None) -> dict:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=count, default=2)
    parser.add_argument("--seeds", type=count, default=3)
    parser.add_argument("--iterations", type=count, default=600)
    parser.add_argument("--targets", type=fraction, nargs="+", default=[0.85, 0.90, 0.93])
    parser.add_argument("--lr", type=positive, default=0.2)
    parser.add_argument("--batch", type=count, default=32)
    parser.add_argument("--every", type=count, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--model", default="digits-mlp", choices=["digits-mlp", "digits-cnn"])
    parser.add_argument("--baselines", action="store_true", help="NetSenseML's fixed policies, not the ladder")
    args = parser.parse_args(argv)
    cases = BASELINES if args.baselines else tuple((c.name, c, True) for c in LADDER)
    torch.set_num_threads(1)
    rows = []
    started = time.monotonic()
    for name, codec, ef in cases:
        for seed in range(args.seeds):
            curve = train(codec, args.workers, seed, args.iterations, args.lr, args.batch, args.every, args.model, ef)
            rows.append({"codec": name, "seed": seed, "final": curve[-1][1],
                         **{f"{t:g}": first_reaching(curve, t) for t in args.targets}})
    result = {"model": args.model, "workers": args.workers, "lr": args.lr, "batch": args.batch, "iterations": args.iterations,
              "targets": args.targets, "rows": rows, "efficiency": {}, "seconds": time.monotonic() - started}
    print(f"{'codec':16s} " + " ".join(f"it@{t:g}".rjust(9) for t in args.targets) + "  final acc  efficiency")
    base = {t: np.mean([r[f"{t:g}"] or args.iterations for r in rows if r["codec"] == "none"]) for t in args.targets}
    for name, _, _ in cases:
        mine = [r for r in rows if r["codec"] == name]
        its = {t: np.mean([r[f"{t:g}"] or args.iterations for r in mine]) for t in args.targets}
        eff = float(np.mean([base[t] / its[t] for t in args.targets]))
        result["efficiency"][name] = eff
        missed = {t: any(r[f"{t:g}"] is None for r in mine) for t in args.targets}   # a seed never got there: >N
        print(f"{name:16s} " + " ".join(f"{'>' if missed[t] else ' '}{its[t]:8.0f}" for t in args.targets)
              + f"  {np.mean([r['final'] for r in mine]):9.3f}  {eff:10.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"compression_efficiency{'-baselines' if args.baselines else ''}-{args.model}.json" \
        if args.baselines or args.model != "digits-mlp" else args.out / "compression_efficiency.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"{time.monotonic() - started:.0f} s; written to {out}")
    return result


if __name__ == "__main__":
    main()
