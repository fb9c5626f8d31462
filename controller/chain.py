"""Prediction from a job's own chain of events, and the choice per key between it and the rhythm.
Pure; every time is one switch's clock (µs).

A parameter-server iteration is a renewal process: its period spreads with the queue the gradients
meet, so a rhythm predicts it poorly. Its cause is steadier: the PS's reply reaches a worker's port,
the worker computes, and its gradients reach the PS's port a compute time later. The switch sees both
(the reply is the same job's data towards another port), so the lag from one to the other is learned
like any report: for every target key (switch, port, job) and cause (another port of the same switch
and job, or `first`: whichever of them started first), the lag from the cause's first start since the
target's last report to the target's next start, at least a quarter of the target's period or 100 ms,
whichever is less (a cause must leave room for a window). A pair predicts the target's next start as
the cause's start plus the median of its recent lags (made when the cause is reported: a compute time
of notice). Before any lag is known, a target is awaited from its job's first cause: its window opens
then and closes when the start comes (scheduler_core.py), as pcn-host's does when the announced burst arrives.

Which model predicts a key is chosen by what each would have predicted for the key's recent starts:
the rhythm's forecast (predictor.py) and every pair's, scored by the median of their absolute errors;
the smaller wins, by a fifth and by a millisecond before the choice changes. Nothing is assumed about
the pattern (PS, sharded PS, ring, generator): a generator keeps a clock and its rhythm wins; a PS's
reply chain wins at the PS; a ring rank's neighbour starts too shortly before it to be a cause.

The window's reach either side of a prediction comes from the chosen model's own errors (`reach`):
spread x their RMS, unless that is wider than a window may stay open; then the densest part of the
errors that fits, so the likeliest part of a wide spread (the earliest of several workers is not
uniform) is armed instead of nothing.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from pcnlab.controller.predictor_types import BurstKey, BurstReport

RHYTHM = "rhythm"
FIRST = "first"
END = "end"        # the key's own burst end: its last data packet before a silence of G (the switch says so)


@dataclass(frozen=True)
class ChainConfig:
    lags: int = 6               # recent lags per (target, cause) behind the median (a PS warms up: on
                                # pcn-training-resnet the reply-to-gradients lag falls from ~370 to ~305 ms
                                # over 20 iterations, with pcn-host's announcements as with our windows, and
                                # a median of 12 erred 20-35 ms early for 5-8 iterations; replayed on 18 runs,
                                # 6 brings the p50 error from iteration 3 from 6.0 to 4.9 ms, coverage as it was)
    errors: int = 12            # recent errors per model behind the choice and the window's reach
    min_errors: int = 2         # a model with fewer scored starts cannot be chosen over the rhythm (3 left
                                # pcn-training-resnet's iteration 3 uncovered at 19-28 packets; replayed,
                                # 2 covers it in every PS run and the ring's, and one generator run's
                                # warm-up start less: pcn-predict at 200 ms jitter)
    min_lag_us: int = 2000      # a cause closer to the start than this gives no notice: not a cause,
    min_lag_share: float = 0.25  # nor one closer than this x the target's period (a window must fit: a
                                # ring neighbour starting 5 ms before is steady but gives no notice),
    notice_us: int = 100_000    # though one this far ahead gives notice enough whatever the period (a
                                # window reaching further ahead of its start than this less the write
                                # notice is then skipped as late)
    switch_margin: float = 0.8  # a challenger's error must be under this x the chosen model's to take over,
    min_gain_us: float = 1000.0  # and under it by this much: a clock's sub-ms errors are no reason to leave
                                # it (measured: two periodic jobs into one port, one chose its own END by
                                # 0.2 ms against 0.4 ms; the switch reports the end of the port's last job
                                # only, so the other job's bursts hid 3-6 of its 35 ENDs, and their starts
                                # had no window)
    gate_sigmas: float = 4.0    # a start within gate_sigmas x RMS of the prediction is a hit
    min_gate_us: float = 1000.0
    arm_hit_rate: float = 0.6   # a chain prediction is confident when this share of recent starts hit
    max_starts: int = 8         # recent starts kept per key
    provisional_share: float = 0.05  # until a target's pairs are scored min_errors times it is forecast
                                # from FIRST's lags (provisional), spread this x the lag (a PS's third
                                # iteration: it met 23-29 packets uncovered on resnet); 0: never
    first_wait_us: int = 1_000_000  # a target with no lag yet is awaited from its job's first cause, at
                                # most this long: its window opens then and closes when the start comes
                                # (scheduler_core.py), as an announcement's does (a PS's first iteration: it met 30-40
                                # packets uncovered on resnet, pcn-host's 3-17); 0: never. A provisional
                                # forecast's window waits as long after its cause, closing the same way.


@dataclass(frozen=True)
class ChainForecast:
    """The next start of `target` as the pair (target, cause) predicts it, when the cause is reported."""

    target: BurstKey
    model: str            # the cause's port as a string, or FIRST
    next_start_us: int
    rms_us: float         # RMS of the pair's recent errors
    hit_rate: float
    errors: int           # scored starts behind rms_us and hit_rate
    period_us: float      # the target's median interval between starts
    provisional: bool = False  # from FIRST's lags before any pair of the target was scored min_errors times
    awaiting: bool = False     # no lag known yet: next_start_us is the latest the start is awaited
    cause_us: int | None = None  # when the cause was reported


def _rms(values: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else math.inf


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def reach(errors: Sequence[float], jitter_us: float, spread: float, max_open_us: float) -> tuple[float, float]:
    """(before, after): how far a window reaches either side of a predicted start. spread x jitter each
    side while the two fit in `max_open_us`; beyond, the interval of that length holding the most of the
    recent signed errors (actual - predicted), the earliest such when several tie, so the likeliest
    starts are covered rather than none."""
    margin = spread * jitter_us
    if 2 * margin <= max_open_us or not errors:
        return margin, margin
    errs = sorted(errors)
    best_lo, best_n = errs[0], 0
    j = 0
    for i, lo in enumerate(errs):
        while j < len(errs) and errs[j] <= lo + max_open_us:
            j += 1
        if j - i > best_n:
            best_lo, best_n = lo, j - i
    # Centre the densest interval's errors inside the allowed length. Either side may be negative: the
    # likeliest starts can all lie before the forecast (the window still ends after it: windows.py).
    hi = max(e for e in errs if best_lo <= e <= best_lo + max_open_us)
    slack = (max_open_us - (hi - best_lo)) / 2
    return slack - best_lo, hi + slack


class _Pair:
    """The lags of one (target, cause): the cause's start to the target's next start."""

    def __init__(self, cfg: ChainConfig):
        self.lags: deque[int] = deque(maxlen=cfg.lags)

    def predict(self, cause_us: int) -> int | None:
        return cause_us + round(_median(self.lags)) if self.lags else None


class ChainModels:
    """Lags of every (target, cause) pair on each switch and job, the errors of every model for each
    target, and each target's chosen model."""

    def __init__(self, config: ChainConfig | None = None):
        self.config = config or ChainConfig()
        self._starts: dict[BurstKey, deque[int]] = {}
        self._seen: dict[BurstKey, int] = {}  # each key's latest report, iteration start or not
        self._pairs: dict[tuple[BurstKey, str], _Pair] = {}
        self._errors: dict[tuple[BurstKey, str], deque[float]] = {}
        self._chosen: dict[BurstKey, str] = {}
        self._forecast: dict[BurstKey, tuple[str, int]] = {}  # each target's latest forecast: (model, start)
        self._ends: dict[BurstKey, deque[tuple[int, int]]] = {}  # each key's recent burst ends: (end, seen)
        self._awaited: set[BurstKey] = set()  # targets already awaited from their job's first cause

    # --- learning ----------------------------------------------------------------------------------

    def _others(self, key: BurstKey) -> list[BurstKey]:
        return [k for k in self._starts if k != key and k.switch == key.switch and k.job == key.job]

    def _causes(self, key: BurstKey, since_us: int, until_us: int) -> dict[str, int]:
        """Each other port's first start in (since, until], and the first of all of them (FIRST): one
        event per port and iteration, the same when learning and when forecasting."""
        causes: dict[str, int] = {}
        for other in self._others(key):
            inside = [t for t in self._starts[other] if since_us < t <= until_us]
            if inside:
                causes[str(other.port)] = inside[0]
        if causes:
            causes[FIRST] = min(causes.values())
        # The key's own last burst end seen by `until`: a ring rank's next start follows the end of the
        # iteration's last step by the compute time, steadier than the period (pcn-ring: silence before a
        # start sd 4.5-4.8 ms against the period's 35-39 ms). Its notice runs from when the switch saw the
        # silence (G after the end, at the port's next background packet), not from the end.
        ends = [end for end, seen in self._ends.get(key, ()) if since_us < end and seen <= until_us]
        if ends:
            causes[END] = ends[-1]
        return causes

    def note(self, report: BurstReport) -> None:
        """Any report of a key (a sub-burst too): causes count from its latest one. An iteration start
        taken for a sub-burst (the segmenter still learning the gaps) then still ends the wait for
        the next cause, and a cause seen before the key's last activity is not taken for a new one."""
        if report.t_us < self._seen.get(report.key, -1):  # the switch restarted: its clock is new
            self.forget_switch(report.switch)
        if report.key not in self._seen:
            self._set_up_over(report.key)
        self._seen[report.key] = report.t_us

    def _set_up_over(self, key: BurstKey) -> None:
        """The job is seen at a new port of the switch: what its other ports saw before was its set-up
        (a PS's workers connecting, before the parameters first go out), and the scores it gave their
        rhythms are forgotten (measured: pcn-training's set-up exchanges, 740 ms apart, made the PS port's
        rhythm confident and well scored before iteration 0, and its forecasts were 230-290 ms off)."""
        for other in self._seen:
            if other.switch == key.switch and other.job == key.job:
                self._errors.pop((other, RHYTHM), None)

    def observe_start(self, report: BurstReport, rhythm_predicted_us: int | None) -> None:
        """An iteration started at `report.key`: score what each model predicted for it (the rhythm's
        forecast before this report, if any; every pair's from its cause), then learn the lags. Call
        it instead of `note` for an iteration start."""
        key, t, cfg = report.key, report.t_us, self.config
        since = self._seen.get(key)
        self.note(report)
        starts = self._starts.setdefault(key, deque(maxlen=cfg.max_starts))
        period = self.period_us(key)
        if rhythm_predicted_us is not None and period:
            # A rhythm's error is at most half a period: farther, it predicted another slot.
            err = max(min(t - rhythm_predicted_us, period / 2), -period / 2)
            self._score(key, RHYTHM, err)
        # Measured: pcn-training's first iterations, 1 s apart while the workers warm up, held the PS's
        # reply chain (150 ms) back until the period fell to 330 ms; iterations 3-10 were uncovered.
        min_lag = max(cfg.min_lag_us, min(cfg.min_lag_share * period, cfg.notice_us))
        self._drop_short_lags(key, min_lag)
        scored = set()
        if since is not None and since < t:
            for cause, at in self._causes(key, since, t - min_lag).items():
                pair = self._pairs.setdefault((key, cause), _Pair(cfg))
                predicted = pair.predict(at)
                if predicted is not None:
                    self._score(key, cause, t - predicted)
                    scored.add(cause)
                pair.lags.append(t - at)
        self._score_forecast(key, t, period, scored)
        starts.append(t)
        self._choose(key)

    def _score_forecast(self, key: BurstKey, t: int, period: float, scored: set[str]) -> None:
        """The chosen pair is scored by the forecast it made for this start, when its cause fell where no
        lag is learned (measured: a ring port whose chosen neighbour began starting 5 ms before it
        instead of after: that cause was too close and the one before came before the port's last
        report, so the pair was never scored again while its forecasts, one lag after the close cause,
        came 40-60 ms before the next start; it stayed chosen for 4.6 s, every window missed)."""
        made = self._forecast.pop(key, None)
        if made is None or made[0] in scored or not period:
            return
        model, predicted = made
        # Like the rhythm's, an error is at most half a period: farther, it forecast another slot.
        self._score(key, model, max(min(t - predicted, period / 2), -period / 2))

    def _drop_short_lags(self, key: BurstKey, min_lag: float) -> None:
        """Forget the pairs whose lag no longer gives notice: learned while the key's period was shorter
        (measured: a ring port whose first reports, before the segmenter had learned its gaps, were
        its steps 20 ms apart kept a 16 ms lag from its neighbour, chosen, and every window came too late
        once the period was 330 ms: coverage 0 %)."""
        for pair_key in [pk for pk, pair in self._pairs.items()
                         if pk[0] == key and pair.lags and _median(pair.lags) < min_lag]:
            del self._pairs[pair_key]
            self._errors.pop(pair_key, None)
            if self._chosen.get(key) == pair_key[1]:
                del self._chosen[key]

    def _score(self, key: BurstKey, model: str, error: float) -> None:
        self._errors.setdefault((key, model), deque(maxlen=self.config.errors)).append(error)

    def _choose(self, key: BurstKey) -> None:
        """The model whose recent errors are smallest, by their median absolute value: a few outliers
        (a pair's first lags, learned while the job started) would hold an RMS up for a dozen
        iterations."""
        cfg = self.config
        scored = {m: self.score_us(key, m) for m in self._scoreable(key)}
        if not scored:
            return
        best = min(scored, key=lambda m: (scored[m], m != RHYTHM))
        current = self._chosen.get(key, RHYTHM)
        held = scored.get(current, math.inf)
        if best != current and scored[best] < min(cfg.switch_margin * held, held - cfg.min_gain_us):
            self._chosen[key] = best

    # --- what the scheduler asks ---------------------------------------------------------------------

    def chosen(self, key: BurstKey) -> str:
        """The model that predicts `key`: RHYTHM, a cause port, or FIRST."""
        return self._chosen.get(key, RHYTHM)

    def errors(self, key: BurstKey, model: str | None = None) -> list[float]:
        """The recent signed errors (actual - predicted, µs) of a key's model (default: the chosen one)."""
        return list(self._errors.get((key, model or self.chosen(key)), ()))

    def score_us(self, key: BurstKey, model: str) -> float | None:
        """A model's score for `key`: the median of its recent absolute errors (None: none yet)."""
        errs = self._errors.get((key, model))
        return _median([abs(e) for e in errs]) if errs else None

    def period_us(self, key: BurstKey) -> float:
        starts = self._starts.get(key)
        if not starts or len(starts) < 2:
            return 0.0
        return _median([b - a for a, b in zip(starts, list(starts)[1:])])

    def on_cause(self, report: BurstReport) -> list[ChainForecast]:
        """A start at `report.key` is a cause for the other keys of its switch and job: the forecast of
        each target whose chosen model is this cause (or FIRST), when this is the cause's first start
        since the target's last report. A target none of whose pairs has been scored min_errors times
        yet (unless its rhythm is confident and errs within the forecast's spread: scheduler_core.py) is forecast
        from FIRST, provisionally: its lags are all there is."""
        out = []
        for target in self._others(report.key):
            model = self.chosen(target)
            provisional = model == RHYTHM and self.config.provisional_share > 0 and not self._scored(target)
            if model == RHYTHM and not provisional:
                continue
            model = FIRST if provisional else model
            last = self._seen[target]
            if report.t_us <= last:
                continue
            if model not in (FIRST, str(report.key.port)) or \
                    self._causes(target, last, report.t_us).get(model) != report.t_us:
                continue  # not its cause, or not the cause's first start since the target's last
            forecast = self._forecast_of(target, model, report.t_us, provisional)
            if forecast is None and provisional:
                forecast = self._awaiting(target, report.t_us)
            if forecast is not None:
                out.append(forecast)
        return out

    def _scoreable(self, key: BurstKey) -> dict[str, deque[float]]:
        """The recent errors of each model of `key` with enough scored starts to be chosen."""
        return {m: errs for (k, m), errs in self._errors.items() if k == key and len(errs) >= self.config.min_errors}

    def _scored(self, key: BurstKey) -> bool:
        """Has any pair of `key` scored enough starts to be chosen? (The rhythm's scores do not count: a
        job's set-up traffic scores it before the first iteration.)"""
        return any(m != RHYTHM for m in self._scoreable(key))

    def on_end(self, key: BurstKey, end_us: int, seen_us: int) -> list[ChainForecast]:
        """The switch saw at `seen_us` that `key`'s burst ended at `end_us` (its last data packet before a
        silence of G): a cause for the key's own next start. Its forecast, when END is the key's model."""
        if end_us <= self._seen.get(key, -1):
            return []  # a start came after it already (the digest came late): nothing to forecast
        self._ends.setdefault(key, deque(maxlen=self.config.max_starts)).append((end_us, seen_us))
        if self.chosen(key) != END:
            return []
        forecast = self._forecast_of(key, END, end_us)
        return [forecast] if forecast is not None else []

    def _forecast_of(self, target: BurstKey, model: str, cause_us: int,
                     provisional: bool = False) -> ChainForecast | None:
        cfg = self.config
        pair = self._pairs.get((target, model))
        predicted = pair.predict(cause_us) if pair is not None else None
        if predicted is None:
            return None
        self._forecast[target] = (model, predicted)
        errs = self.errors(target, model)
        rms = _rms(errs)
        if provisional:  # its spread from the lag, or from the errors it has if they are wider
            rms = max(rms if errs else 0.0, cfg.provisional_share * (predicted - cause_us))
        gate = max(cfg.gate_sigmas * rms, cfg.min_gate_us)
        hits = sum(abs(e) <= gate for e in errs) / len(errs) if errs else 0.0
        return ChainForecast(target, model, predicted, rms, hits, len(errs), self.period_us(target), provisional,
                             cause_us=cause_us)

    def _awaiting(self, target: BurstKey, cause_us: int) -> ChainForecast | None:
        """The job's first cause for a target with no lag learned yet: the start is awaited from now, at
        most first_wait_us (once per target: a pair whose lags are dropped later is not awaited again)."""
        cfg = self.config
        if cfg.first_wait_us <= 0 or target in self._awaited or (target, FIRST) in self._pairs:
            return None
        self._awaited.add(target)
        return ChainForecast(target, FIRST, cause_us + cfg.first_wait_us, 0.0, 0.0, 0, self.period_us(target),
                             provisional=True, awaiting=True, cause_us=cause_us)

    def forget_choice(self, key: BurstKey) -> None:
        """The key's segmenter found its iteration starts among reports that were all taken for starts
        (scheduler_core.py): the scores behind its choice were of sub-bursts, and the rhythm predicts it until its
        models are scored again. Its starts and lags stay (replayed on 18 runs of 2026-11-26: also
        replacing its starts with the split's lost a pcn-ring run 28 starts and opened a pcn-predict
        run's windows for 164 s; forgetting its lags too moved one start, either way, in two)."""
        self._chosen.pop(key, None)
        self._forecast.pop(key, None)
        for pair in [p for p in self._errors if p[0] == key]:
            del self._errors[pair]

    def drop_end_lags(self, key: BurstKey, below_us: float) -> None:
        """The key's segmenter found the silence that parts its iterations (scheduler_core.py): END lags shorter
        than it were learned from a flight's end to the next flight, since a start's own silence is
        longer. Such a pair is forgotten, its scores and the choice of it with it (measured, replayed: a
        pcn-back-to-back run with G learned whose split formed at iteration 2, where its rhythm was
        confident and kept, predicted from END, 17 ms after each flight, for five iterations, none
        covered)."""
        pair = self._pairs.get((key, END))
        if pair is None or not pair.lags or _median(pair.lags) >= below_us:
            return
        del self._pairs[(key, END)]
        self._errors.pop((key, END), None)
        if self._chosen.get(key) == END:
            del self._chosen[key]
        if self._forecast.get(key, (None,))[0] == END:
            del self._forecast[key]

    def forget_switch(self, switch: str) -> None:
        """A restarted switch has a new clock: what was learned from it is void."""
        self._awaited = {k for k in self._awaited if k.switch != switch}
        for store in (self._starts, self._chosen, self._seen, self._forecast, self._ends):
            for key in [k for k in store if k.switch == switch]:
                del store[key]
        for store in (self._pairs, self._errors):
            for pair in [p for p in store if p[0].switch == switch]:
                del store[pair]
