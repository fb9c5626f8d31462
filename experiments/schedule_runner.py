"""Changing conditions during a run: the experiment file's `schedule:` (a list of changes, each at a
time after the jobs started) applied while the run is up.

    schedule:
      - {at_s: 20, link: s1-h1, bw: 2}          # s1's egress port towards h1 drains at 2 Mbit/s from then on
      - {at_s: 40, link: s1-h1, bw: 20}
      - {at_s: 0, link: s1-h1, loss: 0.01}      # 1 % of the DDL data packets towards h1 lost at random
      - {at_s: 10, start: bulk}                  # background flow(s) named bulk start ...
      - {at_s: 30, stop: bulk}                   # ... and stop

A rate change goes through the controller the runner already drives (PcnController.set_queue_rate:
BMv2's thrift runtime, as every queue setting; kept as the port's rate, so a switch that restarts gets
it back), so it needs BMv2 switches; so does a loss (PcnController.set_loss: a P4Runtime entry of
p4src/loss.p4, which loses DDL data packets towards the port before they queue and counts them). A
flow named in a `start` waits for it (the runner does not start it with the others); one named only
in a `stop` starts with the others and ends there. Each flow runs in its own group of processes
(workloads.Workloads.start_flows), its logs with the others under flows/.

Every change applied is an event in events.jsonl: {"type": "schedule", "action": "rate" | "loss" |
"start" | "stop", "at_s" (as planned), "applied_s" (when it took effect, seconds after the jobs
started), and for a rate "switch", "port", "peer", "mbps", "rate_pps", "call_ms"; for a loss "switch",
"port", "peer", "loss", "call_ms"; for a flow "flow"}. The rate a
port had at any moment is read back from those events by the reading side (analysis/results.py,
`rate_timeline`) for the fidelity check.
"""

from __future__ import annotations

import time
from typing import Iterable

from pcnlab.experiments.config.runs import Change
from pcnlab.rates import rate_pps


def scheduled_starts(changes: Iterable[Change]) -> set[str]:
    """Flows the schedule starts (the runner leaves them out of the others)."""
    return {name for c in changes for name in c.start}


def scheduled_stops(changes: Iterable[Change]) -> set[str]:
    return {name for c in changes for name in c.stop}


class ScheduleRunner:
    """Applies a run's changes as their times come; `tick()` from the runner's loop.

    `endpoints`: the network's SwitchEndpoints (ports -> peers); `controller`: the run's
    ControllerThread (rate changes); `flows`: the run's FlowConfigs by name; `workloads`: its
    Workloads (flows); `events`: its EventLog."""

    def __init__(self, changes: Iterable[Change], *, endpoints=(), controller=None, flows=None, workloads=None,
                 events=None, duration_s: float = 0.0):
        self.pending = sorted(changes, key=lambda c: c.at_s)
        self.ports = {(ep.name, peer): port for ep in endpoints for port, peer in ep.ports.items()}
        self.controller = controller
        self.flows = dict(flows or {})
        self.workloads = workloads
        self.events = events
        self.duration_s = duration_s
        self.handles: dict[str, object] = {}     # flows running now
        self.finished: dict[str, object] = {}    # flows the schedule stopped
        self.t0: float | None = None

    def own_flows(self) -> set[str]:
        """The background flows the schedule starts or stops: it runs them (the runner, the others)."""
        return scheduled_starts(self.pending) | scheduled_stops(self.pending)

    def start_background(self) -> None:
        """With the other background flows: those the schedule only stops."""
        for name in sorted(scheduled_stops(self.pending) - scheduled_starts(self.pending)):
            self._start(name, None)

    def begin(self) -> None:
        """The jobs have started: the changes' times count from now."""
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - (self.t0 if self.t0 is not None else time.monotonic())

    def tick(self) -> list[str]:
        """Apply every change that is due; what was done, in words."""
        done = []
        while self.t0 is not None and self.pending and self.pending[0].at_s <= self.elapsed():
            change = self.pending.pop(0)
            if change.link and change.bw is not None:
                done.append(self._rate(change))
            if change.link and change.loss is not None:
                done.append(self._loss(change))
            for name in change.stop:
                done.append(self._stop(name, change.at_s))
            for name in change.start:
                done.append(self._start(name, change.at_s))
        return done

    def _log(self, **fields) -> None:
        if self.events is not None:
            self.events.write("schedule", applied_s=round(self.elapsed(), 4), **fields)

    def _rate(self, change: Change) -> str:
        switch, peer = change.link
        port = self.ports[(switch, peer)]
        pps = rate_pps(change.bw)
        call_s = self.controller.call(self.controller.controller.set_queue_rate(switch, port, pps), 10)
        self._log(action="rate", at_s=change.at_s, switch=switch, port=port, peer=peer, mbps=change.bw,
                  rate_pps=pps, call_ms=round(call_s * 1e3, 3))
        return f"{switch}-{peer} at {change.bw:g} Mbit/s"

    def _loss(self, change: Change) -> str:
        switch, peer = change.link
        port = self.ports[(switch, peer)]
        call_s = self.controller.call(self.controller.controller.set_loss(switch, port, change.loss), 10)
        self._log(action="loss", at_s=change.at_s, switch=switch, port=port, peer=peer, loss=change.loss,
                  call_ms=round(call_s * 1e3, 3))
        return f"{switch}-{peer} losing {change.loss:.2%} of DDL data packets"

    def _start(self, name: str, at_s: float | None) -> str:
        from pcnlab.workloads import FlowSpec

        flow = self.flows[name]
        remaining = max(self.duration_s - self.elapsed(), 1.0) if at_s is not None else self.duration_s
        self.handles[name] = self.workloads.start_flows([FlowSpec(**flow.flow_spec_kwargs(remaining))], name=name)
        if at_s is not None:
            self._log(action="start", at_s=at_s, flow=name)
        return f"flow {name} started"

    def _stop(self, name: str, at_s: float) -> str:
        handle = self.handles.pop(name, None)
        if handle is not None:
            handle.stop()
            self.finished[name] = handle
        self._log(action="stop", at_s=at_s, flow=name)
        return f"flow {name} stopped"

    def close(self) -> dict:
        """Stop what the schedule started; the throughput of every flow it ran, by flow."""
        for name in list(self.handles):
            self.finished[name] = self.handles.pop(name)
            self.finished[name].stop()
        out = {}
        for handle in self.finished.values():
            out.update(handle.throughput())
        return out
