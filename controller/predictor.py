"""Learns each DDL job's iteration rhythm from the switch's burst-start reports and predicts its next
burst start, with a confidence. Pure: no I/O and no clock of its own; every time is the switch's clock
(microseconds since that switch started), as the reports carry it.

One `BurstPredictor` per (switch, port, job); `PredictorBank` holds them. The hypothesis is a period and
the recent reports that fit it, each on its slot (iteration number):

- A report within tolerance of anchor + n * period (n = 1, or 2 when one report was missed) *matches*:
  it joins the points and the period is the least-squares slope of the points over their slots, so a
  missed report counts as two periods and jitter averages out over the window.
- Any other report makes the recent reports compete (`fit_chain`): each candidate period is scored by
  the chain of reports it explains backwards from one of the two newest reports, recent links weighing
  most, minus the slots it predicts that saw no report and the reports it leaves unexplained. A single
  spurious report is outvoted by the reports before it; a new period wins after two consistent reports;
  reports resuming after a pause re-learn from scratch (the old period only as a first guess).
- The next start is predicted two ways, and the one with the smaller recent error is used: from the
  latest report plus a period (right when each iteration starts when the previous one ends: the jitter
  accumulates) and from the least-squares line through the points (right when bursts keep a fixed
  cadence and jitter around it, as the burst generator's --period does).

Confidence is the weakest of: support (matched intervals since the hypothesis began), hit rate (share of
recent predicted slots that saw their burst), agreement (share of recent reports that matched: reports
at unforeseen times mean the rhythm is not what we think), regularity (timing spread against the
period) and freshness (more than `max_missed` slots gone by without a report means the job paused: 0, so the
scheduler disarms and no stale window is predicted forever).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from pcnlab.controller.predictor_types import BurstKey, BurstReport, Observation, Prediction, PredictorConfig
from pcnlab.controller.chainfit import ChainFit, fit_chain, fit_fraction, line_fit


def _rms(values: Iterable[float]) -> float:
    values = list(values)
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else 0.0


class BurstPredictor:
    """Period, phase and confidence of one (switch, port, job)."""

    def __init__(self, key: BurstKey, config: PredictorConfig | None = None):
        self.key = key
        self.config = config or PredictorConfig()
        self.reports = 0
        self.counts: dict[str, int] = {}
        self._reset()

    def _reset(self) -> None:
        cfg = self.config
        self._times: deque[int] = deque(maxlen=cfg.history)
        self._queues: deque[int] = deque(maxlen=cfg.outcomes)
        self._points: deque[tuple[int, int]] = deque(maxlen=cfg.points)
        # Errors as shares of the period: a job's jitter scales with its iteration time, so the estimate
        # carries over a change of period.
        self._err_renewal: deque[float] = deque(maxlen=cfg.errors)
        self._err_lattice: deque[float] = deque(maxlen=cfg.errors)
        self._outcomes: deque[int] = deque(maxlen=cfg.outcomes)
        self._agreement: deque[int] = deque(maxlen=cfg.outcomes)  # 1 per recent report that matched
        self._between: deque[int] = deque(maxlen=3)  # recent reports between the slots of a confident rhythm
        self._kinds: deque[str] = deque(maxlen=cfg.between_window)  # what the latest reports were
        self._period: float | None = None
        self._support = 0
        self._cache: tuple[bool, float, float, float] | None = None

    # --- the model --------------------------------------------------------------------------------

    @property
    def period_us(self) -> float | None:
        return self._period

    @property
    def queue_pkts(self) -> int:
        """The largest queue the recent bursts met (what a pre-drain has to drain)."""
        return max(self._queues, default=0)

    def _model(self) -> tuple[bool, float]:
        """(use the line, jitter in us): the model whose recent errors were smaller (renewal until the
        line has a few points), and the RMS of its errors."""
        renewal = _rms(self._err_renewal)
        if len(self._points) >= 4 and len(self._err_lattice) >= 3:
            lattice = _rms(self._err_lattice)
            if lattice < renewal:
                return True, lattice * (self._period or 0.0)
        return False, renewal * (self._period or 0.0)

    def _jitter(self) -> float:
        return self._model()[1]

    def _tolerance(self, jitter: float | None = None) -> float:
        cfg, period = self.config, self._period or 0.0
        if len(self._err_renewal) < 3:
            tol = cfg.fit_tol_frac * period  # jitter not known yet: as loose as learning
        else:
            jitter = self._jitter() if jitter is None else jitter
            tol = min(max(cfg.gate_sigmas * jitter, cfg.min_tol_frac * period), cfg.max_tol_frac * period)
        return max(tol, cfg.min_tol_us)

    def _derived(self) -> tuple[bool, float, float, float]:
        """(use the line, jitter, tolerance, the line's offset at the newest point), computed once per
        change of state: forecasts are asked for far more often than the state changes."""
        if self._cache is None:
            offset = line_fit(self._points)[1] if len(self._points) >= 2 else 0.0
            use_lattice, jitter = self._model()
            self._cache = (use_lattice, jitter, self._tolerance(jitter), offset)
        return self._cache

    def _changed(self) -> None:
        self._cache = None

    def _predict_slot(self, n: int, offset: float | None = None) -> tuple[float, float]:
        """(renewal, lattice) predictions of the start n slots after the newest point."""
        slot, t = self._points[-1]
        renewal = t + n * self._period
        if len(self._points) >= 2:
            if offset is None:
                offset = line_fit(self._points)[1]
            return renewal, t + offset + n * self._period
        return renewal, renewal

    def _set_period(self) -> None:
        if len(self._points) >= 2:
            slope = line_fit(self._points)[0]
            if slope >= self.config.min_period_us:
                self._period = slope

    def _adopt(self, fit: ChainFit) -> None:
        """Take a re-fitted hypothesis: its points and outcomes. The errors (the job's jitter) carry over;
        only a predictor that has none yet replays them over the points as if it had tracked them."""
        replay = not self._err_renewal
        self._points.clear()
        self._outcomes.clear()
        self._period = fit.period_us
        previous: tuple[int, int] | None = None
        for point in fit.points:
            if previous is not None:
                n = point[0] - previous[0]
                if replay and len(self._points) >= 2:
                    renewal, lattice = self._predict_slot(n)
                    self._err_renewal.append((point[1] - renewal) / math.sqrt(n) / fit.period_us)
                    self._err_lattice.append((point[1] - lattice) / fit.period_us)
                self._outcomes.extend([0] * (n - 1) + [1])
            self._points.append(point)
            previous = point
        self._period = fit.period_us
        self._support = len(fit.points) - 1
        self._changed()

    def _follow_drift(self) -> None:
        """A period that changed by less than the tolerance shows as errors of one sign: then fit the
        period on the latest points only, instead of waiting for the old ones to leave the window."""
        errors = list(self._err_renewal)
        if len(errors) < 8 or len(self._points) < 8:
            return
        recent, earlier = errors[-4:], errors[:-4]
        same_sign = all(e > 0 for e in recent) or all(e < 0 for e in recent)
        if same_sign and abs(sum(recent) / 4) > _rms(earlier):
            for _ in range(len(self._points) - 5):
                self._points.popleft()

    def _resync(self, t_us: int) -> None:
        """After a pause: start over from this report, the old period only as a first guess."""
        self._points.clear()
        self._points.append((0, t_us))
        self._outcomes.clear()
        self._support = 0
        self._changed()

    # --- reports and forecasts ---------------------------------------------------------------------

    def observe(self, report: BurstReport) -> Observation:
        t = report.t_us
        if self._times and t <= self._times[-1]:
            if t == self._times[-1]:
                return self._record(report, "duplicate", None, None, False)
            self._reset()  # the switch's clock went back: it restarted; what we knew is void
            self._count("reset")
        self.reports += 1
        self._times.append(t)
        self._queues.append(report.queue_pkts)
        if self._period is None:
            fit = fit_chain(self._times, (), self.config)
            if fit is not None and fit.score >= self.config.min_fit_score:
                self._adopt(fit)
            return self._record(report, "first" if len(self._times) == 1 else "learning", None, None, False)

        before = self.forecast(t)
        assert before is not None
        use_lattice, _, tol, offset = self._derived()
        slot, anchor = self._points[-1]
        gap = t - anchor
        n = max(1, round(gap / self._period))
        renewal, lattice = self._predict_slot(n, offset)
        predicted = lattice if use_lattice else renewal
        error = t - predicted
        if n <= self.config.max_missed + 1 and abs(error) <= tol * math.sqrt(n):
            kind = "match" if n == 1 else "missed"
            self._err_renewal.append((t - renewal) / math.sqrt(n) / self._period)
            if len(self._points) >= 2:
                self._err_lattice.append((t - lattice) / self._period)
            self._points.append((slot + n, t))
            self._follow_drift()
            self._outcomes.extend([0] * (n - 1) + [1])
            self._support += 1
            self._set_period()
            self._changed()
            if n > 1:
                kind = self._refit(t, kind)  # two periods, or a doubled period? let the reports say
        elif before.confident and gap < self._period - tol:
            # A report between two slots of a rhythm that keeps its slots: when iterations run back to
            # back the flights of one are spread over most of the period and no gap tells them from the
            # next iteration's start. It neither moves the rhythm nor counts against it, unless reports
            # between the slots keep a rhythm of their own (a period halved: every other new start falls
            # on an old slot, so no slot goes empty); then the reports are fitted afresh.
            self._between.append(t)
            if self._between_dominates():
                # Most recent reports fall between the slots: the rhythm may be a multiple of the true
                # period (learned from reports before the job's iterations began, e.g. its ranks starting
                # one by one). Adopt a chain of the recent reports at a half, third or quarter of it, if
                # one fits; sub-bursts scattered over the period (back-to-back iterations) fit none.
                self._kinds.clear()
                if not self._refit_fraction():
                    return self._record(report, "between", None, None, False)
                self._between.clear()
                kind = "refit"
            elif not self._between_rhythm(tol):
                return self._record(report, "between", None, None, False)
            else:
                self._between.clear()
                kind = self._refit(t, "spurious")
        else:
            kind = self._refit(t, "spurious")
            if kind == "spurious" and gap > (self.config.max_missed + 1) * self._period + tol:
                self._resync(t)
                # Nothing was predicted for a burst after a pause: no error to record, no agreement lost.
                return self._record(report, "resync", None, None, False)
        # Reports the hypothesis did not foresee (spurious, or what forced a re-fit) cost agreement.
        self._agreement.append(1 if kind in ("match", "missed") else 0)
        return self._record(report, kind, round(predicted), round(error), before.confident)

    def _refit_fraction(self) -> bool:
        fit = fit_fraction(self._times, self._period, self.config, self._tolerance() / self._period)
        if fit is not None:
            self._adopt(fit)
        return fit is not None

    def _between_dominates(self) -> bool:
        """Were two thirds of the latest reports between the slots?"""
        window = self.config.between_window
        return len(self._kinds) == window and sum(k == "between" for k in self._kinds) >= 2 * window / 3

    def _between_rhythm(self, tol: float) -> bool:
        """Do the last three reports between slots keep a rhythm of their own: one steady interval of at
        least half a period (flights of one iteration come closer together than that)?"""
        if len(self._between) < 3:
            return False
        a, b, c = self._between
        steady = min(tol, self.config.min_tol_frac * self._period)
        return abs((c - b) - (b - a)) <= steady and (c - b) >= 0.5 * self._period

    def _refit(self, t: int, kind: str) -> str:
        fit = fit_chain(self._times, (self._period,), self.config, self._tolerance() / self._period)
        if fit is None or fit.score < self.config.min_fit_score:
            return kind
        same_anchor = fit.anchor_us == self._points[-1][1]
        if same_anchor and abs(fit.period_us - self._period) <= self._tolerance():
            return kind  # the current hypothesis is still the best one
        self._adopt(fit)
        return "refit"

    def forecast(self, now_us: int) -> Prediction | None:
        """The next burst start after `now_us` (switch clock), rolling past slots that went by without a
        report, with its confidence. None until a period has been learned."""
        if self._period is None or not self._points:
            return None
        cfg = self.config
        use_lattice, jitter, tol, offset = self._derived()
        anchor = self._points[-1][1]
        n = 1 + max(0, math.floor((now_us - anchor - tol) / self._period))
        renewal, lattice = self._predict_slot(n, offset)
        next_start = lattice if use_lattice else renewal
        # Its expiry (as Prediction.expires_us rounds it) already past: that slot has gone by too.
        if round(next_start) + math.ceil(tol * math.sqrt(n)) <= now_us:
            n += 1
            renewal, lattice = self._predict_slot(n, offset)
            next_start = lattice if use_lattice else renewal
        missed = n - 1
        # A renewal forecast n slots ahead spreads sqrt(n) times more.
        spread = jitter if use_lattice else jitter * math.sqrt(n)
        support = min(1.0, self._support / cfg.support_links)
        outcomes = list(self._outcomes) + [0] * missed
        hit_rate = sum(outcomes[-cfg.outcomes:]) / len(outcomes[-cfg.outcomes:]) if outcomes else 0.0
        regularity = 1.0 / (1.0 + (jitter / (cfg.regularity_scale * self._period)) ** 2)
        agreement = sum(self._agreement) / len(self._agreement) if len(self._agreement) >= 4 else 1.0
        confidence = min(support, hit_rate, regularity, agreement) if missed <= cfg.max_missed else 0.0
        return Prediction(
            key=self.key, next_start_us=round(next_start), period_us=self._period, confidence=confidence,
            jitter_us=spread, based_on=len(self._points), tolerance_us=tol * math.sqrt(n),
            queue_pkts=self.queue_pkts, confident=confidence >= cfg.arm_confidence,
            missed=missed)

    def predict(self, now_us: int) -> Prediction | None:
        """The forecast if it is confident, else None."""
        prediction = self.forecast(now_us)
        return prediction if prediction is not None and prediction.confident else None

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def _record(self, report: BurstReport, kind: str, predicted: int | None, error: int | None,
                was_confident: bool) -> Observation:
        self._count(kind)
        self._kinds.append(kind)
        return Observation(report, kind, predicted, error, was_confident, self.forecast(report.t_us))


@dataclass
class PredictorBank:
    """One predictor per (switch, port, job), created on the key's first report. Keys share nothing but
    the configuration (frozen)."""

    config: PredictorConfig = field(default_factory=PredictorConfig)
    predictors: dict[BurstKey, BurstPredictor] = field(default_factory=dict)

    def record(self, report: BurstReport) -> Observation:
        """Feed a report; the full account of what it did (for the event log)."""
        predictor = self.predictors.get(report.key)
        if predictor is None:
            predictor = self.predictors[report.key] = BurstPredictor(report.key, self.config)
        return predictor.observe(report)

    def observe(self, report: BurstReport) -> Prediction | None:
        """Feed a report; the confident prediction of that key's next burst, or None."""
        prediction = self.record(report).prediction
        return prediction if prediction is not None and prediction.confident else None

    def relearn(self, key: BurstKey, reports: Iterable[BurstReport]) -> None:
        """Forget what the key learned and learn it again from these reports (its iteration starts)."""
        self.predictors.pop(key, None)
        for report in reports:
            self.record(report)

    def forecast(self, key: BurstKey, now_us: int) -> Prediction | None:
        predictor = self.predictors.get(key)
        return predictor.forecast(now_us) if predictor is not None else None

    def predict(self, key: BurstKey, now_us: int) -> Prediction | None:
        predictor = self.predictors.get(key)
        return predictor.predict(now_us) if predictor is not None else None

    def forget_switch(self, switch: str) -> None:
        """A restarted switch has a new clock: everything learned from it is void."""
        for key in [k for k in self.predictors if k.switch == switch]:
            del self.predictors[key]
