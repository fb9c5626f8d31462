"""What the parameter-server and ring workers share: process setup, the compute phase, digests, dumps."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

from pcnlab.workloads.config import TrainConfig, as_dict
from pcnlab.workloads.joblog import JsonLog


def setup_process(cfg: TrainConfig):
    """Threads, gloo's interface, SIGTERM as a clean exit; then join the job's process group."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if cfg.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = cfg.iface
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{cfg.master_addr}:{cfg.master_port}",
                            rank=cfg.rank, world_size=cfg.world, timeout=timedelta(seconds=cfg.timeout_s))
    return torch, dist


def open_log(cfg: TrainConfig) -> JsonLog:
    return JsonLog(cfg.log, job=cfg.job, host=cfg.host, role=cfg.role(), rank=cfg.rank, config=as_dict(cfg))


def timed_compute(cfg: TrainConfig, work) -> tuple[int, int, object]:
    """Run `work()` and pad the phase to compute_ms (the accelerator's time it stands in for)."""
    start = time.monotonic_ns()
    result = work()
    pad = cfg.compute_ms / 1e3 - (time.monotonic_ns() - start) / 1e9
    if pad > 0:
        time.sleep(pad)
    return start, time.monotonic_ns(), result


def flat(tensors) -> "object":
    import torch

    return torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.zeros(0)


def unflatten_into(buffer, tensors) -> None:
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(buffer[offset:offset + n].view_as(t))
        offset += n


def digest(tensors) -> str:
    """A short digest of the parameters' bytes: replicas in sync log the same digest."""
    h = hashlib.sha1()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class Dumper:
    """Writes named tensors per iteration when `dump_dir` is set (for checking the arithmetic)."""

    def __init__(self, cfg: TrainConfig):
        self.dir = Path(cfg.dump_dir) if cfg.dump_dir else None
        if self.dir:
            self.dir.mkdir(parents=True, exist_ok=True)

    def __call__(self, tag: str, named: dict) -> None:
        if self.dir:
            import torch

            torch.save({k: v.detach().clone() for k, v in named.items()}, self.dir / f"{tag}.pt")


def run_main(cfg: TrainConfig, body) -> None:
    """Run one rank's body with its log; a failure is one line on stderr and exit status 1."""
    log = open_log(cfg)
    try:
        body(log)
    except SystemExit as exc:
        log.close("stopped" if exc.code else "ok")
        raise
    except BaseException as exc:  # noqa: BLE001 -- reported, then the process fails
        message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        log.error(message)
        log.close("failed")
        print(f"{cfg.job} rank {cfg.rank} ({cfg.role()} on {cfg.host or 'localhost'}): {message}",
              file=sys.stderr, flush=True)
        os._exit(1)  # do not wait on gloo's threads
    log.close("ok")
