"""The typed, resolved configuration of a run (RunConfig and its sections) and of an experiment (its runs).

Every default comes from the key table (schema.py). `to_dict` writes a run as plain data for its folder
(config.yaml); `from_dict` reads it back. The `*_kwargs` methods give the arguments of the objects the run
is made of (the data plane's PortMode, the scheduler's PlannerConfig, the launcher's JobSpec and FlowSpec).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from pcnlab.analysis.fidelity_limits import FidelityConfig
from pcnlab.experiments.config.limits import (BMV2_FLOW_MBPS, BMV2_FLOW_MBPS_PACKET_LOG, MAX_LINK_MBPS,
                                              MAX_LINK_MBPS_BRIDGE, MAX_LINK_MBPS_PACKET_LOG)
from pcnlab.experiments.config.schema import FILE_JOB_KIND, TOPOLOGY_PARAMS, default, section_keys
from pcnlab.rates import rate_pps
from pcnlab.topologies.topos import make_topology
from pcnlab.workloads.catalog import process_model
from pcnlab.workloads.containers import ContainerSpec

_LAUNCHER_JOB_KIND = {file: launcher for launcher, file in FILE_JOB_KIND.items()}


@dataclass(frozen=True)
class TopologyConfig:
    kind: str
    params: dict[str, Any]                 # every parameter of the kind's build(), resolved
    hosts: tuple[str, ...]                 # traffic hosts, h1..hN
    roles: dict[str, tuple[str, ...]]      # role -> hosts, e.g. ps, workers, background

    @property
    def queue(self) -> int:
        return self.params["queue"]

    def link_rates_mbps(self) -> dict[str, float]:
        return {k: v for k, v in self.params.items() if k.endswith("bw")}

    def queue_rates_pps(self) -> dict[str, int]:
        """BMv2 queue rates (packets/s) of each rate parameter, from full-size frames."""
        return {k: rate_pps(v) for k, v in self.link_rates_mbps().items()}

    def build(self, monitors: bool = True):
        """The Mininet Topo (a monitor host per switch by default, for telemetry)."""
        return make_topology(self.kind, monitors=monitors, **self.params)


@dataclass(frozen=True)
class SwitchConfig:
    kind: str = default("switch", "kind")
    packet_log: bool = default("switch", "packet_log")
    pcap: bool = default("switch", "pcap")
    pace_hosts: bool = default("switch", "pace_hosts")
    host_queue: str = default("switch", "host_queue")
    realtime: bool = default("switch", "realtime")


def link_limit(switch: SwitchConfig) -> tuple[float, str]:
    """The highest link rate (Mbit/s) these switches keep up with, and why, for the error message."""
    if switch.kind == "bridge":
        return MAX_LINK_MBPS_BRIDGE, f"the Linux bridge variant allows ({MAX_LINK_MBPS_BRIDGE:g} Mbit/s)"
    if switch.packet_log:
        return MAX_LINK_MBPS_PACKET_LOG, (f"BMv2's logging build keeps up with (one TCP flow through one switch "
                                          f"reaches about {BMV2_FLOW_MBPS_PACKET_LOG} Mbit/s with packet_log on a "
                                          "2-core machine)")
    return MAX_LINK_MBPS, (f"BMv2 keeps up with (one TCP flow through one switch reaches about {BMV2_FLOW_MBPS} "
                           "Mbit/s on a 2-core machine; links stay well below so the queue rate, not the CPU, is "
                           "the bottleneck)")


@dataclass(frozen=True)
class ModeConfig:
    kind: str = default("mode", "kind")
    K: int = default("mode", "K")
    K_pre: int = default("mode", "K_pre")
    lead_us: int | str = default("mode", "lead_us")   # "auto": what the queue needs to drain, plus an RTT
    guard_us: int = default("mode", "guard_us")
    drop_non_ect: bool = default("mode", "drop_non_ect")
    announce_hold_us: int = default("mode", "announce_hold_us")
    count_announcements: bool = default("mode", "count_announcements")
    interleave: bool = default("mode", "interleave")   # controller/turns.py: jobs at a shared port take turns
    K_behind: int | None = default("mode", "K_behind")  # first served (ingress.p4): None off

    def port_mode_kwargs(self) -> dict:
        """Arguments of pcnlab.controller.dataplane.PortMode."""
        return {"mode": self.kind, "k": self.K, "k_pre": self.K_pre, "drop_non_ect": self.drop_non_ect,
                "hold_us": self.announce_hold_us, "count_announcements": self.count_announcements,
                "k_behind": self.K_behind}

    def planner_kwargs(self) -> dict:
        """Arguments of pcnlab.controller.windows.PlannerConfig (lead None: the planner's automatic lead)."""
        return {"k_pre": self.K_pre, "guard_us": self.guard_us,
                "lead_us": None if self.lead_us == "auto" else self.lead_us}


@dataclass(frozen=True)
class TelemetryConfig:
    every: int | None = default("telemetry", "every")   # None: off


@dataclass(frozen=True)
class JobConfig:
    id: int                                # the data plane's job id (1-based, in file order)
    name: str
    kind: str                              # ps | ring | generator (schema.JOB_KINDS)
    pattern: str                           # generator: ps | ring; ps and ring jobs: their kind
    ps: tuple[str, ...]
    workers: tuple[str, ...]
    iterations: int = default("jobs", "iterations")
    compute_ms: float = default("jobs", "compute_ms")
    model: str = default("jobs", "model")
    scale: float = default("jobs", "scale")
    batch: int = default("jobs", "batch")
    lr: float = default("jobs", "lr")
    eval_every: int = default("jobs", "eval_every")
    bucket_mb: float = default("jobs", "bucket_mb")
    burst_bytes: int = default("jobs", "burst_bytes")
    reply_bytes: int = default("jobs", "burst_bytes")       # the file's null: burst_bytes
    period_ms: float = default("jobs", "period_ms")
    jitter_ms: float = default("jobs", "jitter_ms")
    pcn_start: bool = False                                 # the file's auto: resolved per run (pcn-host)
    pcn_start_lead_us: float = default("jobs", "pcn_start_lead_us")
    burst_gap_us: int | None = default("jobs", "burst_gap_us")
    burst_min_payload: int = default("jobs", "burst_min_payload")
    cc: str = default("jobs", "cc")
    ecn: bool = default("jobs", "ecn")
    compression: str = default("jobs", "compression")
    compression_ratio: float = default("jobs", "compression_ratio")
    error_feedback: bool = default("jobs", "error_feedback")
    transport: str = default("jobs", "transport")      # resolved: tcp | ltp (tcp-<cc> sets cc)
    ltp_deadline_ms: float | str = default("jobs", "ltp_deadline_ms")   # or "auto"
    ltp_theta_min: float = default("jobs", "ltp_theta_min")
    argv: tuple[str, ...] = ()                              # torchrun: its script's path made absolute
    env: tuple[tuple[str, str], ...] = ()
    iteration_regex: str | None = default("jobs", "iteration_regex")
    image: str | None = default("jobs", "image")            # PyTorch jobs: each process in a container of this image
    cpus: float | None = default("jobs", "cpus")
    memory: str | None = default("jobs", "memory")

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.ps + tuple(h for h in self.workers if h not in self.ps)

    def job_spec_kwargs(self, seed: int = 0) -> dict:
        """Arguments of pcnlab.workloads.specs.JobSpec for this job."""
        out = {"name": self.name, "kind": _LAUNCHER_JOB_KIND.get(self.kind, self.kind),
               "workers": self.workers, "servers": self.ps, "iterations": self.iterations,
               "compute_ms": self.compute_ms, "cc": self.cc, "ecn": self.ecn, "seed": seed,
               "pcn_start": self.pcn_start, "pcn_lead_us": self.pcn_start_lead_us}
        if self.transport == "ltp":
            out.update(transport="ltp", ltp_deadline_ms=self.ltp_deadline_ms, ltp_theta_min=self.ltp_theta_min)
        if self.image is not None:
            out.update(container=ContainerSpec(self.image, self.cpus, self.memory))
        if self.kind == "torchrun":
            out.update(argv=self.argv, env=self.env)
        elif self.kind == "generator":
            out.update(pattern=self.pattern, burst_bytes=self.burst_bytes, reply_bytes=self.reply_bytes,
                       period_ms=self.period_ms, jitter_ms=self.jitter_ms)
        else:
            out.update(model=process_model(self.model), profile_scale=self.scale, batch=self.batch, lr=self.lr,
                       eval_every=self.eval_every, compression=self.compression,
                       compression_ratio=self.compression_ratio, error_feedback=self.error_feedback)
            if self.kind == "ring":
                out.update(bucket_mb=self.bucket_mb)
        return out

    def to_dict(self) -> dict:
        keys = section_keys("jobs")
        out = {"id": self.id}
        for f in fields(self):
            key = keys.get(f.name)
            if f.name == "id" or (key is not None and key.applies and self.kind not in key.applies):
                continue
            if f.name == "ps" and self.pattern != "ps":
                continue
            value = getattr(self, f.name)
            if f.name == "env":
                value = dict(value)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class BackgroundFlowConfig:
    """One background TCP flow of a run (the workload process's own settings: workloads.process_config.FlowConfig)."""

    name: str
    src: str
    dst: str
    cc: str = default("background", "cc")
    ecn: bool = default("background", "ecn")
    rate: float | None = default("background", "rate")     # Mbit/s; None: unlimited

    def flow_spec_kwargs(self, duration_s: float = 0.0) -> dict:
        """Arguments of pcnlab.workloads.specs.FlowSpec (the rate cap is the runner's to apply)."""
        return {"src": self.src, "dst": self.dst, "cc": self.cc, "ecn": self.ecn, "duration_s": duration_s,
                "name": self.name}


@dataclass(frozen=True)
class Change:
    """One entry of `schedule:`, resolved (flow names as the run names them)."""

    at_s: float
    link: tuple[str, str] | None = None     # (switch, peer): the switch's egress port towards peer
    bw: float | None = None                 # Mbit/s
    start: tuple[str, ...] = ()
    stop: tuple[str, ...] = ()
    loss: float | None = None               # share of DDL data packets towards the port lost at random

    @classmethod
    def from_dict(cls, data: dict) -> "Change":
        link = tuple(data["link"].split("-", 1)) if data.get("link") else None
        return cls(float(data["at_s"]), link, data.get("bw"), tuple(data.get("start", ())), tuple(data.get("stop", ())),
                   data.get("loss"))

    def to_dict(self) -> dict:
        out: dict = {"at_s": self.at_s}
        if self.link:
            out["link"] = "-".join(self.link)
            out.update({k: getattr(self, k) for k in ("bw", "loss") if getattr(self, k) is not None})
        if self.start:
            out["start"] = list(self.start)
        if self.stop:
            out["stop"] = list(self.stop)
        return out


@dataclass(frozen=True)
class RunConfig:
    """One run: a point of the sweep and one repetition, with every default resolved."""

    experiment: str
    name: str
    index: int                             # 0-based position in Experiment.runs()
    repetition: int                        # 1-based
    seed: int
    sweep: dict[str, Any]                  # sweep key (as written) -> this run's value
    topology: TopologyConfig
    switch: SwitchConfig
    mode: ModeConfig
    telemetry: TelemetryConfig
    jobs: tuple[JobConfig, ...]
    background: tuple[BackgroundFlowConfig, ...]
    duration_s: float
    warmup_s: float
    description: str = ""
    source: str = ""                       # the experiment file
    overrides: tuple[str, ...] = ()        # the --set items applied
    fidelity: FidelityConfig = field(default_factory=FidelityConfig)
    reference: str | None = None           # analysis/reference.py: figures the report shows beside ours
    schedule: tuple[Change, ...] = ()      # changes during the run (experiments/schedule_runner.py)
    time_scale: float = default("", "time_scale")   # every value above is already scaled (config/timescale.py)
    alone: str | None = None               # `alone: true`: the one job of its point this run holds (load.py)

    def to_dict(self) -> dict:
        """The resolved config as plain data (YAML/JSON), for the run folder."""
        topo = self.topology
        return {
            "experiment": self.experiment, "run": self.name, "index": self.index,
            "repetition": self.repetition, "seed": self.seed, "sweep": dict(self.sweep),
            "source": self.source, "overrides": list(self.overrides), "description": self.description,
            "topology": {"kind": topo.kind, **topo.params, "hosts": list(topo.hosts),
                         "roles": {k: list(v) for k, v in topo.roles.items()},
                         "queue_rates_pps": topo.queue_rates_pps()},
            "switch": asdict(self.switch), "mode": asdict(self.mode), "telemetry": asdict(self.telemetry),
            "jobs": [job.to_dict() for job in self.jobs],
            "background": [asdict(flow) for flow in self.background],
            "duration_s": self.duration_s, "warmup_s": self.warmup_s, "time_scale": self.time_scale,
            "fidelity": asdict(self.fidelity),
            "reference": self.reference, "schedule": [c.to_dict() for c in self.schedule],
            **({"alone": self.alone} if self.alone else {}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "RunConfig":
        """Read back what to_dict wrote (a run folder's config)."""
        topo = dict(data["topology"])
        hosts, roles = tuple(topo.pop("hosts")), {k: tuple(v) for k, v in topo.pop("roles").items()}
        topo.pop("queue_rates_pps", None)
        kind = topo.pop("kind")
        if any(k.name == "hosts" for k in TOPOLOGY_PARAMS.get(kind, ())):
            topo["hosts"] = len(hosts)  # star's count of hosts: to_dict's host list took its key
        jobs = []
        for job in data["jobs"]:
            job = dict(job)
            job.setdefault("pattern", job["kind"])
            job["ps"] = tuple(job.get("ps", ()))
            job["workers"] = tuple(job["workers"])
            jobs.append(JobConfig(**job))
        return cls(
            experiment=data["experiment"], name=data["run"], index=data["index"],
            repetition=data["repetition"], seed=data["seed"], sweep=dict(data["sweep"]),
            topology=TopologyConfig(kind, topo, hosts, roles), switch=SwitchConfig(**data["switch"]),
            mode=ModeConfig(**data["mode"]), telemetry=TelemetryConfig(**data["telemetry"]),
            jobs=tuple(jobs), background=tuple(BackgroundFlowConfig(**f) for f in data["background"]),
            duration_s=data["duration_s"], warmup_s=data["warmup_s"], description=data.get("description", ""),
            source=data.get("source", ""), overrides=tuple(data.get("overrides", ())),
            fidelity=FidelityConfig(**data.get("fidelity", {})), reference=data.get("reference"),
            schedule=tuple(Change.from_dict(c) for c in data.get("schedule", ())),
            time_scale=data.get("time_scale", default("", "time_scale")), alone=data.get("alone"))


@dataclass(frozen=True)
class Experiment:
    name: str
    path: Path
    description: str
    repetitions: int
    sweep: dict[str, tuple]                # sweep key (as written) -> its values
    overrides: tuple[str, ...]
    _runs: tuple[RunConfig, ...] = field(repr=False, default=())
    baseline: str | None = None            # the sweep point the report compares against

    def runs(self) -> list[RunConfig]:
        """Every run: the sweep's cartesian product (first key slowest), once per repetition, repetitions
        outermost (interleaved: every point of repetition 1, then of repetition 2, ...)."""
        return list(self._runs)
