"""The scheduler's window math: from a prediction, the pre-drain window to arm, and when to write,
extend, replace and remove windows. Pure: it returns changes; the controller writes them (as
`dataplane.window_entry`) and logs them. Every time is the switch's clock (microseconds), so each
switch is handled on its own clock.

A window for burst start s with jitter j is [s - m - lead, s + max(guard, m)), m = spread x j: the burst
may come up to m early, and the queue must have drained `lead` before it; it may come up to m late.
The lead is learned per key from what the bursts met (lead.py), unless the experiment fixes it.
The window for the next iteration is written as soon as the previous one's start is reported (about
a period of notice, far more than a P4Runtime write takes); the switch, not the write, opens and
closes it. A window that could not be written before it opens is not written at all, and a port
without a standing queue above K_pre gets none.

scheduler_core.py drives the planner from the reports (only those that start an iteration: segments.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from pcnlab.controller.modes import K_PRE
from pcnlab.controller.lead import LeadConfig, LeadTracker
from pcnlab.controller.predictor_types import BurstKey, BurstReport, Prediction


@dataclass(frozen=True)
class Window:
    """A pre-drain window [start_us, end_us) on one port, planned for one job's predicted burst."""

    switch: str
    port: int
    job: int
    start_us: int
    end_us: int            # exclusive
    predicted_us: int = 0  # the burst start it was planned for
    lead_us: int = 0       # the lead it was planned with (lead.py learns what each lead gave)

    @property
    def key(self) -> BurstKey:
        return BurstKey(self.switch, self.port, self.job)

    @property
    def length_us(self) -> int:
        return self.end_us - self.start_us

    def contains(self, t_us: int) -> bool:
        return self.start_us <= t_us < self.end_us

    def overlaps(self, other: "Window") -> bool:
        return self.start_us < other.end_us and other.start_us < self.end_us


SPREAD = 2.0      # windows reach this x the predicted jitter either side (bench: coverage against cost)


def plan_window(prediction: Prediction, lead_us: int, guard_us: int, spread: float = SPREAD) -> Window:
    """The window for `prediction`'s burst: [s - m - lead, s + max(guard, m)) with m = spread x jitter, or
    the prediction's own reach either side (early_us, late_us: chain.reach) when it has one."""
    margin = spread * prediction.jitter_us
    early = margin if prediction.early_us is None else prediction.early_us
    late = margin if prediction.late_us is None else prediction.late_us
    start = prediction.next_start_us - math.ceil(early) - max(lead_us, 0)
    end = prediction.next_start_us + max(guard_us, math.ceil(late), 1)
    key = prediction.key
    return Window(key.switch, key.port, key.job, start, end, prediction.next_start_us, max(lead_us, 0))


GUARD_US = 1000   # a window stays open at least this long after the predicted start (the schema's default)


@dataclass(frozen=True)
class PlannerConfig:
    k_pre: int = K_PRE            # a port whose standing queue is no deeper needs no window
    guard_us: int = GUARD_US      # at least this long after the predicted start
    spread: float = SPREAD        # windows reach spread x the predicted jitter either side
    lead_us: int | None = None    # a fixed lead; None: learned per key (lead.py)
    rtt_us: int = LeadConfig.rtt_us             # the background's base RTT, for the first learned lead
    max_lead_share: float = LeadConfig.max_share   # a learned lead stays below this share of the period
    rate_pps: float = 1000.0      # port rate for the learned lead, unless port_rates has the port
    port_rates: Mapping[tuple[str, int], float] = field(default_factory=dict)
    min_notice_us: int = 5000     # a new window that would open sooner than this is not written (late)
    max_extend: float = 2.0       # extend to cover a revised prediction up to this x the planned length
    max_open_share: float = 0.3   # a window's reach either side of its start, together, within this x the period

    def lead_config(self) -> LeadConfig:
        return LeadConfig(k_pre=self.k_pre, rtt_us=self.rtt_us, max_share=self.max_lead_share,
                          min_lead_us=max(self.guard_us, 1))


@dataclass(frozen=True)
class WindowChange:
    op: Literal["arm", "disarm", "skip"]
    window: Window
    # arm: new | extend | replace;  disarm: replaced | stale | unconfident | unneeded | expired | shutdown
    # | arrived (scheduler_core.py: a waiting window's start came);  skip: late (it would open before it could be written)
    reason: str
    at_us: int                    # switch time of the decision
    late: bool = False            # armed with less than min_notice_us before it opens (an extension)


class WindowPlanner:
    """Which windows each key has armed, and what to change for a new prediction. A window never
    outlives its end (it is a time range in the switch), no window is armed without a confident
    prediction, and an unconfident key loses every window that has not ended."""

    def __init__(self, config: PlannerConfig | None = None):
        self.config = config or PlannerConfig()
        self._armed: dict[BurstKey, list[Window]] = {}
        self._leads: dict[BurstKey, LeadTracker] = {}
        # Recently removed windows and when (switch time): a start is judged by the windows in force when
        # it began, and its report arrives after a window 1 ms past the start may have been expired.
        self._removed: dict[BurstKey, deque[tuple[Window, int]]] = {}
        self._taught: dict[BurstKey, Window] = {}  # the window whose lead each key's latest covered start judged

    def tracker(self, key: BurstKey) -> LeadTracker:
        tracker = self._leads.get(key)
        if tracker is None:
            cfg = self.config
            rate = cfg.port_rates.get((key.switch, key.port), cfg.rate_pps)
            tracker = self._leads[key] = LeadTracker(rate, cfg.lead_config())
        return tracker

    def covering(self, key: BurstKey, t_us: int) -> list[Window]:
        """The windows of `key` in force at `t_us`: open then and not removed before it, whether they
        are still armed now or not."""
        live = [w for w in self._armed.get(key, ()) if w.contains(t_us)]
        return live + [w for w, at in self._removed.get(key, ()) if w.contains(t_us) and at > t_us]

    def observe_start(self, report: BurstReport, teach: bool = True) -> bool:
        """An iteration started: what it met teaches the key's lead (unless `teach` is False: a window
        planned without a lead was open for it). Returns whether a window of the key was open for it.
        A window teaches its lead once, on the first start it covers: a second start inside it (a
        sub-burst taken for a start before the key's split formed: on pcn-ring with G learned, three met
        19-21 packets in a 45 ms window, the queue of the iteration's own first flights) met what the
        first left, not what the lead drained. The lead judged is the one the start had: a start that
        came early in its window, sooner after it opened than the lead planned, judges that shorter
        time, or no rung when it is off the ladder (measured: pcn-ring with G learned, seed 614, a wide
        chain forecast's window opened 6 ms before iteration 5, which met 26 packets, and its planned
        30 ms lead scored 26: the ladder kept 45 ms for most of the run, where the learned-G runs'
        starts met 5.5-5.8 packets against 4.6 at 30-40 ms open)."""
        covering = self.covering(report.key, report.t_us)
        # The window open longest set how long the queue had drained: its lead is the one judged.
        judged = min(covering, key=lambda w: w.start_us) if covering else None
        if judged is not None:
            teach = teach and self._taught.get(report.key) != judged
            self._taught[report.key] = judged
        if teach:
            lead = None   # (no window, or one planned without a lead: the lead in use now)
            if judged is not None and judged.lead_us:
                lead = max(min(judged.lead_us, report.t_us - judged.start_us), 1)
            self.tracker(report.key).observe(report.queue_pkts, judged is not None, lead)
        return judged is not None

    def needed(self, key: BurstKey) -> bool:
        """A fixed lead arms wherever a prediction is confident; a learned one only where a standing
        queue above K_pre waits for the bursts."""
        return self.config.lead_us is not None or self.tracker(key).needed

    def lead_for(self, prediction: Prediction) -> int:
        cfg = self.config
        if cfg.lead_us is not None:
            return cfg.lead_us
        return self.tracker(prediction.key).lead(prediction.period_us)

    def window_for(self, prediction: Prediction) -> Window:
        cfg = self.config
        return plan_window(prediction, self.lead_for(prediction), cfg.guard_us, cfg.spread)

    def armed(self, key: BurstKey | None = None) -> list[Window]:
        if key is not None:
            return list(self._armed.get(key, ()))
        return [w for windows in self._armed.values() for w in windows]

    def update(self, key: BurstKey, prediction: Prediction | None, now_us: int) -> list[WindowChange]:
        """What to write for `key` now, given its latest prediction (None or unconfident: disarm)."""
        windows = self._armed.setdefault(key, [])
        live = [w for w in windows if w.end_us > now_us]
        if prediction is None or not prediction.confident:
            return [self._remove(w, "unconfident", now_us) for w in live]
        if not self.needed(key):
            return [self._remove(w, "unneeded", now_us) for w in live if w.start_us > now_us]
        desired = self.window_for(prediction)
        if desired.end_us <= now_us:
            return []
        same = [w for w in live if w.overlaps(desired)]
        # Future windows for a burst no longer predicted (the hypothesis moved) go; an open one is left
        # to close at its end: it is for the burst just seen.
        changes = [self._remove(w, "stale", now_us) for w in live if w not in same and w.start_us > now_us]
        if any(w.start_us <= desired.start_us and w.end_us >= desired.end_us for w in same):
            return changes  # already covered
        reason = "new"
        if not same and desired.start_us - now_us < self.config.min_notice_us:
            # It would open before a write could reach the switch: it opens once written, if that is still
            # a lead before the predicted start (a wide reach asked for more than the notice left: measured,
            # a warming job's chain, 170 ms ahead of a start its window would have opened 250 ms before);
            # else none rather than one stuck late.
            opens = now_us + self.config.min_notice_us
            if desired.predicted_us - opens < max(self.config.guard_us, 1):
                return changes + [WindowChange("skip", desired, "late", now_us)]
            desired = replace(desired, start_us=opens, lead_us=min(desired.lead_us, desired.predicted_us - opens))
        if same:
            start = min([desired.start_us] + [w.start_us for w in same])
            end = max([desired.end_us] + [w.end_us for w in same])
            if end - start <= self.config.max_extend * desired.length_us:
                desired, reason = replace(desired, start_us=start, end_us=end,
                                          lead_us=desired.lead_us + desired.start_us - start), "extend"
            else:
                reason = "replace"
        # Write the new window before removing the old ones, so there is no gap between them.
        changes.append(self._add(desired, reason, now_us))
        changes += [self._remove(w, "replaced", now_us) for w in same]
        return changes

    def withdraw(self, window: Window, reason: str, now_us: int) -> WindowChange:
        """Remove an armed window before its end (scheduler_core.py: the start a waiting window was for came)."""
        return self._remove(window, reason, now_us)

    def expire(self, switch: str, now_us: int) -> list[WindowChange]:
        """Entries of `switch` whose windows have ended: inert, removed to keep the table small."""
        return [self._remove(w, "expired", now_us) for key, windows in self._armed.items()
                if key.switch == switch for w in list(windows) if w.end_us <= now_us]

    def disarm_all(self, reason: str = "shutdown", now_us: int = 0) -> list[WindowChange]:
        """Every armed window, to remove (on shutdown: leave no window armed)."""
        return [self._remove(w, reason, now_us) for w in self.armed()]

    def carry(self, window: Window, now_us: int) -> WindowChange:
        """Arm again a window its switch lost (a restart or a reconfiguration), already moved into the
        switch's new clock by the caller; it is then removed like any other."""
        return self._add(window, "carried", now_us)

    def forget_switch(self, switch: str) -> None:
        """A restarted switch lost its table: nothing to remove, nothing armed."""
        for store in (self._armed, self._leads, self._removed, self._taught):
            for key in [k for k in store if k.switch == switch]:
                del store[key]

    def _add(self, window: Window, reason: str, now_us: int) -> WindowChange:
        # The table's key is (port, range): two jobs' windows on a port must not share a range, or
        # removing one would remove the other.
        taken = {(w.start_us, w.end_us) for w in self.armed() if (w.switch, w.port) == (window.switch, window.port)}
        while (window.start_us, window.end_us) in taken:
            window = replace(window, end_us=window.end_us + 1)
        self._armed.setdefault(window.key, []).append(window)
        late = window.start_us - now_us < self.config.min_notice_us
        return WindowChange("arm", window, reason, now_us, late)

    def _remove(self, window: Window, reason: str, now_us: int) -> WindowChange:
        self._armed[window.key].remove(window)
        self._removed.setdefault(window.key, deque(maxlen=8)).append((window, now_us))
        return WindowChange("disarm", window, reason, now_us)


def open_intervals(changes: Iterable[WindowChange]) -> list[tuple[str, int, int, int]]:
    """(switch, port, from_us, to_us) during which each armed window was in force: from its arming (or
    its start) to its removal (or its end)."""
    armed: dict[Window, int] = {}
    out = []
    for change in changes:
        w = change.window
        if change.op == "arm":
            armed[w] = change.at_us
        elif w in armed:
            begin, end = max(w.start_us, armed.pop(w)), min(w.end_us, change.at_us)
            if end > begin:
                out.append((w.switch, w.port, begin, end))
    for w, at in armed.items():
        if w.end_us > max(w.start_us, at):
            out.append((w.switch, w.port, max(w.start_us, at), w.end_us))
    return out


def union_us(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by [from, to) intervals (overlaps counted once)."""
    total, reach = 0, None
    for begin, end in sorted(intervals):
        if reach is None or begin >= reach:
            total += end - begin
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total
