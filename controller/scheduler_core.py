"""The pure core of the controller's scheduler loop: burst reports and timer ticks in, window changes out.
Every time is one switch's clock (µs); scheduler.py does the I/O around it, `replay` runs it offline.

Only reports that start an iteration (segments.py) reach the models: the sub-bursts TCP makes of one
iteration would otherwise look like iterations of their own. Each start teaches two models: the key's
rhythm (predictor.py) and the job's chain of events on its switch (chain.py), which also says which of
them predicts the key. A rhythm predicts the next start when the key's own start is reported; a chain
predicts it when the chosen cause (another port's start) is reported, a compute time ahead. Either
prediction becomes a window through the planner (windows.py), shaped by the chosen model's own errors;
a provisional chain forecast's window (few lags, or none yet: chain.py) waits for its start and closes
when it comes, as an announced window does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace

from pcnlab.controller.predictor_types import BurstKey, BurstReport, Observation, Prediction
from pcnlab.controller.chain import RHYTHM, ChainForecast, ChainModels, reach
from pcnlab.controller.predictor import PredictorBank
from pcnlab.controller.segments import IterationSegmenter
from pcnlab.controller.windows import Window, WindowChange, WindowPlanner


# A confident rhythm is relearned when the split forms all the same if the split takes less than this
# share of the reports it learned from for starts: it was confident on flights (pcn-back-to-back with G
# learned, seed 755: flights 20 ms apart, 3 of 16 reports starts, the rhythm then took flights 26 ms
# from its slot for starts and covered 24 of 40 iterations). A PS's split after its set-up pauses keeps
# more (pcn-training-resnet: 5 of 13; its rhythm, kept, covered 4 more of its first 10 iterations).
KEEP_SHARE = 0.3


class WindowScheduler:
    """The models and the planner, driven by reports and by timer ticks. The caller writes the changes,
    and calls `tick(switch, now)` at `next_wakeup_us(switch)` (switch clock) so a missed report rolls
    the rhythm's forecast on or disarms."""

    def __init__(self, bank: PredictorBank | None = None, planner: WindowPlanner | None = None,
                 chains: ChainModels | None = None):
        self.bank = bank or PredictorBank()
        self.planner = planner or WindowPlanner()
        self.chains = chains or ChainModels()
        self._pending: dict[BurstKey, Prediction] = {}  # confident forecasts awaiting their burst
        self._issued: dict[BurstKey, Prediction] = {}   # the latest forecast planned for each key
        self._segments: dict[BurstKey, IterationSegmenter] = {}
        self._recent: dict[BurstKey, deque[BurstReport]] = {}  # each key's reports in its segmenter's history
        self._waiting: dict[BurstKey, Window] = {}  # provisional windows, open until their start comes

    def on_report(self, report: BurstReport) -> tuple[Observation, list[WindowChange]]:
        """A burst report: an iteration start teaches the models and plans the windows it predicts (its
        own key's next, by the rhythm; other keys', as their chain's cause); a sub-burst (the same
        iteration, reported again after a gap TCP left) changes nothing."""
        key, t = report.key, report.t_us
        segmenter = self._segments.setdefault(key, IterationSegmenter())
        recent = self._recent.setdefault(key, deque(maxlen=segmenter.config.history + 1))
        recent.append(report)
        had_split = segmenter.threshold_us is not None
        starts = segmenter.starts_iteration(t, report.idle_us)
        rhythm = self.bank.forecast(key, t)
        if not had_split and segmenter.threshold_us is not None:
            # Whatever the rhythm: an END lag shorter than the split was a flight's (chain.drop_end_lags)
            self.chains.drop_end_lags(key, below_us=segmenter.threshold_us)
            starts_us = segmenter.starts_us()
            if not (rhythm and rhythm.confident) or len(starts_us) < KEEP_SHARE * len(recent):
                self._relearn(key, t)
                rhythm = self.bank.forecast(key, t)
        if not starts:
            # A short gap, but right where a confident rhythm expects its next start: a start after all
            # (back to back, the last flight of one iteration can come just before the next begins).
            # "Right where": within the rhythm's tolerance and within the split of it. A young rhythm's
            # tolerance can be wider than the silence between iterations, and then flights fall in it
            # (pcn-back-to-back with G learned, seed 745: a +-105 ms slot around a 600 ms rhythm, the
            # split at 54 ms; the flights it took for starts taught it 578, 560, 545 and 271 ms).
            in_slot = (rhythm is not None and rhythm.confident
                       and abs(t - rhythm.next_start_us) <= min(rhythm.tolerance_us, segmenter.threshold_us))
            if not in_slot:
                self.chains.note(report)
                return Observation(report, "sub-burst", None, None, False, rhythm), []
        waiting = self._waiting.get(key)
        # A start a waiting window was open for teaches the lead nothing: that window was not the lead's.
        self.planner.observe_start(report, teach=not (waiting is not None and waiting.contains(t)))
        changes: list[WindowChange] = self._arrived(key, t)
        issued = self._issued.pop(key, None)
        observation = self.bank.record(report)
        self.chains.observe_start(report, rhythm.next_start_us if rhythm is not None else None)
        model = self.chains.chosen(key)
        if model == RHYTHM:
            prediction = self._shaped(observation.prediction)
            changes += self._plan(key, prediction, t)
        else:
            # Its next start is predicted when its cause is reported; the window open now stays.
            prediction = None
            self._pending.pop(key, None)
        caused = [fc for fc in self.chains.on_cause(report) if not (fc.provisional and self._rhythm_holds(fc, t))]
        forecasts = tuple(self._chain_prediction(fc) for fc in caused)
        for fc, forecast in zip(caused, forecasts):
            planned = self._plan(forecast.key, forecast, t)
            if fc.provisional:
                self._waiting.update((c.window.key, c.window) for c in planned if c.op == "arm")
            changes += planned
        observation = replace(observation, prediction=prediction, model=model, forecasts=forecasts,
                              **self._judged(issued, t))
        return observation, changes + self.planner.expire(report.switch, t)

    def _arrived(self, key: BurstKey, now_us: int) -> list[WindowChange]:
        """The start a provisional window was waiting for came: the window closes, as pcn-host's does when
        the announced burst arrives (it was planned to wait as long as the start might take)."""
        window = self._waiting.pop(key, None)
        if window is None or window not in self.planner.armed(key):
            return []
        return [self.planner.withdraw(window, "arrived", now_us)]

    def _relearn(self, key: BurstKey, now_us: int) -> None:
        """A split formed: the reports before it were all taken for starts, sub-bursts too, and the
        key's rhythm learned a period of a flight's length from them (measured: pcn-paper with G learned,
        split formed at iteration 3, period 1.79 s of 2 s at iteration 4, confident from iteration 8
        only, where a configured G armed from iteration 3). Unless the rhythm predicts confidently from
        reports the split mostly takes for starts (KEEP_SHARE), it learns again from the starts the
        split finds among them, as if it had held from the first. Such a rhythm is kept: its reports
        were starts (measured: pcn-back-to-back at G 40 ms, whose first split took one of four 600 ms
        iterations, 77 ms after the one before, for a sub-burst).
        The key's chain forgets its choice too (ChainModels.forget_choice): pcn-paper with G learned
        had chosen its END chain from the flights (10-20 ms after a flight's end), which stayed chosen
        once the split formed at iteration 3, and iteration 4, 2 s on, had no window."""
        self.bank.relearn(key, [r for r in self.iteration_starts(key) if r.t_us < now_us])
        self.chains.forget_choice(key)

    def on_end(self, key: BurstKey, end_us: int, now_us: int) -> tuple[tuple[Prediction, ...], list[WindowChange]]:
        """The switch saw `key`'s burst end at `end_us` (reported at `now_us`): a cause of the key's next
        start (chain.END), planned when that is the key's chosen model."""
        forecasts = tuple(self._chain_prediction(fc) for fc in self.chains.on_end(key, end_us, now_us))
        changes: list[WindowChange] = []
        for forecast in forecasts:
            changes += self._plan(forecast.key, forecast, now_us)
        return forecasts, changes + self.planner.expire(key.switch, now_us)

    def iteration_gap_us(self, key: BurstKey) -> int | None:
        """The silence above which the key's reports start iterations, as learned so far (segments.py);
        None while its gaps form one group (every report starts one)."""
        segmenter = self._segments.get(key)
        return round(segmenter.threshold_us) if segmenter and segmenter.threshold_us is not None else None

    def iteration_starts(self, key: BurstKey) -> list[BurstReport]:
        """The key's reports in its segmenter's history that the split in force takes for iteration
        starts, oldest first (the latest included): before the split formed they were all taken for
        starts (segments.starts_us)."""
        segmenter = self._segments.get(key)
        if segmenter is None:
            return []
        wanted = set(segmenter.starts_us())
        return [r for r in self._recent[key] if r.t_us in wanted]

    @staticmethod
    def _judged(issued: Prediction | None, t_us: int) -> dict:
        """The forecast planned for this start (whatever model made it), against the start."""
        if issued is None or abs(t_us - issued.next_start_us) > max(issued.tolerance_us, issued.period_us / 2):
            return {"predicted_us": None, "error_us": None, "was_confident": False}
        return {"predicted_us": issued.next_start_us, "error_us": t_us - issued.next_start_us,
                "was_confident": issued.confident}

    def _shaped(self, prediction: Prediction | None) -> Prediction | None:
        """A rhythm's forecast with its window's reach from the rhythm's errors (chain.reach)."""
        if prediction is None:
            return None
        cfg = self.planner.config
        early, late = reach(self.chains.errors(prediction.key, RHYTHM), prediction.jitter_us, cfg.spread,
                            cfg.max_open_share * prediction.period_us)
        return replace(prediction, early_us=early, late_us=late)

    def _chain_prediction(self, forecast: ChainForecast) -> Prediction:
        cfg, chain_cfg = self.planner.config, self.chains.config
        rhythm = self.bank.predictors.get(forecast.target)
        period = forecast.period_us or (rhythm.period_us if rhythm is not None else 0.0) or 0.0
        if forecast.awaiting:  # from the cause (the planner opens it once written) to the latest awaited
            early, late = forecast.next_start_us - forecast.cause_us, 0.0
        else:
            early, late = reach(self.chains.errors(forecast.target, forecast.model), forecast.rms_us, cfg.spread,
                                cfg.max_open_share * period)
        if forecast.provisional:  # (an awaiting one already reaches exactly that far)
            # It waits for its start up to first_wait after the cause, closing when it comes: one or two
            # lags say little (resnet: iteration 0, drained by the awaited window, came 275-290 ms after
            # the first reply, iteration 1 366-373 ms after the second, and met 16 packets uncovered).
            late = max(late, forecast.cause_us + chain_cfg.first_wait_us - forecast.next_start_us)
        # A provisional forecast (nothing scored yet for its target, and no rhythm that holds) is armed:
        # a PS's third iteration would otherwise meet the standing queue (resnet: 23-29 packets).
        confident = forecast.provisional or (forecast.errors >= chain_cfg.min_errors
                                             and forecast.hit_rate >= chain_cfg.arm_hit_rate)
        gate = max(chain_cfg.gate_sigmas * forecast.rms_us, chain_cfg.min_gate_us)
        return Prediction(key=forecast.target, next_start_us=forecast.next_start_us, period_us=period,
                          confidence=forecast.hit_rate, jitter_us=forecast.rms_us, based_on=forecast.errors,
                          tolerance_us=gate, queue_pkts=rhythm.queue_pkts if rhythm is not None else 0,
                          confident=confident, model=forecast.model, early_us=early, late_us=late)

    def _rhythm_holds(self, forecast: ChainForecast, now_us: int) -> bool:
        """A provisional forecast yields to a confident rhythm whose recent errors (median, absolute) are
        within the forecast's own spread: a generator's; an awaiting one (no spread known) to any
        confident rhythm scored since the job's set-up. A PS's rhythm can be confident by iteration 2
        and far off (pcn-training: the job's set-up traffic scored it, its window 400 ms late)."""
        rhythm = self.bank.forecast(forecast.target, now_us)
        if rhythm is None or not rhythm.confident:
            return False
        score = self.chains.score_us(forecast.target, RHYTHM)  # None: not scored since the set-up (chain.py)
        return score is not None and (forecast.awaiting or score <= forecast.rms_us)

    def tick(self, switch: str, now_us: int) -> list[WindowChange]:
        changes: list[WindowChange] = []
        for key, prediction in list(self._pending.items()):
            if key.switch == switch and now_us >= prediction.expires_us:
                if prediction.model == RHYTHM:
                    changes += self._plan(key, self._shaped(self.bank.forecast(key, now_us)), now_us)
                else:  # the chain's burst did not come: its window ends by itself; the next cause re-plans
                    del self._pending[key]
        return changes + self.planner.expire(switch, now_us)

    def next_wakeup_us(self, switch: str) -> int | None:
        times = [p.expires_us for k, p in self._pending.items() if k.switch == switch]
        times += [w.end_us for w in self.planner.armed() if w.switch == switch]
        return min(times, default=None)

    def shutdown(self, now_us: int = 0) -> list[WindowChange]:
        self._pending.clear()
        return self.planner.disarm_all("shutdown", now_us)

    def forget_switch(self, switch: str) -> None:
        """The switch restarted: its clock and its table are new."""
        self.bank.forget_switch(switch)
        self.planner.forget_switch(switch)
        self.chains.forget_switch(switch)
        for store in (self._segments, self._pending, self._issued, self._recent, self._waiting):
            for key in [k for k in store if k.switch == switch]:
                del store[key]

    def _plan(self, key: BurstKey, prediction: Prediction | None, now_us: int) -> list[WindowChange]:
        if prediction is not None and prediction.confident:
            self._pending[key] = prediction
        else:
            self._pending.pop(key, None)
        if prediction is not None:
            self._issued[key] = prediction
        return self.planner.update(key, prediction, now_us)


@dataclass(frozen=True)
class ReplayStep:
    observation: Observation
    covered: bool                 # the burst began inside a window of its key, armed in time
    window: Window | None         # that window


@dataclass
class Replay:
    steps: list[ReplayStep]
    changes: list[WindowChange]


def replay(reports: Iterable[BurstReport], scheduler: WindowScheduler | None = None,
           write_latency_us: int = 0, ends: Iterable[tuple[BurstKey, int, int]] = ()) -> Replay:
    """Run reports (in time order, one switch clock each) through a scheduler as the controller would,
    timer ticks included, and say for each burst whether a window armed at least `write_latency_us`
    before it was open when it began. `ends`: the burst ends the switch reported, (key, end, seen),
    each fed when it was seen. For benchmarks and offline checks of an event log."""
    scheduler = scheduler or WindowScheduler()
    armed_at: dict[Window, int] = {}
    steps: list[ReplayStep] = []
    changes: list[WindowChange] = []

    def apply(batch: list[WindowChange]) -> None:
        changes.extend(batch)
        for change in batch:
            if change.op == "arm":
                armed_at[change.window] = change.at_us

    def advance(switch: str, until_us: int) -> None:
        while (wake := scheduler.next_wakeup_us(switch)) is not None and wake < until_us:
            apply(scheduler.tick(switch, wake))

    pending: dict[str, deque[tuple[BurstKey, int, int]]] = {}   # each switch's ends, in its own clock
    for end in sorted(ends, key=lambda e: e[2]):
        pending.setdefault(end[0].switch, deque()).append(end)
    for report in reports:
        mine = pending.get(report.switch, deque())
        while mine and mine[0][2] < report.t_us:
            key, end_us, seen_us = mine.popleft()
            advance(key.switch, seen_us)
            apply(scheduler.on_end(key, end_us, seen_us)[1])
        advance(report.switch, report.t_us)
        hit = next((w for w in scheduler.planner.covering(report.key, report.t_us)
                    if armed_at.get(w, report.t_us) + write_latency_us <= report.t_us), None)
        observation, batch = scheduler.on_report(report)
        apply(batch)
        steps.append(ReplayStep(observation, hit is not None, hit))
    return Replay(steps, changes)
