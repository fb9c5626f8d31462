"""What the parameter-server and ring workers share: process setup, the compute phase (with its
PCN-START announcement), test accuracy, digests, dumps."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

from pcnlab.workloads.announce import Announcer, Shifts, start_listener
from pcnlab.workloads.process_config import TrainConfig, as_dict
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


def timed_compute(cfg: TrainConfig, work, announce=None, shifts: Shifts | None = None, log: JsonLog | None = None,
                  it: int | None = None) -> tuple[int, int, object]:
    """Run `work()` and pad the phase to compute_ms (the accelerator's time it stands in for), and by
    the controller's time shifts that hold for the communication it plans (`shifts`: Shifts.take).
    `announce(comm_start_ns)`, if given, runs inside the pad, one lead before the phase ends (at once
    when the work overran it): the PCN-START of the communication that follows."""
    start = time.monotonic_ns()
    shift_us = shifts.take(log, it, start, start + int(cfg.compute_ms * 1e6)) if shifts is not None else 0.0
    result = work()
    phase_ns = int(cfg.compute_ms * 1e6 + shift_us * 1e3)
    if announce is not None:
        announce(max(start + phase_ns, time.monotonic_ns()))
    pad = phase_ns / 1e9 - (time.monotonic_ns() - start) / 1e9
    if pad > 0:
        time.sleep(pad)
    return start, time.monotonic_ns(), result


def peers(cfg: TrainConfig) -> list[str]:
    return [p for p in cfg.peers.split(",") if p]


def announcer(cfg: TrainConfig, log: JsonLog, destinations: list[str], nbytes: int):
    """The worker's PCN-START sender (None without pcn_start), to the job's port at each destination."""
    if not cfg.pcn_start or not destinations:
        return None
    return Announcer(log, destinations, cfg.master_port, cfg.job, cfg.rank, nbytes, cfg.pcn_lead_us)


def listen_on_job_port(cfg: TrainConfig, log: JsonLog) -> Shifts:
    """Every rank listens on its address and the job's port: one that bursts are sent to (a PS shard, a
    ring rank) absorbs the PCN-STARTs sent to it, and every one takes the controller's time shifts."""
    shifts = Shifts()
    if cfg.addr:
        start_listener(log, cfg.addr, cfg.master_port, shifts)
    return shifts


def should_evaluate(cfg: TrainConfig, it: int) -> bool:
    """Test accuracy after iteration `it`: every eval_every iterations and after the last one."""
    return it == cfg.iterations - 1 or (cfg.eval_every > 0 and (it + 1) % cfg.eval_every == 0)


def held_out_accuracy(cfg: TrainConfig, model, task, it: int) -> dict:
    """{"accuracy", "test_loss"} on the held-out data after iteration `it`, when this rank evaluates
    (`task` not None) and the iteration is one to evaluate; else {}."""
    if task is None or not should_evaluate(cfg, it):
        return {}
    from pcnlab.workloads.models import evaluate

    accuracy, loss = evaluate(model, task)
    return {"accuracy": accuracy, "test_loss": loss}


def flat(tensors) -> "object":
    import torch

    return torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.zeros(0)


def offsets(tensors) -> list[int]:
    """Where each tensor starts in `flat(tensors)`."""
    out, o = [], 0
    for t in tensors:
        out.append(o)
        o += t.numel()
    return out


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
    """Run one rank's body with its log; a failure is one line on stderr and exit status 1.

    A rank that steps an optimizer (a PS shard, a ring rank) imports torch._dynamo first: the first
    optimizer would (about a CPU-second), after the rendezvous, in every ring rank at once. Before the
    log's anchor line it is paid while the launcher still starts the ranks one at a time."""
    if cfg.kind == "ring" or cfg.role() == "ps":
        import torch._dynamo  # noqa: F401
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
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's teardown of PyTorch: about half a CPU-second per rank, every rank of the
    # job at the same moment (on 2 cores, a second with no idle time while the run is measured).
    os._exit(0)
