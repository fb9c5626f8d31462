"""A program of the user's own as a job (`kind: torchrun`): each rank is started in its host with the
environment torchrun gives a rank, so an unmodified torch.distributed script (init_process_group with
the default env:// rendezvous) runs as it would under `torchrun --nnodes N --nproc-per-node 1`:

    MASTER_ADDR, MASTER_PORT   rank 0's address and the job's port (its TCPStore)
    RANK, WORLD_SIZE           the rank (the order of the job's workers) and their number
    LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE, TORCHELASTIC_RUN_ID
                               one rank per host, as torchrun sets them for one process per node
    GLOO_SOCKET_IFNAME         the host's interface, so gloo does not pick loopback

plus, for the optional hook (hook.py), where this rank logs and whether it announces its bursts:

    PCNLAB_LOG, PCNLAB_JOB, PCNLAB_HOST, PCNLAB_PCN_START (1 in pcn-host runs), PCNLAB_PCN_LEAD_US,
    PCNLAB_ANNOUNCE_TO (the ring successor's address: where DDP's gloo ring all-reduce sends),
    PCNLAB_ANNOUNCE_PORT (the job's port, where the successor's hook absorbs them)

The job's own `env` comes last and may override any of them. torchrun is not run itself: its elastic
agent adds a process per host and restarts ranks, and the testbed wants each rank's exit status.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pcnlab.workloads.specs import JobSpec


def program_argv(argv: tuple[str, ...], python: str = sys.executable) -> list[str]:
    """The command line of a rank: a first word ending in .py is a script, run by `python` (the
    project's own, which has PyTorch; in a container, the image's)."""
    return [python, *argv] if argv[0].endswith(".py") else list(argv)


def rank_env(spec: JobSpec, rank: int, ips: list[str], iface: str, port: int, log: Path) -> dict[str, str]:
    """The variables rank `rank` of `spec` starts with, beside the host's own environment; `ips` are
    every rank's address in rank order, `port` the job's port."""
    world = len(spec.workers)
    env = {
        "MASTER_ADDR": ips[0], "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world),
        "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(rank), "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world), "TORCHELASTIC_RUN_ID": spec.name, "GLOO_SOCKET_IFNAME": iface,
        "PCNLAB_LOG": str(log), "PCNLAB_JOB": spec.name, "PCNLAB_HOST": spec.workers[rank],
        "PCNLAB_PCN_START": "1" if spec.pcn_start else "0", "PCNLAB_PCN_LEAD_US": f"{spec.pcn_lead_us:g}",
        "PCNLAB_ANNOUNCE_TO": ips[(rank + 1) % world], "PCNLAB_ANNOUNCE_PORT": str(port),
    }
    env.update(dict(spec.env))
    return env
