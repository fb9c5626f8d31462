"""Generated burst-start report traces for the predictor and window tests (seeded, no switch)."""

from __future__ import annotations

import random

from pcnlab.controller.predictor_types import BurstReport

T0 = 5_000_000  # switch clock (us) at the first burst: the switch has been up a while


def renewal(rng: random.Random, n: int, period_us: float, jitter: float = 0.0, t0: float = T0) -> list[int]:
    """Each iteration starts when the previous one ends: durations uniform in period x [1 - jitter, 1 + jitter]."""
    out, t = [], float(t0)
    for _ in range(n):
        out.append(round(t))
        t += period_us * (1 + rng.uniform(-jitter, jitter))
    return out


def lattice(rng: random.Random, n: int, period_us: float, jitter: float = 0.0, t0: float = T0) -> list[int]:
    """A fixed cadence, each start moved by uniform period x [-jitter, +jitter] (the burst generator's --period)."""
    return [round(t0 + k * period_us + period_us * rng.uniform(-jitter, jitter)) for k in range(n)]


def with_sub_bursts(rng: random.Random, starts: list[int], flights: tuple[int, int] = (2, 5),
                    gap_us: tuple[int, int] = (8_000, 25_000)) -> list[int]:
    """What the switch reports of iterations that TCP sends in flights: each start, then 1 to 4 more
    reports an RTT-like gap apart."""
    out = []
    for t in starts:
        out.append(t)
        for _ in range(rng.randint(*flights) - 1):
            t += rng.randint(*gap_us)
            out.append(t)
    return out


def reports(times: list[int], switch: str = "s1", port: int = 2, job: int = 1, queue: int = 30) -> list[BurstReport]:
    return [BurstReport(switch, port, job, t, queue) for t in times]


def feed(predictor, times: list[int], **labels):
    """Observe each time as a report; the observations."""
    return [predictor.observe(r) for r in reports(times, **labels)]


def p95(values) -> float:
    values = sorted(abs(v) for v in values)
    return values[min(len(values) - 1, int(0.95 * len(values)))]
