"""Early Close: when the PS stops waiting for the rest of an iteration's gradients.

The PS closes an iteration (and every worker stops sending it) at the first of:

- complete: every chunk of every worker has arrived (Early Close did not fire);
- threshold: the workers together have delivered at least the loss-tolerant threshold theta of the
  iteration's gradient, and each at least theta_min of its own (`past_theta`), and either every
  worker's LAST datagram is in (each has sent every chunk once, so what is missing
  is lost and would cost a pull and a round trip: wire.py, receiver.py), or the rest has not arrived
  within a grace period after that moment: grace = SLACK x (the rest's
  bytes at the rate this iteration has arrived so far) + 2 x the largest smoothed RTT the workers
  report. The tail is then not merely in flight at the usual pace but waiting on losses to be
  detected and sent again (or on a straggler), which is the long tail incast gives TCP;
- deadline: the hard deadline, counted from the iteration's first datagram at the PS, whatever has
  arrived (a worker short of theta, or silent, is filled in: fill.py). A number (`deadline_s`), or
  derived from the ideal exchange (`deadline_s` None, the YAML's `ltp_deadline_ms: auto`):
  AUTO_FACTOR x (every worker's gradient bytes / the rate the PS's port delivers them at) + the largest
  smoothed RTT the workers report. The rate is measured at the PS (receiver.py: a chunk's median size
  over the median gap between new chunks by their kernel arrival times, averaged over iterations like
  the loss);
  until one iteration has measured it the deadline is UNMEASURED_DEADLINE_S. Why 3: counted from the
  first datagram, the port takes every gradient once (one ideal exchange), and where the workers start
  as the PS's own link delivers their parameters (ltp-incast.yaml: the same bytes over the same rate)
  the last one starts up to another exchange later; the third is room for repairs.

theta adapts to the loss the PS measures (each worker's transmissions carry consecutive sequence
numbers, so the gaps in what arrived are what was lost): theta = 1 - GAIN x loss, the loss an
exponentially weighted average over iterations, held within [theta_min, 1]. On a link that loses
nothing theta stays 1: the PS waits for every byte (until the deadline), and the model's updates are
exactly TCP's. The more the network loses, the lower theta goes and the sooner the tail is given up,
but never below theta_min of any worker's gradient before the deadline (the accuracy guard). Theta is
held against the iteration's whole gradient, as the loss it follows is the iteration's: against each
worker's share, a gradient of a few chunks moves in steps a chunk wide (1/7 of a 10 KB one), so any
loss at all made the PS wait for a retransmission until the estimate passed 7 % (measured: at 6 %
random loss, 149 of 150 iterations of ltp-synchronised-generator closed complete, their gradients
taking 52 ms at the PS (p50) against the 13.6 ms the bytes need; docs/results.md). Delay
enters through the grace period: the RTT and the iteration's own arrival rate set how long the
tail may take before it counts as a tail.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The defaults every layer takes from here (the YAML schema, JobSpec, the processes' configs):
LTP_DEADLINE_MS = 500.0      # an iteration closes at the latest this long after its first datagram
AUTO = "auto"                # ltp_deadline_ms: derived from the ideal exchange (hard_deadline_s)
LTP_THETA_MIN = 0.8          # Early Close never takes less than this share of a worker's gradient

GAIN = 2.0            # theta = 1 - GAIN x the loss estimate
ALPHA = 0.25          # weight of the latest iteration's loss in the estimate
SLACK = 2.0           # the grace period allows the rest twice the time the iteration's pace predicts
MIN_GRACE_S = 0.002
AUTO_FACTOR = 3.0     # auto deadline: this many ideal exchanges, plus an RTT
MIN_DEADLINE_S = 0.01
UNMEASURED_DEADLINE_S = LTP_DEADLINE_MS / 1e3   # auto, before the port's rate is measured

COMPLETE, THRESHOLD, DEADLINE = "complete", "threshold", "deadline"


def hard_deadline_s(ltp_deadline_ms: float | str) -> float | None:
    """The job's `ltp_deadline_ms` as EarlyClose takes it: seconds, or None for AUTO. A worker's sender,
    which stops at the PS's close, gives up at this or (None) at the job's timeout."""
    return None if ltp_deadline_ms == AUTO else float(ltp_deadline_ms) / 1e3


@dataclass
class EarlyClose:
    deadline_s: float | None      # None: derived from the ideal exchange (auto)
    theta_min: float = 0.8
    loss: float = 0.0             # the loss estimate (EWMA over iterations)
    rate: float | None = None     # auto: the port's rate, gradient bytes/s (EWMA over iterations)

    def __post_init__(self):
        if self.deadline_s is not None and not 0 < self.deadline_s:
            raise ValueError("the hard deadline must be positive")
        if not 0 <= self.theta_min <= 1:
            raise ValueError("theta_min is a fraction in [0, 1]")

    @property
    def theta(self) -> float:
        return min(1.0, max(self.theta_min, 1.0 - GAIN * self.loss))

    def past_theta(self, delivered: np.ndarray, each: int, theta: float | None = None) -> bool:
        """Whether an iteration may close on the threshold: the workers' `delivered` amounts (one per
        worker, each of `each`) come to at least theta of them all, and none is short of theta_min."""
        theta = self.theta if theta is None else theta
        return bool(delivered.sum() >= theta * each * len(delivered) and (delivered >= self.theta_min * each).all())

    def learn(self, loss_rate: float, port_rate: float | None = None) -> None:
        """After an iteration: the share of its transmissions that were lost, and the rate its gradient
        bytes arrived at (bytes/s; None: not measured)."""
        self.loss = (1 - ALPHA) * self.loss + ALPHA * min(max(loss_rate, 0.0), 1.0)
        if port_rate is not None and port_rate > 0:
            self.rate = port_rate if self.rate is None else (1 - ALPHA) * self.rate + ALPHA * port_rate

    def deadline_for(self, total_bytes: int, rtt_s: float) -> float:
        """The hard deadline of an iteration of `total_bytes` (every worker's gradient)."""
        if self.deadline_s is not None:
            return self.deadline_s
        if self.rate is None:
            return UNMEASURED_DEADLINE_S
        return max(MIN_DEADLINE_S, AUTO_FACTOR * total_bytes / self.rate + rtt_s)

    @staticmethod
    def grace_s(received_bytes: int, total_bytes: int, first_s: float, now_s: float, srtt_s: float) -> float:
        """How long the rest may take once every worker is past theta."""
        elapsed = max(now_s - first_s, 1e-3)
        rate = received_bytes / elapsed if received_bytes else 0.0
        rest = max(total_bytes - received_bytes, 0)
        pace = rest / rate if rate else 0.0
        return max(MIN_GRACE_S, SLACK * pace + 2 * srtt_s)

    def decide(self, complete: bool, first_s: float | None, theta_s: float | None, grace_s: float | None,
               now_s: float, deadline_s: float | None = None, all_in: bool = False) -> str | None:
        """Why the iteration closes now (COMPLETE, THRESHOLD, DEADLINE), or None to keep waiting.
        first_s: its first datagram; theta_s: when the last worker reached theta (None: not yet);
        deadline_s: its hard deadline (this policy's number when None); all_in: every worker's LAST
        datagram has arrived."""
        if complete:
            return COMPLETE
        if first_s is None:
            return None
        if now_s >= first_s + (self.deadline_s if deadline_s is None else deadline_s):
            return DEADLINE
        if theta_s is not None and (all_in or grace_s is not None and now_s >= theta_s + grace_s):
            return THRESHOLD
        return None

    def next_check(self, first_s: float | None, theta_s: float | None, grace_s: float | None,
                   deadline_s: float | None = None) -> float | None:
        """The next moment `decide` could change its answer without a datagram arriving."""
        times = []
        if first_s is not None:
            times.append(first_s + (self.deadline_s if deadline_s is None else deadline_s))
        if theta_s is not None and grace_s is not None:
            times.append(theta_s + grace_s)
        return min(times) if times else None
