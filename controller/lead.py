"""How early a pre-drain window must open at one port, learned from what the bursts met. Pure.

The standing queue a burst would meet is what iteration starts met when no window was open for them
(uncovered). The first lead drains it at the port's rate and gives the background one RTT under that
queue to hear the marks: 2 x queue / rate + the base RTT. From then on the switch says whether the lead
was enough: an iteration start inside a window that still met more than K_pre packets makes the lead
longer (x grow); one that met K_pre or fewer lets it shrink a little (x shrink), so the lead settles
where the queue just reaches K_pre, within [min_lead_us, max_share x the period]. A port whose
standing queue is K_pre or less has nothing to drain: no window is needed there.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from pcnlab.controller.dataplane import K_PRE


@dataclass(frozen=True)
class LeadConfig:
    k_pre: int = K_PRE
    rtt_us: int = 1000            # the base RTT (no queue) of the background senders
    grow: float = 1.5             # a covered start above K_pre: the lead was too short
    shrink: float = 0.9           # a covered start at or below K_pre: try a little less
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
    """The lead of one (switch, port, job), adapted iteration by iteration."""

    def __init__(self, rate_pps: float, config: LeadConfig | None = None):
        self.rate_pps = rate_pps
        self.config = config or LeadConfig()
        self._uncovered: deque[int] = deque(maxlen=self.config.history)
        self.lead_us: float | None = None

    @property
    def standing_pkts(self) -> int | None:
        return max(self._uncovered) if self._uncovered else None

    @property
    def needed(self) -> bool:
        """Is there a standing queue above K_pre to drain here?"""
        standing = self.standing_pkts
        return standing is not None and standing > self.config.k_pre

    def observe(self, queue_pkts: int, covered: bool) -> None:
        """An iteration start met `queue_pkts`; `covered`: a window of ours was open for it."""
        cfg = self.config
        if not covered:
            self._uncovered.append(queue_pkts)
            if self.lead_us is None and self.needed:
                self.lead_us = initial_lead_us(self.standing_pkts, self.rate_pps, cfg.rtt_us)
            return
        if self.lead_us is None:
            return
        self.lead_us *= cfg.grow if queue_pkts > cfg.k_pre else cfg.shrink

    def lead(self, period_us: float) -> int:
        """The lead to plan with now, bounded."""
        cfg = self.config
        lead = self.lead_us if self.lead_us is not None else cfg.min_lead_us
        upper = max(cfg.min_lead_us, cfg.max_share * period_us)
        self.lead_us = min(max(lead, cfg.min_lead_us), upper) if self.lead_us is not None else None
        return round(min(max(lead, cfg.min_lead_us), upper))
