"""What may end in the middle of a run, looked at on every tick of the runner (0.05-0.2 s).

    a BMv2 switch     started again at once (PcnNetwork.revive); the controller replaces its session
                      and reconfigures it. Event `switch_restarted` {switch, status}.
    a queue-log collector   named: the queue log of its switch stops there. Event `collector_ended`.
    a background flow process that fails or is killed (not one that ends at its duration): named.
                      Event `flow_ended` {flow, status}.

A job's rank that fails ends the run (JobHandle.check raises, in one line). The fidelity check reads
these events and names each one (analysis/fidelity.py), so a run with a hole is never trusted
silently. Each is reported once.
"""

from __future__ import annotations

import subprocess

from pcnlab.controller.events import EventLog


class RunWatch:
    def __init__(self, events: EventLog, net=None):
        self.events = events
        self.net = net                                     # a PcnNetwork with BMv2 switches, or None
        self.collectors: dict[str, subprocess.Popen] = {}  # switch -> its queue-log collector
        self.flows = None                                  # the run's FlowsHandle, once started
        self._told: set[str] = set()

    def tick(self) -> list[str]:
        """Look once; returns what happened, for the progress line."""
        notes = []
        if self.net is not None:
            for name, status in self.net.revive():
                self.events.write("switch_restarted", switch=name, status=status)
                notes.append(f"switch {name} ended (status {status}); started it again")
        for switch, proc in self.collectors.items():
            if proc.poll() is not None and self._first(f"collector {switch}"):
                self.events.write("collector_ended", switch=switch, status=proc.returncode)
                notes.append(f"the queue-log collector of {switch} ended (status {proc.returncode})")
        for proc in (self.flows.procs if self.flows is not None else []):
            code = proc.popen.poll() if proc.popen is not None else None
            if code not in (None, 0) and self._first(f"flow {proc.label}"):
                self.events.write("flow_ended", flow=proc.label, status=code)
                notes.append(f"background flow {proc.label} ended (status {code})")
        return notes

    def _first(self, what: str) -> bool:
        if what in self._told:
            return False
        self._told.add(what)
        return True
