"""`pcnlab controller`: the controller alone, against switches that are already running (a run in
progress, or a network started with `pcnlab slice --cli`), until Ctrl-C or SIGTERM. It takes over as
primary (a higher election id), reinstalls everything, and on exit removes every window it armed.

Given a run folder of `pcnlab run`, it rebuilds the run's own data-plane settings from its config.yaml
(traffic classes, burst detection, telemetry), the way the runner does; `--mode` may change the mode.
A `pcnlab slice` folder has no jobs: its switches get the mode on every port and no DDL classes.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from pathlib import Path

import yaml

from pcnlab.controller.events import EventLog
from pcnlab.controller.endpoints import load_endpoints
from pcnlab.errors import UsageError

TAKEOVER_ELECTION_ID = 100
SLICE_MODE = "ecn"   # a slice's ports, unless --mode says (with the data plane's default K and K_pre)


def endpoints_file(topology: Path) -> Path:
    path = Path(topology)
    if path.is_dir():
        path = path / "endpoints.json"
    if not path.exists():
        raise UsageError(f"{path} not found: give a run folder of a running BMv2 network "
                         "(it holds endpoints.json), e.g. results/slice/latest/tree-bmv2")
    return path


def _run_config(folder: Path, mode: str | None, k: int | None, k_pre: int | None):
    """The run's resolved configuration, with the mode changes asked for; None for a slice."""
    from pcnlab.controller.modes import MODES
    from pcnlab.experiments.config.runs import RunConfig

    path = folder / "config.yaml"
    if not path.exists():
        return None
    run = RunConfig.from_dict(yaml.safe_load(path.read_text()))
    if mode is not None and mode not in MODES:
        raise UsageError(f"--mode {mode}: choose one of {', '.join(MODES)}")
    changes = {k_: v for k_, v in (("kind", mode), ("K", k), ("K_pre", k_pre)) if v is not None}
    return dataclasses.replace(run, mode=dataclasses.replace(run.mode, **changes))


def run_standalone(topology: Path, mode: str | None, k: int | None, k_pre: int | None,
                   events_path: Path | None, say=print) -> None:
    from pcnlab.experiments.run_controller import start_controller, start_slice_controller

    path = endpoints_file(topology)
    folder = path.parent
    endpoints = load_endpoints(path)
    events = EventLog(events_path or folder / "controller-events.jsonl")
    run = _run_config(folder, mode, k, k_pre)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if run is not None:
        topo = run.topology.build(monitors=run.switch.kind == "bmv2" and bool(run.telemetry.every))
        thread, _ = start_controller(run, topo, endpoints, events, election_id=TAKEOVER_ELECTION_ID)
        what = f"run {run.name} in mode {run.mode.kind}"
    else:
        given = {name: value for name, value in (("k", k), ("k_pre", k_pre)) if value is not None}
        thread, _ = start_slice_controller(endpoints, mode or SLICE_MODE, events, **given,
                                           election_id=TAKEOVER_ELECTION_ID)
        what = f"mode {mode or SLICE_MODE}"
    try:
        say(f"driving {', '.join(ep.name for ep in endpoints)} ({what}); events in {events.path}; Ctrl-C to stop")
        stop.wait()
    finally:
        thread.stop()
        events.close()
    say("stopped; no window left armed")
