"""A standard PyTorch DistributedDataParallel training script, CPU and gloo, that imports nothing from
PCN Lab: what a researcher brings. Start it with torchrun, or as a PCN Lab job (`kind: torchrun`,
experiments/own-training.yaml), which gives every rank torchrun's environment.

It learns a fixed random two-layer "teacher" network's labels from the inputs (each rank its own
shard of the samples), prints one line per training step on rank 0 (`step N loss L`), and at the end
the accuracy on held-out samples (`accuracy A`). --compute-ms pads each step's forward and backward
to at least that long, as a model on an accelerator would take.

    torchrun --nproc-per-node 2 examples/ddp_train.py --steps 20
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def teacher_data(samples: int, features: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    w1, w2 = torch.randn(features, 32, generator=g), torch.randn(32, classes, generator=g)
    return x, (torch.tanh(x @ w1) @ w2).argmax(dim=1)


def main(on_ddp=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--compute-ms", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    dist.init_process_group("gloo")          # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    features, classes = 64, 10
    x, y = teacher_data(20_000, features, classes, args.seed)
    x_test, y_test = x[-2_000:], y[-2_000:]
    x_train, y_train = x[:-2_000][rank::world], y[:-2_000][rank::world]
    model = DistributedDataParallel(nn.Sequential(nn.Linear(features, args.hidden), nn.ReLU(),
                                                  nn.Linear(args.hidden, classes)))
    if on_ddp is not None:
        on_ddp(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        begin = time.monotonic()
        at = (step * args.batch) % (len(x_train) - args.batch)
        loss = F.cross_entropy(model(x_train[at:at + args.batch]), y_train[at:at + args.batch])
        optimizer.zero_grad()
        if args.compute_ms:  # the accelerator's time, before the gradients leave (DDP sends them in backward)
            time.sleep(max(0.0, args.compute_ms / 1000 - (time.monotonic() - begin)))
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    if rank == 0:
        print(f"accuracy {accuracy:.4f}", flush=True)
    dist.barrier()   # no rank tears its connections down while another still uses them
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
