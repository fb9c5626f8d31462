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
from dataclasses import dataclass
from typing import Iterable

from pcnlab.rates import rate_pps


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


def problems(changes: Iterable[Change], duration_s: float, bmv2: bool, links: set[frozenset],
             switches: set[str], flows: set[str]) -> list[tuple[int, str, str]]:
    """(entry index, key, what is wrong and how to fix it) for every change that cannot be applied:
    the config turns the first into its one-line error."""
    out = []
    started: dict[str, float] = {}
    stopped: dict[str, float] = {}
    for i, c in enumerate(changes):
        if not c.link and c.bw is None and c.loss is None and not c.start and not c.stop:
            out.append((i, "", "a change needs link and bw or loss, start or stop"))
        if c.at_s >= duration_s:
            out.append((i, "at_s", f"{c.at_s:g} s is not before the run ends (duration_s {duration_s:g} s after "
                                   f"the jobs start); change it earlier or run longer"))
        if c.link:
            sw, peer = c.link
            if c.bw is None and c.loss is None:
                out.append((i, "bw", "a link change needs bw (Mbit/s), the rate the port drains at from then on, "
                                      "or loss, the share of DDL data packets it loses"))
            if not bmv2:
                why = {"rate": "the rate is the switch's queue rate", "loss": "the loss is its P4 program's"}
                what = [k for k, v in (("rate", c.bw), ("loss", c.loss)) if v is not None] or ["rate"]
                out.append((i, "link", f"changing a link's {' and '.join(what)} during a run needs BMv2 switches "
                                       f"(switch: bmv2): {', '.join(why[k] for k in what)}"))
            if sw not in switches:
                out.append((i, "link", f"{sw!r} is not a switch of this topology ({', '.join(sorted(switches))}); "
                                       f"write link: <switch>-<peer>"))
            elif frozenset((sw, peer)) not in links:
                out.append((i, "link", f"{sw} has no link to {peer!r}; write link: <switch>-<peer> for a pair "
                                       f"the topology links"))
        else:
            for key in ("bw", "loss"):
                if getattr(c, key) is not None:
                    out.append((i, key, f"{key} needs link: <switch>-<peer>, the port it changes"))
        for what, names, seen in (("start", c.start, started), ("stop", c.stop, stopped)):
            for name in names:
                if name not in flows:
                    out.append((i, what, f"no background flow is named {name!r} (flows: "
                                          f"{', '.join(sorted(flows)) or 'none'})"))
                elif name in seen:
                    out.append((i, what, f"flow {name!r} is {what}ed twice; a flow starts at most once and "
                                          f"stops at most once"))
                seen[name] = c.at_s
    for name, t in stopped.items():
        if name in started and started[name] >= t:
            out.append((0, "stop", f"flow {name!r} stops at {t:g} s, not after it starts at {started[name]:g} s"))
    return out


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
