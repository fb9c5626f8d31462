"""LTP's rate control: a TCP-friendly AIMD window (Reno's response to loss, driven by selective
acknowledgements), an RTT estimator (RFC 6298), and loss detection by time (RACK, RFC 8985).

Why AIMD on loss, and not a delay target or BBR: the bottleneck is a shallow switch queue shared with
loss-based TCP background (cubic). A delay-based controller (LEDBAT, Swift) backs off as soon as cubic
fills the queue and starves; BBR, in shallow buffers, takes far more than its share from cubic and
keeps losing packets at its probing rate. Reno's additive increase / multiplicative decrease has
TCP's response function, and in this regime (RTTs of milliseconds, windows of a few packets: cubic
runs in its "TCP-friendly" Reno region) that gives one LTP sender about one cubic flow's share.
Under incast the same rule spreads the port among the workers: N windows of a few packets each.

What differs from TCP is what is done with a loss, not how the rate reacts to it: a lost chunk is
queued for retransmission only while the iteration is open (retransmit only what is still worth
having), loss is detected by time against later acknowledged transmissions (every transmission has
its own sequence number, so there is no ambiguity and no need for three duplicate acknowledgements,
which windows of 2-3 packets never produce), and the retransmission timer's floor is
MIN_RTO_S, not TCP's 200 ms. The window is kept from one iteration to the next (no slow-start
restart after the compute gap): every iteration meets the same incast, and restarting at the initial
window is what makes synchronised TCP senders overflow a shallow queue together.
"""

from __future__ import annotations

from dataclasses import dataclass

INITIAL_WINDOW = 4.0          # packets (RFC 3390's 4 full frames)
MIN_WINDOW = 1.0
MIN_RTO_S = 0.005             # the retransmission timer's floor (BMv2 and Python scheduling jitter)
MAX_RTO_S = 1.0
INITIAL_RTO_S = 0.05
REORDER_FRACTION = 0.25       # RACK's reordering window: a quarter of the smoothed RTT
PEAK_DECAY = 0.998            # the recent peak RTT forgets 0.2 % per sample (about 6 % per iteration)
PEAK_FACTOR = 1.5             # the retransmission timer waits at least this times the recent peak RTT


@dataclass
class RttEstimator:
    """RFC 6298's smoothed RTT and variance, the minimum seen, and a slowly forgotten peak.

    The timer is RFC 6298's, with two changes for a burst that meets an empty path at its start and a
    full queue a few windows later (every iteration's incast): it waits at least PEAK_FACTOR x the
    recent peak RTT (the smoothed RTT of the previous iteration's quiet tail would fire it spuriously
    at every iteration's start), and it doubles after each timeout until an acknowledgement comes."""

    srtt: float | None = None
    rttvar: float = 0.0
    min_rtt: float | None = None
    peak: float = 0.0
    backoff: int = 0

    def update(self, sample: float) -> None:
        if sample <= 0:
            return
        self.backoff = 0
        self.peak = max(sample, self.peak * PEAK_DECAY)
        if self.srtt is None:
            self.srtt, self.rttvar = sample, sample / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
            self.srtt = 0.875 * self.srtt + 0.125 * sample
        self.min_rtt = sample if self.min_rtt is None else min(self.min_rtt, sample)

    def rto(self) -> float:
        base = INITIAL_RTO_S if self.srtt is None else max(MIN_RTO_S, self.srtt + 4 * self.rttvar,
                                                          PEAK_FACTOR * self.peak)
        return min(MAX_RTO_S, base * (1 << min(self.backoff, 6)))

    def timed_out(self) -> None:
        self.backoff += 1

    def reorder_window(self) -> float:
        return REORDER_FRACTION * (self.srtt if self.srtt is not None else INITIAL_RTO_S)

    @property
    def srtt_us(self) -> int:
        return int((self.srtt or 0.0) * 1e6)


@dataclass
class AimdWindow:
    """Congestion window in packets: slow start to the first loss, then +1 per window acknowledged;
    halved once per window of losses (losses of transmissions sent before the last reduction do not
    count again: `recover_seq`); one packet after a retransmission timeout, and back to the window
    before it when the timeout proves spurious (an acknowledgement of a transmission it declared lost:
    the datagrams were waiting in a queue, not lost; Eifel, RFC 3522)."""

    cwnd: float = INITIAL_WINDOW
    ssthresh: float = float("inf")
    recover_seq: int = -1
    reductions: int = 0
    timeouts: int = 0
    undone: int = 0                  # timeouts found spurious and undone
    _before_timeout: tuple[float, float] | None = None

    def on_ack(self, newly_acked: int) -> None:
        for _ in range(newly_acked):
            if self.cwnd < self.ssthresh:
                self.cwnd += 1.0
            else:
                self.cwnd += 1.0 / self.cwnd

    def on_loss(self, lost_seq: int, highest_sent_seq: int) -> bool:
        """A transmission `lost_seq` was lost; True when this halved the window (a new loss event)."""
        if lost_seq <= self.recover_seq:
            return False
        self.ssthresh = max(self.cwnd / 2.0, 2.0)
        self.cwnd = max(self.cwnd / 2.0, MIN_WINDOW)
        self.recover_seq = highest_sent_seq
        self.reductions += 1
        return True

    def on_timeout(self, highest_sent_seq: int) -> None:
        if self._before_timeout is None:       # the window of the first of consecutive timeouts
            self._before_timeout = (self.cwnd, self.ssthresh)
        self.ssthresh = max(self.cwnd / 2.0, 2.0)
        self.cwnd = MIN_WINDOW
        self.recover_seq = highest_sent_seq
        self.timeouts += 1

    def undo_timeout(self) -> bool:
        """A transmission the last timeout declared lost was acknowledged: restore the window it
        took. True when there was one to undo."""
        if self._before_timeout is None:
            return False
        self.cwnd, self.ssthresh = self._before_timeout
        self._before_timeout = None
        self.undone += 1
        return True

    def settle(self) -> None:
        """An acknowledgement of a transmission sent after the last timeout: it stands."""
        self._before_timeout = None

    def allowed(self) -> int:
        """Transmissions that may be outstanding at once."""
        return max(int(self.cwnd), 1)
