"""Jobs that share a port take turns (`mode.interleave`): what the controller sees of each job at a port
becomes the phases the interleaving core plans on (interleave.py), and the plan's shifts are what to
send each job. Pure: times are the switch's clock (µs), fed by the scheduler (scheduler.py), which
sends the shifts (shift_channel.py).

Per (switch, port, job) it keeps the recent iteration starts (the predictor's) and each iteration's
communication there: from its start to the job's last packet before its next start (that start's time
less the silence before it, `idle_us`). Only the starts the job's segmenter takes for iterations once it
has split its silences count, those before the split it takes for starts too (`earlier`; waiting for
`after` starts from the split, a first plan came at 9.97 s where starts from 2.66 s were known, 64c22b6).
Periods are measured: a job paced by its compute has no clock, so periods that agree within their spread
(`SAME`, turn_rules.py), or slip apart by less than `SLIP` of a period over the plan's `horizon` (on
their exact common circle no shift moves any overlap away), are taken as one, their median; a period near
a whole multiple of a shorter one is taken as that multiple (c at 1,717 ms beside two at 866 slid across
them on their LCM circle, 0.578 overlapped; on 2 x 866 it clears them, b681c74).

A port is planned once at least two jobs have shown `after` starts there: each job's phase is its next
start, its communication time and its period as they would be alone (a job whose latest start is `after`
periods old has left the port). While k jobs send at once each gets a k-th of the port, so a job's
communication alone is each stretch of it over the number of jobs sending then (fluid.alone_us, the
median of the recent ones). A job paced by its compute (its silences vary no more than its periods; a
steady collision, where neither varies, counts as compute-paced, as training is: 35c646d, e0655f6
reverted) starts its next iteration a silence after its communication ends, so its period alone is that
silence plus its communication alone; a clocked job keeps its median period (619f27d). Its start is the
first one a shift sent now can move (decided from `holds_us` on, the channel's moment): the fluid model
of the port plays out the round under way from every job's latest start (fluid.first_starts; carried on
at the pace alone instead, jobs missed their slots by 142-304 ms, 483b88a). A job belongs to the first
port that plans it; at another it is fixed (shift 0), as is a job without the channel (`fix`: its host
refused the datagram; an unmodified script), and one that came more than half its wait (shift and margin)
before its slot (`IGNORED`: a script whose pacing takes up the wait; on the shift alone, d2dbc6f missed one).
Fixed jobs come first, the first is the anchor (after a hold where none is fixed: the slowest); a second
is left out of the plan (named in its record). Where none is fixed, a common delay too (`cheapest`).

A plan that moves a job sends every job it can move its slot (`ShiftOrder.start_us`): its first
communication decided from the plan's moment on starts no sooner than its start + shift + the plan's
margin. TCP does not share a port as a fluid (3,907 starts came 48-120 ms early to 60-150 ms late, 10th
and 90th percentiles; with shifts alone three jobs stayed 77-78 % overlapped, 369dbb6). A job that comes
early waits for its slot, one late misses it, so every slot is the margin later: the 90th percentile of
how much later than foreseen the port's starts came (`_foresee`; a round off is a wrong round, and none
is foreseen while a job waits for its slot). No margin beside a fixed job, nor in a hold (sized to its room:
a 167 ms hold sent 633 ms later went into the next job's communication, 5ad0080).

Every `check_every` starts of the anchor after a plan, the latest starts are compared with the plan
(interleave.drift): a job that moved from its slot by more than half the plan's clearance, a period that
changed, or a job that came makes a new plan. A plan moves jobs only where their recent communications
overlapped by MIN_GAIN (estimates read while colliding, or from a script's flights, moved jobs that were apart
into each other: 476 ms, 988f286; 255, 421 and 337 ms beside the hooked script, 5ad0080), when it cuts their
overlap by MIN_GAIN, and when the overlap it removes over `horizon` periods is more than the delays it costs
(a shift only delays: 935 ms shifts of a 1,063 ms period for 9 % of overlap); otherwise it records them where
they are. Beside a job without the channel only the moved jobs' overlap repays their delays (a job was moved
790 ms for 59 ms of its own overlap counting both, 228e161). A job faster than
it comes closer to its communication each period; once they collide, TCP keeps them together (8-100 %
overlapped in four periods) until a check moves it 150-750 ms (714394b). So a check that finds it with less
room ahead than it may cross before a shift sent then acts (turn_rules.closing) delays it within the room
behind it (turn_rules.within) before it collides, if that reach fits the room (periods read while colliding
gave 1.4 s: 'holds' of 425 ms, 0511e1e). Where no job is fixed, a job faster than the slowest is held back
so too (checks found two jobs apart while one came 10 ms a period closer, and moved nobody until they
collided at 55 s, 855e8c2); for two jobs: with more, a hold that would move an unheld one is not made, and
rooms are against the anchor alone. Beside a job fixed because another port plans it, both overlaps count:
that job takes turns too. A plan that moved nobody and left overlap is made again at each start of the
anchor (the estimates improve: e8ac288, e5f896a), and recorded only when it moves a job or finds them apart;
beside a fixed job, at every check (an unmodified script's early 'starts' are its warm-up's flights,
a79364e). At most `max_plans` plans that move jobs per port in a row: a job that ignores its shifts is not
shifted for ever (found ignoring, it gives them back). A check that finds every job in its slot and their
recent communications apart (less than MIN_GAIN) gives them back, and a hold taken its own: what moves the
jobs later is their periods slipping apart (given back on being in the slots alone, a PS beside a ring was
moved 9 times, 5-7 % slower, 2d8a76c; never given back, three jobs slid back to 7-20 % overlapped, d78a1f6).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from pcnlab.controller.fluid import Sender, alone_us, first_starts
from pcnlab.controller.interleave import JobPhase, Plan, drift, plan
from pcnlab.controller.turn_rules import (MIN_GAIN, MeasuredPhase, cheapest, closing, mad, obeyed, repays,
                                         same_periods, shared, stuck, unmoved, within)


@dataclass(frozen=True)
class TurnConfig:
    after: int = 4          # starts of each job at the port before its first plan
    check_every: int = 3    # the anchor's starts between two checks of a plan
    max_plans: int = 4      # plans that move jobs, per port
    samples: int = 8        # recent iterations behind a job's period and communication time
    horizon: int = 10       # periods over which the overlap a plan removes must repay its delays


@dataclass(frozen=True)
class ShiftOrder:
    """Send job `job` its slot, from plan number `plan` of a port: its first communication decided from the
    plan's moment on starts no sooner than `start_us` (the switch's clock), which is `shift_us` (and the
    plan's margin) after where it would start."""

    switch: str
    port: int
    job: int
    shift_us: float
    plan: int
    start_us: float | None = None


@dataclass(frozen=True)
class PlanRecord:
    """A plan made at a port, for the event log: when (switch µs), why, and what it predicts."""

    switch: str
    port: int
    number: int
    at_us: int
    holds_us: int                     # its shifts move the starts decided from then on
    reason: str
    plan: Plan
    fixed: tuple = ()
    left_out: tuple = ()
    orders: tuple[ShiftOrder, ...] = ()
    margin_us: float = 0.0            # every moved job's slot this much later than planned (see _plan)

    def fields(self) -> dict:
        p = self.plan
        return {"switch": self.switch, "port": self.port, "plan": self.number, "t_us": self.at_us, "holds_us": self.holds_us,
                "reason": self.reason, "jobs": list(p.jobs), "fixed": list(self.fixed), "left_out": list(self.left_out),
                "shifts_us": {str(j): round(s) for j, s in p.shifts_us.items()},
                "period_us": {str(ph.job): round(ph.period_us) for ph in p.phases},
                "comm_us": {str(ph.job): round(ph.comm_us) for ph in p.phases},
                "overlap_before": {str(j): round(f, 3) for j, f in p.before_fraction.items()},
                "overlap_after": {str(j): round(f, 3) for j, f in p.overlap_fraction.items()},
                "clearance_us": round(p.clearance_us) if p.clearance_us != float("inf") else None,
                "margin_us": round(self.margin_us),
                "starts_us": {str(o.job): round(o.start_us) for o in self.orders if o.start_us is not None}}


IGNORED = 1      # a job that came more than half its wait before its slot this often ignores its shifts; jobs that
                 # obey wait for it (2026-11-30's sweeps: 2 of 721 slots sent to them, 55 of 154 to the script's)
LATE = 0.9       # a plan's margin: this quantile of how much later than foreseen the port's starts came
LATE_SAMPLES = 32


@dataclass
class _Track:
    starts: deque
    comms: deque               # (start, end, next start) of each communication ended at the port
    split: bool = False        # its segmenter tells iteration starts from flights (until then: no starts kept)

    def period_us(self) -> tuple[float, float] | None:
        """(median start to start, its median absolute deviation)."""
        s = list(self.starts)
        gaps = [b - a for a, b in zip(s, s[1:]) if b > a]
        if not gaps:
            return None
        return float(statistics.median(gaps)), mad(gaps)


@dataclass
class _Port:
    tracks: dict = field(default_factory=dict)    # job -> _Track
    plan: Plan | None = None
    plans: int = 0                                 # plans that moved a job since one held (or one was fixed)
    records: int = 0                               # plans made, moving a job or not
    anchor_starts: int = 0                         # the anchor's starts since the plan
    left_out: tuple = ()                           # fixed jobs the plan could not take
    held: dict = field(default_factory=dict)       # job held back -> (its room ahead then, its shift, when)
    foreseen: dict = field(default_factory=dict)   # job -> (from when, its first start decided then, as foreseen)
    waiting: dict = field(default_factory=dict)    # job sent a slot -> (from when, its slot, its wait for it)
    late: deque = field(default_factory=lambda: deque(maxlen=LATE_SAMPLES))  # seen minus foreseen, µs

    def overlapped(self, jobs=None) -> float:
        """The share of the recent communications (of `jobs`, None: all) that overlapped another's."""
        return shared({j: [c[:2] for c in t.comms] for j, t in self.tracks.items() if jobs is None or j in jobs})


class Turns:
    """The turns of the jobs at every port of every switch; see the module's note."""

    def __init__(self, config: TurnConfig | None = None):
        self.config = config or TurnConfig()
        self._ports: dict[tuple[str, int], _Port] = {}
        self._owner: dict[int, tuple[str, int]] = {}   # job -> the port whose plan shifts it
        self._fixed: set[int] = set()                  # jobs without the channel, or that ignore it
        self.ignored: dict[int, int] = {}              # job -> the slots it came well before (fixed at IGNORED)

    def on_start(self, switch: str, port: int, job: int, t_us: int, idle_us: int | None,
                 split: bool = True, holds_us: int | None = None,
                 earlier: Iterable[tuple[int, int | None]] = (), gap_us: int | None = None) -> PlanRecord | None:
        """An iteration start of `job` at the port after `idle_us` of the job's silence there (`split`: the
        key's segmenter has split its silences): a new plan for the port when one is due (else None).
        `holds_us`: from when a shift sent now would hold (the starts a job decides from then on; the
        channel's moment, in the switch's clock; None: `t_us`). `earlier`: at the first start of a split
        (the job's last `split` was False), the reports before it that the split takes for starts
        ((t_us, idle_us), oldest first): the track begins with them, as if the split had held from the first.
        `gap_us`: the split's silence. A start after less is a flight that the predictor took for a start
        because it came in its rhythm's slot (scheduler_core); here it is no iteration (measured: a job
        shifted from a 1.31 s collided period to 0.94 s sent a flight 16 ms after a packet where the old
        rhythm expected it; taken for a start, the next check read a 403 ms move and shifted the other job
        by 394 ms, 669b06e)."""
        at = (t_us, t_us if holds_us is None else holds_us)
        key = (switch, port)
        state = self._ports.setdefault(key, _Port())
        track = self._track(switch, port, job)
        if split != track.split:              # what came before the split were flights, not iterations
            track.starts.clear()
            track.comms.clear()
            track.split = split
            for t, idle in earlier if split else ():
                if t < t_us:
                    self._add(track, t, idle)
        if not split or (gap_us is not None and idle_us is not None and idle_us <= gap_us):
            return None
        self._add(track, t_us, idle_us)
        now = self._phases(state, at[1])      # the port as it is now: for the foresight, a plan and a check
        self._foresee(state, job, t_us, idle_us, at[1], now)
        if state.plan is None:
            return self._plan(key, state, at, now, "first plan") if self._ready(state) else None
        if job not in state.plan.jobs and job not in state.left_out:
            came = len(track.starts) >= self.config.after and track.comms and state.plans < self.config.max_plans
            return self._plan(key, state, at, now, f"job {job} came") if came else None
        if job != state.plan.jobs[0]:
            return None
        state.anchor_starts += 1
        spent = state.plans >= self.config.max_plans
        again = stuck(state.plan)
        soon = again and not any(self._fixed_at(key, j) for j in state.plan.jobs)   # one more communication read
        if state.anchor_starts < self.config.check_every and not (soon and not spent):
            return None
        state.anchor_starts = 0
        if again:
            return None if spent else self._plan(key, state, at, now, "overlap left: planned again", quiet=True)
        if any(j not in now for j in state.plan.jobs):
            return None
        observed = [now[j] for j in state.plan.jobs]
        checked = drift(state.plan, same_periods(observed, self.config.horizon, state.plan.phases))
        if not checked.replan and state.overlapped() < MIN_GAIN:
            state.plans = 0          # every job in its slot and apart: the plan held and paid; may plan again
        if state.plans >= self.config.max_plans:
            return None
        return self._plan(key, state, at, now, checked.reason or "checked", hold_only=not checked.replan)

    def told(self, switch: str, port: int, job: int) -> bool:
        """Whether the job's starts at the port are told apart (the last `on_start` had `split`)."""
        state = self._ports.get((switch, port))
        track = state.tracks.get(job) if state is not None else None
        return track is not None and track.split

    def _fixed_at(self, key: tuple[str, int], job: int) -> bool:
        """The job cannot be shifted at this port: it has no channel, or another port's plan shifts it."""
        return job in self._fixed or self._owner.get(job, key) != key

    @staticmethod
    def _add(track: _Track, t_us: int, idle_us: int | None) -> None:
        """A start, and the communication it ended (the previous start to the last packet, `idle_us` ago)."""
        if track.starts and idle_us is not None and t_us - idle_us > track.starts[-1]:
            track.comms.append((track.starts[-1], t_us - idle_us, t_us))
        track.starts.append(t_us)

    def fix(self, job: int) -> None:
        """`job` cannot be shifted (its hosts refused the channel, or it ignores its shifts): fixed at every
        port from now, and the ports whose plan counted on shifting it plan again at the next start, with
        their `max_plans` again (spent on a job that ignored them, they left a job that came closer to it
        no hold: a collision from 55 s, 0511e1e)."""
        if job in self._fixed:
            return
        self._fixed.add(job)
        for state in self._ports.values():
            if state.plan is not None and job in state.plan.jobs:
                state.plan, state.plans = None, 0
        self._owner = {j: k for j, k in self._owner.items() if j != job}

    def _track(self, switch: str, port: int, job: int) -> _Track:
        state = self._ports.setdefault((switch, port), _Port())
        if job not in state.tracks:
            n = self.config.samples
            state.tracks[job] = _Track(deque(maxlen=n + 1), deque(maxlen=n))
        return state.tracks[job]

    def _ready(self, state: _Port) -> bool:
        ready = [j for j, t in state.tracks.items() if len(t.starts) >= self.config.after and t.comms]
        return len(ready) >= 2 and state.plans < self.config.max_plans

    def _phases(self, state: _Port, at_us: int) -> dict[int, MeasuredPhase]:
        """Each job's phase as it would be alone, its start the first one a shift sent now can move (the
        fluid model of the port from the jobs' latest starts, fluid.first_starts); a job whose latest
        start is `after` of its periods before `at_us` has left the port (or paused) and is not planned."""
        found, senders = {}, []
        for job, track in state.tracks.items():
            period = track.period_us()
            if not period or not track.comms or at_us - track.starts[-1] > self.config.after * period[0]:
                continue
            others = [c[:2] for j, t in state.tracks.items() if j != job for c in t.comms]
            # only the communications the others' kept ones cover: a job twice as slow keeps twice the
            # history, and its collisions older than the faster jobs' samples read as alone (850 ms of 445)
            since = max((t.comms[0][0] for j, t in state.tracks.items()
                         if j != job and len(t.comms) == t.comms.maxlen), default=-1)
            covered = [c for c in track.comms if c[0] >= since] or list(track.comms)
            alones = [alone_us(c[:2], others) for c in covered]
            comm = float(statistics.median(alones))
            silences = [n - e for _, e, n in track.comms]
            gaps = [n - s for s, _, n in track.comms]
            silence = float(statistics.median(silences)) if mad(silences) <= mad(gaps) else None
            # paced by its compute (ties too, as a steady collision gives): silence + communication alone.
            # Its period's spread stays its starts' (the collisions'). Taken from its time alone instead,
            # two identical jobs (940.6, 940.9 ms alone) read at 933 and 960, 937 and 961 ms (the model's
            # bias, not noise) stayed two periods, and their first plans moved nobody (76146d5); the cost:
            # a 1.15 s job colliding with two of 0.87 s is taken for one of them (14f4d4f)
            alone = silence + comm if silence is not None else period[0]
            senders.append(Sender(job, float(track.starts[-1]), comm, alone, silence))
            found[job] = period
        known = [c[:2] for t in state.tracks.values() for c in t.comms]
        try:
            starts = first_starts(senders, at_us, known)
        except RuntimeError:                 # a moment far from the starts (a clock map gone wrong): not now
            return {}
        return {s.job: MeasuredPhase(JobPhase(s.job, s.period_us, s.comm_us, starts[s.job]), found[s.job][1],
                                     found[s.job][0]) for s in senders}

    def _foresee(self, state: _Port, job: int, t_us: int, idle_us: int | None, holds_us: int,
                 now: dict[int, MeasuredPhase]) -> None:
        """How much later than foreseen this start came (when it is the first the job decided from the
        moment a foresight was made for), and each job's next start foreseen from `now` (the port's phases
        at `holds_us`), for those without. Not while a job waits for the slot a plan sent it: the model
        does not know it; the start its slot held came well before it, or not (IGNORED)."""
        was = state.foreseen.get(job)
        period = state.tracks[job].period_us()
        if was is not None and idle_us is not None and t_us - idle_us >= was[0]:
            if period and abs(t_us - was[1]) <= period[0] / 2:      # a round off is a wrong round, not lateness
                state.late.append(t_us - was[1])
            del state.foreseen[job]
        if job in state.waiting and idle_us is not None and t_us - idle_us >= state.waiting[job][0]:
            _, slot, wait = state.waiting.pop(job)           # the start its slot held; before it: ignored
            self.ignored[job] = self.ignored.get(job, 0) + (0 < wait and t_us < slot - wait / 2)
            if self.ignored[job] >= IGNORED:
                self.fix(job)
        for j, (since, _, _) in list(state.waiting.items()):  # a job that left does not hold the foresight
            p = state.tracks[j].period_us()
            if p and holds_us - since > self.config.after * p[0]:
                del state.waiting[j]
        if state.waiting:
            return
        for j, found in now.items():
            state.foreseen.setdefault(j, (holds_us, found.phase.start_us))

    def _plan(self, key: tuple[str, int], state: _Port, at: tuple[int, int], now: dict[int, MeasuredPhase],
              reason: str, quiet: bool = False, hold_only: bool = False) -> PlanRecord | None:
        """The port's plan from its phases as they are `now` (`at`: the report's time, and the moment its
        shifts hold from), and its record (`quiet`: none for a plan that moves nobody and leaves overlap,
        as the last did: its estimates are kept, the log is not filled; `hold_only`: none, and nothing
        changed, unless it holds a job back)."""
        phases = same_periods(list(now.values()), horizon=self.config.horizon)
        fixed = [p for p in phases if self._fixed_at(key, p.job)]
        free = [p for p in phases if p not in fixed]
        if not free or len(phases) < 2:
            return None
        ordered = fixed[:1] + free
        paying = [p.job for p in free] if fixed and fixed[0].job in self._fixed else None   # anchor without the channel
        # the jobs that catch up on the anchor without the channel, or where none is fixed on the slowest seen
        pace = ordered if paying else [] if fixed else sorted(free, key=lambda p: -now[p.job].seen_us)
        held = closing(pace, now, self.config.check_every) if pace else {}
        hold = plan([replace(p, period_us=pace[0].period_us) if p.job in held else p for p in pace]) if held \
            else None                # on the anchor's period: where they are now
        holds = hold is not None and within(hold, held)
        if hold_only and not holds:
            return None
        # held back within the room behind it, before it reaches the anchor; else the port's plan
        made = hold if holds else plan(ordered) if fixed else cheapest(plan(ordered))
        late = sorted(state.late)
        margin = 0.0 if fixed or holds or not late else max(0.0, late[min(len(late) - 1, int(LATE * len(late)))])
        stretch = {j: m.seen_us - m.phase.period_us for j, m in now.items()} if paying else None
        if holds:
            recent = (self.config.check_every + 1) * pace[0].period_us         # the last hold, judged
            took = [obeyed(state.held[j], ahead, slip, at[1], pace[0].period_us)
                    for j, (ahead, _, slip) in held.items() if j in state.held and at[1] - state.held[j][2] <= recent]
            state.plans = max(0, state.plans - 1) if took and all(took) else state.plans + 1
            state.held = {j: (ahead, hold.shifts_us[j], at[1]) for j, (ahead, _, _) in held.items()}
            reason += "".join(f"; job {j} held back: {ahead / 1e3:.0f} ms of room ahead, {reach / 1e3:.0f} ms its reach"
                              for j, (ahead, reach, _) in held.items())
        elif sum(made.before_fraction.values()) - sum(made.overlap_fraction.values()) < MIN_GAIN \
                or not repays(made, self.config.horizon, margin * len(free), paying, stretch) \
                or state.overlapped(made.jobs) < MIN_GAIN:
            made = unmoved(made)     # already as apart as a shift would make them, or not worth the delay
        else:
            state.plans += 1         # what is sent counts: a job that ignores it is not shifted for ever
            state.held = {}
        state.plan, state.anchor_starts = made, 0
        state.left_out = tuple(p.job for p in fixed[1:])
        for p in free:
            self._owner[p.job] = key
        if quiet and stuck(made):
            return None
        state.records += 1
        moves = any(made.shifts_us[p.job] > 0 for p in free)
        orders = tuple(ShiftOrder(key[0], key[1], p.job, made.shifts_us[p.job], state.records,
                                  p.start_us + made.shifts_us[p.job] + margin) for p in free) if moves else ()
        if orders:               # what was foreseen without the slots no longer holds
            state.foreseen.clear()
            state.waiting = {o.job: (at[1], o.start_us, o.shift_us + margin) for o in orders}
        return PlanRecord(key[0], key[1], state.records, at[0], at[1], reason, made, tuple(p.job for p in fixed[:1]),
                          state.left_out, orders, margin if moves else 0.0)
