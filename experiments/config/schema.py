"""The experiment file's schema: every key (`Key`) of every section (`SECTIONS`) and topology
(`TOPOLOGY_PARAMS`), with its type, unit, default, allowed values and meaning; its bounds from limits.py.

The package reads this table: converters check values against it, typed configs take their defaults from
it, sweeps and --set list its dotted keys, reference_markdown() renders it as docs/yaml-reference.md.
Facts owned elsewhere are imported, never restated: modes and data plane limits (controller/), host and
switch limits and topologies (topologies/), job kinds, patterns, models, images (workloads/), references.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from pcnlab.analysis.fidelity_limits import FidelityConfig
from pcnlab.controller.dataplane import (BURST_MIN_PAYLOAD, COUNT_ANNOUNCEMENTS, DROP_NON_ECT, HOLD_US, MAX_BURST_GAP_US,
                                         MAX_JOB_ID, MAX_PAYLOAD, MAX_QDEPTH, MAX_TELEMETRY_EVERY)
from pcnlab.controller.modes import DROPTAIL, K, K_PRE, K_PRE_MODES, MARKING_MODES, MODES
from pcnlab.controller.segments import REPORT_GAP_US
from pcnlab.controller.windows import GUARD_US
from pcnlab.analysis.reference import REFERENCES
from pcnlab.experiments.config.limits import (MAX_BYTES, MAX_DURATION_S, MAX_LINK_MBPS_PACKET_LOG, MAX_RUNS,
                                              MAX_TIME_SCALE, MIN_LINK_MBPS)
from pcnlab.topologies.topos import HOST_QUEUES, MAX_HOSTS, MAX_SWITCHES, SWITCH_KINDS, TOPOLOGIES
from pcnlab.workloads.catalog import MODELS
from pcnlab.workloads.compression_methods import CHOICES as COMPRESSIONS, DEFAULT_ERROR_FEEDBACK, DEFAULT_RATIO
from pcnlab.workloads.ltp.earlyclose import LTP_DEADLINE_MS, LTP_THETA_MIN
from pcnlab.workloads.process_config import (BATCH, BUCKET_MB, BURST_BYTES, BURST_PATTERNS, EVAL_EVERY, ITERATIONS, LR,
                                             MODEL, PROFILE_SCALE, TRAIN_KINDS, TRANSPORTS)
from pcnlab.workloads.containers import DEFAULT_IMAGE
from pcnlab.workloads.specs import JOB_KINDS as LAUNCHER_JOB_KINDS, TORCH_KINDS

FIDELITY = FidelityConfig()   # the fidelity section's defaults, from the check that owns them

# --- the words of the file -------------------------------------------------------------------------

# An experiment file calls the launcher's burst generator ("burst") a generator; the other kinds keep
# the launcher's names (workloads/specs.py owns the kinds).
FILE_JOB_KIND = {"burst": "generator"}
JOB_KINDS = tuple(FILE_JOB_KIND.get(kind, kind) for kind in LAUNCHER_JOB_KINDS)
CCS = ("reno", "cubic", "bbr", "dctcp")
# A job's transport: workloads.process_config.TRANSPORTS (tcp, ltp), or tcp-<cc>, TCP with that congestion control
# (it sets the job's cc), so one swept key can run LTP against each TCP variant.
TRANSPORT_CHOICES = TRANSPORTS + tuple(f"tcp-{cc}" for cc in CCS)
LTP_KINDS = ("ps", "generator")
CONTAINER_KINDS = tuple(FILE_JOB_KIND.get(kind, kind) for kind in TORCH_KINDS)   # jobs whose processes are PyTorch

# --- the schema ----------------------------------------------------------------------------------


class _Required:
    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Key:
    """One key of the schema: its type, unit, default, allowed values and a one-line description."""

    name: str
    type: str            # int | number | bool | choice | name | text | lead | autonumber | every | autobool | hosts
                         # | section | list | sweep | argv | env
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
    scales: str = ""                # time_scale (config/timescale.py): RATE divided by it, TIME multiplied, KEPT
                                    # a time or rate of the machine, not of the regime; "": neither


RATE, TIME, KEPT = "rate", "time", "kept"


def _rate(name: str, doc: str, default: Any = 20.0, default_doc: str = "") -> Key:
    return Key(name, "number", default, doc, unit="Mbit/s", min=MIN_LINK_MBPS, default_doc=default_doc,
               scales=RATE)


_IMAGE = Key(  # a PyTorch job's container; the file's `containers` section takes these for every such job
    "image", "text", None, "each PyTorch process in a container of this image (podman; never pulled) in its host's "
    "network namespace, with the image's PyTorch and this checkout's code (read-only); null: in the host itself",
    nullable=True, applies=CONTAINER_KINDS, default_doc="containers.image")
_CPUS = Key("cpus", "number", None, "CPUs each container may use (podman --cpus)", above=0, nullable=True,
            applies=CONTAINER_KINDS, default_doc="containers.cpus")
_MEMORY = Key("memory", "text", None, "each container's memory limit (podman --memory: a number and b, k, m or g, "
              "e.g. 2g)", nullable=True, applies=CONTAINER_KINDS, default_doc="containers.memory")
_BW = _rate("bw", "rate of every host link (and of every link without its own rate below)")
_QUEUE = Key("queue", "int", 60, "egress queue depth of every switch port", unit="packets", min=1, max=MAX_QDEPTH)
SAME_AS_BW = "same as bw"

TOPOLOGY_PARAMS: dict[str, tuple[Key, ...]] = {
    "star": (
        Key("hosts", "int", 3, "hosts on the one switch s1 (role `hosts`)", min=1, max=MAX_HOSTS),
        _BW, _QUEUE,
        _rate("first_bw", "rate of h1's link, both ways (e.g. a parameter server's, faster than its workers' "
              "links; a `schedule:` change at_s 0 can lower s1's side, the queue towards h1)", SAME_AS_BW,
              SAME_AS_BW)),
    "dumbbell": (
        Key("left", "int", 2, "hosts on s1 (role `left`)", min=1, max=MAX_HOSTS),
        Key("right", "int", 2, "hosts on s2 (role `right`)", min=1, max=MAX_HOSTS),
        _BW,
        _rate("bottleneck_bw", "rate of the s1-s2 link", SAME_AS_BW, SAME_AS_BW),
        _QUEUE),
    "tree": (
        Key("workers_per_leaf", "int", 2, "DDL hosts on each of the leaves s2, s3 (role `workers`)", min=0,
            max=MAX_HOSTS),
        Key("background_per_leaf", "int", 3, "background hosts on each leaf (role `background`)", min=0,
            max=MAX_HOSTS),
        _BW,
        _rate("uplink_bw", "rate of the leaf-root links (the PS link, h1-s1, is a host link: bw)",
              SAME_AS_BW, SAME_AS_BW),
        _QUEUE),
    "leaf-spine": (
        Key("leaves", "int", 2, "leaf switches", min=1, max=MAX_SWITCHES),
        Key("spines", "int", 2, "spine switches, each linked to every leaf", min=1, max=MAX_SWITCHES),
        Key("hosts_per_leaf", "int", 2, "hosts on each leaf (role `hosts`)", min=1, max=MAX_HOSTS),
        _BW,
        _rate("fabric_bw", "rate of the leaf-spine links", SAME_AS_BW, SAME_AS_BW),
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
        Key("containers", "section", None, "every PyTorch process (each PS, worker and rank; LTP and compressed "
            "ones too) in its own podman container in its host's network namespace: `containers: <image>` or a mapping "
            "(below); a job's own keys override it, its `image: null` runs it in its hosts", default_doc="none"),
        Key("jobs", "list", [], f"DDL jobs, each a mapping (below); data-plane job ids 1, 2, ... in this order "
            f"(at most {MAX_JOB_ID})", default_doc="[] (none)"),
        Key("background", "list", [], "background TCP flows, each a mapping (below)", default_doc="[] (none)"),
        Key("duration_s", "number", 30.0, "length of a run: background flows run this long; jobs end at "
            "their iterations or at this limit, whichever comes first", unit="s", above=0, max=MAX_DURATION_S, scales=TIME),
        Key("warmup_s", "number", 2.0, "background flows run this long before the jobs start, so a standing "
            "queue is there when the first burst arrives", unit="s", min=0, max=MAX_DURATION_S, scales=TIME),
        Key("time_scale", "number", 1.0, "the same regime, slower, for a machine that cannot keep up with its "
            "link rates: every rate (÷ in the unit column: topology's bw keys, schedule bw, background rate) is divided "
            "by this and every time of the modelled regime (×) multiplied; queue depths and thresholds stay in packets, "
            "sizes in bytes. A run's config.yaml and metrics.json hold what ran (scaled); `pcnlab report` gives times "
            "and rates back in the file's units. Real compute is not slowed: generator jobs keep their proportions "
            "whole; ps and ring jobs where compute_ms covers the real compute (PyTorch's forward and backward, "
            "compression, the PS's update are not slowed); torchrun jobs only in what the runner sets "
            "(pcn_start_lead_us, warmup_s, duration_s), not their script's own times; TCP's timers (200 ms minimum "
            "RTO) stay the kernel's", min=1, max=MAX_TIME_SCALE),
        Key("repetitions", "int", 1, "runs per sweep point; run names end with `,rep=N` when above 1", min=1, max=MAX_RUNS),
        Key("alone", "bool", False, "add, per point and repetition, a run per job with only that job: `<point>,alone=<job>`"),
        Key("seed", "int", 0, "seed of repetition 1; repetition N uses seed + N - 1 (every sweep point of a "
            "repetition shares it)", min=0, max=(1 << 31) - 1),
        Key("baseline", "text", None, "the sweep point the report compares every other point against "
            "(Δ, Δ % and the interval of the difference), e.g. `mode=droptail`; `pcnlab report --baseline` "
            "overrides it", nullable=True, default_doc="none"),
        Key("reference", "choice", None, "published figures `pcnlab report` shows beside ours, in their own "
            "column (analysis/reference.py)", choices=tuple(REFERENCES), nullable=True, default_doc="none"),
        Key("schedule", "list", [], "changes during a run, each a mapping (below): a link's rate or loss, background "
            "flows starting and stopping", default_doc="[] (none)"),
        Key("sweep", "sweep", {}, "dotted key -> list of values; the cartesian product becomes runs, named "
            "from their values (`mode=pcn,workers=2`); keys joined by + take one value each from a list per point"),
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
        Key("pace_hosts", "bool", False, "bmv2: each host sends at most its link's `bw` (tc tbf on the host's "
            "end, as a NIC serialises): without it a host sends at veth speed and simultaneous bursts (incast) "
            "wait in BMv2's input buffer, which no real switch has (topologies/network.py host_pacing). "
            "A port fed by one host at its own rate then queues in the host's bucket, not in BMv2; a `schedule:` "
            "may lower a paced host's link, not raise it. bmv2 only (bridges shape both ends already)"),
        Key("host_queue", "choice", "fifo", "pace_hosts: a paced host's queue. fifo: one queue, packets leave in "
            "the order the host's sockets wrote them (a parameter server's concurrent pushes reach its workers one "
            "after another); fair: one queue per destination host, served in turn (HTB), as a Linux host's default "
            "fq_codel interleaves flows: concurrent pushes reach every worker together (topologies/network.py "
            "fair_host_pacing)", choices=HOST_QUEUES, what="host queue"),
        Key("realtime", "bool", False, "bmv2: each switch runs under SCHED_FIFO (`chrt --fifo`), so a packet "
            "that wakes one of its threads preempts the hosts' processes, as a hardware switch never waits for a "
            "host's CPU. Without it, on 2 cores, BMv2's threads waited up to a scheduler slice behind the workers' "
            "Python where their packets converge (burstiness-paper: processing lag p95 0.65-0.8 ms, with it 85-106 "
            "µs). A switch busy near a whole core then takes that CPU from the hosts (the kernel leaves them 5 %)"),
    ),
    "mode": (
        Key("kind", "choice", DROPTAIL, "droptail: drop at a full queue; ecn: mark CE at K; pcn: ours, "
            "predicted pre-drain windows with K_pre; pcn-host: the paper's host-announced counter",
            choices=MODES, what="mode"),
        Key("K", "int", K, f"ECN marking threshold ({', '.join(MARKING_MODES)}); at most topology.queue",
            unit="packets", min=1, max=MAX_QDEPTH),
        Key("K_pre", "int", K_PRE, f"threshold for background traffic while a burst is expected "
            f"({', '.join(K_PRE_MODES)}); at most K", unit="packets", min=0, max=MAX_QDEPTH),
        Key("lead_us", "lead", "auto", "pcn: how long before the predicted iteration start the window opens; "
            "auto: learned per port (first 2 x the standing queue / port rate + an RTT, then longer while "
            "iterations inside a window still meet more than K_pre, shorter while they meet less)", unit="us",
            min=0, max=MAX_BURST_GAP_US, scales=TIME),
        Key("guard_us", "int", GUARD_US, "pcn: how long after the predicted start the window stays open",
            unit="us", min=0, max=MAX_BURST_GAP_US, scales=TIME),
        Key("drop_non_ect", "bool", DROP_NON_ECT, "pcn: drop background non-ECT packets above K_pre inside a window"),
        Key("announce_hold_us", "int", HOLD_US, "pcn-host: an announcement keeps K_pre for background at most "
            "this long when its burst never arrives", unit="us", min=1, max=MAX_BURST_GAP_US, scales=TIME),
        Key("interleave", "bool", False, "jobs that share a port take turns: the controller plans time shifts "
            "that interleave their communication, from each job's predicted period and communication time there "
            "(CASSINI's unified circle for unequal periods), sends each job's processes its shift over the "
            "announcements' port, and plans again when the phases drift; a job that does not listen (an unmodified "
            "script) is left where it is and named (controller/turns.py). Any mode"),
        Key("K_behind", "int", None, "first served, the in-network alternative to interleave: while the burst of "
            "the DDL job that started first at a port is under way (its last data packet less than its G ago), "
            "another job's ECN-capable data packets are marked at this depth instead of K, so its senders back "
            "off until that burst is over (p4src/ingress.p4; BMv2's priority queues cannot hold a port's rate). At most K; "
            f"{', '.join(MARKING_MODES)}", unit="packets", min=0, max=MAX_QDEPTH, nullable=True,
            default_doc="off"),
        Key("count_announcements", "bool", COUNT_ANNOUNCEMENTS, "pcn-host: the announcements waiting in the queue count in "
            "the depth it marks at (BMv2 counts packets, so a 115-byte PCN-START weighs as a full one; "
            "false: mark at the depth without them; pcn-training's start queue 5.4-5.9 with, 6.2-6.5 without)"),
    ),
    "telemetry": (
        Key("every", "every", 1, "clone 1 in N packets of every port to the monitor host; off: no queue log",
            min=1, max=MAX_TELEMETRY_EVERY, default_doc="1 (bmv2), off (bridge)"),
    ),
    "fidelity": (
        Key("min_rate_pct", "number", FIDELITY.min_rate_pct, "every bottleneck port sends at least this share of its configured rate "
            "while its queue is non-empty", unit="%", min=0, max=100),
        Key("min_backlog_s", "number", FIDELITY.min_backlog_s, "a port is checked as a bottleneck when its queue was non-empty at "
            "least this long", unit="s", min=0, max=MAX_DURATION_S, scales=TIME),
        Key("max_bmv2_cpu_pct", "number", FIDELITY.max_bmv2_cpu_pct, "no BMv2 process uses more than this share of one core (p95 of "
            "0.5 s samples): its ingress pipeline is one thread", unit="%", above=0),
        Key("min_idle_pct", "number", FIDELITY.min_idle_pct, "the machine's idle time (p5 of 0.5 s samples) is at least this; 0: "
            "below 5 % is only a warning (a busy machine whose switches held their rates and lag kept up)",
            unit="%", min=0, max=100),
        Key("max_lag_factor", "number", FIDELITY.max_lag_factor, "each switch's processing lag (packets that met an empty queue), "
            "p95, is at most this times the idle value `pcnlab calibrate` measured", above=0),
        Key("max_telemetry_loss_pct", "number", FIDELITY.max_telemetry_loss_pct, "telemetry records lost, at most this share per switch",
            unit="%", min=0, max=100),
        Key("max_controller_lag_ms", "number", FIDELITY.max_controller_lag_ms, "pcn: from a burst report to the window write it caused, "
            "p95 at most this (the machine's speed, not the regime's: time_scale leaves it)", unit="ms", above=0,
            scales=KEPT),
    ),
    "jobs": (
        Key("name", "name", REQUIRED, "the job's name (logs under jobs/<name>/)", default_doc="job<N>"),
        Key("kind", "choice", REQUIRED, "ps: PyTorch parameter server; ring: PyTorch ring all-reduce; "
            "generator: the DDL burst generator (no PyTorch); torchrun: your own program (argv), one rank per "
            "worker host with torchrun's environment", choices=JOB_KINDS, what="job kind"),
        Key("pattern", "choice", "ps", "generator: workers send to one PS which answers (ps), or each worker "
            "to the next (ring)", choices=BURST_PATTERNS, applies=("generator",), what="pattern"),
        Key("ps", "hosts", "ps", "PS host(s): host names or a role; one host per PS shard (a generator: one "
            "host); ps jobs and ps-pattern generators", applies=("ps", "generator"),
            default_doc="role `ps`"),
        Key("workers", "hosts", "workers", "a count (taken in order from pool), a host, a role, or a list of "
            "hosts and roles; a ring needs at least 2", default_doc="role `workers`"),
        Key("pool", "hosts", "workers", "where a count of workers is taken from: a role or a list of hosts",
            default_doc="role `workers`, else every host but the PS"),
        Key("iterations", "int", ITERATIONS, "training iterations (generator: bursts)", min=1, max=1_000_000),
        Key("compute_ms", "number", 0.0, "compute time per iteration (an accelerator's; generator: the gap "
            "after the PS's answer)", unit="ms", min=0, max=MAX_DURATION_S * 1000, scales=TIME),
        Key("model", "choice", MODEL, "mlp, cnn: small real models on generated data; digits-mlp, digits-cnn: "
            "scikit-learn's handwritten digits (test accuracy reported); resnet50, vgg16, bert-base: their "
            "per-layer gradient sizes times scale", choices=MODELS, applies=TRAIN_KINDS, what="model"),
        Key("scale", "number", PROFILE_SCALE, "gradient profiles: every layer's size times this", above=0, max=1,
            applies=TRAIN_KINDS),
        Key("batch", "int", BATCH, "samples per worker per iteration", min=1, max=1 << 16, applies=TRAIN_KINDS),
        Key("lr", "number", LR, "learning rate (SGD)", above=0, applies=TRAIN_KINDS),
        Key("eval_every", "int", EVAL_EVERY, "real models: test accuracy on held-out data every this many iterations "
            "and after the last (0: only after the last); by the PS (ring: rank 0)", min=0, max=1_000_000,
            applies=TRAIN_KINDS),
        Key("compression", "choice", "none", "gradient compression (with error feedback unless error_feedback "
            "is false): topk, randk (keep compression_ratio of the values, sent as index + value), int8 (8 bits "
            "per value), sign (1 bit); adaptive: each worker picks one per iteration from what it senses of the network "
            "(workloads/netsense.py)", choices=COMPRESSIONS, applies=TRAIN_KINDS, what="compression method"),
        Key("compression_ratio", "number", DEFAULT_RATIO, "topk, randk: the share of each gradient's values sent",
            above=0, max=1, applies=TRAIN_KINDS),
        Key("error_feedback", "bool", DEFAULT_ERROR_FEEDBACK, "compressed gradients: what one iteration's "
            "payload leaves out is added to the next (false: it is lost, as in NetSenseML's fixed top-k "
            "baselines; only with topk, randk, int8 or sign: none leaves nothing out, and adaptive's costs were "
            "measured with it); the PS's compressed reply always sends the change since what the workers hold",
            applies=TRAIN_KINDS),
        Key("bucket_mb", "number", BUCKET_MB, "ring: all_reduce buckets like DDP's (0: one per tensor)", unit="MB",
            min=0, max=1024, applies=("ring",)),
        Key("burst_bytes", "int", BURST_BYTES, "B: what each worker sends per iteration", unit="bytes", min=1,
            max=MAX_BYTES, applies=("generator",)),
        Key("reply_bytes", "int", None, "what the PS answers each worker", unit="bytes", min=0, max=MAX_BYTES,
            nullable=True, applies=("generator",), default_doc="burst_bytes"),
        Key("period_ms", "number", 0.0, "a burst starts every period (0: back to back after compute_ms)",
            unit="ms", min=0, max=MAX_DURATION_S * 1000, applies=("generator",), scales=TIME),
        Key("jitter_ms", "number", 0.0, "each start moves by a uniform offset in [-jitter, +jitter]; below "
            "period_ms", unit="ms", min=0, max=MAX_DURATION_S * 1000, applies=("generator",), scales=TIME),
        Key("pcn_start", "autobool", "auto", "announce each burst one RTT ahead (DSCP PCN-START) for pcn-host "
            "(ps, ring: each worker's gradients, to the PS or its ring successor, before each iteration's "
            "communication); auto: on in pcn-host runs only"),
        Key("pcn_start_lead_us", "number", 0.0, "how far ahead the announcement goes (0: two smoothed RTTs)",
            unit="us", min=0, max=MAX_BURST_GAP_US, scales=TIME),
        Key("burst_gap_us", "int", None, "G: a data packet of the job after this much silence on a switch "
            "port starts a burst there (burst digests, every mode); null: the switch reports bursts after "
            f"{REPORT_GAP_US // 1000} ms of silence and the controller and the analysis learn which silences "
            "separate iterations (controller/segments.py)", unit="us", min=1, max=MAX_BURST_GAP_US,
            nullable=True, default_doc="learned", scales=TIME),
        Key("burst_min_payload", "int", BURST_MIN_PAYLOAD, "packets with less L4 payload (pure ACKs, small control "
            "messages) never start a burst", unit="bytes", min=1, max=MAX_PAYLOAD),
        Key("cc", "choice", "cubic", "TCP congestion control; one this kernel lacks is refused (dctcp is not "
            "built into every kernel); dctcp needs ecn: true", choices=CCS, what="congestion control"),
        Key("ecn", "bool", True, "ECN on the job's hosts (ECT packets)"),
        Key("transport", "choice", "tcp", "how the workers' gradients (generator: bursts) reach the PS: tcp "
            "(TCP with `cc`); tcp-cubic, tcp-reno, tcp-bbr, tcp-dctcp (TCP with that congestion control: sets "
            "cc); ltp (LTP datagrams: loss-tolerant, Early Close and Bubble Filling, workloads/ltp/). The "
            "parameters (generator: answers) always return over TCP", choices=TRANSPORT_CHOICES,
            applies=LTP_KINDS, what="transport"),
        Key("ltp_deadline_ms", "autonumber", LTP_DEADLINE_MS, "ltp: the hard deadline: the PS closes an iteration this "
            "long after its first datagram arrived, whatever is missing (filled in); auto: derived from the ideal "
            "exchange, 3 x every worker's gradient bytes over the rate the PS's port delivers them at (measured by "
            "the PS) + the workers' largest smoothed RTT (workloads/ltp/earlyclose.py)", unit="ms", above=0,
            max=MAX_DURATION_S * 1000, applies=LTP_KINDS, scales=TIME),
        Key("ltp_theta_min", "number", LTP_THETA_MIN, "ltp: the lowest loss-tolerant threshold: before the deadline the PS "
            "closes an iteration only once every worker delivered at least this share (the threshold adapts "
            "to the measured loss between this and 1)", min=0, max=1, applies=LTP_KINDS),
        Key("argv", "argv", (), "torchrun: the program each rank runs, with its arguments (a list, or one line "
            "split as a shell would); a first word ending in .py is a Python script, run by the project's Python "
            "(in a container: the image's python3), its path relative to the current folder",
            applies=("torchrun",), default_doc="required"),
        Key("env", "env", (), "torchrun: variables added to every rank's environment (after torchrun's own: "
            "workloads/torchrun.py)", applies=("torchrun",), default_doc="none"),
        Key("iteration_regex", "text", None, "torchrun: a pattern (Python re) of the lines rank 0 prints once "
            "per iteration; their count is checked against the iterations the switches found",
            nullable=True, applies=("torchrun",), default_doc="none"),
        _IMAGE, _CPUS, _MEMORY,
    ),
    "containers": (replace(_IMAGE, default=DEFAULT_IMAGE, nullable=False, applies=(), default_doc=""),
                   replace(_CPUS, applies=(), default_doc="no limit"), replace(_MEMORY, applies=(), default_doc="no limit")),
    "background": (
        Key("name", "name", REQUIRED, "the flow's name; with several src/dst pairs, name-1, name-2, ...",
            default_doc="<src>-<dst>"),
        Key("src", "hosts", REQUIRED, "sender(s): a host, a role or a list; one flow per (src, dst) pair"),
        Key("dst", "hosts", REQUIRED, "receiver(s): a host, a role or a list"),
        Key("cc", "choice", "cubic", "TCP congestion control (dctcp: see jobs)", choices=CCS,
            what="congestion control"),
        Key("ecn", "bool", True, "ECN on the sender's host (ECT packets)"),
        Key("rate", "number", None, "cap on the sender's rate (null: as fast as TCP goes)", unit="Mbit/s",
            above=0, nullable=True, scales=RATE),
    ),
    "schedule": (
        Key("at_s", "number", REQUIRED, "when, in seconds after the jobs start (before duration_s)", unit="s", min=0,
            max=MAX_DURATION_S, scales=TIME),
        Key("link", "text", None, "the port that changes: `<switch>-<peer>`, the switch's egress port "
            "towards that host or switch (e.g. s1-h1); needs bw or loss, and BMv2 switches", nullable=True,
            default_doc="none"),
        Key("bw", "number", None, "the port's rate from then on (the switch's queue rate, changed live)",
            unit="Mbit/s", min=MIN_LINK_MBPS, nullable=True, default_doc="none", scales=RATE),
        Key("loss", "number", None, "the share of DDL data packets (payload at least the job's "
            "burst_min_payload; not pcn-host announcements) towards the port lost at random from then on, before they queue (0: none; "
            "counted: metrics.json `random_loss`)", min=0, max=1, nullable=True,
            default_doc="none"),
        Key("start", "name", None, "a background flow (its name; a name that became name-1, name-2, ... starts "
            "them all) that starts now instead of with the others", nullable=True, default_doc="none"),
        Key("stop", "name", None, "a background flow (as for start) that stops now", nullable=True,
            default_doc="none"),
    ),
}
SHORTHAND = {"topology": "kind", "switch": "kind", "mode": "kind", "telemetry": "every", "containers": "image"}
LIST_SECTIONS = ("jobs", "background", "schedule")
NOT_SWEPT = ("name", "description", "repetitions", "sweep", "fidelity", "reference", "baseline", "alone")


def by_name(keys: Iterable[Key]) -> dict[str, Key]:
    return {k.name: k for k in keys}


def section_keys(section: str) -> dict[str, Key]:
    return by_name(SECTIONS[section])


def default(section: str, name: str) -> Any:
    """A key's default, for the typed configs' fields."""
    return section_keys(section)[name].default

