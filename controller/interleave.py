"""Jobs that share a port take turns (CASSINI, NSDI 2024): the time shifts that interleave their
communication phases, as a pure core. No I/O and no clock of its own: every time is one clock's µs (a
switch's, as the predictor's forecasts carry it); the same inputs give the same plan.

Each job at the port is what the predictor knows of it (`JobPhase`): its period, how long its
communication lasts, and one start. The jobs are laid on CASSINI's *unified circle*: its perimeter is
the least common multiple of their periods, on which a job of period P communicates L / P times, each
arc `comm_us` long. Periods are rounded to a quantum first (1 ms by default); while the LCM exceeds
`max_turns` of the longest period the quantum doubles, so the circle stays bounded (CASSINI's bounded
approximation: the rounding is in `Circle.period_error_us`, and a plan made with it drifts by that much
per iteration, which `drift` notices).

A shift delays a job's starts (shifts only delay: a job cannot be made to start earlier), in
[0, its period); the first job is the anchor and keeps 0. The plan minimises the communication time
each job spends overlapping another's, summed over the jobs (per circle), then, among shifts that
overlap as little, leaves the gaps between the jobs as even as it can (each job moved to the middle of
the shifts that overlap least, until none moves), so a little jitter does not make them collide:

- overlap as a function of one job's shift (the others fixed) is piecewise linear, its bends where one
  of the job's edges meets another job's edge: the candidates; the least is at one of them, and where
  two neighbouring candidates are both least, every shift between them is too;
- the jobs are placed one by one (the largest share of its period communicating first), each at the
  smallest least candidate (first fit: jobs packed against each other leave room for the next), then
  each is placed again against all the others until none improves (`rounds`);
- equivalent plans (the same arrangement, everything moved by whole periods of the anchor) are
  reduced to the one whose largest delay is least.

`drift` compares observed starts with the plan: how far each job has moved from its planned slot
relative to the anchor, and whether to plan again (a job moved by more than half the plan's clearance,
the circle's periods changed, or a job came or went). Delivering shifts to the jobs is not here.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

QUANTUM_US = 1000.0    # periods are rounded to this first
MAX_TURNS = 64         # the circle is at most this many of the longest period (else the quantum doubles)
ROUNDS = 8             # re-placing rounds after the first fit
CENTRE_ROUNDS = 100    # rounds moving each job to the middle of its least shifts (until none moves 1 µs)
_EPS = 1e-3            # µs: overlaps closer than this (a nanosecond) are equal


@dataclass(frozen=True)
class JobPhase:
    """One job at the shared port, as the predictor knows it: a start of its communication (µs, the port's
    clock), its period and how long each communication lasts."""

    job: Hashable
    period_us: float
    comm_us: float
    start_us: float = 0.0

    def __post_init__(self):
        if not (math.isfinite(self.period_us) and self.period_us > 0):
            raise ValueError(f"job {self.job!r}: period_us must be a positive number, not {self.period_us!r}")
        if not (math.isfinite(self.comm_us) and self.comm_us >= 0):
            raise ValueError(f"job {self.job!r}: comm_us must be a number >= 0, not {self.comm_us!r}")
        if not math.isfinite(self.start_us):
            raise ValueError(f"job {self.job!r}: start_us must be a finite number")


@dataclass(frozen=True)
class Circle:
    """The unified circle: its perimeter, each job's period on it (a divisor of the perimeter), the
    quantum they were rounded to, and how far each rounded period is from the job's own."""

    length_us: float
    periods_us: tuple[float, ...]
    quantum_us: float
    period_error_us: tuple[float, ...]

    @property
    def exact(self) -> bool:
        return all(abs(e) <= _EPS for e in self.period_error_us)

    def turns(self, i: int) -> int:
        """How many times job i communicates on the circle."""
        return round(self.length_us / self.periods_us[i])


def unified_circle(periods_us: Sequence[float], quantum_us: float = QUANTUM_US, max_turns: int = MAX_TURNS) -> Circle:
    """The circle over these periods: their LCM once rounded to the quantum, the quantum doubled until the
    LCM is at most `max_turns` times the longest rounded period."""
    if not periods_us:
        raise ValueError("no periods")
    if quantum_us <= 0 or max_turns < 1:
        raise ValueError("quantum_us must be > 0 and max_turns >= 1")
    q = float(quantum_us)
    while True:
        units = [max(1, round(p / q)) for p in periods_us]
        lcm = math.lcm(*units)
        if lcm <= max_turns * max(units) or all(u == 1 for u in units):
            return Circle(lcm * q, tuple(u * q for u in units), q, tuple(u * q - p for u, p in zip(units, periods_us)))
        q *= 2


def _job_arcs(p: JobPhase, i: int, shift: float, circle: Circle) -> list[tuple[float, float, int]]:
    """Job i's communications on the circle, as (begin, end, i) with 0 <= begin < end <= length (an arc
    across the circle's origin split in two)."""
    length, period = circle.length_us, circle.periods_us[i]
    comm = min(p.comm_us, period)
    if comm <= 0:
        return []
    base = (p.start_us + shift) % period
    out = []
    for k in range(circle.turns(i)):
        a = (base + k * period) % length
        b = a + comm
        if b <= length:
            out.append((a, b, i))
        else:
            out += [(a, length, i), (0.0, b - length, i)]
    return out


def _arcs(phases: Sequence[JobPhase], shifts: Sequence[float], circle: Circle, members=None
          ) -> list[tuple[float, float, int]]:
    """Every communication of every job (of `members`, if given) on the circle."""
    return [arc for i, (p, s) in enumerate(zip(phases, shifts)) if members is None or i in members
            for arc in _job_arcs(p, i, s, circle)]


def _overlapped(arcs: list[tuple[float, float, int]], jobs: int) -> list[float]:
    """Per job: its communication time (per circle) during which another job communicates too."""
    events = sorted([(a, 1, i) for a, _, i in arcs] + [(b, -1, i) for _, b, i in arcs])
    active = [0] * jobs
    out = [0.0] * jobs
    busy, prev = 0, 0.0
    for here, step, i in events:
        if busy > 1 and here > prev:
            for k in range(jobs):
                if active[k] > 0:
                    out[k] += here - prev
        was = active[i] > 0
        active[i] += step
        busy += (active[i] > 0) - was
        prev = here
    return out


def _total(phases, shifts, circle, members) -> float:
    over = _overlapped(_arcs(phases, shifts, circle, members), len(phases))
    return sum(over[i] for i in members)


def _candidates(phases, shifts, circle, j, members) -> list[float]:
    """The shifts of job j at which the overlap bends: one of its edges on another job's edge (mod its period)."""
    period = circle.periods_us[j]
    own = phases[j].start_us % period
    edges = {e for a, b, _ in _arcs(phases, shifts, circle, members - {j}) for e in (a, b)}
    comm = min(phases[j].comm_us, period)
    found = {0.0}
    for e in edges:
        for mine in (own, own + comm):
            found.add(round((e - mine) % period, 6) % period)
    return sorted(found)


def _least(phases, shifts, circle, j, members) -> tuple[float, list[tuple[float, float]]]:
    """The least overlap job j can have (others fixed), and the runs of shifts that give it, each as
    (first, last) candidate, in order; a run may cross the period's end (last < first). No runs: every
    shift gives it."""
    cands = _candidates(phases, shifts, circle, j, members)
    others = _arcs(phases, shifts, circle, members - {j})
    values = []
    for c in cands:
        over = _overlapped(others + _job_arcs(phases[j], j, c, circle), len(phases))
        values.append(sum(over[i] for i in members | {j}))
    best = min(values)
    low = [v <= best + _EPS for v in values]
    runs: list[list[int]] = []
    for k, ok in enumerate(low):
        if ok and runs and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        elif ok:
            runs.append([k])
    if len(runs) == 1 and len(runs[0]) == len(cands):                  # every shift is as good
        return best, []
    if len(runs) > 1 and low[0] and low[-1] and runs[0][0] == 0:   # the run across the period's end
        runs[0] = runs.pop() + runs[0]
    return best, [(cands[r[0]], cands[r[-1]]) for r in runs]


def _span(run: tuple[float, float], period: float) -> float:
    return (run[1] - run[0]) % period


def _centre(shift: float, runs: list[tuple[float, float]], period: float) -> float:
    """The middle of the run of least shifts that holds `shift` (else of the longest; no runs: `shift`)."""
    def holds(run):
        return (shift - run[0]) % period <= _span(run, period) + _EPS
    if not runs:
        return shift
    chosen = next((r for r in runs if holds(r)), None) or max(runs, key=lambda r: (_span(r, period), -r[0]))
    return (chosen[0] + _span(chosen, period) / 2) % period


@dataclass(frozen=True)
class Plan:
    """The shifts chosen, and what they are predicted to do (per job, in the order given)."""

    jobs: tuple
    shifts_us: dict                 # job -> delay of its starts, in [0, its period on the circle)
    circle: Circle
    overlap_fraction: dict          # job -> share of its communication overlapping another's, after the shifts
    before_fraction: dict           # the same without them
    clearance_us: float             # smallest gap between two jobs' communications after the shifts (0: they overlap)
    phases: tuple[JobPhase, ...]    # what it was planned from

    @property
    def overlap_us(self) -> float:
        """Communication time per circle that overlaps another job's, summed over the jobs."""
        return self.shared_us()

    def shared_us(self, jobs=None, before: bool = False) -> float:
        """Communication time per circle that overlaps another job's, summed over `jobs` (None: all), after
        the shifts (`before`: without them)."""
        shares = self.before_fraction if before else self.overlap_fraction
        return sum(shares[p.job] * _comm_per_circle(p, self.circle, i)
                   for i, p in enumerate(self.phases) if jobs is None or p.job in jobs)


def _comm_per_circle(p: JobPhase, circle: Circle, i: int) -> float:
    return min(p.comm_us, circle.periods_us[i]) * circle.turns(i)


def fractions(phases: Sequence[JobPhase], shifts: Sequence[float] | None = None, circle: Circle | None = None
              ) -> dict:
    """Per job: the share of its communication that overlaps another job's on the circle (0 for a job
    that never communicates)."""
    circle = circle or unified_circle([p.period_us for p in phases])
    shifts = list(shifts) if shifts is not None else [0.0] * len(phases)
    over = _overlapped(_arcs(phases, shifts, circle), len(phases))
    out = {}
    for i, p in enumerate(phases):
        comm = _comm_per_circle(p, circle, i)
        out[p.job] = over[i] / comm if comm > 0 else 0.0
    return out


def clearance(phases: Sequence[JobPhase], shifts: Sequence[float], circle: Circle) -> float:
    """The smallest gap on the circle between the end of one job's communication and the start of another
    job's (0 where two overlap; infinite with fewer than two jobs communicating)."""
    arcs = sorted(_arcs(phases, shifts, circle))
    if len({i for _, _, i in arcs}) < 2:
        return math.inf
    if any(f > _EPS for f in fractions(phases, shifts, circle).values()):
        return 0.0
    length = circle.length_us
    best = math.inf
    for (_, b, i), (a2, _, i2) in zip(arcs, arcs[1:] + arcs[:1]):   # each arc and the next, going round
        if i2 != i:
            best = min(best, (a2 - b) % length)
    return best


def room(phases: Sequence[JobPhase], shifts: Sequence[float], circle: Circle, i: int) -> tuple[float, float]:
    """The free time before job i's communications (from the nearest end of another job's before each of its
    starts) and after them (from each of its ends to the next other job's start), the least over its turns
    on the circle; negative where they overlap, by that much; infinite with no other job communicating."""
    length = circle.length_us

    def spans(k: int) -> list[tuple[float, float]]:
        period, comm = circle.periods_us[k], min(phases[k].comm_us, circle.periods_us[k])
        base = (phases[k].start_us + shifts[k]) % period
        return [((base + t * period) % length, comm) for t in range(circle.turns(k))] if comm > 0 else []
    mine, others = spans(i), [span for k in range(len(phases)) if k != i for span in spans(k)]
    if not others or not mine:
        return math.inf, math.inf
    ahead = min((a - b) % length - c for a, _ in mine for b, c in others)
    behind = min(min((b - a) % length for b, _ in others) - c for a, c in mine)
    return ahead, behind


def plan(phases: Sequence[JobPhase], quantum_us: float = QUANTUM_US, max_turns: int = MAX_TURNS,
         rounds: int = ROUNDS) -> Plan:
    """The shifts that interleave these jobs' communications at one port (see the module's note)."""
    phases = tuple(phases)
    if not phases:
        raise ValueError("no jobs to plan")
    if len({p.job for p in phases}) != len(phases):
        raise ValueError("each job once")
    circle = unified_circle([p.period_us for p in phases], quantum_us, max_turns)
    n = len(phases)
    share = [min(p.comm_us, circle.periods_us[i]) / circle.periods_us[i] for i, p in enumerate(phases)]
    order = sorted(range(n), key=lambda i: (-share[i], i))
    shifts = [0.0] * n
    placed = {order[0]}
    for j in order[1:]:                                  # first fit, in order of share
        placed.add(j)
        runs = _least(phases, shifts, circle, j, placed)[1]
        shifts[j] = runs[0][0] if runs else 0.0
    everyone = set(range(n))
    for _ in range(rounds):                              # each again against all the others
        moved = False
        for j in order[1:]:
            now = _total(phases, shifts, circle, everyone)
            best, runs = _least(phases, shifts, circle, j, everyone)
            if best < now - _EPS and runs:
                shifts[j], moved = runs[0][0], True
        if not moved:
            break
    for _ in range(CENTRE_ROUNDS):                       # to the middle of the least shifts
        step = 0.0
        for j in order[1:]:
            period = circle.periods_us[j]
            new = _centre(shifts[j], _least(phases, shifts, circle, j, everyone)[1], period)
            step = max(step, min(abs(new - shifts[j]), period - abs(new - shifts[j])))
            shifts[j] = new
        if step < 1.0:
            break
    shifts = _least_delay(shifts, circle)
    return Plan(tuple(p.job for p in phases), {p.job: s for p, s in zip(phases, shifts)}, circle,
                fractions(phases, shifts, circle), fractions(phases, None, circle),
                clearance(phases, shifts, circle), phases)


def _least_delay(shifts: list[float], circle: Circle) -> list[float]:
    """The same arrangement with the first job at 0 and the largest delay least: everything moved by
    whole periods of the first job (ties: the smallest sum, then the fewest periods)."""
    first = circle.periods_us[0]
    base = [(s - shifts[0]) for s in shifts]
    options = []
    for k in range(round(circle.length_us / first)):
        moved = [round((s + k * first) % p, 6) % p for s, p in zip(base, circle.periods_us)]
        options.append((max(moved), sum(moved), k, moved))
    return min(options)[3]


@dataclass(frozen=True)
class Drift:
    """How far observed starts are from a plan's slots."""

    offsets_us: dict          # job -> its start minus its planned slot, minus the anchor's (signed, wrapped)
    worst_us: float
    tolerance_us: float
    overlap_fraction: dict    # per job, predicted from the observed starts as they are
    replan: bool
    reason: str               # why plan again ("" when not)


def drift(planned: Plan, observed: Sequence[JobPhase], tolerance_us: float | None = None,
          quantum_us: float | None = None, max_turns: int = MAX_TURNS) -> Drift:
    """Observed starts (after the plan's shifts were applied; one start per job, taken near one moment)
    against the plan. A job's offset is how far it moved from its slot (its planned start + shift + whole
    periods) relative to the anchor's move, wrapped to the arrangement's own period for the two (the GCD
    of their periods on the circle: moving by that changes nothing). Plan again when a job moved more than
    `tolerance_us` (default: half the plan's clearance, at least a quantum), its period no longer rounds
    to the plan's circle, or a job came or went."""
    observed = tuple(observed)
    by_job = {p.job: p for p in observed}
    q = quantum_us or planned.circle.quantum_us
    tol = tolerance_us if tolerance_us is not None else (
        max(planned.clearance_us / 2, q) if math.isfinite(planned.clearance_us) else math.inf)
    reason = ""
    if set(by_job) != set(planned.jobs):
        reason = "the jobs at the port changed"
    elif unified_circle([by_job[j].period_us for j in planned.jobs], q, max_turns).periods_us != \
            planned.circle.periods_us:
        reason = "a period changed"
    present = [p for p in planned.phases if p.job in by_job]
    offsets: dict = {}
    if present:
        anchor = present[0]
        a_index = planned.phases.index(anchor)

        def moved(p: JobPhase) -> float:
            return by_job[p.job].start_us - (p.start_us + planned.shifts_us[p.job])
        for p in present:
            i = planned.phases.index(p)
            g = math.gcd(round(planned.circle.periods_us[i] / planned.circle.quantum_us),
                         round(planned.circle.periods_us[a_index] / planned.circle.quantum_us)) \
                * planned.circle.quantum_us
            off = (moved(p) - moved(anchor)) % g
            offsets[p.job] = off - g if off > g / 2 else off
    worst = max((abs(v) for v in offsets.values()), default=0.0)
    if not reason and worst > tol:
        reason = f"a job moved {worst:.0f} µs from its slot (tolerance {tol:.0f} µs)"
    now = fractions(observed, None, unified_circle([p.period_us for p in observed], q, max_turns)) if observed else {}
    return Drift(offsets, worst, tol, now, bool(reason), reason)
