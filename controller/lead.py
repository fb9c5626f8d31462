"""How early a pre-drain window must open at one port, chosen from what the bursts met. Pure.

The standing queue a burst would meet is what iteration starts met when no window was open for them
(uncovered). The first lead drains it at the port's rate and gives the background one RTT under that
queue to hear the marks: 2 x queue / rate + the base RTT. The leads tried are a ladder around it
(ratio x apart, from `below` steps below to `steps` above, never beyond max_share x the period), and
the switch says what each gave: the queue a covered start met, per lead it had (the lead its window
was planned with, or less when the start came sooner after the window opened). Each lead is tried
`tries` times in turn (the first lead, then the one below and two above it, then longer ones while
the longest tried is the best, shorter ones while the shortest tried is); until a covered start has
been judged, the ladder follows the standing queue; then the lead whose recent starts met the least
is chosen, the shortest of those within `tolerance` packets of the least. Once the choice has tried
neighbours, the leads halfway (in ratio) between it and them are added and tried (`finest`): coarse
rungs find the trough in few starts, the halves find its floor. The best of all is used, and every
`refresh`-th covered start tries a neighbour of it again, so the choice follows a port whose traffic
changes.

Why a choice and not a lead that grows while starts meet too much (the lead of commit 45342a3):
the queue a window leaves is not monotone in how long it was open. The marks make the background
back off an RTT after the window opens, the queue drains to a trough, and the senders grow back to
K_pre while the window holds. Measured on pcn-training and pcn-ring (docs/results.md), per covered
start by how long its window had been open: 10-20 ms 10 packets, 20-50 ms 4-6, 50-80 ms 7-11. A lead
that grows whenever a start met more than its target wandered over 10-120 ms; pcn-host's hosts,
announcing two smoothed RTTs ahead (about 42 ms there), met 5.
A port whose standing queue is K_pre or less has nothing to drain: no window is needed there.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from pcnlab.controller.modes import K_PRE


@dataclass(frozen=True)
class LeadConfig:
    k_pre: int = K_PRE
    rtt_us: int = 1000            # the base RTT (no queue) of the background senders
    ratio: float = 1.5            # between neighbouring leads of the ladder
    steps: int = 4                # leads above the first
    below: int = 3                # leads below it (tried only while the shortest tried is the best:
                                  # pcn-training-resnet's windows, which open the chain's reach, about
                                  # 15 ms, before the lead, met least at the one below the first, the
                                  # shortest there was: 5.6-6.3 packets against 6.7-8.1 at the first)
    tries: int = 3                # covered starts per lead before choosing
    recent: int = 8               # a lead's last starts behind its score
    tolerance: float = 0.5        # packets: a shorter lead within this of the best is preferred
    refresh: int = 8              # every refresh-th covered start tries a neighbour of the choice
    finest: float = 1.2           # the lead halfway (in ratio) to each tried neighbour of the choice is
                                  # added while the two are at least finest^2 apart (ratio or more:
                                  # never). A ladder 1.25 x apart from the start met 6.73 packets on
                                  # pcn-training-resnet against 7.05 but slowed the ring's warm-up;
                                  # halves of the 1.5 x ladder: docs/results.md, "Predicted PCN on
                                  # real training", 2026-11-26
    min_lead_us: int = 1000
    max_share: float = 0.3        # of the period: the lead never holds K_pre longer than this
    history: int = 8              # uncovered starts behind the standing-queue estimate


def initial_lead_us(queue_pkts: float, rate_pps: float, rtt_us: int) -> int:
    """Drain `queue_pkts` at `rate_pps`, plus one RTT under that queue for the senders to react."""
    if rate_pps <= 0:
        raise ValueError(f"port rate must be positive, not {rate_pps}")
    drain = max(queue_pkts, 0) * 1_000_000 / rate_pps
    return math.ceil(2 * drain + max(rtt_us, 0))


class LeadTracker:
    """The lead of one (switch, port, job), chosen iteration by iteration."""

    def __init__(self, rate_pps: float, config: LeadConfig | None = None):
        self.rate_pps = rate_pps
        self.config = config or LeadConfig()
        self._uncovered: deque[int] = deque(maxlen=self.config.history)
        self.ladder: tuple[int, ...] = ()           # follows the standing queue until a covered start
        self._met: dict[int, deque[int]] = {}       # per lead of the ladder: the queues its starts met
        self._covered = 0
        self._upper = math.inf                      # max_share x the period, as of the last plan
        self.lead_us: int | None = None             # the lead to plan with next
        self._first = 0                             # the ladder's first lead (from the standing queue)
        self._halves: list[int] = []                # rungs added halfway, around a choice

    @property
    def standing_pkts(self) -> int | None:
        return max(self._uncovered) if self._uncovered else None

    @property
    def needed(self) -> bool:
        """Is there a standing queue above K_pre to drain here?"""
        standing = self.standing_pkts
        return standing is not None and standing > self.config.k_pre

    def observe(self, queue_pkts: int, covered: bool, lead_us: int | None = None) -> None:
        """An iteration start met `queue_pkts`; `covered`: a window of ours was open for it, planned
        with `lead_us` (None: the lead in use now)."""
        cfg = self.config
        if not covered:
            self._uncovered.append(queue_pkts)
            if not self._covered and self.needed:
                # Until a covered start has been judged, the ladder follows the standing queue (measured:
                # fixed at the first uncovered start, 11 packets, pcn-training's first lead was 14 ms in
                # one run and 32 ms in the next, at 26).
                first = max(cfg.min_lead_us, initial_lead_us(self.standing_pkts, self.rate_pps, cfg.rtt_us))
                # Distinct rungs: min_lead_us (the guard) may flatten the short end.
                self.ladder = tuple(sorted({max(cfg.min_lead_us, round(first * cfg.ratio ** k))
                                            for k in range(-cfg.below, cfg.steps + 1)}))
                self._first = self.lead_us = self._rung(first)
                self._met = {lead: deque(maxlen=cfg.recent) for lead in self.ladder}
                self._halves = []
            return
        if not self.ladder:
            return
        lead = self.lead_us if lead_us is None else lead_us
        used = self._rung(lead)
        if abs(math.log(max(lead, 1) / used)) > math.log(cfg.ratio) / 2:
            return  # planned off the ladder (capped by the period, or before the ladder moved): no rung's
        self._met[used].append(queue_pkts)
        self._covered += 1
        self.lead_us = self._next()

    def _rung(self, lead_us: float) -> int:
        """The ladder's lead nearest `lead_us` (in ratio)."""
        return min(self.ladder, key=lambda rung: abs(math.log(max(lead_us, 1) / rung)))

    def score(self, lead_us: int) -> float | None:
        """The mean queue the lead's recent covered starts met (None: not tried yet)."""
        met = self._met.get(lead_us)
        return sum(met) / len(met) if met else None

    def _next(self) -> int:
        cfg = self.config
        ladder = [rung for rung in self.ladder if rung <= self._upper] or [self.ladder[0]]
        tried = [rung for rung in ladder if len(self._met[rung]) >= cfg.tries]
        scores = {rung: self.score(rung) for rung in tried}
        # The first lead, the one below and two above it are tried; a longer one only while the longest
        # tried is the best so far (the queue falls to a trough and rises again: a run has 75-150 starts,
        # and each lead tried costs `tries` of them; three tries of each are noisy, so the climb does not
        # stop at the first step that looked no better: pcn-training stayed at 9-14 ms, 10 packets, for
        # 40 starts where 32 ms met 5.8), and a shorter one only while the shortest tried is the best.
        # The first lead's place (a rung; the period's cap removes only rungs above it: then the longest left).
        first = ladder.index(self._first) if self._first in ladder else len(ladder) - 1
        for rung in ladder[max(first - 1, 0):first + 3]:
            if rung not in scores:
                return rung
        best = min(scores.values())
        shortest, longest = ladder.index(tried[0]), ladder.index(tried[-1])
        if scores[tried[-1]] <= best and longest + 1 < len(ladder):
            return ladder[longest + 1]
        if scores[tried[0]] <= best and shortest > 0:
            return ladder[shortest - 1]
        chosen = next(rung for rung in tried if scores[rung] <= best + cfg.tolerance)
        half = self._halfway(chosen, tried)
        if half is not None:
            return half
        if self._covered % cfg.refresh or len(tried) == 1:
            return chosen
        i = tried.index(chosen)
        side = 1 if (self._covered // cfg.refresh) % 2 else -1
        return tried[i + side if 0 <= i + side < len(tried) else i - side]

    def _halfway(self, chosen: int, tried: list[int]) -> int | None:
        """A half tried fewer than `tries` times yet, else a new rung halfway between `chosen` and a tried
        neighbour of it, added to the ladder (None: both sides are as fine as `finest` allows, or untried)."""
        cfg = self.config
        for half in self._halves:
            if len(self._met[half]) < cfg.tries and half <= self._upper:
                return half
        i = self.ladder.index(chosen)
        for j in (i - 1, i + 1):
            if not 0 <= j < len(self.ladder) or self.ladder[j] not in tried:
                continue
            low, high = sorted((chosen, self.ladder[j]))
            if high / low < cfg.finest ** 2:
                continue
            half = round(math.sqrt(low * high))
            if half in (low, high):
                continue
            self.ladder = tuple(sorted((*self.ladder, half)))
            self._met[half] = deque(maxlen=cfg.recent)
            self._halves.append(half)
            return half
        return None

    def lead(self, period_us: float) -> int:
        """The lead to plan with now, within [min_lead_us, max_share x the period]."""
        cfg = self.config
        upper = self._upper = max(cfg.min_lead_us, cfg.max_share * period_us)
        lead = self.lead_us if self.lead_us is not None else cfg.min_lead_us
        return round(min(max(lead, cfg.min_lead_us), upper))
