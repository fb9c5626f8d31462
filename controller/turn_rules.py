"""The rules a port's plan follows beyond the interleaving core (interleave.py), for turns.py: which
measured periods are taken as one (`same_periods`), the cheapest common delay where no job is fixed
(`cheapest`), whether a plan's delays repay the overlap it removes (`repays`), the plan that moves
nobody (`unmoved`), when such a plan is made again (`stuck`), and which jobs are held back before they
reach a slower one (`closing`). Pure; the reasons for each are in turns.py's note."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from pcnlab.controller.interleave import JobPhase, Plan, clearance, fractions, room, unified_circle

SAME = 2.0       # periods within this many times the larger one's spread (median absolute deviation) are one
SLIP = 0.1       # periods that slip apart by less than this share of a period over the horizon are one
MIN_GAIN = 0.05  # a plan moves jobs only when it cuts their overlap shares (summed) by this much


def stuck(made: Plan) -> bool:
    """The plan moves nobody and leaves overlap: made again soon (turns.py's note)."""
    return not any(made.shifts_us.values()) and sum(made.overlap_fraction.values()) >= MIN_GAIN


def shared(spans: dict) -> float:
    """The share of the jobs' communications ({job: [(start, end), ...]}) that overlapped another job's."""
    total = sum(b - a for mine in spans.values() for a, b in mine)
    both = sum(max(0, min(b, d) - max(a, c)) for j, mine in spans.items() for a, b in mine
               for k, theirs in spans.items() if k != j for c, d in theirs)
    return both / total if total > 0 else 0.0


def mad(values: list) -> float:
    """The median absolute deviation from the median."""
    median = statistics.median(values)
    return float(statistics.median(abs(v - median) for v in values))


@dataclass(frozen=True)
class MeasuredPhase:
    """A job's phase as measured at a port, and how far its period may be trusted."""

    phase: JobPhase
    spread_us: float              # the period's median absolute deviation
    seen_us: float = 0.0          # its median start to start, as seen (the phase's period is as it would be alone)


def same_periods(phases, horizon: int, planned: tuple[JobPhase, ...] = ()) -> list[JobPhase]:
    """The phases with periods that agree within SAME times their spread, or slip apart by less than SLIP
    of a period over `horizon` periods, taken as one (their median); a period as close to a whole multiple
    of a shorter one (over that multiple) taken as the multiple; and, given the phases a plan was made
    from, a period as close to its planned one taken as that."""
    out = [p.phase for p in phases]
    spread = {p.phase.job: p.spread_us for p in phases}

    def close(a: float, b: float, *jobs) -> bool:
        return abs(a - b) <= max(SAME * max(spread.get(j, 0.0) for j in jobs), SLIP * min(a, b) / horizon)
    if planned:
        was = {p.job: p.period_us for p in planned}
        return [replace(p, period_us=was[p.job]) if p.job in was and close(p.period_us, was[p.job], p.job) else p
                for p in out]
    groups: list[list[JobPhase]] = []
    for p in sorted(out, key=lambda p: p.period_us):
        if groups and close(p.period_us, statistics.median(q.period_us for q in groups[-1]), p.job, groups[-1][0].job):
            groups[-1].append(p)
        else:
            groups.append([p])
    one = {p.job: float(statistics.median(q.period_us for q in g)) for g in groups for p in g}
    # A period near a whole multiple n of a shorter one is that multiple (CASSINI's circle then holds
    # n turns of the shorter job to one of the longer; else it is the two periods' LCM, on which the
    # longer job slides across the shorter ones): judged as P / n against the shorter, its spread / n.
    def widest(group) -> float:
        return max(spread.get(p.job, 0.0) for p in group)
    for g, longer in enumerate(groups[1:], 1):
        period = one[longer[0].job]
        for shorter in groups[:g]:
            base = one[shorter[0].job]
            n = round(period / base)
            if n >= 2 and abs(period / n - base) <= max(SAME * max(widest(longer) / n, widest(shorter)),
                                                        SLIP * base / horizon):
                one.update({p.job: n * base for p in longer})
                break
    return [replace(p, period_us=one[p.job]) for p in out]


def cheapest(made: Plan) -> Plan:
    """The same arrangement with every job delayed by a common r (mod its own period) so that the delays
    sum least: where no job is fixed, the anchor (the plan's first job) may move too, and moving it a little
    can stand for moving another nearly a period (reviewed: 770 ms for one order of two jobs, 230 for the
    other, the same plan). r is 0 or brings one job to 0."""
    periods = dict(zip(made.jobs, made.circle.periods_us))

    def moved(r: float) -> dict:
        return {j: (s + r) % periods[j] for j, s in made.shifts_us.items()}
    best = min((moved(r) for r in [0.0, *((periods[j] - s) % periods[j] for j, s in made.shifts_us.items())]),
               key=lambda shifts: sum(shifts.values()))
    return replace(made, shifts_us=best)


def repays(made: Plan, horizon: int, extra_us: float = 0.0, paying=None, stretch: dict | None = None) -> bool:
    """The overlap the plan removes over `horizon` of its longest period (communication time no longer
    shared, summed over the jobs in `paying`, None: all) is more than the delays it orders (each moved job
    loses its shift once, and `extra_us` more in all). Two jobs whose communications overlap by x are each
    stretched by x (fluid sharing: each sends at half rate while both do), so a job's overlap is what it
    loses each period. `stretch` {job: µs}: what each job was seen to lose a period (its start to start
    less its period alone); a plan that leaves such a job in `paying` apart, overlapped before, removes at
    least that, over `horizon` of its periods (TCP keeps colliding jobs together longer than a fluid shares:
    a job beside an unmodified script, 41 ms a period of overlap by the model, was seen 150-300 ms a period
    slower)."""
    removed = made.shared_us(paying, before=True) - made.shared_us(paying)
    removed *= horizon * max(made.circle.periods_us) / made.circle.length_us
    seen = horizon * sum(max(0.0, lost) for job, lost in (stretch or {}).items() if (paying is None or job in paying)
                         and made.overlap_fraction.get(job, 1.0) < 1e-6 < made.before_fraction.get(job, 0.0))
    return max(removed, seen) > sum(made.shifts_us.values()) + extra_us


def unmoved(made: Plan) -> Plan:
    """The plan that leaves every job where it is: no shifts, the overlap as it is."""
    shifts = [0.0] * len(made.phases)
    return replace(made, shifts_us={p.job: 0.0 for p in made.phases},
                   overlap_fraction=fractions(made.phases, shifts, made.circle),
                   clearance_us=clearance(made.phases, shifts, made.circle))


def closing(phases: list[JobPhase], measured: dict, check_every: int) -> dict:
    """Beside an anchor (`phases[0]`) that is not moved: each job that comes closer to the
    communication before its own each period (its start to start, as seen in `measured` {job:
    MeasuredPhase}, is shorter than the anchor's, by at most SLIP of it) and has less room ahead of its start
    to the anchor's communication (on the anchor's period: where it is now) than it may cross before a shift
    sent at the next check acts, or overlaps it by less: its reach, a random walk's over `check_every` + 1
    periods (k, the last for the channel's lead): k slips and three standard deviations of k periods'
    jitter (both periods' spreads, taken as a normal's: x 1.4826). {job: (its room ahead, its reach, its
    slip)}, in µs, for those with more room behind them, where a delay moves them away, and a reach
    within the room both sides (else no hold keeps it apart: periods read while colliding, 1.4 s)."""
    anchor = measured[phases[0].job]
    k = check_every + 1
    out = {}
    for i, p in enumerate(phases[1:], 1):
        m = measured[p.job]
        slip = anchor.seen_us - m.seen_us
        if not 0 < slip <= SLIP * anchor.seen_us:
            continue
        reach = k * slip + 3 * math.sqrt(k) * 1.4826 * math.hypot(anchor.spread_us, m.spread_us)
        two = [phases[0], replace(p, period_us=phases[0].period_us)]
        ahead, behind = room(two, [0.0, 0.0], unified_circle([q.period_us for q in two]), 1)
        if -reach < ahead < reach < ahead + behind and behind > ahead:
            out[p.job] = (ahead, reach, slip)
    return out


def within(made: Plan, movers) -> bool:
    """The plan moves a job, only jobs in `movers`, each later within the room behind it, and adds no overlap."""
    zeros = [0.0] * len(made.phases)
    shifts = [made.shifts_us[p.job] for p in made.phases]
    return any(shifts) and sum(made.overlap_fraction.values()) <= sum(made.before_fraction.values()) and all(
        s == 0 or (p.job in movers and s < room(made.phases, zeros, made.circle, i)[1])
        for i, (p, s) in enumerate(zip(made.phases, shifts)))


def obeyed(before: tuple[float, float, float], ahead_us: float, slip_us: float, now_us: float, period_us: float) -> bool:
    """Whether a job held back took the shift: `before` is (its room ahead then, the shift sent, when, µs),
    and its room ahead now is more than half that shift above where its slip (per period, `period_us`) alone
    would have brought it by `now_us`."""
    ahead, shift, at = before
    return ahead_us > ahead - slip_us * (now_us - at) / period_us + shift / 2
