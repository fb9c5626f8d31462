"""The load a run puts on its switches, before it runs: packets/s per switch when every job's and
background flow's traffic is as heavy as it can be at once and shares the links max-min fairly
(progressive filling over the routed paths, topologies/routing.py; a flow's rate is bounded by every link
on its path, and a job's by what it sends per iteration over its shortest iteration: `job_flows`), each
TCP data packet bringing back half an ACK (one per two segments) that weighs a full packet in a switch's
egress queue (BMv2 drains its queues in packets/s, pcnlab/rates.py); a switch forwards every data packet
and ACK whose path crosses it. Telemetry clones are not counted here: what one switch forwards with
telemetry 1 in N (pcnlab.calibration.capacity_pps) already pays for them. experiments/fit.py judges it.

Hand-written: no library computes max-min fair shares over a Mininet topology's routes (networkx has
paths but no progressive filling), and the model is a few lines of plain Python.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import math
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from pcnlab.files import write_atomic
from pcnlab.rates import FRAME_BYTES, rate_pps
from pcnlab.topologies.routing import compute_routes, ports_of
from pcnlab.workloads.datasets import cache_dir
from pcnlab.workloads.specs import JobSpec

ACKS_PER_PACKET = 0.5          # TCP's delayed ACK (and LTP's, workloads/ltp/acks.py): one per two segments
SEGMENT_BYTES = FRAME_BYTES - 14 - 20 - 32     # a full frame's TCP payload (Ethernet, IPv4, TCP with timestamps)


@dataclass(frozen=True)
class Flow:
    """One direction of traffic, src to dst, backlogged up to `cap_pps` (a background flow's rate, what a
    job sends per iteration; None: no cap)."""

    src: str
    dst: str
    cap_pps: float | None = None


def flows(run) -> list[Flow]:
    """Every job's and background flow's traffic, one Flow per direction between two hosts."""
    out = []
    for job in run.jobs:
        out += job_flows(JobSpec(**job.job_spec_kwargs()))
    out += [Flow(f.src, f.dst, rate_pps(f.rate) if f.rate else None) for f in run.background]
    return [f for f in out if f.src != f.dst]


def job_flows(spec: JobSpec) -> list[Flow]:
    """A job's flows, each capped at its bytes per iteration over the job's shortest iteration (its period,
    or its compute_ms: an iteration is never shorter) in full-size segments; uncapped (backlogged) where
    the job gives no such time (compute_ms 0, a torchrun script). PyTorch jobs send their whole model
    uncompressed (an upper bound: compression only sends less)."""
    gap_s = (spec.period_ms or spec.compute_ms) / 1e3 if spec.kind != "torchrun" else 0.0

    def cap(nbytes: float) -> float | None:
        return nbytes / SEGMENT_BYTES / gap_s if gap_s > 0 else None

    if spec.comm_pattern == "ps":
        # Each shard capped at the whole model: shards are whole tensors, largest first (workloads/ps.py),
        # so one shard may carry nearly all of it.
        up, down = _iteration_bytes(spec)
        return [flow for server in spec.servers for worker in spec.workers
                for flow in (Flow(worker, server, cap(up)), Flow(server, worker, cap(down)))]
    ranks = [host for _, _, host in spec.placements()]      # ring, a ring generator, torchrun: rank to next
    up, _ = _iteration_bytes(spec)
    # A ring all-reduce, PyTorch's or the generator's (workloads/burst.py: 2 (n - 1) chunks of 1/n): each
    # rank sends 2 (n - 1) / n of it per iteration.
    up = up * 2 * (len(ranks) - 1) / len(ranks)
    return [Flow(a, b, cap(up)) for a, b in zip(ranks, ranks[1:] + ranks[:1])]


def _iteration_bytes(spec: JobSpec) -> tuple[float, float]:
    """Bytes one worker sends per iteration, and receives back (a generator's reply; a PS's parameters)."""
    if spec.kind == "burst":
        return spec.burst_bytes, spec.reply_bytes if spec.reply_bytes is not None else spec.burst_bytes
    if spec.kind == "torchrun":
        return 0.0, 0.0
    size = 4 * model_parameters(spec.model, spec.profile_scale)    # float32 gradients, and parameters back
    return size, size


@functools.lru_cache(maxsize=None)
def model_parameters(model: str, profile_scale: float) -> int:
    """A PyTorch model's parameters, counted on the model the workers build (workloads/models.py), once
    per version of the code that builds it and of PyTorch: the count is kept in the cache folder under
    their digest (`pcnlab run` imported PyTorch for it: 2.4 s of every PyTorch run's start, and of its
    --dry-run). A cache that cannot be read is counted again; one that cannot be written is left."""
    path = cache_dir() / f"parameters-{_builder_digest()}.json"
    key = f"{model}@{profile_scale!r}"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    if isinstance(known.get(key), int):
        return known[key]
    from pcnlab.workloads.models import build_model

    count = sum(p.numel() for p in build_model(model, 0, profile_scale).parameters())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({**known, key: count}))
    except OSError:
        pass
    return count


def _builder_digest() -> str:
    """The digest of what decides a model's parameters: the modules that build it, and PyTorch's version."""
    try:
        digest = hashlib.sha256(metadata.version("torch").encode())
    except metadata.PackageNotFoundError:     # counting imports it, and says so
        digest = hashlib.sha256(b"no torch")
    for module in ("models", "profiles", "catalog", "process_config"):
        digest.update(Path(importlib.util.find_spec(f"pcnlab.workloads.{module}").origin).read_bytes())
    return digest.hexdigest()[:16]


def switch_pps(run, topologies: dict | None = None) -> dict[str, float]:
    """Packets/s each switch forwards under the model (the module's docstring)."""
    topologies = {} if topologies is None else topologies
    key = (run.topology.kind, tuple(sorted(run.topology.params.items())))
    if key not in topologies:
        topologies[key] = run.topology.build(monitors=False)
    topo = topologies[key]
    paths = _Paths(topo)
    capacity = _capacities(topo, run)
    demands = []                                # (flow, {directed link: packets per data packet})
    for flow in flows(run):
        use: dict = {}
        for link in paths.links(flow.src, flow.dst):
            use[link] = use.get(link, 0) + 1
        for link in paths.links(flow.dst, flow.src):
            if topo.isSwitch(link[0]) or not run.switch.pace_hosts:     # a paced host's tbf counts bytes
                use[link] = use.get(link, 0) + ACKS_PER_PACKET
        demands.append((flow, use))
    rates = max_min(demands, capacity)
    loads = {sw: 0.0 for sw in topo.switches()}
    for (flow, _), rate in zip(demands, rates):
        for sw in paths.switches(flow.src, flow.dst):
            loads[sw] += rate
        for sw in paths.switches(flow.dst, flow.src):
            loads[sw] += rate * ACKS_PER_PACKET
    return loads


def max_min(demands, capacity: dict) -> list[float]:
    """Progressive filling: every flow's rate grows alike until a link it uses (weighted by its packets
    there per data packet) is full or it reaches its own cap; then it stays, and the others grow on."""
    users: dict = {link: [] for link in capacity}
    for i, (_, use) in enumerate(demands):
        for link, weight in use.items():
            if link in users:
                users[link].append((i, weight))
    rates = [0.0] * len(demands)
    growing = set(range(len(demands)))
    while growing:
        step = math.inf
        for link, members in users.items():
            weight = sum(w for i, w in members if i in growing)
            if weight:
                step = min(step, (capacity[link] - sum(w * rates[i] for i, w in members)) / weight)
        for i in growing:
            if demands[i][0].cap_pps is not None:
                step = min(step, demands[i][0].cap_pps - rates[i])
        if step == math.inf:
            break                               # nothing bounds them (no rate on their paths)
        for i in growing:
            rates[i] += max(step, 0.0)
        stopped = {i for i in growing if demands[i][0].cap_pps is not None
                   and rates[i] >= demands[i][0].cap_pps * (1 - 1e-9)}
        for link, members in users.items():
            if sum(w * rates[i] for i, w in members) >= capacity[link] * (1 - 1e-9):
                stopped |= {i for i, _ in members}
        growing -= stopped
    return rates


def _capacities(topo, run) -> dict[tuple[str, str], int]:
    """Packets/s of each directed link with a rate: a switch's egress queue towards its peer (the
    schedule's highest rate for it, if higher); a host's own sending only when hosts are paced."""
    out = {}
    for a, b, info in topo.links(withInfo=True):
        bw = info.get("bw")
        if bw is None:
            continue
        for src, dst in ((a, b), (b, a)):
            if topo.isSwitch(src) or run.switch.pace_hosts:
                out[(src, dst)] = rate_pps(bw)
    for change in run.schedule:
        if change.link and change.bw is not None and change.link in out:
            out[change.link] = max(out[change.link], rate_pps(change.bw))
    return out


class _Paths:
    """Routed paths between hosts, as the switches' routes send them (topologies/routing.py)."""

    def __init__(self, topo):
        self.topo = topo
        self.routes = compute_routes(topo)
        self.ports = {sw: ports_of(topo, sw) for sw in topo.switches()}

    def nodes(self, src: str, dst: str) -> list[str]:
        prefix = f"{self.topo.nodeInfo(dst)['ip'].split('/')[0]}/32"
        path = [src, next(iter(self.topo.g[src]))]
        while path[-1] != dst:
            port = next(r.port for r in self.routes[path[-1]] if r.prefix == prefix)
            path.append(self.ports[path[-1]][port])
        return path

    def links(self, src: str, dst: str) -> list[tuple[str, str]]:
        path = self.nodes(src, dst)
        return list(zip(path, path[1:]))

    def switches(self, src: str, dst: str) -> list[str]:
        return [n for n in self.nodes(src, dst) if self.topo.isSwitch(n)]
