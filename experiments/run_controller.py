"""How a run's configuration becomes its controller: the data plane's settings per switch (modes,
DDL classes with each job's burst detection, telemetry, pcn-host's code point), the PCN scheduler's
planner, and the running controller. The experiment runner and `pcnlab controller --topology RUN`
(taking over a run in progress) wire a controller this one way.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from pcnlab.controller.sessions import ControllerThread, PcnController
from pcnlab.controller.dataplane import DataPlaneConfig, FlowClass, PortMode
from pcnlab.controller.events import EventLog
from pcnlab.controller.modes import ANNOUNCE_MODES, K, K_PRE, WINDOW_MODES
from pcnlab.controller.program import P4Program
from pcnlab.controller.scheduler import PcnScheduler
from pcnlab.controller.shift_channel import ShiftChannel, Target
from pcnlab.controller.endpoints import SwitchEndpoint
from pcnlab.controller.windows import PlannerConfig
from pcnlab.experiments.config.runs import RunConfig


def flow_classes(run: RunConfig, ips: dict[str, str]) -> tuple[FlowClass, ...]:
    """Every ordered pair of a job's hosts is that job's DDL traffic, with the job's burst detection."""
    classes = []
    for job in run.jobs:
        for a, b in itertools.permutations(sorted(set(job.hosts)), 2):
            classes.append(FlowClass(job=job.id, src=f"{ips[a]}/32", dst=f"{ips[b]}/32",
                                     burst_gap_us=job.burst_gap_us, burst_min_payload=job.burst_min_payload))
    return tuple(classes)


def dataplane_configs(run: RunConfig, topo, endpoints: Sequence[SwitchEndpoint]) -> dict[str, DataPlaneConfig]:
    """Per switch: the run's mode on every traffic port, the DDL classes, and telemetry to the monitor
    port. `topo` is the run's Mininet Topo (run.topology.build())."""
    from pcnlab.workloads import PCN_START_DSCP

    ips = {h: topo.nodeInfo(h)["ip"].split("/")[0] for h in topo.hosts()}
    classes = flow_classes(run, ips)
    mode = PortMode(**run.mode.port_mode_kwargs())
    every = run.telemetry.every
    out = {}
    for ep in endpoints:
        monitor = topo.monitor_port(ep.name)
        out[ep.name] = DataPlaneConfig(
            switch_id=ep.device_id, classes=classes,
            modes={p: mode for p in ep.ports if p != monitor},
            telemetry_port=monitor if every else None, telemetry_every=every or 1,
            pcn_start_dscp=PCN_START_DSCP if run.mode.kind in ANNOUNCE_MODES else None)
    return out


def port_rates(endpoints: Sequence[SwitchEndpoint]) -> dict[tuple[str, int], int]:
    """(switch, port) -> the queue's drain rate in packets/s, as the switch was configured."""
    return {(ep.name, q.port): q.rate_pps for ep in endpoints for q in ep.queues if q.rate_pps}


def start_controller(run: RunConfig, topo, endpoints: Sequence[SwitchEndpoint], events: EventLog,
                     election_id: int = 10) -> tuple[ControllerThread, PcnScheduler]:
    """A controller driving every switch of the run, its scheduler (arming windows in pcn runs, only
    learning and logging in the others; with `mode.interleave`, a channel for the jobs' time shifts,
    whose jobs the runner adds as it starts them), started and with every switch configured."""
    controller = PcnController(endpoints, P4Program.named(), election_id=election_id,
                               dataplane=dataplane_configs(run, topo, endpoints))
    scheduler = PcnScheduler(controller, events,
                             PlannerConfig(**run.mode.planner_kwargs(), port_rates=port_rates(endpoints)),
                             arm=run.mode.kind in WINDOW_MODES, channel=ShiftChannel() if run.mode.interleave else None)
    thread = ControllerThread(controller).start()
    events.write("mode", mode=run.mode.kind, K=run.mode.K, K_pre=run.mode.K_pre, K_behind=run.mode.K_behind)
    return thread, scheduler


def start_slice_controller(endpoints: Sequence[SwitchEndpoint], mode: str, events: EventLog, k: int = K,
                           k_pre: int = K_PRE, election_id: int = 10) -> tuple[ControllerThread, PcnScheduler]:
    """A network without an experiment (`pcnlab slice`): one mode on every port (with the data plane's
    default thresholds unless given), no DDL classes."""
    port_mode = PortMode(mode, k=k, k_pre=k_pre)
    dataplane = {ep.name: DataPlaneConfig(switch_id=ep.device_id, modes={p: port_mode for p in ep.ports})
                 for ep in endpoints}
    controller = PcnController(endpoints, P4Program.named(), election_id=election_id, dataplane=dataplane)
    scheduler = PcnScheduler(controller, events, PlannerConfig(k_pre=k_pre, port_rates=port_rates(endpoints)),
                             arm=mode in WINDOW_MODES)
    return ControllerThread(controller).start(), scheduler


def shift_targets(handle, hosts) -> list[Target]:
    """Where a started job (a workloads JobHandle) takes its time shifts: every process that sends its
    communication (not its parameter servers), in its host's network namespace, on the job's port."""
    return [Target(p.host, hosts.netns_pid(p.host), p.ip, handle.port) for p in handle.procs
            if not p.label.startswith("ps")]
