"""The foundation's vertical slice: a topology of BMv2 switches (or Linux bridges), the pipeline and
routes pushed by our controller, and every host pinging every other."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from pcnlab.controller.events import EventLog
from pcnlab.controller.modes import DROPTAIL
from pcnlab.experiments.run_controller import start_slice_controller
from pcnlab.experiments.rundir import RunFolder
from pcnlab.topologies.network import NetworkOptions, PcnNetwork, check_supported
from pcnlab.topologies.topos import make_topology


@dataclass
class SliceResult:
    run_dir: Path
    sent: int
    received: int
    configure_s: float

    @property
    def loss(self) -> float:
        return 1 - self.received / self.sent if self.sent else 1.0


def run_slice(topology: str, options: NetworkOptions, results_root: Path = Path("results"),
              topo_params: dict | None = None, say=print, cli: bool = False) -> SliceResult:
    topo = make_topology(topology, **(topo_params or {}))
    check_supported(topo, options)
    bmv2 = options.switch == "bmv2"
    with RunFolder.create(results_root, "slice", f"{topology}-{options.switch}") as run:
        say(f"[1/3] starting {topology} with {options.switch} switches "
            f"({len(topo.traffic_hosts())} hosts, {len(topo.switches())} switches) in {run.path}")
        with PcnNetwork(topo, run.path, run.ledger, options) as net:
            started = time.monotonic()
            controller = events = None
            if bmv2:
                say("[2/3] pushing the pipeline and routes over P4Runtime")
                # Wired the way `pcnlab controller` wires a slice it takes over: drop-tail on every port.
                events = EventLog(run.path / "events.jsonl")
                controller, _ = start_slice_controller(net.endpoints(), DROPTAIL, events)
            configure_s = time.monotonic() - started
            try:
                say("[3/3] every host pings every other")
                hosts = [net.host(name) for name in topo.traffic_hosts()]
                sent = received = 0
                for src in hosts:
                    for dst in hosts:
                        if src is dst:
                            continue
                        out = src.cmd(f"ping -c1 -W1 {dst.IP()}")
                        sent += 1
                        ok = " 0% packet loss" in out
                        received += ok
                        if not ok:
                            say(f"      {src.name} -> {dst.name}: no reply")
                if cli:
                    from mininet.cli import CLI

                    say(f"Mininet CLI; in another terminal: sudo pcnlab controller --topology {run.path}")
                    CLI(net.net)
            finally:
                if controller is not None:
                    controller.stop()
                if events is not None:
                    events.close()
        result = SliceResult(run.path, sent, received, configure_s)
        run.finish({"pings_sent": sent, "pings_received": received, "configure_s": round(configure_s, 3)})
    say(f"{received}/{sent} pings answered ({result.loss:.0%} lost); "
        + (f"switches configured in {configure_s:.2f} s; " if bmv2 else "")
        + f"logs in {result.run_dir}")
    return result
