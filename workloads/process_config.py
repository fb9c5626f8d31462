"""Typed configurations of the workload processes, and their round trip through a command line.

Each process started inside a host is `python -m pcnlab.workloads.<module> --field value ...`; the
launcher builds that command line from the dataclass with `to_argv`, the process parses it back with
`parse_config`. Only scalar fields (int, float, str, bool, or a number or a word: float | str) are used,
so the mapping is one to one.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import dataclass, fields
from typing import TypeVar

from pcnlab.workloads.compression_methods import DEFAULT_ERROR_FEEDBACK, DEFAULT_RATIO
from pcnlab.workloads.ltp.earlyclose import AUTO, LTP_DEADLINE_MS, LTP_THETA_MIN

T = TypeVar("T")

TRAIN_KINDS = ("ps", "ring")
BURST_PATTERNS = ("ps", "ring")
TRANSPORTS = ("tcp", "ltp")
# Defaults every layer takes from here (the YAML schema, JobSpec, the processes' configs; Early Close's
# are workloads/ltp/earlyclose.py's):
BURST_BYTES = 250_000        # B: what each worker of the generator sends per iteration
ITERATIONS = 10              # training iterations (the generator: bursts)
MODEL = "mlp"                # catalog.MODELS
PROFILE_SCALE = 0.01         # gradient profiles: each layer's size times this
BATCH = 32                   # samples per worker per iteration
LR = 0.05                    # SGD's learning rate
MOMENTUM = 0.0               # SGD's momentum (not a file key: a job spec's, for tests and the bench)
EVAL_EVERY = 10              # real models: test accuracy every this many iterations and at the end (0: the end)
BUCKET_MB = 25.0             # ring: all_reduce buckets like DDP's (0: one all_reduce per tensor)


@dataclass
class TrainConfig:
    """One rank of a PyTorch parameter-server or ring all-reduce job (gloo)."""

    kind: str = "ps"                 # ps: ranks 0..servers-1 are PS shards, the rest workers; ring: all workers
    rank: int = 0
    world: int = 2                   # all ranks: PS shards + workers (ring: workers)
    servers: int = 1                 # PS shards (ps only)
    master_addr: str = "127.0.0.1"   # rank 0's address: gloo's rendezvous store
    master_port: int = 29500
    iface: str = ""                  # GLOO_SOCKET_IFNAME (inside a Mininet host: <host>-eth0; required there)
    model: str = MODEL               # catalog.PROCESS_MODELS: mlp | cnn | digits-mlp | digits-cnn | profile:<name>
    profile_scale: float = PROFILE_SCALE
    iterations: int = ITERATIONS
    eval_every: int = EVAL_EVERY
    batch: int = BATCH
    lr: float = LR
    momentum: float = MOMENTUM
    compute_ms: float = 0.0          # pad each worker's compute phase to at least this (an accelerator's time)
    bucket_mb: float = BUCKET_MB
    seed: int = 0
    timeout_s: float = 120.0         # gloo's timeout for rendezvous and every collective
    log: str = "rank.jsonl"
    dump_dir: str = ""               # write the tensors of every iteration here (tests; small models)
    addr: str = ""                   # this rank's address (where it absorbs PCN-START datagrams)
    peers: str = ""                  # every rank's address in rank order, comma-separated
    pcn_start: bool = False          # announce each iteration's communication one RTT ahead (PCN_START_DSCP)
    pcn_lead_us: float = 0.0         # the lead; 0 = two smoothed RTTs of gloo's connection there
    transport: str = "tcp"           # ps: gradients over gloo's TCP (tcp) or LTP datagrams (ltp: workloads/ltp)
    ltp_port: int = 0                # ltp: shard s listens on UDP ltp_port + s (0: master_port + 1)
    ltp_deadline_ms: float | str = LTP_DEADLINE_MS   # or AUTO
    ltp_theta_min: float = LTP_THETA_MIN
    compression: str = "none"        # compression.CHOICES: none | topk | randk | int8 | sign | adaptive (netsense.py)
    compression_ratio: float = DEFAULT_RATIO              # topk, randk: the share of values kept
    error_feedback: bool = DEFAULT_ERROR_FEEDBACK         # add what one iteration left out to the next
    job: str = "job"
    host: str = ""

    def role(self) -> str:
        return "ps" if self.kind == "ps" and self.rank < self.servers else "worker"


@dataclass
class BurstConfig:
    """One process of the DDL burst generator (no PyTorch): a PS or a worker of a PS or ring pattern."""

    role: str = "worker"             # ps | worker
    pattern: str = "ps"              # ps: workers send to the PS, which answers; ring: worker i -> i+1
    rank: int = 0                    # worker index 0..workers-1 (the PS ignores it)
    workers: int = 2
    ps_addr: str = "127.0.0.1"
    port: int = 5600                 # TCP data port (the PS's, or every ring worker's); UDP for PCN-START
    peers: str = ""                  # ring: the workers' addresses in rank order, comma-separated
    burst_bytes: int = BURST_BYTES
    reply_bytes: int = BURST_BYTES   # what the PS answers each worker (the launcher resolves JobSpec's None)
    iterations: int = ITERATIONS
    period_ms: float = 0.0           # bursts start every period (0: back to back after the compute gap)
    jitter_ms: float = 0.0           # each start moves by a uniform offset in [-jitter, +jitter]
    compute_ms: float = 0.0          # the gap between the answer and the next burst
    cc: str = ""                     # TCP congestion control of the data sockets ("" = the host's default)
    pcn_start: bool = False          # announce every burst one RTT ahead (DSCP PCN_START_DSCP)
    pcn_lead_us: float = 0.0         # the lead; 0 = two of the connection's smoothed RTTs
    transport: str = "tcp"           # ps pattern: bursts over TCP, or LTP datagrams (ltp; answers stay on TCP)
    ltp_port: int = 0                # ltp: the PS's UDP port (0: port + 1)
    ltp_deadline_ms: float | str = LTP_DEADLINE_MS   # or AUTO
    ltp_theta_min: float = LTP_THETA_MIN
    seed: int = 0
    timeout_s: float = 60.0
    log: str = "rank.jsonl"
    job: str = "job"
    host: str = ""


@dataclass
class FlowConfig:
    """One end of a long-lived background TCP flow."""

    role: str = "sender"             # sender | receiver
    addr: str = "127.0.0.1"          # the receiver's address (the receiver binds to it)
    port: int = 5700
    cc: str = ""                     # sender's congestion control ("" = the host's default)
    duration_s: float = 0.0          # 0: until stopped (SIGTERM)
    interval_ms: float = 100.0       # throughput is recorded per interval
    timeout_s: float = 30.0          # connect / accept
    log: str = "flow.jsonl"
    flow: str = "flow"
    host: str = ""


def _field_type(cls, name: str):
    hints = typing.get_type_hints(cls)
    return hints[name]


def to_argv(config) -> list[str]:
    """`--field value` for every field of a config dataclass."""
    argv = []
    for f in fields(config):
        value = getattr(config, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            argv += [flag, "1" if value else "0"]
        else:
            argv += [flag, str(value)]
    return argv


def _parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (1/0, on/off), got {text!r}")


def _number_or_text(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def parse_config(cls: type[T], argv: list[str] | None = None, description: str = "") -> T:
    """Parse a command line made by `to_argv` (or typed by hand) into the dataclass `cls`."""
    parser = argparse.ArgumentParser(description=description or cls.__doc__)
    defaults = cls()
    for f in fields(cls):
        typ = _field_type(cls, f.name)
        conv = _parse_bool if typ is bool else _number_or_text if typ == (float | str) else typ
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=conv,
                            default=getattr(defaults, f.name))
    args = parser.parse_args(argv)
    return cls(**vars(args))


def as_dict(config) -> dict:
    return dataclasses.asdict(config)
