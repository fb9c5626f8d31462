"""Re-fitting a burst rhythm from scratch: which period and phase explain the recent report times best.
Pure; used by predictor.py when a report does not match the current hypothesis (and while learning).

Each candidate period is scored by the chain of reports it explains backwards from one of the two
newest reports, recent links weighing most, minus the slots it predicts that saw no report and the
reports it leaves unexplained; the period of the winner is refined by least squares over its chain.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pcnlab.controller.predictor_types import PredictorConfig


@dataclass(frozen=True)
class ChainFit:
    """One hypothesis scored on the recent reports: `points` are (slot, t_us), oldest first."""

    period_us: float
    score: float
    points: tuple[tuple[int, int], ...]

    @property
    def anchor_us(self) -> int:
        return self.points[-1][1]


def line_fit(points: Sequence[tuple[int, int]]) -> tuple[float, float]:
    """Least-squares t = a + P * slot, relative to the newest point (absolute times squared lose digits).
    Returns (P, a') with a' the line's value at the newest slot minus the newest time."""
    k0, t0 = points[-1]
    n = len(points)
    xs = [k - k0 for k, _ in points]
    ys = [t - t0 for _, t in points]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


def _chain(times: Sequence[int], start: int, period: float, tol: float, cfg: PredictorConfig
           ) -> tuple[float, list[tuple[int, int]]]:
    """Walk back from times[start] one period (or max_missed + 1) at a time; score the walk."""
    score = -float(len(times) - 1 - start)  # newer reports this hypothesis cannot explain
    current, slot, weight = times[start], 0, 1.0
    points = [(0, current)]
    max_slots = cfg.max_missed + 1
    j = start - 1
    while j >= 0:
        found = None
        for k in range(j, -1, -1):
            gap = current - times[k]
            if gap > max_slots * period + tol * math.sqrt(max_slots):
                break
            n = round(gap / period)
            if 1 <= n <= max_slots and abs(gap - n * period) <= tol * math.sqrt(n):
                found = (k, n)
                break
        if found is None:
            break
        k, n = found
        # +1 for the link, -1 per slot without a report, -1 per report in between it leaves unexplained;
        # a link that costs more than it explains ends the chain (older reports belong to another rhythm).
        gain = 1 - (n - 1) - (j - k)
        if gain < 0:
            break
        score += weight * gain
        slot -= n
        current = times[k]
        points.append((slot, current))
        weight *= cfg.decay
        j = k - 1
    points.reverse()
    return score, points


def fit_chain(times: Sequence[int], candidates: Iterable[float], cfg: PredictorConfig,
              tol_frac: float | None = None) -> ChainFit | None:
    """The best (period, anchor) for the recent report times (ascending), starting from one of the two
    newest. Candidates are the given periods and the intervals between recent reports. Links match
    within `tol_frac` of the period: the tracker's own tolerance, or `fit_tol_frac` while learning."""
    if tol_frac is None:
        tol_frac = cfg.fit_tol_frac
    times = list(times)
    m = len(times)
    if m < 2:
        return None
    periods = {round(p) for p in candidates if p >= cfg.min_period_us}
    for start in (m - 1, m - 2):
        for back in range(1, 4):
            if start - back >= 0:
                periods.add(times[start] - times[start - back])
    diffs = sorted(b - a for a, b in zip(times, times[1:]))
    periods.add(diffs[len(diffs) // 2])
    best: ChainFit | None = None
    for period in sorted(p for p in periods if p >= cfg.min_period_us):
        for start in (m - 1, m - 2):
            if start < 0:
                continue
            p = float(period)
            for _refine in range(2):  # chain with the candidate, then with the slope of what it found
                tol = max(tol_frac * p, cfg.min_tol_us)
                score, points = _chain(times, start, p, tol, cfg)
                if len(points) < 2:
                    break
                refined = line_fit(points)[0]
                if refined < cfg.min_period_us or abs(refined - p) < 1.0:
                    break
                p = refined
            if len(points) < 2:
                continue
            # Ties go to the newer start, then to the earlier candidate.
            if best is None or score > best.score + 1e-9 or (
                    abs(score - best.score) <= 1e-9 and points[-1][1] > best.anchor_us):
                best = ChainFit(p, score, tuple(points))
    return best


def fit_fraction(times: Sequence[int], period: float, cfg: PredictorConfig, tol_frac: float) -> ChainFit | None:
    """A chain of the recent report times at a half, third or quarter of `period`, if one fits them (a
    rhythm learned at a multiple of the job's period) that explains three quarters of them at least;
    None when the best chain is another period or leaves more unexplained (sub-bursts scattered
    between the slots make chains at any period)."""
    times = list(times)
    fractions = [period / k for k in (2, 3, 4)]
    fit = fit_chain(times, fractions, cfg, tol_frac)
    if fit is None or fit.score < cfg.min_fit_score or len(fit.points) < 0.75 * len(times):
        return None
    if not any(abs(fit.period_us - f) <= cfg.min_tol_frac * f for f in fractions):
        return None
    return fit
