"""What to run: a DDL job (JobSpec) or a background TCP flow (FlowSpec), checked as it is made.

Hosts are topology names (h1, ...). A bad spec is a one-line UsageError; `Workloads` (launcher.py)
starts good ones. This module owns the job kinds and the rule for job and flow names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from pcnlab.errors import UsageError
from pcnlab.workloads.catalog import check_model
from pcnlab.workloads.compression_methods import DEFAULT_ERROR_FEEDBACK, DEFAULT_RATIO, check_compression
from pcnlab.workloads.ltp.earlyclose import AUTO, LTP_DEADLINE_MS, LTP_THETA_MIN
from pcnlab.workloads.process_config import (BATCH, BUCKET_MB, BURST_BYTES, BURST_PATTERNS, EVAL_EVERY, ITERATIONS, LR,
                                             MODEL, MOMENTUM, PROFILE_SCALE, TRANSPORTS)
from pcnlab.workloads.containers import ContainerSpec

JOB_KINDS = ("ps", "ring", "burst", "torchrun")
TORCH_KINDS = ("ps", "ring", "torchrun")    # the kinds whose processes are PyTorch: they may run in containers
NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")   # job and flow names: they become file names


def check_name(what: str, name: str) -> None:
    if not NAME_RE.fullmatch(name):
        raise UsageError(f"{what} name {name!r}: use letters, digits, '.', '_' and '-' only")


@dataclass(frozen=True)
class JobSpec:
    """One DDL job: PyTorch parameter server ("ps"), PyTorch ring all-reduce ("ring"), the burst
    generator ("burst", with pattern "ps" or "ring"), or a program of the user's own started in every
    worker host with torchrun's environment ("torchrun": `argv`, one rank per worker; torchrun.py)."""

    name: str
    kind: str
    workers: tuple[str, ...]
    servers: tuple[str, ...] = ()    # ps: one host per PS shard; burst/ps: exactly one; ring: none
    iterations: int = ITERATIONS
    compute_ms: float = 0.0
    # PyTorch jobs
    model: str = MODEL               # catalog.PROCESS_MODELS: mlp | cnn | digits-mlp | digits-cnn | profile:<name>
    profile_scale: float = PROFILE_SCALE
    batch: int = BATCH
    lr: float = LR
    momentum: float = MOMENTUM
    bucket_mb: float = BUCKET_MB
    eval_every: int = EVAL_EVERY     # real models: test accuracy every this many iterations and at the end
    dump_tensors: bool = False       # write every iteration's tensors to jobs/<job>/tensors (small models)
    # the burst generator
    pattern: str = "ps"
    burst_bytes: int = BURST_BYTES
    reply_bytes: int | None = None   # None (the YAML's null): burst_bytes (reply_size)
    period_ms: float = 0.0
    jitter_ms: float = 0.0
    pcn_start: bool = False          # every job kind: announce each burst (PCN-START) one lead ahead
    pcn_lead_us: float = 0.0         # 0: two smoothed RTTs (announce.default_lead_us)
    # PyTorch jobs: gradient compression (compression_methods.py; adaptive: netsense.py)
    compression: str = "none"
    compression_ratio: float = DEFAULT_RATIO          # topk, randk: the share of values kept
    error_feedback: bool = DEFAULT_ERROR_FEEDBACK     # what a payload leaves out goes into the next iteration
    # transport
    cc: str | None = None            # burst: per socket; torch jobs: the hosts' default (sysctl)
    ecn: bool | None = None          # per host (network namespace); None: leave the host as it is
    port: int = 0                    # 0: chosen by the launcher
    transport: str = "tcp"           # ps jobs, ps-pattern generators: gradients (bursts) over tcp or ltp
    ltp_deadline_ms: float | str = LTP_DEADLINE_MS   # ltp: the PS closes an iteration this long after its first
                                                     # datagram; AUTO: derived from the ideal exchange
    ltp_theta_min: float = LTP_THETA_MIN       # ltp: the lowest loss-tolerant threshold (workloads/ltp/earlyclose.py)
    seed: int = 0
    timeout_s: float = 120.0         # the processes' own rendezvous / connect timeout
    # torchrun: the program and its arguments, and variables added to its environment
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    container: ContainerSpec | None = None   # TORCH_KINDS: each process in this container (containers.py)

    def __post_init__(self):
        object.__setattr__(self, "workers", tuple(self.workers))
        object.__setattr__(self, "servers", tuple(self.servers))
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "env", tuple(tuple(kv) for kv in self.env))
        if self.kind not in JOB_KINDS:
            raise UsageError(f"job {self.name!r}: unknown kind {self.kind!r}; choose one of {', '.join(JOB_KINDS)}")
        check_name("job", self.name)
        if not self.workers:
            raise UsageError(f"job {self.name!r}: needs at least one worker host")
        if self.iterations < 1:
            raise UsageError(f"job {self.name!r}: iterations must be at least 1")
        if self.kind == "burst" and self.pattern not in BURST_PATTERNS:
            raise UsageError(f"job {self.name!r}: unknown pattern {self.pattern!r}; choose one of "
                             f"{', '.join(BURST_PATTERNS)}")
        if self.comm_pattern == "ps" and (not self.servers or (self.kind == "burst" and len(self.servers) != 1)):
            want = "exactly one PS host" if self.kind == "burst" else "at least one PS host (servers)"
            raise UsageError(f"job {self.name!r}: a parameter-server job needs {want}")
        if self.comm_pattern == "ring":
            if self.servers:
                raise UsageError(f"job {self.name!r}: a ring job has no servers; list every host as a worker")
            if len(self.workers) < 2:
                raise UsageError(f"job {self.name!r}: a ring needs at least two workers")
        if self.kind == "burst" and self.pattern == "ring" and len(set(self.workers)) != len(self.workers):
            raise UsageError(f"job {self.name!r}: a generator ring needs distinct worker hosts")
        if self.container is not None and self.kind not in TORCH_KINDS:
            raise UsageError(f"job {self.name!r}: the {self.kind} workload has no PyTorch processes to run in "
                             f"containers (image: is for {', '.join(TORCH_KINDS)} jobs); it runs in its hosts")
        if self.kind == "torchrun":
            self._check_program()
        elif self.kind != "burst":
            check_model(self.model, self.profile_scale)
        if self.transport not in TRANSPORTS:
            raise UsageError(f"job {self.name!r}: unknown transport {self.transport!r}; choose one of "
                             f"{', '.join(TRANSPORTS)}")
        if self.transport == "ltp" and self.comm_pattern != "ps":
            raise UsageError(f"job {self.name!r}: ltp carries a parameter server's gradients; a ring has no PS")
        deadline = self.ltp_deadline_ms
        if (deadline != AUTO and (isinstance(deadline, (str, bool)) or not deadline > 0)) \
                or not 0 <= self.ltp_theta_min <= 1:
            raise UsageError(f"job {self.name!r}: ltp_deadline_ms must be positive or {AUTO}, and ltp_theta_min "
                             f"in [0, 1]")
        if self.eval_every < 0:
            raise UsageError(f"job {self.name!r}: eval_every must be 0 (only at the end) or more")
        check_compression(self.compression, self.compression_ratio, self.kind, f"job {self.name!r}: compression",
                          self.error_feedback)
        if self.compression != "none" and self.transport != "tcp":
            raise UsageError(f"job {self.name!r}: compressed gradients travel over gloo (transport tcp); "
                             f"{self.transport} sends them as float32; use compression none with it")

    def _check_program(self) -> None:
        if not self.argv or not all(isinstance(a, str) for a in self.argv) or not self.argv[0]:
            raise UsageError(f"job {self.name!r}: a torchrun job needs argv, the program and its arguments, "
                             f"e.g. [python3, train.py]")
        if self.servers:
            raise UsageError(f"job {self.name!r}: a torchrun job has ranks, not servers; list every host as a worker")
        if self.transport != "tcp" or self.compression != "none":
            raise UsageError(f"job {self.name!r}: a torchrun job's program chooses its own transport and "
                             f"compression; leave transport and compression unset")
        for name, _ in self.env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise UsageError(f"job {self.name!r}: env name {name!r}: use letters, digits and '_', "
                                 f"not starting with a digit")

    @property
    def reply_size(self) -> int:
        """What the PS answers each worker: reply_bytes, or burst_bytes where it is None."""
        return self.burst_bytes if self.reply_bytes is None else self.reply_bytes

    @property
    def comm_pattern(self) -> str:
        return self.pattern if self.kind == "burst" else self.kind

    @property
    def hosts(self) -> list[str]:
        """Every host the job runs on, once each, sorted."""
        return sorted({*self.servers, *self.workers})

    def placements(self) -> list[tuple[str, int, str]]:
        """(label, rank, host) per process: torch ranks are PS shards first, then workers; the generator's
        PS has rank -1."""
        if self.kind == "burst":
            out = [(f"worker{i}", i, h) for i, h in enumerate(self.workers)]
            return ([("ps", -1, self.servers[0])] + out) if self.pattern == "ps" else out
        if self.kind == "torchrun":
            return [(f"rank{i}", i, h) for i, h in enumerate(self.workers)]
        servers = self.servers if self.kind == "ps" else ()
        return ([(f"ps{i}", i, h) for i, h in enumerate(servers)]
                + [(f"worker{i}", len(servers) + i, h) for i, h in enumerate(self.workers)])


@dataclass(frozen=True)
class FlowSpec:
    """A long-lived background TCP flow from src to dst."""

    src: str
    dst: str
    cc: str | None = None            # cubic, reno, bbr, dctcp (where the kernel has it)
    ecn: bool | None = None          # set on the sender's host (ECN is per network namespace)
    duration_s: float = 0.0          # 0: until stop()
    interval_ms: float = 100.0
    port: int = 0
    name: str = ""                   # default: <src>-<dst>[-n]


def flow_labels(flows: Sequence[FlowSpec]) -> list[str]:
    """Each flow's name in file names: its own, or <src>-<dst>, numbered from the second of a kind on."""
    labels, seen = [], {}
    for f in flows:
        base = f.name or f"{f.src}-{f.dst}"
        check_name("flow", base)
        seen[base] = seen.get(base, 0) + 1
        labels.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    if len(set(labels)) != len(labels):
        raise UsageError("two flows have the same name; name them apart")
    return labels
