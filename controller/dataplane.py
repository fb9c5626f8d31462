"""The data plane's run-time configuration (p4src/pcn.p4), as typed objects and the P4Runtime entries
that carry them, all by P4Info names: switch config, traffic classes, port modes, pre-drain windows,
random loss towards a port, the pcn-host code point, the telemetry clone session and the burst digest.

Its limits and defaults are read without finsy (the experiment schema takes them from here): finsy is
imported where an entry is built."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pcnlab.controller.modes import DROPTAIL, K, K_PRE, K_PRE_MODES, MARKING_MODES, MODES
from pcnlab.controller.segments import REPORT_GAP_US
from pcnlab.controller.telemetry import CLASS_NAMES
from pcnlab.errors import UsageError
from pcnlab.p4src.facts import program_facts

if TYPE_CHECKING:
    import finsy as fy

HOLD_US = 100_000   # pcn-host: an announcement holds K_pre for at most this long (when its burst never comes)
DROP_NON_ECT = False   # pcn: drop background non-ECT packets above K_pre inside a window
COUNT_ANNOUNCEMENTS = True   # pcn-host: queued announcements count in the depth it marks at
BURST_MIN_PAYLOAD = 64   # bytes of L4 payload a packet needs to start a burst (pure ACKs never do)
FACTS = program_facts()  # generated from p4src/ by `make p4` (p4src/facts.py)
MAX_PORTS = FACTS["MAX_PORTS"]
MAX_JOBS = FACTS["MAX_JOBS"]   # register slots per port; DDL job ids run 1..MAX_JOBS - 1 (0 is background)
MAX_JOB_ID = MAX_JOBS - 1
MAX_QDEPTH = (1 << 19) - 1
MAX_BURST_GAP_US = (1 << 32) - 1
MAX_PAYLOAD = (1 << 16) - 1
MAX_TELEMETRY_EVERY = (1 << 32) - 1   # telemetry_every: a bit<32> of every port_mode action
BURST_START, BURST_END = FACTS["BURST_START"], FACTS["BURST_END"]   # the digest's kinds
LOSS_SCALE = FACTS["LOSS_SCALE"]   # p4src/loss.p4's unit: packets lost per LOSS_SCALE

# Every P4Info name the controller uses, and what it gives each (tests/controller/test_p4info_names.py holds
# them to p4src/build/pcn.p4info.txtpb); entries are built through table_entry() and action(), which refuse
# any other name, field or parameter.
SWITCH_PARAMS = ("switch_id", "telemetry_every", "telemetry_session")   # every port_mode action starts with them
MODE_ACTIONS = {   # mode -> its port_mode action, and the parameters after SWITCH_PARAMS
    DROPTAIL: ("mode_droptail", ()),
    "ecn": ("mode_ecn", ("k", "k_behind")),
    "pcn": ("mode_pcn", ("k", "k_pre", "drop_non_ect", "k_behind")),
    "pcn-host": ("mode_pcn_host", ("k", "k_pre", "hold_us", "discount_announcements", "k_behind")),
}
ACTIONS: dict[str, tuple[str, ...]] = {   # action -> its parameters
    "forward": ("port", "dst_mac"), "set_ddl": ("job", "burst_gap_us", "burst_min_payload"),
    "lose": ("rate_per_million",), "window_open": (), "NoAction": (),
    **{name: SWITCH_PARAMS + params for name, params in MODE_ACTIONS.values()},
}
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {   # table -> (its match fields, its actions)
    "ipv4_routes": (("ipv4_dst",), ("forward",)),
    "ddl_pairs": (("src", "dst"), ("set_ddl",)),
    "traffic_class": (("src", "dst", "proto", "sport", "dport"), ("set_ddl",)),
    "pcn_start_codepoint": (("dscp",), ("NoAction",)),
    "port_mode": (("port",), tuple(name for name, _ in MODE_ACTIONS.values())),
    "predrain_windows": (("port", "now_us"), ("window_open",)),
    "gradient_loss": (("port",), ("lose",)),
}
PORT_COUNTERS = {
    "to_queue": "to_queue_port_class",     # handed to the egress queue, by egress port
    "tx": "tx_port_class",                 # left the switch, by egress port
    "marked": "marked_port_class",
    "dropped": "dropped_port_class",       # dropped by the program (PCN early drop)
    "lost": "lost_port_class",             # lost at random before the queue (schedule's loss), by egress port
}
BURST_DIGEST = "burst_digest_t"
DIGEST_FIELDS = ("port", "job", "ts", "queue", "idle", "kind")   # BurstStart.from_digest reads them


def action(name: str, **params) -> fy.P4TableAction:
    """A table action by its P4Info name, with exactly the parameters ACTIONS lists for it."""
    if set(params) != set(ACTIONS.get(name, ("?",))):
        raise ValueError(f"action {name}({', '.join(params)}) is not one the controller knows: dataplane.ACTIONS")
    import finsy as fy

    return fy.P4TableAction(name, **params)


def table_entry(table: str, match: dict | None = None, action: fy.P4TableAction | None = None,
                **options) -> fy.P4TableEntry:
    """A table entry by P4Info names, its match fields and action among those TABLES lists for the table."""
    fields, actions = TABLES.get(table, (("?",), ()))
    if not set(match or ()) <= set(fields) or (action is not None and action.name not in actions):
        raise ValueError(f"{table} entry matching {sorted(match or ())} with {action and action.name} is not one the "
                         "controller knows: dataplane.TABLES")
    import finsy as fy

    return fy.P4TableEntry(table, match=fy.P4TableMatch(match) if match else None, action=action, **options)


def k_pre_fits(mode: str, k: int, k_pre: int) -> bool:
    """K_pre is a lower threshold than K where the mode has one (K_PRE_MODES): 0 <= k_pre <= k."""
    return mode not in K_PRE_MODES or 0 <= k_pre <= k


def k_behind_fits(mode: str, k: int, k_behind: int | None) -> bool:
    """First served (None: off) needs a marking mode (MARKING_MODES) and 0 <= k_behind <= k."""
    return k_behind is None or (mode in MARKING_MODES and 0 <= k_behind <= k)


@dataclass(frozen=True)
class PortMode:
    """How one egress port treats its queue. k and k_pre are queue depths in packets."""

    mode: str = DROPTAIL
    k: int = K
    k_pre: int = K_PRE
    drop_non_ect: bool = DROP_NON_ECT  # pcn: drop background non-ECT packets above k_pre inside a window
    hold_us: int = HOLD_US      # pcn-host: an announcement holds K_pre for at most this long
    count_announcements: bool = COUNT_ANNOUNCEMENTS  # pcn-host: queued announcements count in its depth
    k_behind: int | None = None  # first served: a DDL job's threshold behind another's earlier burst (None: k, off)

    def __post_init__(self):
        if self.mode not in MODES:
            raise UsageError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if not 0 <= self.k <= MAX_QDEPTH or not k_pre_fits(self.mode, self.k, self.k_pre):
            raise UsageError(f"mode {self.mode}: need 0 <= k_pre ({self.k_pre}) <= k ({self.k})")
        if not k_behind_fits(self.mode, self.k, self.k_behind):
            raise UsageError(f"mode {self.mode}: k_behind ({self.k_behind}) needs a marking mode "
                             f"({', '.join(MARKING_MODES)}) and 0 <= k_behind <= k ({self.k})")
        if not 0 < self.hold_us <= MAX_BURST_GAP_US:
            raise UsageError(f"mode {self.mode}: hold_us must be between 1 and {MAX_BURST_GAP_US}, not {self.hold_us}")

    def action(self, switch: dict) -> fy.P4TableAction:
        """The port_mode action; `switch`: the switch's id and telemetry (DataPlaneConfig.switch_params)."""
        name, params = MODE_ACTIONS[self.mode]
        values = {"k": self.k, "k_pre": self.k_pre, "drop_non_ect": int(self.drop_non_ect), "hold_us": self.hold_us,
                  "discount_announcements": int(not self.count_announcements),
                  "k_behind": self.k if self.k_behind is None else self.k_behind}
        return action(name, **switch, **{p: values[p] for p in params})


@dataclass(frozen=True)
class FlowClass:
    """Packets matching these fields belong to DDL job `job` (None fields match anything). The job's
    bursts are told apart in the switch by G (`burst_gap_us`: a data packet after this much silence
    starts one; None: REPORT_GAP_US, and the controller learns which gaps separate iterations,
    segments.py) and by `burst_min_payload` (smaller packets, e.g. pure ACKs, never start one)."""

    job: int
    src: str | None = None           # an address or prefix, e.g. 10.0.0.2 or 10.0.0.0/24
    dst: str | None = None
    proto: int | None = None         # 6 TCP, 17 UDP
    sport: tuple[int, int] | None = None  # inclusive port range
    dport: tuple[int, int] | None = None
    priority: int = 10
    burst_gap_us: int | None = None
    burst_min_payload: int = BURST_MIN_PAYLOAD   # bytes of L4 payload
    learned_gap_us: int | None = None  # burst_gap_us None: the G the controller learned, once it has

    @property
    def gap_us(self) -> int:
        """The G the switch uses: the configured one, else the learned one, else REPORT_GAP_US."""
        return self.burst_gap_us or self.learned_gap_us or REPORT_GAP_US

    def __post_init__(self):
        if not 1 <= self.job <= MAX_JOB_ID:
            raise UsageError(f"DDL job ids run from 1 to {MAX_JOB_ID}, not {self.job}")
        if self.burst_gap_us is not None and not 0 < self.burst_gap_us <= MAX_BURST_GAP_US:
            raise UsageError(f"job {self.job}: burst_gap_us must be between 1 and {MAX_BURST_GAP_US}")
        if not 1 <= self.burst_min_payload <= MAX_PAYLOAD:
            raise UsageError(f"job {self.job}: burst_min_payload must be between 1 and {MAX_PAYLOAD} bytes")

    @property
    def is_pair(self) -> bool:
        """One host to another, nothing else: an exact `ddl_pairs` entry (a hash lookup in BMv2)."""
        hosts = [ipaddress.ip_network(v, strict=False) for v in (self.src, self.dst) if v is not None]
        return (len(hosts) == 2 and all(h.prefixlen == 32 for h in hosts) and self.proto is None
                and self.sport is None and self.dport is None)

    def entry(self) -> fy.P4TableEntry:
        ddl = action("set_ddl", job=self.job, burst_gap_us=self.gap_us, burst_min_payload=self.burst_min_payload)
        if self.is_pair:
            src, dst = (str(ipaddress.ip_network(v, strict=False).network_address) for v in (self.src, self.dst))
            return table_entry("ddl_pairs", {"src": src, "dst": dst}, ddl)
        match: dict[str, object] = {}
        for name in ("src", "dst"):
            value = getattr(self, name)
            if value is not None:
                net = ipaddress.ip_network(value, strict=False)
                match[name] = f"{net.network_address}/&{net.netmask}"
        if self.proto is not None:
            match["proto"] = f"{self.proto}/&255"
        for name in ("sport", "dport"):
            value = getattr(self, name)
            if value is not None:
                match[name] = f"{value[0]}...{value[1]}"
        return table_entry("traffic_class", match, ddl, priority=self.priority)


@dataclass(frozen=True)
class DataPlaneConfig:
    """Everything the program needs on one switch besides its routes."""

    switch_id: int
    modes: dict[int, PortMode] = field(default_factory=dict)  # egress port -> mode; others drop-tail
    classes: tuple[FlowClass, ...] = ()
    telemetry_port: int | None = None  # collector port; None: no telemetry
    telemetry_every: int = 1       # 1 in N packets per port (when telemetry_port is set)
    telemetry_session: int = 100   # clone session id used for telemetry
    pcn_start_dscp: int | None = None  # pcn-host announcements

    def switch_params(self) -> dict:
        """The switch's id and telemetry, which every port_mode action carries."""
        every = self.telemetry_every if self.telemetry_port is not None else 0
        return dict(zip(SWITCH_PARAMS, (self.switch_id, every, self.telemetry_session), strict=True))

    def config_entry(self) -> fy.P4TableEntry:
        """Ports without a mode of their own: drop-tail, with the switch's telemetry."""
        return table_entry("port_mode", action=PortMode().action(self.switch_params()), is_default_action=True)

    def mode_entry(self, port: int, mode: PortMode) -> fy.P4TableEntry:
        return table_entry("port_mode", {"port": port}, mode.action(self.switch_params()))

    def with_learned_gap(self, job: int, gap_us: int) -> tuple["DataPlaneConfig", list[FlowClass]]:
        """This configuration with `gap_us` as the learned G of job's classes that have no G of their
        own, and those classes (their entries are what changes on the switch)."""
        changed = [c for c in self.classes if c.job == job and c.burst_gap_us is None and c.learned_gap_us != gap_us]
        classes = tuple(replace(c, learned_gap_us=gap_us) if c in changed else c for c in self.classes)
        return replace(self, classes=classes), [replace(c, learned_gap_us=gap_us) for c in changed]

    def static_entries(self) -> list:
        """What a freshly configured switch needs besides its routes, its default config and its modes."""
        import finsy as fy

        out: list = [cls.entry() for cls in self.classes]
        if self.pcn_start_dscp is not None:
            out.append(table_entry("pcn_start_codepoint", {"dscp": self.pcn_start_dscp}, action("NoAction")))
        if self.telemetry_port is not None:
            # Truncation happens in the program (truncate()); the session only picks the port.
            out.append(fy.P4CloneSessionEntry(self.telemetry_session, replicas=[self.telemetry_port]))
        out.append(fy.P4DigestEntry(BURST_DIGEST, max_list_size=1, max_timeout_ns=0, ack_timeout_ns=1_000_000))
        return out


def window_entry(port: int, start_us: int, end_us: int) -> fy.P4TableEntry:
    """A pre-drain window [start_us, end_us) on `port`, in the switch's clock."""
    if end_us <= start_us:
        raise ValueError(f"empty window [{start_us}, {end_us})")
    return table_entry("predrain_windows", {"port": port, "now_us": f"{start_us}...{end_us - 1}"},
                       action("window_open"), priority=1)


def loss_entry(port: int, fraction: float) -> fy.P4TableEntry:
    """DDL data packets towards `port` are lost at random, `fraction` of them (0 to 1; p4src/loss.p4)."""
    if not 0 <= fraction <= 1:
        raise UsageError(f"a loss rate is a fraction between 0 and 1, not {fraction}")
    return table_entry("gradient_loss", {"port": port}, action("lose", rate_per_million=round(fraction * LOSS_SCALE)))


@dataclass(frozen=True)
class BurstStart:
    """A burst digest: DDL job `job` began a burst towards `port` at `ts_us` (switch clock), or (`ended`)
    sent its last data packet there at `ts_us` before a silence of G."""

    port: int
    job: int
    ts_us: int
    queue_pkts: int  # queue the burst met (left behind by the port's last departure)
    idle_us: int     # start: the job's silence towards the port before it (since the switch started, for
                     # the first); end: how long after ts_us the switch saw the silence
    kind: int = BURST_START

    @property
    def ended(self) -> bool:
        return self.kind == BURST_END

    @classmethod
    def from_digest(cls, data: dict) -> "BurstStart":
        return cls(*(int(data[name]) for name in DIGEST_FIELDS))


async def read_port_counters(switch: fy.Switch) -> dict[tuple[int, str, str], tuple[int, int]]:
    """(port, class name, counter) -> (packets, bytes), for every non-zero slot.

    Drops at a full queue never reach egress: to_queue - tx - dropped - (still queued) counts them (a
    packet lost at random is counted only as lost: it never reached the queue).
    """
    import finsy as fy

    out: dict[tuple[int, str, str], tuple[int, int]] = {}
    for label, counter in PORT_COUNTERS.items():
        async for entry in switch.read(fy.P4CounterEntry(counter)):
            if entry.index is None or entry.data is None or not entry.packet_count:
                continue
            port, cls = divmod(entry.index, FACTS["CLASSES"])
            out[(port, CLASS_NAMES[cls], label)] = (entry.packet_count, entry.byte_count)
    return out
