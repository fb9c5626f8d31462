"""A port that jobs share, as a fluid: while k jobs send at once each gets a k-th of it. Pure, in one
clock's µs (a switch's). Hand-written: the switch reports only each communication's start (and its end
once the next start comes), so both what a communication would have taken alone and where each job's
next iteration will start are read from this model; no library of the field models a port this way.

- `alone_us`: how long a communication that shared the port would have taken alone.
- Background flows are not in the model. Counted as one more share each (1e211b8, reverted), a cubic
  flow beside two generator jobs made them read 614-704 ms alone (593-606 measured) and left them more
  overlapped than without it in 3 of 3 paired runs (from 15 s: 19-22 % against 0-16 %): the flow backs
  off under the bursts' ECN marks and does not hold a share while they send.
- `first_starts`: where each job's iterations will start once a shift sent now can hold. A job decides
  its next start when its communication ends (a silence after it, the compute, or at its clock's next
  tick), so a start decided before the shift reaches it is not moved: the shift moves the first start
  decided at or after `at_us`. Until then the jobs' communications go on colliding and stretching each
  other, and a plan that takes each job's latest start carried on at its pace alone misplaces them:
  three jobs colliding at a plan's moment started their next iterations 0.3-0.5 s later than that
  (measured, 483b88a), and each shift left a job 142-304 ms off its slot.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

MAX_EVENTS = 10_000     # a bound on the model's steps (each job records after a few communications)


def alone_us(span: tuple, others: Sequence[tuple]) -> float:
    """How long the communication over `span` (start, end) would have taken alone: each stretch of it over
    the number of jobs sending then (itself and the `others`' (start, end) that cover it)."""
    start, end = span
    cuts = sorted({start, end, *(t for o in others for t in o if start < t < end)})
    return float(sum((b - a) / (1 + sum(o[0] <= (a + b) / 2 < o[1] for o in others))
                     for a, b in zip(cuts, cuts[1:])))


@dataclass(frozen=True)
class Sender:
    """A job at the port: its latest start, its communication alone, and its pace: a silence after each
    communication (paced by its compute) or, with `silence_us` None, a period from start to start (a clock;
    no sooner than its communication ends)."""

    job: Hashable
    start_us: float
    comm_us: float
    period_us: float
    silence_us: float | None = None

    def next_start(self, start_us: float, end_us: float) -> float:
        if self.silence_us is not None:
            return end_us + self.silence_us
        return max(start_us + self.period_us, end_us)


def first_starts(senders: Sequence[Sender], at_us: float, known: Sequence[tuple] = ()) -> dict:
    """Each sender's first start decided at or after `at_us` (its communication before it ends then or
    later), from each one's latest start on, the port shared as a fluid with the communications in
    `known` ((start, end) that are over: each holds a share while it lasts)."""
    if not senders:
        return {}
    by_job = {s.job: s for s in senders}
    t = min(s.start_us for s in senders)
    known = [(a, b) for a, b in known if b > t]
    due = {s.job: s.start_us for s in senders}     # the next start of each job not sending
    sending: dict = {}                              # job -> [its start, its work left (µs of the port alone)]
    out: dict = {}
    for _ in range(MAX_EVENTS):
        if len(out) == len(senders):
            return out
        shares = len(sending) + sum(a <= t < b for a, b in known)
        steps = [(t + left * shares, 0, job) for job, (_, left) in sending.items()]
        steps += [(start, 1, job) for job, start in due.items()]
        steps += [(e, 2, None) for a, b in known for e in (a, b) if e > t]
        when, kind, job = min(steps, key=lambda s: (s[0], s[1]))
        for entry in sending.values():
            entry[1] -= (when - t) / shares
        t = when
        if kind == 1:
            sending[job] = [due.pop(job), by_job[job].comm_us]
        elif kind == 0:
            start, _ = sending.pop(job)
            nxt = by_job[job].next_start(start, t)
            if t >= at_us:
                out[job] = nxt
            else:
                due[job] = nxt
    raise RuntimeError(f"the port's model took more than {MAX_EVENTS} steps")
