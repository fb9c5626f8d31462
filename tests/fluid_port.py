"""A shared port as a fluid, feeding the turns of controller/turns.py as the scheduler does (the jobs'
starts and the silence before each, in a switch's clock): tests/controller/test_turns.py's model of the
port, which the holds of a job beside one without the channel are measured on too."""

from __future__ import annotations

from pcnlab.controller.turn_rules import shared
from pcnlab.controller.turns import Turns

MS = 1000


def feed(turns: Turns, jobs: dict, iterations: int, obey: set = frozenset(), port: int = 1, from_ms: int = 0,
         clocked: set = frozenset(), lead_ms: float = 50, longer: dict | None = None, seen: list | None = None) -> list:
    """Jobs {job: (period_ms, comm_ms, first_start_ms)} at one port (from `from_ms` on), as a fluid model of
    it: alone a job sends for comm_ms; while k send at once each gets a k-th of it, so each one's
    communication stretches. A job decides its next start as its communication ends: paced by its compute,
    period_ms - comm_ms after its last packet; one in `clocked`, period_ms after its last start (no sooner
    than that end; `longer` {job: {iteration: ms}}: that silence longer). Each start is fed (and put in
    `seen` as (job, µs)) with the silence since the job's last packet, and the moment a plan
    made then holds from (`lead_ms` later: the channel's); each job in `obey` starts the first
    communication it decides from that moment on no sooner than the slot ordered for it. The plans."""
    nxt = {j: float((from_ms + first) * MS) for j, (_, _, first) in jobs.items()}   # None while it sends
    left: dict = {}                      # a sending job's work left (µs of the port alone)
    last = {j: None for j in jobs}       # the job's last packet at the port
    clock = {j: 0.0 for j in jobs}       # a clocked job's next tick
    orders: list = []                    # (from when it holds, job, slot) not yet taken
    count = {j: 0 for j in jobs}
    plans, t = [], 0.0
    while min(count.values()) < iterations:
        events = [(t + w * len(left), 0, j) for j, w in left.items()]
        events += [(s, 1, j) for j, s in nxt.items() if s is not None]
        when, starting, job = min(events)
        for j in left:
            left[j] -= (when - t) / len(left)
        t = when
        period, comm, _ = jobs[job]
        if not starting:
            del left[job]
            last[job] = t
            taken = [o for o in orders if o[1] == job and o[0] <= t]
            orders = [o for o in orders if o not in taken]
            decided = max(clock[job], t) if job in clocked else t + (period - comm) * MS
            decided += (longer or {}).get(job, {}).get(count[job], 0) * MS
            nxt[job] = max([decided] + [o[2] for o in taken])
            continue
        assert job not in left, f"job {job} starts again while it sends: the switch would see one burst"
        nxt[job], clock[job] = None, t + period * MS
        left[job] = float(comm * MS)
        count[job] += 1
        if seen is not None:
            seen.append((job, t))
        holds = round(t + lead_ms * MS)
        record = turns.on_start("s1", port, job, round(t), None if last[job] is None else round(t - last[job]),
                                holds_us=holds)
        if record is not None:
            plans.append(record)
            orders += [(holds, o.job, o.start_us) for o in record.orders if o.job in obey]
    return plans


def overlapped(turns: Turns, since_us: float) -> float:
    """The share of the jobs' communications at port 1 since `since_us` that overlapped another's."""
    tracks = turns._ports[("s1", 1)].tracks
    return shared({j: [c[:2] for c in t.comms if c[0] >= since_us] for j, t in tracks.items()})
