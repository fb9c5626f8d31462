"""How early a pre-drain window must open at one port, learned from what the bursts met. Pure.

The standing queue a burst would meet is what iteration starts met when no window was open for them
(uncovered). The first lead drains it at the port's rate and gives the background one RTT under that
queue to hear the marks: 2 x queue / rate + the base RTT. From then on the switch says whether the lead
was enough: an iteration start inside a window that still met more than the target makes the lead
longer (x grow); one that met the target or fewer lets it shrink a little (x shrink), so the lead
settles where a covered start just meets the target, within [min_lead_us, max_share x the period].

The target is aim x K_pre (5 packets) while the lead is shorter than reach x the first lead, and K_pre
beyond it: the first lead is about what a host announcing two RTTs ahead (pcn-host) gives under the
standing queue, and where many flows keep the queue near K_pre however long it is held (pcn-paper's
six), a longer one would hold K_pre for little. Measured on pcn-training (docs/results.md): covered
starts met 6.5-6.8 packets with this target, against about K_pre aimed at K_pre alone; twice the first
lead met no fewer (6.6-6.9) and held windows open 20 % of the time instead of 14 %. A port whose
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
    grow: float = 1.5             # a covered start above the target: the lead was too short
    shrink: float = 0.9           # a covered start at or below the target: try a little less
    aim: float = 0.5              # a covered start's target: aim x K_pre packets while the lead is
    reach: float = 1.0            # under reach x the first lead (about a host's announcement); K_pre beyond
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
        self.lead_us *= cfg.grow if queue_pkts > self.target_pkts else cfg.shrink

    @property
    def target_pkts(self) -> float:
        """The queue a covered start should meet at the present lead."""
        cfg = self.config
        first = initial_lead_us(self.standing_pkts or 0, self.rate_pps, cfg.rtt_us)
        return cfg.aim * cfg.k_pre if (self.lead_us or 0) < cfg.reach * first else cfg.k_pre

    def lead(self, period_us: float) -> int:
        """The lead to plan with now, bounded."""
        cfg = self.config
        lead = self.lead_us if self.lead_us is not None else cfg.min_lead_us
        upper = max(cfg.min_lead_us, cfg.max_share * period_us)
        self.lead_us = min(max(lead, cfg.min_lead_us), upper) if self.lead_us is not None else None
        return round(min(max(lead, cfg.min_lead_us), upper))
