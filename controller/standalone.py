"""`pcnlab controller`: the controller alone, against switches that are already running (a network
started with `pcnlab slice --cli`, or a run in progress), until Ctrl-C or SIGTERM. It takes over as
primary (a higher election id), reinstalls everything, and on exit removes every window it armed."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from pcnlab.controller.controller import ControllerThread, PcnController
from pcnlab.controller.dataplane import DataPlaneConfig, PortMode
from pcnlab.controller.events import EventLog
from pcnlab.controller.program import P4Program
from pcnlab.controller.scheduler import PcnScheduler
from pcnlab.controller.specs import load_endpoints
from pcnlab.controller.windows import PlannerConfig
from pcnlab.errors import UsageError

TAKEOVER_ELECTION_ID = 100


def endpoints_file(topology: Path) -> Path:
    path = Path(topology)
    if path.is_dir():
        path = path / "endpoints.json"
    if not path.exists():
        raise UsageError(f"{path} not found: give a run folder of a running BMv2 network "
                         "(it holds endpoints.json), e.g. results/slice/latest/tree-bmv2")
    return path


def run_standalone(topology: Path, mode: str, k: int, k_pre: int, burst_gap_us: int,
                   events_path: Path | None, say=print) -> None:
    endpoints = load_endpoints(endpoints_file(topology))
    port_mode = PortMode(mode, k=k, k_pre=k_pre)
    dataplane = {ep.name: DataPlaneConfig(switch_id=ep.device_id, burst_gap_us=burst_gap_us,
                                          modes={p: port_mode for p in ep.ports})
                 for ep in endpoints}
    controller = PcnController(endpoints, P4Program.named(), election_id=TAKEOVER_ELECTION_ID,
                               dataplane=dataplane)
    events = EventLog(events_path or Path(topology if Path(topology).is_dir() else Path(topology).parent)
                      / "controller-events.jsonl")
    rates = {(ep.name, q.port): q.rate_pps for ep in endpoints for q in ep.queues if q.rate_pps}
    PcnScheduler(controller, events, PlannerConfig(k_pre=k_pre, port_rates=rates), arm=(mode == "pcn"))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with ControllerThread(controller):
        say(f"driving {', '.join(ep.name for ep in endpoints)} in mode {mode}; events in {events.path}; "
            "Ctrl-C to stop")
        stop.wait()
    events.close()
    say("stopped; no window left armed")
