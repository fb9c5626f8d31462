"""Experiment files: the YAML schema, its validation, `--set` overrides and sweeps.

    exp = load_experiment("experiments/smoke.yaml", overrides=["duration_s=10"])
    for run in exp.runs():          # the sweep's cartesian product times the repetitions
        run.name                    # "mode=pcn" (or "mode=pcn,rep=2"), stable across loads
        run.seed                    # the file's seed + repetition - 1: the modes of one repetition share it
        run.to_dict()               # the resolved config (every default filled in), for the run folder

Every key, its type, unit, default and allowed values are in `SCHEMA` below; `reference_markdown()` renders
them as the README's YAML reference (docs/yaml-reference.md, checked by a test). Units are fixed by the key:
link rates in Mbit/s, queue depths and thresholds in packets, times in the unit their name ends with
(`_s`, `_ms`, `_us`), sizes in bytes.

Every mistake a user can make in a file is a one-line `UsageError` (exit code 2) that starts with the file
and line (or the `--set` that caused it) and names the dotted key, what is wrong and what is allowed.
Nothing here starts a process or needs root: topologies are built as Mininet `Topo`s only to learn their
hosts and roles.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterable

from pcnlab.controller.dataplane import (MAX_BURST_GAP_US, MAX_JOB_ID, MAX_PAYLOAD, MAX_QDEPTH, MAX_TELEMETRY_EVERY,
                                         MODES)
from pcnlab.errors import UsageError
from pcnlab.experiments.reference import REFERENCES
from pcnlab.experiments.yamlpos import Raw, Where, load_tree, parse_scalar
from pcnlab.topologies.routing import rate_pps
from pcnlab.topologies.topos import MAX_HOSTS, MAX_SWITCHES, TOPOLOGIES, make_topology
from pcnlab.workloads.catalog import MODELS, process_model

# --- limits -------------------------------------------------------------------------------------

# One TCP flow through one BMv2 switch reaches about 450 Mbit/s on the fast build and 200 Mbit/s on the
# logging build (packet_log) on a 2-core machine. A link must stay well below that so the configured
# queue rate, not the switch's CPU, is the bottleneck, with room for several flows, telemetry clones and
# the controller on the same cores.
MAX_LINK_MBPS = 100.0
MAX_LINK_MBPS_PACKET_LOG = 50.0
MAX_LINK_MBPS_BRIDGE = 1000.0      # Linux bridge + tc: not CPU-bound at these rates
MIN_LINK_MBPS = 0.1
MAX_QUEUE = MAX_QDEPTH             # the data plane's queue depth fields
MAX_JOBS = MAX_JOB_ID              # DDL job ids 1..MAX_JOB_ID in the data plane
MAX_RUNS = 1000                    # sweep points x repetitions
MAX_FLOWS = 500                    # background flows (src x dst pairs): two iperf3 processes each
MAX_DURATION_S = 86_400            # no time of an experiment is longer than a day (durations, periods)
MAX_BYTES = 1 << 30                # a burst or an answer, which the generator holds in memory: 1 GiB

SWITCH_KINDS = ("bmv2", "bridge")
JOB_KINDS = ("ps", "ring", "generator")
PATTERNS = ("ps", "ring")
CCS = ("reno", "cubic", "bbr", "dctcp")
NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")

# --- the schema ----------------------------------------------------------------------------------


class _Required:
    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Key:
    """One key of the schema: its type, unit, default, allowed values and a one-line description."""

    name: str
    type: str            # int | number | bool | choice | name | text | lead | every | autobool | hosts
                         # | section | list | sweep
    default: Any
    doc: str
    unit: str = ""       # Mbit/s | packets | bytes | s | ms | us | MB
    choices: tuple = ()
    min: float | None = None        # inclusive
    above: float | None = None      # exclusive lower bound
    max: float | None = None        # inclusive
    nullable: bool = False          # null is allowed (and means the default's meaning, see doc)
    applies: tuple = ()             # jobs: the kinds the key applies to (empty: all)
    default_doc: str = ""           # how the default reads in the reference, when not a plain value
    what: str = ""                  # the noun for choice errors ("mode", "congestion control")


def _rate(name: str, doc: str, default: Any = 20.0, default_doc: str = "") -> Key:
    return Key(name, "number", default, doc, unit="Mbit/s", min=MIN_LINK_MBPS, default_doc=default_doc)


_BW = _rate("bw", "rate of every host link (and of every link without its own rate below)")
_QUEUE = Key("queue", "int", 60, "egress queue depth of every switch port", unit="packets", min=1, max=MAX_QUEUE)
_SAME_AS_BW = "same as bw"

TOPOLOGY_PARAMS: dict[str, tuple[Key, ...]] = {
    "star": (
        Key("hosts", "int", 3, "hosts on the one switch s1 (role `hosts`)", min=1, max=MAX_HOSTS),
        _BW, _QUEUE),
    "dumbbell": (
        Key("left", "int", 2, "hosts on s1 (role `left`)", min=1, max=MAX_HOSTS),
        Key("right", "int", 2, "hosts on s2 (role `right`)", min=1, max=MAX_HOSTS),
        _BW,
        _rate("bottleneck_bw", "rate of the s1-s2 link", _SAME_AS_BW, _SAME_AS_BW),
        _QUEUE),
    "tree": (
        Key("workers_per_leaf", "int", 2, "DDL hosts on each of the leaves s2, s3 (role `workers`)", min=0,
            max=MAX_HOSTS),
        Key("background_per_leaf", "int", 3, "background hosts on each leaf (role `background`)", min=0,
            max=MAX_HOSTS),
        _BW,
        _rate("uplink_bw", "rate of the leaf-root links (the PS link, h1-s1, is a host link: bw)",
              _SAME_AS_BW, _SAME_AS_BW),
        _QUEUE),
    "leaf-spine": (
        Key("leaves", "int", 2, "leaf switches", min=1, max=MAX_SWITCHES),
        Key("spines", "int", 2, "spine switches, each linked to every leaf", min=1, max=MAX_SWITCHES),
        Key("hosts_per_leaf", "int", 2, "hosts on each leaf (role `hosts`)", min=1, max=MAX_HOSTS),
        _BW,
        _rate("fabric_bw", "rate of the leaf-spine links", _SAME_AS_BW, _SAME_AS_BW),
        _QUEUE),
}

SECTIONS: dict[str, tuple[Key, ...]] = {
    "": (
        Key("name", "name", REQUIRED, "the experiment's name: results go to results/<name>/",
            default_doc="the file's name without .yaml"),
        Key("description", "text", "", "free text, copied into every run's config", default_doc='""'),
        Key("topology", "section", REQUIRED, "the network: `topology: tree` or a mapping (below)"),
        Key("switch", "section", {}, "the switches: `switch: bmv2` or a mapping (below)", default_doc="see below"),
        Key("mode", "section", {}, "the queue discipline of every switch port: `mode: pcn` or a mapping",
            default_doc="see below"),
        Key("telemetry", "section", {}, "telemetry clones for the switch queue log: `telemetry: 10` or a mapping",
            default_doc="see below"),
        Key("fidelity", "section", {}, "the thresholds of each run's fidelity check (fidelity.json): a mapping",
            default_doc="see below"),
        Key("jobs", "list", [], f"DDL jobs, each a mapping (below); data-plane job ids 1, 2, ... in this order "
            f"(at most {MAX_JOBS})", default_doc="[] (none)"),
        Key("background", "list", [], "background TCP flows, each a mapping (below)", default_doc="[] (none)"),
        Key("duration_s", "number", 30.0, "length of a run: background flows run this long; jobs end at "
            "their iterations or at this limit, whichever comes first", unit="s", above=0, max=MAX_DURATION_S),
        Key("warmup_s", "number", 2.0, "background flows run this long before the jobs start, so a standing "
            "queue is there when the first burst arrives", unit="s", min=0, max=MAX_DURATION_S),
        Key("repetitions", "int", 1, "runs per sweep point; run names end with `,rep=N` when above 1", min=1,
            max=MAX_RUNS),
        Key("seed", "int", 0, "seed of repetition 1; repetition N uses seed + N - 1 (every sweep point of a "
            "repetition shares it)", min=0, max=(1 << 31) - 1),
        Key("baseline", "text", None, "the sweep point the report compares every other point against "
            "(Δ, Δ % and the interval of the difference), e.g. `mode=droptail`; `pcnlab report --baseline` "
            "overrides it", nullable=True, default_doc="none"),
        Key("reference", "choice", None, "published figures `pcnlab report` shows beside ours, in their own "
            "column (experiments/reference.py)", choices=tuple(REFERENCES), nullable=True, default_doc="none"),
        Key("sweep", "sweep", {}, "dotted key -> list of values; the cartesian product becomes runs, named "
            "from their values (`mode=pcn,workers=2`)"),
    ),
    "topology": (
        Key("kind", "choice", REQUIRED, "which topology; its parameters are listed below", choices=tuple(TOPOLOGIES),
            what="topology"),
    ),
    "switch": (
        Key("kind", "choice", "bmv2", "bmv2: one simple_switch_grpc per switch running p4src/pcn.p4; bridge: "
            "Linux bridges (drop-tail only, no telemetry; for tests without BMv2)", choices=SWITCH_KINDS,
            what="switch kind"),
        Key("packet_log", "bool", False, "BMv2's per-packet log (the slower logging build: links at most "
            f"{MAX_LINK_MBPS_PACKET_LOG:g} Mbit/s)"),
        Key("pcap", "bool", False, "a pcap per BMv2 port in the run folder"),
    ),
    "mode": (
        Key("kind", "choice", "droptail", "droptail: drop at a full queue; ecn: mark CE at K; pcn: ours, "
            "predicted pre-drain windows with K_pre; pcn-host: the paper's host-announced counter",
            choices=MODES, what="mode"),
        Key("K", "int", 40, "ECN marking threshold (ecn, pcn, pcn-host); at most topology.queue",
            unit="packets", min=1, max=MAX_QUEUE),
        Key("K_pre", "int", 10, "threshold for background traffic while a burst is expected (pcn, pcn-host); "
            "at most K", unit="packets", min=0, max=MAX_QUEUE),
        Key("lead_us", "lead", "auto", "pcn: how long before the predicted iteration start the window opens; "
            "auto: learned per port (first 2 x the standing queue / port rate + an RTT, then longer while "
            "iterations inside a window still meet more than K_pre, shorter while they meet less)", unit="us",
            min=0, max=MAX_BURST_GAP_US),
        Key("guard_us", "int", 1000, "pcn: how long after the predicted start the window stays open",
            unit="us", min=0, max=MAX_BURST_GAP_US),
        Key("drop_non_ect", "bool", False, "pcn: drop background non-ECT packets above K_pre inside a window"),
        Key("announce_hold_us", "int", 100_000, "pcn-host: an announcement keeps K_pre for background at most "
            "this long when its burst never arrives", unit="us", min=1, max=MAX_BURST_GAP_US),
    ),
    "telemetry": (
        Key("every", "every", 1, "clone 1 in N packets of every port to the monitor host; off: no queue log",
            min=1, max=MAX_TELEMETRY_EVERY, default_doc="1 (bmv2), off (bridge)"),
    ),
    "fidelity": (
        Key("min_rate_pct", "number", 95.0, "every bottleneck port sends at least this share of its configured rate "
            "while its queue is non-empty", unit="%", min=0, max=100),
        Key("min_backlog_s", "number", 1.0, "a port is checked as a bottleneck when its queue was non-empty at "
            "least this long", unit="s", min=0, max=MAX_DURATION_S),
        Key("max_bmv2_cpu_pct", "number", 90.0, "no BMv2 process uses more than this share of one core (p95 of "
            "0.5 s samples): its ingress pipeline is one thread", unit="%", above=0),
        Key("min_idle_pct", "number", 0.0, "the machine's idle time (p5 of 0.5 s samples) is at least this; 0: "
            "below 5 % is only a warning (a busy machine whose switches held their rates and lag kept up)",
            unit="%", min=0, max=100),
        Key("max_lag_factor", "number", 5.0, "each switch's processing lag (packets that met an empty queue), "
            "p95, is at most this times the idle value `pcnlab calibrate` measured", above=0),
        Key("max_telemetry_loss_pct", "number", 1.0, "telemetry records lost, at most this share per switch",
            unit="%", min=0, max=100),
        Key("max_controller_lag_ms", "number", 50.0, "pcn: from a burst report to the window write it caused, "
            "p95 at most this", unit="ms", above=0),
    ),
    "jobs": (
        Key("name", "name", REQUIRED, "the job's name (logs under jobs/<name>/)", default_doc="job<N>"),
        Key("kind", "choice", REQUIRED, "ps: PyTorch parameter server; ring: PyTorch ring all-reduce; "
            "generator: the DDL burst generator (no PyTorch)", choices=JOB_KINDS, what="job kind"),
        Key("pattern", "choice", "ps", "generator: workers send to one PS which answers (ps), or each worker "
            "to the next (ring)", choices=PATTERNS, applies=("generator",), what="pattern"),
        Key("ps", "hosts", "ps", "PS host(s): host names or a role; one host per PS shard (a generator: one "
            "host); ps jobs and ps-pattern generators", applies=("ps", "generator"),
            default_doc="role `ps`"),
        Key("workers", "hosts", "workers", "a count (taken in order from pool), a host, a role, or a list of "
            "hosts and roles; a ring needs at least 2", default_doc="role `workers`"),
        Key("pool", "hosts", "workers", "where a count of workers is taken from: a role or a list of hosts",
            default_doc="role `workers`, else every host but the PS"),
        Key("iterations", "int", 10, "training iterations (generator: bursts)", min=1, max=1_000_000),
        Key("compute_ms", "number", 0.0, "compute time per iteration (an accelerator's; generator: the gap "
            "after the PS's answer)", unit="ms", min=0, max=MAX_DURATION_S * 1000),
        Key("model", "choice", "mlp", "mlp, cnn: small real models on generated data; digits-mlp, digits-cnn: "
            "scikit-learn's handwritten digits (test accuracy reported); resnet50, vgg16, bert-base: their "
            "per-layer gradient sizes times scale", choices=MODELS, applies=("ps", "ring"), what="model"),
        Key("scale", "number", 0.01, "gradient profiles: every layer's size times this", above=0, max=1,
            applies=("ps", "ring")),
        Key("batch", "int", 32, "samples per worker per iteration", min=1, max=1 << 16, applies=("ps", "ring")),
        Key("lr", "number", 0.05, "learning rate (SGD)", above=0, applies=("ps", "ring")),
        Key("eval_every", "int", 10, "real models: test accuracy on held-out data every this many iterations "
            "and after the last (0: only after the last); by the PS (ring: rank 0)", min=0, max=1_000_000,
            applies=("ps", "ring")),
        Key("bucket_mb", "number", 25.0, "ring: all_reduce buckets like DDP's (0: one per tensor)", unit="MB",
            min=0, max=1024, applies=("ring",)),
        Key("burst_bytes", "int", 250_000, "B: what each worker sends per iteration", unit="bytes", min=1,
            max=MAX_BYTES, applies=("generator",)),
        Key("reply_bytes", "int", None, "what the PS answers each worker", unit="bytes", min=0, max=MAX_BYTES, nullable=True,
            applies=("generator",), default_doc="burst_bytes"),
        Key("period_ms", "number", 0.0, "a burst starts every period (0: back to back after compute_ms)",
            unit="ms", min=0, max=MAX_DURATION_S * 1000, applies=("generator",)),
        Key("jitter_ms", "number", 0.0, "each start moves by a uniform offset in [-jitter, +jitter]; below "
            "period_ms", unit="ms", min=0, max=MAX_DURATION_S * 1000, applies=("generator",)),
        Key("pcn_start", "autobool", "auto", "announce each burst one RTT ahead (DSCP PCN-START) for pcn-host "
            "(ps, ring: each worker's gradients, to the PS or its ring successor, before each iteration's "
            "communication); auto: on in pcn-host runs only"),
        Key("pcn_start_lead_us", "number", 0.0, "how far ahead the announcement goes (0: one smoothed RTT)",
            unit="us", min=0, max=MAX_BURST_GAP_US),
        Key("burst_gap_us", "int", 10_000, "G: a data packet of the job after this much silence on a switch "
            "port starts a burst there (burst digests, every mode)", unit="us", min=1, max=MAX_BURST_GAP_US),
        Key("burst_min_payload", "int", 64, "packets with less L4 payload (pure ACKs, small control messages) "
            "never start a burst", unit="bytes", min=1, max=MAX_PAYLOAD),
        Key("cc", "choice", "cubic", "TCP congestion control; dctcp needs a kernel with it (checked when the "
            "run starts) and ecn: true", choices=CCS, what="congestion control"),
        Key("ecn", "bool", True, "ECN on the job's hosts (ECT packets)"),
    ),
    "background": (
        Key("name", "name", REQUIRED, "the flow's name; with several src/dst pairs, name-1, name-2, ...",
            default_doc="<src>-<dst>"),
        Key("src", "hosts", REQUIRED, "sender(s): a host, a role or a list; one flow per (src, dst) pair"),
        Key("dst", "hosts", REQUIRED, "receiver(s): a host, a role or a list"),
        Key("cc", "choice", "cubic", "TCP congestion control (dctcp: see jobs)", choices=CCS,
            what="congestion control"),
        Key("ecn", "bool", True, "ECN on the sender's host (ECT packets)"),
        Key("rate", "number", None, "cap on the sender's rate (null: as fast as TCP goes)", unit="Mbit/s",
            above=0, nullable=True),
    ),
}
SHORTHAND = {"topology": "kind", "switch": "kind", "mode": "kind", "telemetry": "every"}
LIST_SECTIONS = ("jobs", "background")
NOT_SWEPT = ("name", "description", "repetitions", "sweep", "fidelity", "reference", "baseline")


def _keys(section: str) -> dict[str, Key]:
    return {k.name: k for k in SECTIONS[section]}


# --- the typed, resolved configuration -------------------------------------------------------------


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
    kind: str = "bmv2"
    packet_log: bool = False
    pcap: bool = False


@dataclass(frozen=True)
class ModeConfig:
    kind: str = "droptail"
    K: int = 40
    K_pre: int = 10
    lead_us: int | str = "auto"            # "auto": what the queue needs to drain, plus an RTT
    guard_us: int = 1000
    drop_non_ect: bool = False
    announce_hold_us: int = 100_000

    def port_mode_kwargs(self) -> dict:
        """Arguments of pcnlab.controller.dataplane.PortMode."""
        return {"mode": self.kind, "k": self.K, "k_pre": self.K_pre, "drop_non_ect": self.drop_non_ect,
                "hold_us": self.announce_hold_us}

    def planner_kwargs(self) -> dict:
        """Arguments of pcnlab.controller.windows.PlannerConfig (lead None: the planner's automatic lead)."""
        return {"k_pre": self.K_pre, "guard_us": self.guard_us,
                "lead_us": None if self.lead_us == "auto" else self.lead_us}


@dataclass(frozen=True)
class TelemetryConfig:
    every: int | None = 1                  # None: off


@dataclass(frozen=True)
class FidelityConfig:
    """Thresholds of the fidelity check (experiments/fidelity.py)."""

    min_rate_pct: float = 95.0
    min_backlog_s: float = 1.0
    max_bmv2_cpu_pct: float = 90.0
    min_idle_pct: float = 0.0
    max_lag_factor: float = 5.0
    max_telemetry_loss_pct: float = 1.0
    max_controller_lag_ms: float = 50.0


@dataclass(frozen=True)
class JobConfig:
    id: int                                # the data plane's job id (1-based, in file order)
    name: str
    kind: str
    pattern: str                           # generator: ps | ring; ps and ring jobs: their kind
    ps: tuple[str, ...]
    workers: tuple[str, ...]
    iterations: int = 10
    compute_ms: float = 0.0
    model: str = "mlp"
    scale: float = 0.01
    batch: int = 32
    lr: float = 0.05
    eval_every: int = 10
    bucket_mb: float = 25.0
    burst_bytes: int = 250_000
    reply_bytes: int = 250_000
    period_ms: float = 0.0
    jitter_ms: float = 0.0
    pcn_start: bool = False
    pcn_start_lead_us: float = 0.0
    burst_gap_us: int = 10_000
    burst_min_payload: int = 64
    cc: str = "cubic"
    ecn: bool = True

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.ps + tuple(h for h in self.workers if h not in self.ps)

    def job_spec_kwargs(self, seed: int = 0) -> dict:
        """Arguments of pcnlab.workloads.launcher.JobSpec for this job."""
        out = {"name": self.name, "kind": "burst" if self.kind == "generator" else self.kind,
               "workers": self.workers, "servers": self.ps, "iterations": self.iterations,
               "compute_ms": self.compute_ms, "cc": self.cc, "ecn": self.ecn, "seed": seed,
               "pcn_start": self.pcn_start, "pcn_lead_us": self.pcn_start_lead_us}
        if self.kind == "generator":
            out.update(pattern=self.pattern, burst_bytes=self.burst_bytes, reply_bytes=self.reply_bytes,
                       period_ms=self.period_ms, jitter_ms=self.jitter_ms)
        else:
            out.update(model=process_model(self.model), profile_scale=self.scale, batch=self.batch, lr=self.lr,
                       eval_every=self.eval_every)
            if self.kind == "ring":
                out.update(bucket_mb=self.bucket_mb)
        return out

    def to_dict(self) -> dict:
        keys = _keys("jobs")
        out = {"id": self.id}
        for f in fields(self):
            key = keys.get(f.name)
            if f.name == "id" or (key is not None and key.applies and self.kind not in key.applies):
                continue
            if f.name == "ps" and self.pattern != "ps":
                continue
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class FlowConfig:
    name: str
    src: str
    dst: str
    cc: str = "cubic"
    ecn: bool = True
    rate: float | None = None              # Mbit/s; None: unlimited

    def flow_spec_kwargs(self, duration_s: float = 0.0) -> dict:
        """Arguments of pcnlab.workloads.launcher.FlowSpec (the rate cap is the runner's to apply)."""
        return {"src": self.src, "dst": self.dst, "cc": self.cc, "ecn": self.ecn, "duration_s": duration_s,
                "name": self.name}


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
    background: tuple[FlowConfig, ...]
    duration_s: float
    warmup_s: float
    description: str = ""
    source: str = ""                       # the experiment file
    overrides: tuple[str, ...] = ()        # the --set items applied
    fidelity: FidelityConfig = field(default_factory=FidelityConfig)
    reference: str | None = None           # experiments/reference.py: figures the report shows beside ours

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
            "duration_s": self.duration_s, "warmup_s": self.warmup_s, "fidelity": asdict(self.fidelity),
            "reference": self.reference,
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
            kind_ = job["kind"]
            job.setdefault("pattern", kind_)
            job["ps"] = tuple(job.get("ps", ()))
            job["workers"] = tuple(job["workers"])
            jobs.append(JobConfig(**job))
        return cls(
            experiment=data["experiment"], name=data["run"], index=data["index"],
            repetition=data["repetition"], seed=data["seed"], sweep=dict(data["sweep"]),
            topology=TopologyConfig(kind, topo, hosts, roles), switch=SwitchConfig(**data["switch"]),
            mode=ModeConfig(**data["mode"]), telemetry=TelemetryConfig(**data["telemetry"]),
            jobs=tuple(jobs), background=tuple(FlowConfig(**f) for f in data["background"]),
            duration_s=data["duration_s"], warmup_s=data["warmup_s"], description=data.get("description", ""),
            source=data.get("source", ""), overrides=tuple(data.get("overrides", ())),
            fidelity=FidelityConfig(**data.get("fidelity", {})), reference=data.get("reference"))


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

    def to_dict(self) -> dict:
        return {"experiment": self.name, "source": str(self.path), "description": self.description,
                "repetitions": self.repetitions, "sweep": {k: list(v) for k, v in self.sweep.items()},
                "overrides": list(self.overrides), "runs": [r.name for r in self._runs]}


# --- errors ---------------------------------------------------------------------------------------


def _error(where: Where, path: str, message: str) -> UsageError:
    tag = " (sweep value)" if where.via == "sweep" else ""
    return UsageError(f"{where}: {path}{tag}: {message}" if path else f"{where}: {message}")


def _suggest(word: str, options: Iterable[str]) -> str:
    options = list(options)
    lowered = {o.lower(): o for o in options}
    if word.lower() in lowered:
        return f" (did you mean {lowered[word.lower()]!r}?)"
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
        close = [lowered[c] for c in close]
    return f" (did you mean {close[0]!r}?)" if close else ""


def _join(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


_UNIT_WORDS = {"Mbit/s": "in Mbit/s", "packets": "of packets", "bytes": "of bytes", "s": "of seconds",
               "ms": "of milliseconds", "us": "of microseconds", "MB": "of megabytes", "%": "in percent"}


_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "MB": "megabytes", "%": "percent"}


def _describe(key: Key) -> str:
    unit = f" {_UNIT_WORDS[key.unit]}" if key.unit else ""
    return {"int": f"a whole number{unit}", "number": f"a number{unit}"}.get(key.type, key.type)


def _fmt(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    return repr(value)


def _check_range(key: Key, raw: Raw, path: str, value: float) -> None:
    unit = f" {key.unit}" if key.unit else ""
    if key.min is not None and value < key.min:
        raise _error(raw.where, path, f"must be at least {key.min:g}{unit}, got {_fmt(value)}")
    if key.above is not None and value <= key.above:
        raise _error(raw.where, path, f"must be above {key.above:g}{unit}, got {_fmt(value)}")
    if key.max is not None and value > key.max:
        raise _error(raw.where, path, f"must be at most {key.max:.15g}{unit}, got {_fmt(value)}")


def _number(key: Key, raw: Raw, path: str, whole: bool) -> int | float:
    value = raw.value
    number: float | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, (int, float)):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value.strip())      # YAML 1.1 reads 1e6 as text
        except ValueError:
            number = None
    if number is None or (isinstance(number, float) and not math.isfinite(number)) \
            or (whole and float(number) != int(number)):
        hint = ""
        if isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9][0-9_.]*\s*[A-Za-z/%]+\s*", value):
            digits = re.match(r"\s*([-+]?[0-9][0-9_.]*)", value).group(1)
            unit = _UNIT_NAMES.get(key.unit, key.unit) or "fixed"
            hint = f"; write the number alone ({path.rsplit('.', 1)[-1]}: {digits}): the unit is always {unit}"
        raise _error(raw.where, path, f"expected {_describe(key)}, got {_fmt(value)}{hint}")
    number = int(number) if whole else float(number)
    _check_range(key, raw, path, number)
    return number


def _convert(key: Key, raw: Raw, path: str) -> Any:
    value = raw.value
    if value is None and key.nullable:
        return None
    kind = key.type
    if kind in ("int", "number"):
        return _number(key, raw, path, whole=kind == "int")
    if kind == "bool":
        if not isinstance(value, bool):
            raise _error(raw.where, path, f"expected true or false, got {_fmt(value)}")
        return value
    if kind == "choice":
        if not isinstance(value, str) or value not in key.choices:
            hint = _suggest(value, key.choices) if isinstance(value, str) else ""
            raise _error(raw.where, path, f"unknown {key.what or key.name} {_fmt(value)}{hint}; "
                                          f"choose one of {', '.join(key.choices)}")
        return value
    if kind == "name":
        if not isinstance(value, str) or not NAME_RE.fullmatch(value):
            raise _error(raw.where, path, f"expected a name of letters, digits, '.', '_' and '-', "
                                          f"got {_fmt(value)}")
        return value
    if kind == "text":
        if not isinstance(value, str):
            raise _error(raw.where, path, f"expected text, got {_fmt(value)}")
        return value
    if kind == "lead":
        if value == "auto":
            return "auto"
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                raise _error(raw.where, path, f"expected auto or a whole number of microseconds, "
                                              f"got {_fmt(value)}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _error(raw.where, path, f"expected auto or a whole number of microseconds, got {_fmt(value)}")
        return _number(key, raw, path, whole=True)
    if kind == "every":
        if value is None or value is False or value == "off":
            return None
        if value is True or not isinstance(value, (int, float, str)):
            raise _error(raw.where, path, f"expected off or a whole number N (1 in N packets), got {_fmt(value)}")
        return _number(key, raw, path, whole=True)
    if kind == "autobool":
        if value == "auto" or isinstance(value, bool):
            return value
        raise _error(raw.where, path, f"expected auto, true or false, got {_fmt(value)}")
    raise AssertionError(f"no converter for {kind}")


def _mapping(raw: Raw, path: str, section: str, allowed: dict[str, Key]) -> dict[str, Raw]:
    """The keys of a mapping, every one of them known. A scalar stands for the section's shorthand key."""
    if raw.value is None:
        return {}
    if not raw.is_map:
        short = SHORTHAND.get(section)
        if short and not raw.is_list:
            return {short: raw}
        what = f"a mapping of {', '.join(allowed)}"
        if short:
            what += f", or a {short} on its own (e.g. {section}: {_example_short(section)})"
        raise _error(raw.where, path or "document", f"expected {what}, got {_fmt(raw.value)}")
    for name, child in raw.value.items():
        if name not in allowed:
            where = child.key_where
            hint = (" (dotted keys are for sweep: and --set; here write the mapping out)" if "." in name
                    else _suggest(name, allowed))
            raise _error(where, _join(path, name), f"unknown key{hint}; "
                                                   f"{path or 'the top level'} takes {', '.join(allowed)}")
    return raw.value


def _example_short(section: str) -> str:
    return {"topology": "tree", "switch": "bmv2", "mode": "pcn", "telemetry": "10"}[section]


def _value(key: Key, present: dict[str, Raw], path: str, default: Any = None) -> Any:
    raw = present.get(key.name)
    if raw is None:
        return key.default if default is None else default
    return _convert(key, raw, _join(path, key.name))


# --- building one run --------------------------------------------------------------------------------


@dataclass
class _Context:
    source: str
    stem: str


def _where(*candidates: Raw | None, fallback: Where) -> Where:
    for raw in candidates:
        if raw is not None:
            return raw.where
    return fallback


def _build(tree: Raw, ctx: _Context) -> dict:
    """Validate one document (after overrides and one sweep point) into the typed sections."""
    top = _mapping(tree, "", "", _keys(""))
    doc_where = tree.where

    name = _value(_keys("")["name"], top, "", ctx.stem) if "name" in top else ctx.stem
    if not NAME_RE.fullmatch(name):
        raise _error(doc_where, "name", f"the file name {ctx.stem!r} is not a valid experiment name; "
                                        "add name: with letters, digits, '.', '_' and '-'")
    description = _value(_keys("")["description"], top, "")

    if "topology" not in top:
        raise _error(doc_where, "topology", f"missing; give one of {', '.join(TOPOLOGIES)}, e.g. topology: tree")
    topology, topo_raws = _topology(top["topology"])

    switch_raw = top.get("switch")
    sw = _mapping(switch_raw, "switch", "switch", _keys("switch")) if switch_raw is not None else {}
    switch = SwitchConfig(**{k.name: _value(k, sw, "switch") for k in SECTIONS["switch"]})
    _check_link_rates(topology, topo_raws, switch, sw, top["topology"].where)

    mode_raw = top.get("mode")
    md = _mapping(mode_raw, "mode", "mode", _keys("mode")) if mode_raw is not None else {}
    mode = ModeConfig(**{k.name: _value(k, md, "mode") for k in SECTIONS["mode"]})
    mode_where = mode_raw.where if mode_raw is not None else doc_where
    if mode.kind != "droptail" and mode.K > topology.queue:
        where = _where(md.get("K"), topo_raws.get("queue"), fallback=mode_where)
        raise _error(where, "mode.K", f"{mode.K} packets is above the queue depth (topology.queue: "
                                      f"{topology.queue}): the queue would drop before it marks; "
                                      f"K must be at most {topology.queue}")
    if mode.kind in ("pcn", "pcn-host") and mode.K_pre > mode.K:
        where = _where(md.get("K_pre"), md.get("K"), fallback=mode_where)
        raise _error(where, "mode.K_pre", f"{mode.K_pre} is above K ({mode.K}); K_pre must be at most K "
                                          "(it is the lower threshold used while a burst is expected)")
    if switch.kind == "bridge" and mode.kind != "droptail":
        where = _where(md.get("kind"), sw.get("kind"), fallback=mode_where)
        raise _error(where, "mode.kind", f"mode {mode.kind} needs switch kind bmv2: a Linux bridge only drops "
                                         "at a full queue; use mode droptail or switch bmv2")

    tel_raw = top.get("telemetry")
    tl = _mapping(tel_raw, "telemetry", "telemetry", _keys("telemetry")) if tel_raw is not None else {}
    if "every" in tl:
        every = _convert(_keys("telemetry")["every"], tl["every"], "telemetry.every")
        if every is not None and switch.kind == "bridge":
            raise _error(tl["every"].where, "telemetry.every", "a Linux bridge has no telemetry; use off, "
                                                               "or switch kind bmv2")
    else:
        every = 1 if switch.kind == "bmv2" else None
    telemetry = TelemetryConfig(every)

    fid_raw = top.get("fidelity")
    fd = _mapping(fid_raw, "fidelity", "fidelity", _keys("fidelity")) if fid_raw is not None else {}
    fidelity = FidelityConfig(**{k.name: _value(k, fd, "fidelity") for k in SECTIONS["fidelity"]})

    jobs = _jobs(top.get("jobs"), topology, mode)
    background = _flows(top.get("background"), topology, switch)

    out = {"name": name, "description": description, "topology": topology, "switch": switch, "mode": mode,
           "telemetry": telemetry, "jobs": jobs, "background": background, "fidelity": fidelity}
    for key_name in ("duration_s", "warmup_s", "repetitions", "seed", "reference"):
        out[key_name] = _value(_keys("")[key_name], top, "")
    return out


def _topology(raw: Raw) -> tuple[TopologyConfig, dict[str, Raw]]:
    allowed = dict(_keys("topology"))
    for params in TOPOLOGY_PARAMS.values():
        allowed.update({k.name: k for k in params})
    present = _mapping(raw, "topology", "topology", allowed)
    if "kind" not in present:
        raise _error(raw.where, "topology.kind", f"missing; choose one of {', '.join(TOPOLOGIES)}")
    kind = _convert(_keys("topology")["kind"], present["kind"], "topology.kind")
    params_keys = {k.name: k for k in TOPOLOGY_PARAMS[kind]}
    for name, child in present.items():
        if name != "kind" and name not in params_keys:
            raise _error(child.key_where, f"topology.{name}",
                         f"not a parameter of the {kind} topology{_suggest(name, params_keys)}; "
                         f"{kind} takes {', '.join(params_keys)}")
    params: dict[str, Any] = {}
    for key in TOPOLOGY_PARAMS[kind]:
        if key.name in present:
            params[key.name] = _convert(key, present[key.name], f"topology.{key.name}")
        elif key.default == _SAME_AS_BW:
            params[key.name] = params["bw"]
        else:
            params[key.name] = key.default
    try:
        topo = make_topology(kind, **params)
    except UsageError as exc:
        raise _error(raw.where, "topology", str(exc)) from None
    hosts = tuple(topo.traffic_hosts())
    roles = {role: tuple(members) for role, members in topo.roles.items() if role != "monitor" and members}
    if len(hosts) < 2:
        raise _error(raw.where, "topology", f"this {kind} topology has {len(hosts)} host; an experiment needs "
                                            "at least two")
    return TopologyConfig(kind, params, hosts, roles), present


def _check_link_rates(topology: TopologyConfig, present: dict[str, Raw], switch: SwitchConfig,
                      sw: dict[str, Raw], fallback: Where) -> None:
    limit, why = _rate_limit(switch)
    for name, mbps in topology.link_rates_mbps().items():
        if mbps > limit:
            where = _where(present.get(name), present.get("bw"), fallback=fallback)
            raise _error(where, f"topology.{name}", f"{mbps:g} Mbit/s is more than {why}; "
                                                     f"use at most {limit:g} Mbit/s per link")


def _rate_limit(switch: SwitchConfig) -> tuple[float, str]:
    if switch.kind == "bridge":
        return MAX_LINK_MBPS_BRIDGE, f"the Linux bridge variant allows ({MAX_LINK_MBPS_BRIDGE:g} Mbit/s)"
    if switch.packet_log:
        return MAX_LINK_MBPS_PACKET_LOG, ("BMv2's logging build keeps up with (one TCP flow through one switch "
                                          "reaches about 200 Mbit/s with packet_log on a 2-core machine)")
    return MAX_LINK_MBPS, ("BMv2 keeps up with (one TCP flow through one switch reaches about 450 Mbit/s on "
                           "a 2-core machine; links stay well below so the queue rate, not the CPU, is the "
                           "bottleneck)")


def _topology_summary(topology: TopologyConfig) -> str:
    roles = "; ".join(f"{role}: {' '.join(members)}" for role, members in topology.roles.items())
    return f"the {topology.kind} topology has hosts {topology.hosts[0]}..{topology.hosts[-1]} ({roles})"


def _resolve(raw: Raw, path: str, topology: TopologyConfig, allow_count: bool = False,
             pool: tuple[str, ...] = (), pool_what: str = "") -> tuple[str, ...]:
    """Host names from a host, a role, a list of hosts and roles, or (allow_count) a count from `pool`."""
    value = raw.value
    if allow_count and isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != int(value) or value < 1:
            raise _error(raw.where, path, f"a count of hosts must be a whole number of at least 1, got {_fmt(value)}")
        if value > len(pool):
            raise _error(raw.where, path, f"{int(value)} hosts asked for, but {pool_what} has only {len(pool)} "
                                          f"({', '.join(pool) or 'none'}); ask for fewer, list hosts, "
                                          "or enlarge the topology")
        return tuple(pool[: int(value)])
    items = value if raw.is_list else [raw]
    if raw.is_list and not items:
        raise _error(raw.where, path, "empty list; give at least one host or role")
    out: list[str] = []
    for item in items:
        name = item.value
        if not isinstance(name, str):
            allowed = "a count, " if allow_count else ""
            raise _error(item.where, path, f"expected {allowed}a host name (e.g. {topology.hosts[0]}) or a role "
                                           f"({', '.join(topology.roles)}), got {_fmt(name)}")
        if name in topology.roles:
            members = topology.roles[name]
        elif name in topology.hosts:
            members = (name,)
        else:
            hint = _suggest(name, list(topology.roles) + list(topology.hosts))
            raise _error(item.where, path, f"{name!r} is not a host or role in the topology{hint}; "
                                           f"{_topology_summary(topology)}")
        for host in members:
            if host in out:
                raise _error(item.where, path, f"host {host} is listed twice")
            out.append(host)
    return tuple(out)


def _jobs(raw: Raw | None, topology: TopologyConfig, mode: ModeConfig) -> tuple[JobConfig, ...]:
    if raw is None or raw.value is None:
        return ()
    if not raw.is_list:
        raise _error(raw.where, "jobs", f"expected a list of jobs (each item `- kind: ps|ring|generator ...`), "
                                        f"got {_fmt(raw.value)}")
    if len(raw.value) > MAX_JOBS:
        raise _error(raw.where, "jobs", f"{len(raw.value)} jobs; the data plane tells at most {MAX_JOBS} apart")
    keys = _keys("jobs")
    jobs: list[JobConfig] = []
    for index, item in enumerate(raw.value):
        path = f"jobs.{index}"
        if not item.is_map:
            raise _error(item.where, path, f"expected a mapping (kind: ..., workers: ...), got {_fmt(item.value)}")
        present = _mapping(item, path, "jobs", keys)
        if "kind" not in present:
            raise _error(item.where, path, f"missing key 'kind'; choose one of {', '.join(JOB_KINDS)}")
        kind = _convert(keys["kind"], present["kind"], f"{path}.kind")
        # Keys of other kinds are refused, unless the kind comes from a sweep or --set: then the file's
        # keys serve the runs they apply to and are ignored in the others.
        kind_where = present["kind"].where
        lenient = kind_where.via == "sweep" or kind_where.line is None
        for name, child in present.items():
            key = keys[name]
            if key.applies and kind not in key.applies and not lenient:
                raise _error(child.key_where, f"{path}.{name}",
                             f"applies to {' and '.join(key.applies)} jobs, not to a {kind} job; remove it")
        values = {k.name: _value(k, present, path) for k in SECTIONS["jobs"]
                  if k.type not in ("hosts",) and k.name not in ("name", "kind")}
        name = _value(keys["name"], present, path, f"job{index + 1}") if "name" in present else f"job{index + 1}"
        if any(j.name == name for j in jobs):
            raise _error(_where(present.get("name"), fallback=item.where), f"{path}.name",
                         f"job name {name!r} is used twice; give each job its own name")
        pattern = values["pattern"] if kind == "generator" else kind

        # placement
        ps: tuple[str, ...] = ()
        if pattern == "ps":
            if "ps" in present:
                ps = _resolve(present["ps"], f"{path}.ps", topology)
            elif "ps" in topology.roles:
                ps = topology.roles["ps"]
            else:
                raise _error(item.where, path, f"missing key 'ps': this {topology.kind} topology has no role "
                                               f"'ps'; name the PS host (roles: {', '.join(topology.roles)})")
            if kind == "generator" and len(ps) != 1:
                raise _error(present["ps"].where, f"{path}.ps", f"a generator has exactly one PS host, "
                                                                f"got {len(ps)} ({', '.join(ps)})")
        elif "ps" in present and not lenient:
            raise _error(present["ps"].key_where, f"{path}.ps", "a ring has no PS; remove ps "
                                                               "(every host is a worker)")
        if "pool" in present:
            pool = _resolve(present["pool"], f"{path}.pool", topology)
            pool_what = f"{path}.pool"
        elif "workers" in topology.roles:
            pool, pool_what = topology.roles["workers"], f"role 'workers' of the {topology.kind} topology"
        else:
            # A ps key ignored in this run (a swept kind) still keeps its hosts out of the pool, so the
            # runs of the sweep use the same workers.
            no_pool = ps or (_resolve(present["ps"], f"{path}.ps", topology) if "ps" in present else ())
            pool = tuple(h for h in topology.hosts if h not in no_pool)
            pool_what = f"the {topology.kind} topology (every host but the PS)"
        if "workers" in present:
            workers = _resolve(present["workers"], f"{path}.workers", topology, allow_count=True, pool=pool,
                               pool_what=pool_what)
        elif "workers" in topology.roles:
            workers = topology.roles["workers"]
        else:
            raise _error(item.where, path, f"missing key 'workers': give a count, hosts or a role "
                                           f"({_topology_summary(topology)})")
        workers_where = _where(present.get("workers"), fallback=item.where)
        both = [h for h in workers if h in ps]
        if both:
            raise _error(workers_where, f"{path}.workers", f"{', '.join(both)} is this job's PS and cannot also "
                                                           "be a worker")
        if not workers:
            raise _error(workers_where, f"{path}.workers", "no worker hosts; a job needs at least one")
        if pattern == "ring" and len(workers) < 2:
            raise _error(workers_where, f"{path}.workers", f"a ring needs at least 2 workers, got "
                                                           f"{len(workers)} ({', '.join(workers)})")

        if values["cc"] == "dctcp" and not values["ecn"]:
            raise _error(_where(present.get("ecn"), present.get("cc"), fallback=item.where), f"{path}.ecn",
                         "dctcp needs ECN; set ecn: true or choose reno, cubic or bbr")
        if kind == "generator":
            if values["period_ms"] > 0 and values["jitter_ms"] >= values["period_ms"]:
                raise _error(_where(present.get("jitter_ms"), fallback=item.where), f"{path}.jitter_ms",
                             f"{values['jitter_ms']:g} ms is not below period_ms ({values['period_ms']:g} ms); "
                             "bursts would overlap")
            if values["reply_bytes"] is None:
                values["reply_bytes"] = values["burst_bytes"]
        else:
            values["reply_bytes"] = values["burst_bytes"] if values["reply_bytes"] is None else values["reply_bytes"]
        if values["pcn_start"] == "auto":
            values["pcn_start"] = mode.kind == "pcn-host"
        values.pop("pattern")
        jobs.append(JobConfig(id=index + 1, name=name, kind=kind, pattern=pattern, ps=ps, workers=workers,
                              **values))
    return tuple(jobs)


def _flows(raw: Raw | None, topology: TopologyConfig, switch: SwitchConfig) -> tuple[FlowConfig, ...]:
    if raw is None or raw.value is None:
        return ()
    if not raw.is_list:
        raise _error(raw.where, "background", f"expected a list of flows (each item `- src: ... dst: ...`), "
                                              f"got {_fmt(raw.value)}")
    keys = _keys("background")
    limit, why = _rate_limit(switch)
    flows: list[FlowConfig] = []
    for index, item in enumerate(raw.value):
        path = f"background.{index}"
        if not item.is_map:
            raise _error(item.where, path, f"expected a mapping (src: ..., dst: ...), got {_fmt(item.value)}")
        present = _mapping(item, path, "background", keys)
        for required in ("src", "dst"):
            if required not in present:
                raise _error(item.where, path, f"missing key {required!r}; give a host or a role "
                                               f"({_topology_summary(topology)})")
        srcs = _resolve(present["src"], f"{path}.src", topology)
        dsts = _resolve(present["dst"], f"{path}.dst", topology)
        count = len(flows) + len(srcs) * len(dsts) - len(set(srcs) & set(dsts))
        if count > MAX_FLOWS:
            raise _error(item.where, path, f"{count} background flows so far (one per src x dst pair); one machine "
                                           f"runs at most {MAX_FLOWS}")
        pairs = [(s, d) for s in srcs for d in dsts if s != d]
        if not pairs:
            raise _error(present["dst"].where, f"{path}.dst", "a flow needs a receiver other than its sender")
        cc = _value(keys["cc"], present, path)
        ecn = _value(keys["ecn"], present, path)
        rate = _value(keys["rate"], present, path)
        if cc == "dctcp" and not ecn:
            raise _error(_where(present.get("ecn"), fallback=item.where), f"{path}.ecn",
                         "dctcp needs ECN; set ecn: true or choose reno, cubic or bbr")
        if rate is not None and rate > limit:
            raise _error(present["rate"].where, f"{path}.rate", f"{rate:g} Mbit/s is more than {why}; "
                                                                f"use at most {limit:g} Mbit/s")
        base = _value(keys["name"], present, path, "x") if "name" in present else None
        for n, (src, dst) in enumerate(pairs, start=1):
            name = (base if len(pairs) == 1 else f"{base}-{n}") if base else f"{src}-{dst}"
            taken = {f.name for f in flows}
            unique, k = name, 2
            while unique in taken:
                if base and len(pairs) == 1:
                    raise _error(present["name"].where, f"{path}.name", f"flow name {name!r} is used twice")
                unique, k = f"{name}-{k}", k + 1
            flows.append(FlowConfig(unique, src, dst, cc, ecn, rate))
    return tuple(flows)


# --- paths, overrides and sweeps ----------------------------------------------------------------------


def _valid_paths(tree: Raw, all_topology_params: bool = False) -> list[str]:
    """Every dotted key that may be set or swept in this document."""
    top = tree.value if tree.is_map else {}
    paths = [k.name for k in SECTIONS[""]]
    for section in ("switch", "mode", "telemetry", "fidelity"):
        paths += [f"{section}.{k.name}" for k in SECTIONS[section]]
    paths.append("topology.kind")
    kind = _current_kind(top.get("topology"))
    for name, params in TOPOLOGY_PARAMS.items():
        if all_topology_params or kind is None or name == kind:
            paths += [f"topology.{k.name}" for k in params if f"topology.{k.name}" not in paths]
    for section in LIST_SECTIONS:
        items = top.get(section)
        count = len(items.value) if items is not None and items.is_list else 0
        for i in range(count):
            paths.append(f"{section}.{i}")
            paths += [f"{section}.{i}.{k.name}" for k in SECTIONS[section]]
    return paths


def _current_kind(raw: Raw | None) -> str | None:
    if raw is None:
        return None
    value = raw.value.get("kind").value if raw.is_map and "kind" in raw.value else raw.value
    return value if isinstance(value, str) and value in TOPOLOGY_PARAMS else None


def _check_path(key: str, tree: Raw, where: Where, what: str, all_topology_params: bool = False) -> list[str]:
    """The parts of a dotted key, if it exists in this document's schema; else a one-line error."""
    parts = key.split(".")
    valid = _valid_paths(tree, all_topology_params)
    if key in valid:
        if what == "sweep key" and parts[0] in NOT_SWEPT:
            raise _error(where, "", f"{what} {key!r} cannot be swept; sweep keys name settings of a run "
                                    "(mode, topology.bw, jobs.0.workers, ...)")
        return parts
    hint = ""
    if parts[0] in LIST_SECTIONS and len(parts) > 1 and parts[1].isdigit():
        top = tree.value if tree.is_map else {}
        items = top.get(parts[0])
        count = len(items.value) if items is not None and items.is_list else 0
        if int(parts[1]) >= count:
            raise _error(where, "", f"{what} {key!r} does not exist: {parts[0]} has {count} "
                                    f"entr{'y' if count == 1 else 'ies'} (numbered from 0)")
    if parts[0] in LIST_SECTIONS and len(parts) > 1 and not parts[1].isdigit():
        hint = f" (list entries are numbered: {parts[0]}.0.{'.'.join(parts[1:])})"
    if not hint:
        hint = _suggest(key, valid)
        if not hint:
            hint = _suggest(key, [p for p in valid if p.rsplit(".", 1)[-1] == parts[-1]] or valid)
        if not hint:
            tails = [p for p in valid if p.endswith("." + parts[-1])]
            hint = f" (did you mean {tails[0]!r}?)" if tails else ""
    raise _error(where, "", f"{what} {key!r} does not exist{hint}")


def _set(tree: Raw, parts: list[str], value: Raw) -> None:
    """Put `value` at the dotted path (creating mappings on the way; a section written as its shorthand
    scalar becomes a mapping)."""
    node = tree
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if node.is_list:
            child = node.value[int(part)]
            if last:
                value.key_where = child.key_where
                node.value[int(part)] = value
                return
            node = child
            continue
        if not node.is_map:
            section = parts[depth - 1] if depth else ""
            short = SHORTHAND.get(section)
            node.value = {short: Raw(node.value, node.where, node.where)} if short and node.value is not None else {}
        if last:
            current = node.value.get(part)
            short = SHORTHAND.get(part) if depth == 0 else None
            if short and current is not None and current.is_map and not value.is_map and not value.is_list:
                current.value[short] = value          # `mode: pcn` keeps the mode's other keys
                value.key_where = value.where
                return
            value.key_where = value.where if current is None else current.key_where
            node.value[part] = value
            return
        child = node.value.get(part)
        if child is None:
            child = Raw({}, value.where, value.where)
            node.value[part] = child
        node = child


def _normal(parts: list[str]) -> str:
    """The key a sweep or override really sets: `mode` is `mode.kind`."""
    if len(parts) == 1 and parts[0] in SHORTHAND:
        return f"{parts[0]}.{SHORTHAND[parts[0]]}"
    return ".".join(parts)


@dataclass
class _Sweep:
    key: str                   # as written
    parts: list[str]
    values: list[Raw]
    where: Where


def _read_sweep(raw: Raw | None) -> list[_Sweep]:
    if raw is None or raw.value is None:
        return []
    if not raw.is_map:
        raise _error(raw.where, "sweep", "expected a mapping of dotted keys to lists of values, e.g. "
                                         "sweep: {mode: [ecn, pcn]}")
    out = []
    for key, values in raw.value.items():
        out.append(_sweep_entry(key, values, values.key_where))
    return out


def _sweep_entry(key: str, values: Raw, where: Where) -> _Sweep:
    if not values.is_list:
        raise _error(values.where, f"sweep.{key}", f"expected a list of values, e.g. [{_fmt(values.value)}], "
                                                   f"got {_fmt(values.value)}")
    if not values.value:
        raise _error(values.where, f"sweep.{key}", "empty list; give at least one value (or remove the key)")
    if len(values.value) > MAX_RUNS:
        raise _error(values.where, f"sweep.{key}", f"{len(values.value)} values; an experiment has at most "
                                                   f"{MAX_RUNS} runs")
    seen: list[Any] = []
    items = []
    for item in values.value:
        plain = item.plain()
        if plain in seen:
            raise _error(item.where, f"sweep.{key}", f"value {_fmt(plain)} is listed twice")
        seen.append(plain)
        items.append(_with_via(item, "sweep"))
    return _Sweep(key, key.split("."), items, where)


def _with_via(raw: Raw, via: str) -> Raw:
    def walk(r: Raw) -> Raw:
        w = Where(r.where.source, r.where.line, via)
        if r.is_map:
            value: Any = {k: walk(v) for k, v in r.value.items()}
        elif r.is_list:
            value = [walk(v) for v in r.value]
        else:
            value = r.value
        return Raw(value, w, Where(r.key_where.source, r.key_where.line, via))
    return walk(raw)


def _label(value: Any, index: int) -> str:
    if isinstance(value, bool):
        text = "on" if value else "off"
    elif isinstance(value, float):
        text = f"{value:g}"
    elif value is None:
        text = "null"
    elif isinstance(value, list) and all(not isinstance(v, (list, dict)) for v in value):
        text = "+".join(_label(v, index) for v in value)
    elif isinstance(value, (list, dict)):
        kind = value.get("kind") if isinstance(value, dict) else None
        text = kind if isinstance(kind, str) else f"#{index + 1}"
    else:
        text = str(value)
    return re.sub(r"[^A-Za-z0-9._+#-]", "-", text)


def _labels(sweeps: list[_Sweep]) -> list[str]:
    def short(parts: list[str]) -> str:
        if len(parts) > 1 and parts[-1] == "kind" and not parts[-2].isdigit():
            return parts[-2]
        return parts[-1]
    shorts = [short(s.parts) for s in sweeps]
    return [sh if shorts.count(sh) == 1 else s.key for sh, s in zip(shorts, sweeps)]


def _apply_override(item: str, tree: Raw, sweeps: list[_Sweep]) -> tuple[Raw, list[_Sweep]]:
    where = Where(f"--set {item}")
    if "=" not in item:
        raise _error(where, "", "expected key=value, e.g. --set mode=pcn or --set jobs.0.workers=4")
    key, text = item.split("=", 1)
    key = key.strip()
    if not key:
        raise _error(where, "", "expected key=value; the key is empty")
    value = parse_scalar(text, where)
    if key == "sweep":
        new = Raw({"sweep": value}, where)
        return tree, _read_sweep(new.value["sweep"])
    if key.startswith("sweep."):
        sweep_key = key[len("sweep."):]
        if value.value is None:                      # --set sweep.mode=  removes that sweep
            return tree, [s for s in sweeps if s.key != sweep_key]
        entry = _sweep_entry(sweep_key, value, where)
        _check_path(sweep_key, tree, where, "sweep key", all_topology_params=True)
        kept = [s for s in sweeps if _normal(s.parts) != _normal(entry.parts)]
        return tree, kept + [entry]
    parts = _check_path(key, tree, where, "key")
    _set(tree, parts, value)
    fixed = _normal(parts)
    # A key fixed on the command line is no longer swept.
    kept = [s for s in sweeps if not _covers(fixed, _normal(s.parts))]
    return tree, kept


def _covers(fixed: str, swept: str) -> bool:
    return swept == fixed or swept.startswith(fixed + ".")


def _check_swept_base(tree: Raw, sweep: _Sweep) -> None:
    """The file's own value of a swept key is replaced in every run, but a typo there is still one."""
    parts = _normal(sweep.parts).split(".")
    node = tree
    for depth, part in enumerate(parts):
        if node.is_list and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
        elif node.is_map and part in node.value:
            node = node.value[part]
        elif not (depth == 1 and not node.is_map and SHORTHAND.get(parts[0]) == part):  # `mode: pcn`
            return                                                # not in the file: nothing to check
    if parts[0] == "topology" and len(parts) == 2:
        keys = [k for params in ({"kind": _keys("topology")["kind"]}, *map(_named, TOPOLOGY_PARAMS.values()))
                for k in [params.get(parts[1])] if k is not None]
    elif parts[0] in LIST_SECTIONS and len(parts) == 3:
        keys = [_keys(parts[0]).get(parts[2])]
    else:
        keys = [_keys(parts[0] if len(parts) == 2 else "").get(parts[-1])]
    if keys and keys[0] is not None and keys[0].type not in ("hosts", "section", "list", "sweep"):
        _convert(keys[0], node, ".".join(parts))


def _named(keys: Iterable[Key]) -> dict[str, Key]:
    return {k.name: k for k in keys}


def load_experiment(path: Path | str, overrides: Iterable[str] = ()) -> Experiment:
    """Read, validate and expand an experiment file. Every error is a one-line UsageError."""
    path = Path(path)
    overrides = tuple(overrides)
    tree = load_tree(path)
    source = str(path)
    if tree is None:
        raise UsageError(f"{source}:1: the file is empty; an experiment needs at least a topology "
                         "(see docs/yaml-reference.md)")
    if not tree.is_map:
        raise _error(tree.where, "", f"expected a mapping of keys (name:, topology:, jobs:, ...) at the top "
                                     f"level, got {_fmt(tree.value)}")
    _mapping(tree, "", "", _keys(""))                 # unknown top-level keys first, with their lines
    sweeps = _read_sweep(tree.value.pop("sweep", None))
    for item in overrides:
        tree, sweeps = _apply_override(item, tree, sweeps)

    swept_topology = any(s.parts[0] == "topology" for s in sweeps)
    seen_keys: dict[str, _Sweep] = {}
    for sweep in sweeps:
        if sweep.where.source.startswith("--set"):
            continue
        _check_path(sweep.key, tree, sweep.where, "sweep key", all_topology_params=swept_topology)
    for sweep in sweeps:
        normal = _normal(sweep.parts)
        for other, first in seen_keys.items():
            if _covers(other, normal) or _covers(normal, other):
                raise _error(sweep.where, "", f"sweep key {sweep.key!r} overlaps {first.key!r}; sweep each "
                                              "setting once")
        seen_keys[normal] = sweep
        _check_swept_base(tree, sweep)

    ctx = _Context(source, path.stem.removesuffix(".yaml"))
    top = tree.value
    repetitions = _value(_keys("")["repetitions"], top, "")
    points = math.prod(len(s.values) for s in sweeps) if sweeps else 1
    if points * repetitions > MAX_RUNS:
        where = sweeps[0].where if sweeps else tree.where
        raise _error(where, "sweep", f"{points} sweep points x {repetitions} repetitions = "
                                     f"{points * repetitions} runs; at most {MAX_RUNS}")

    labels = _labels(sweeps)
    runs: list[RunConfig] = []
    names: set[str] = set()
    for combo_index, combo in enumerate(itertools.product(*(range(len(s.values)) for s in sweeps))):
        point = tree.copy()
        sweep_values: dict[str, Any] = {}
        fragments = []
        for sweep, label, i in zip(sweeps, labels, combo):
            value = sweep.values[i].copy()
            _set(point, sweep.parts, value)
            sweep_values[sweep.key] = value.plain()
            fragments.append(f"{label}={_label(value.plain(), i)}")
        built = _build(point, ctx)
        base_name = ",".join(fragments) or "run"
        for rep in range(1, repetitions + 1):
            name = base_name if repetitions == 1 else (f"{base_name},rep={rep}" if fragments else f"rep={rep}")
            unique, k = name, 2
            while unique in names:
                unique, k = f"{name}-{k}", k + 1
            names.add(unique)
            runs.append(RunConfig(
                experiment=built["name"], name=unique, index=len(runs), repetition=rep,
                seed=built["seed"] + rep - 1, sweep=dict(sweep_values), topology=built["topology"],
                switch=built["switch"], mode=built["mode"], telemetry=built["telemetry"], jobs=built["jobs"],
                background=built["background"], duration_s=built["duration_s"], warmup_s=built["warmup_s"],
                description=built["description"], source=source, overrides=overrides,
                fidelity=built["fidelity"], reference=built["reference"]))
    # Repetitions outermost: each repetition runs every sweep point once before the next begins, so a
    # machine that drifts (load, heat) affects every point alike (interleaved, as benchmarks should be).
    runs = [replace(r, index=i) for i, r in enumerate(sorted(runs, key=lambda r: (r.repetition, r.index)))]
    first = runs[0]
    baseline = _value(_keys("")["baseline"], top, "")
    point_names = list(dict.fromkeys(r.name.rsplit(",rep=", 1)[0] for r in runs))
    if baseline is not None and baseline not in point_names and len(point_names) == 1:
        baseline = None  # a --set fixed the swept key: one point, nothing to compare
    if baseline is not None and baseline not in point_names:
        raise _error(_where(top.get("baseline"), fallback=tree.where), "baseline",
                     f"{baseline!r} is not a point of this sweep{_suggest(baseline, point_names)}; "
                     f"the points are {', '.join(point_names)}")
    return Experiment(name=first.experiment, path=path, description=first.description, repetitions=repetitions,
                      sweep={s.key: tuple(v.plain() for v in s.values) for s in sweeps}, overrides=overrides,
                      _runs=tuple(runs), baseline=baseline)


# --- the reference ------------------------------------------------------------------------------------

_TYPE_WORDS = {"int": "integer", "number": "number", "bool": "true/false", "choice": "one of", "name": "name",
               "text": "text", "lead": "auto or number", "every": "integer or off", "autobool": "auto/true/false",
               "hosts": "hosts", "section": "mapping", "list": "list", "sweep": "mapping"}


def _default_text(key: Key) -> str:
    if key.default_doc:
        return key.default_doc
    if key.default is REQUIRED:
        return "**required**"
    if key.default is None:
        return "null"
    if isinstance(key.default, bool):
        return "true" if key.default else "false"
    if isinstance(key.default, float):
        return f"{key.default:g}"
    if isinstance(key.default, int):
        return f"{key.default:_}".replace("_", " ") if key.default >= 10_000 else str(key.default)
    if key.default in ({}, []):
        return "none"
    return str(key.default)


def _allowed_text(key: Key) -> str:
    if key.type == "choice":
        return " \\| ".join(f"`{c}`" for c in key.choices)
    if key.type == "hosts":
        if key.name == "workers":
            return "count ≥ 1, host, role, or list of hosts/roles"
        return "host, role, or list of hosts/roles"
    bounds = []
    if key.min is not None:
        bounds.append(f"≥ {key.min:g}")
    if key.above is not None:
        bounds.append(f"> {key.above:g}")
    if key.max is not None and key.max != MAX_QUEUE:
        bounds.append(f"≤ {key.max:.15g}")
    text = ", ".join(bounds)
    if key.type == "lead":
        text = "`auto` or integer " + text
    if key.type == "every":
        text = "`off` or " + text
    if key.type == "autobool":
        text = "`auto`, `true`, `false`"
    if key.type == "name":
        text = "letters, digits, `.` `_` `-`"
    if key.unit == "Mbit/s" and key.type == "number":
        text += f", ≤ {MAX_LINK_MBPS:g} (bmv2)"
    if key.nullable:
        text = (text + ", or null") if text else "null"
    return text or "—"


def _row(path: str, key: Key, note: str = "") -> str:
    typ = _TYPE_WORDS[key.type]
    unit = key.unit or "—"
    doc = key.doc + (f" ({note})" if note else "")
    if key.applies:
        doc = f"*{', '.join(key.applies)} only.* " + doc
    return f"| `{path}` | {typ} | {unit} | {_default_text(key)} | {_allowed_text(key)} | {doc} |"


def reference_markdown() -> str:
    """The YAML reference (docs/yaml-reference.md): every key, one line each."""
    head = "| key | type | unit | default | allowed | meaning |\n|---|---|---|---|---|---|"
    lines = [
        "# Experiment YAML reference",
        "",
        "<!-- generated by pcnlab.experiments.config.reference_markdown(); tests/experiments checks it -->",
        "",
        "An experiment file is one YAML mapping. Units are fixed by the key and never written in values: link",
        "rates in Mbit/s (`bw: 20`, not `20Mbps`), queue depths and thresholds in packets, times in the unit",
        "the key ends with (`_s`, `_ms`, `_us`), sizes in bytes. Every default below is filled in and written",
        "to each run's folder. Mistakes are one line, exit code 2: `file:line: key: what is wrong; what is",
        "allowed`.",
        "",
        f"Link rates are at most {MAX_LINK_MBPS:g} Mbit/s per link on BMv2 ({MAX_LINK_MBPS_PACKET_LOG:g} with "
        f"`switch.packet_log`, {MAX_LINK_MBPS_BRIDGE:g} with",
        "`switch: bridge`): one TCP flow through one BMv2 switch reaches about 450 Mbit/s (200 on the logging",
        "build) on a 2-core machine, and the configured queue rate, not the switch's CPU, must be the",
        "bottleneck. BMv2 drains queues in packets/s: a rate becomes `round(Mbit/s * 1e6 / (8 * 1514))`",
        "(`topologies.routing.rate_pps`; 20 Mbit/s = 1651 packets/s), written to each run's config as",
        "`topology.queue_rates_pps`.",
        "",
        "## Top level",
        "",
        head,
    ]
    lines += [_row(k.name, k) for k in SECTIONS[""]]
    lines += ["", "## topology", "",
              "`topology: tree` is short for `topology: {kind: tree}`. Hosts are h1..hN (10.0.0.N); each "
              "topology names the", "roles its hosts play, which jobs and flows may use instead of host "
              "names.", "", head]
    lines += [_row("topology.kind", _keys("topology")["kind"])]
    shared_done: set[str] = set()
    for kind, params in TOPOLOGY_PARAMS.items():
        for key in params:
            if key.name in ("bw", "queue"):
                if key.name not in shared_done:
                    shared_done.add(key.name)
                    lines.append(_row(f"topology.{key.name}", key, "every kind"))
                continue
            lines.append(_row(f"topology.{key.name}", key, f"{kind}"))
    lines += ["", "Roles: star `hosts`; dumbbell `left`, `right`; tree `ps` (h1), `workers`, `background`; "
              "leaf-spine `hosts`.", ""]
    for section, intro in (
            ("switch", "`switch: bridge` is short for `switch: {kind: bridge}`."),
            ("mode", "`mode: pcn` is short for `mode: {kind: pcn}`. The thresholds a mode does not use are "
                     "kept but ignored, so one file can sweep `mode: [droptail, ecn, pcn, pcn-host]`; "
                     "K ≤ topology.queue is checked for ecn, pcn and pcn-host, K_pre ≤ K for pcn and pcn-host. "
                     "Modes other than droptail need `switch: bmv2`."),
            ("telemetry", "`telemetry: 10` is short for `telemetry: {every: 10}`; `telemetry: off` turns the "
                          "queue log off."),
            ("jobs", "`jobs:` is a list; job N gets the data plane's job id N (1-based). Keys that apply to "
                     "other kinds only are refused, unless the kind is swept or set with --set (then they "
                     "serve the runs they apply to). `workers: 4` takes the first 4 hosts of `pool`. A host "
                     "cannot be both a job's PS and its worker. In pcn-host runs only generator jobs announce "
                     "bursts; PyTorch jobs do not. `dctcp` is accepted here; the run checks that the kernel "
                     "has it and stops with a one-line error otherwise."),
            ("background", "`background:` is a list of long-lived TCP flows; `src: background` with `dst: ps` "
                           "makes one flow from every background host to the PS."),
            ("fidelity", "Each run is checked against these after it ends (`fidelity.json`, see the README's "
                         "Fidelity section); a run that fails one is marked untrusted, with the reason. They can "
                         "be set with --set but not swept.")):
        lines += ["", f"## {section}", "", intro, "", head]
        prefix = f"{section}.N" if section in LIST_SECTIONS else section
        lines += [_row(f"{prefix}.{k.name}", k) for k in SECTIONS[section]]
    lines += [
        "", "## sweep and --set", "",
        "`sweep:` maps dotted keys to lists: `mode: [droptail, ecn, pcn, pcn-host]`, `jobs.0.workers: [2, 4]`,",
        "`topology.bw: [10, 20]`. The cartesian product becomes runs (first key slowest), run once per",
        "repetition, repetitions outermost (interleaved: every point once, then again), named from their values with the key's last part: `mode=pcn,workers=2` (`,rep=N` added",
        "when repetitions > 1). A run's seed is `seed + repetition - 1`, the same for every sweep point of a",
        "repetition. A value that is wrong for the schema is reported at its line in the sweep list.",
        "`name`, `description`, `repetitions`, `sweep`, `fidelity` and `reference` cannot be swept; at most "
        f"{MAX_RUNS} runs.",
        "",
        "`pcnlab run FILE --set key=value` changes one key before the sweep is expanded; the value is read as",
        "YAML (`--set mode.K=30`, `--set jobs.0.workers=[h2,h3]`, `--set telemetry=off`). A key set this way",
        "is no longer swept (`--set mode=pcn` runs only pcn). `--set sweep.KEY=[v1,v2]` adds or replaces a",
        "sweep, `--set sweep.KEY=` removes one, `--set sweep=` removes them all. Errors name the `--set`.",
        "",
    ]
    return "\n".join(lines)
