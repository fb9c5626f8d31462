"""The predictor's vocabulary: a burst-start report as the switch sends it, the key it is learned
under, what the predictor forecasts (Prediction) and did with a report (Observation), and its settings
(PredictorConfig). controller/predictor.py learns; windows.py and scheduler.py act on these."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple


class BurstKey(NamedTuple):
    switch: str
    port: int
    job: int


@dataclass(frozen=True)
class BurstReport:
    """A burst start as the switch reported it (its digest): the first DDL packet of `job` towards `port`
    after an idle gap longer than G (`idle_us` long; None where not known), at `t_us` in the switch's clock,
    meeting `queue_pkts` packets queued."""

    switch: str
    port: int
    job: int
    t_us: int
    queue_pkts: int = 0
    idle_us: int | None = None

    @property
    def key(self) -> BurstKey:
        return BurstKey(self.switch, self.port, self.job)


@dataclass(frozen=True)
class Prediction:
    """The next burst start of one key, and how much to trust it."""

    key: BurstKey
    next_start_us: int      # switch clock
    period_us: float
    confidence: float       # 0..1; the scheduler arms only when `confident`
    jitter_us: float        # RMS of the recent prediction errors: the spread a window must cover
    based_on: int           # matched reports behind the period (since the hypothesis began)
    tolerance_us: float     # a report farther than this from next_start_us does not match
    queue_pkts: int         # the largest queue the recent bursts met (what a pre-drain has to drain)
    confident: bool
    missed: int = 0         # predicted slots gone by without a report (the forecast rolled past them)
    model: str = "rhythm"   # what predicted it: the rhythm, or a cause of the job's chain (chain.py)
    early_us: float | None = None  # how far before next_start_us the window reaches (None: its jitter's)
    late_us: float | None = None   # and after it

    @property
    def expires_us(self) -> int:
        """No report by then means this slot was missed: ask the predictor again (`forecast(now)`)."""
        return self.next_start_us + int(math.ceil(self.tolerance_us))


@dataclass(frozen=True)
class Observation:
    """What one report did to its predictor: for the event log and the benchmark."""

    report: BurstReport
    # first | learning | match | missed (matched after missed slots) | spurious | refit (a new period or
    # phase won) | between (between two slots of a confident rhythm: ignored) | resync (after a pause) |
    # duplicate | reset (the switch's clock went back: it restarted)
    kind: str
    predicted_us: int | None    # the start predicted for this report's slot (None: nothing learned yet)
    error_us: int | None        # actual - predicted
    was_confident: bool         # the prediction for this slot was confident (a window was due)
    prediction: Prediction | None  # the forecast of the next burst after this report, any confidence
    model: str = "rhythm"          # the model that predicts this key (predicted_us, error_us are its)
    forecasts: tuple[Prediction, ...] = ()  # what this report, as a cause, predicted for other keys


@dataclass(frozen=True)
class PredictorConfig:
    history: int = 12             # raw reports kept for re-fitting
    points: int = 16              # matched reports in the period fit (fewer: follows drift sooner)
    errors: int = 16              # recent errors behind the jitter estimate and the model choice
    outcomes: int = 8             # recent predicted slots behind the hit rate
    gate_sigmas: float = 4.0      # a report matches within gate_sigmas x jitter ...
    min_tol_frac: float = 0.05    # ... but never tighter than this share of the period
    max_tol_frac: float = 0.25    # ... nor looser than this one (beyond, a report is another burst)
    min_tol_us: float = 200.0     # and never below this (report timing itself is not exact)
    fit_tol_frac: float = 0.2     # link tolerance when re-fitting without a jitter estimate
    max_missed: int = 1           # missed reports tolerated in a row; more means the job paused
    between_window: int = 6       # two thirds of this many reports between the slots: re-fit the rhythm
    min_period_us: int = 1000     # shorter intervals are not iterations (the switch's G is about 2 ms)
    support_links: int = 3        # matched intervals for full support (2 give 0.67: enough to arm)
    regularity_scale: float = 0.15  # jitter of this share of the period halves the confidence
    arm_confidence: float = 0.6
    decay: float = 0.7            # weight of each older link in a re-fit's score
    min_fit_score: float = 1.0    # a re-fit below this score is not adopted
