"""Which burst reports start a DDL iteration. Pure: times are the switch's clock (µs).

TCP sends an iteration's bytes in flights about an RTT apart, so the switch (a data packet after G of
silence starts a burst) often reports one iteration as several bursts. Between iterations the job is
idle far longer than between flights. The switch says how long the job was silent before each report
(`idle_us`): those silences fall into two groups (without it, the gaps between report times do, less
cleanly: a burst's own length is in them, and a late worker's part 100 ms after the first looked like
an iteration of a 400 ms period, 53 'starts' of 40 iterations at a 10 ms G), and
the split between them tells iteration starts from sub-bursts: the split of the recent gaps' logarithms
that maximises the between-group variance (Otsu's method), accepted only when the two groups' typical
gaps differ by at least `min_ratio` and the long gaps recur (`min_long` of them: one pause among
iterations is not a second group; one fewer when the groups differ `decisive_ratio` times). With no
such split every report starts an iteration: there are no sub-bursts, or the iterations run back to
back and cannot be told apart.

A split is also dropped when its long gaps have stopped recurring: when the run of short gaps since the
last long one is longer than twice any run between two long gaps (and than `min_gaps`) and has lasted
twice the longest long gap and the longest time from one long gap to the next, the long gaps are
history, not iterations (measured: a ring's setup pauses, 2.5 s twice and 450 ms, before iterations
330 ms apart made every iteration a 'sub-burst' until the pauses left the history, 28 of 150
iterations). The gaps before that run are forgotten, and the split
is learned again from what follows. And no split holds before a short gap has come between two long
ones: long gaps in a row, then short ones, show no sub-burst, only a job that sped up (measured:
pcn-training's PS port was silent 991, 870 and 432 ms in the job's setup, then 175-200 ms between
iterations; 4 of its first 9 iterations were taken for sub-bursts).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

REPORT_GAP_US = 10_000   # the switch's G for a job whose G is learned: reports every burst after 10 ms of silence


@dataclass(frozen=True)
class SegmenterConfig:
    history: int = 128       # recent gaps behind the split (a generator's iteration at 10 ms: 10-20 sub-bursts)
    min_ratio: float = 3.0   # the two groups' geometric means must differ this much
    min_long: int = 3        # and the long gaps must recur at least this often in the history,
    decisive_ratio: float = 10.0  # or once fewer when the groups differ this much (0: never): the split
                             # at the second long silence instead of the third. pcn-paper with G learned:
                             # flights 10-20 ms, iterations 1.5 s apart; pcn-back-to-back: flights 10-25 ms,
                             # 45-290 ms between iterations, 7-13 x at its second (a split from two long
                             # silences at min_ratio lost it 3-7 starts, 2026-11-25; at 30 x it waited for
                             # the third: iteration 3 uncovered in 9 of 16 runs, replayed 2026-11-27)
    decisive_above: float = 1.5  # such a split lies at most this x above the short group's longest: two
                             # long silences say little of how short the next may be (pcn-back-to-back:
                             # 164 and 193 ms, a split at their midpoint with 24 ms of 63 ms, then
                             # iteration 3 came after 48 ms and was taken for a sub-burst)
    min_gaps: int = 4        # fewer gaps: no split yet (every report starts an iteration)
    min_step: float = 1.5    # silences: the split falls where neighbouring ones differ this much (report
                             # times include each burst's length: their gaps can be a continuum, no step)
    stale_factor: int = 2    # long gaps are history after a run of short ones this many times the longest
                             # between them, lasting this many times the longest long gap or iteration


def split_gap(gaps, min_ratio: float = 3.0, min_long: int = 3, min_step: float = 1.0,
              above_short: float | None = None) -> float | None:
    """The gap (µs) above which a report starts an iteration, or None when the gaps form one group. The
    split falls only where neighbouring gaps differ `min_step` times: with fewer than `min_long` long
    gaps yet, Otsu would otherwise cut the short group (measured: 12 | 14 ms among 12-16 ms flights).
    It lies midway (in logarithms) between the two groups' nearest gaps, or at most `above_short` x the
    short group's longest."""
    logs = sorted(math.log(max(g, 1)) for g in gaps)
    n = len(logs)
    if n < 2:
        return None
    total = sum(logs)
    best, best_at = -1.0, None
    low_sum = 0.0
    for i in range(1, n - min_long + 1):
        low_sum += logs[i - 1]
        step = logs[i] - logs[i - 1]
        if step <= 0 or step < math.log(min_step):
            continue
        m_low, m_high = low_sum / i, (total - low_sum) / (n - i)
        between = i * (n - i) * (m_high - m_low) ** 2
        if between > best:
            best, best_at = between, i
    if best_at is None:
        return None
    m_low = sum(logs[:best_at]) / best_at
    m_high = sum(logs[best_at:]) / (n - best_at)
    if m_high - m_low < math.log(min_ratio):
        return None
    split = math.exp((logs[best_at - 1] + logs[best_at]) / 2)
    return min(split, math.exp(logs[best_at - 1]) * above_short) if above_short else split


class IterationSegmenter:
    """One key's reports in, one verdict each: does this report start an iteration?"""

    def __init__(self, config: SegmenterConfig | None = None):
        self.config = config or SegmenterConfig()
        self._gaps: deque[int] = deque(maxlen=self.config.history)
        self._times: deque[int] = deque(maxlen=self.config.history)  # the report behind each gap
        self._first: int | None = None   # the first report since the history began: a start
        self._last: int | None = None
        self._silences = False
        self.threshold_us: float | None = None

    def starts_iteration(self, t_us: int, idle_us: int | None = None) -> bool:
        """`idle_us`: the silence before the report, as the switch measured it (None: the time since the
        key's previous report stands for it)."""
        last, self._last = self._last, t_us
        if last is None or t_us <= last:  # the first report, or the switch restarted
            self._gaps.clear()
            self._times.clear()
            self._first = t_us
            return True
        self._silences = idle_us is not None
        gap = idle_us if self._silences else t_us - last
        if len(self._times) == self._times.maxlen:
            self._first = None   # the oldest report leaves the history: the first no longer leads it
        self._gaps.append(gap)
        self._times.append(t_us)
        self.threshold_us = self._split()
        if self.threshold_us is not None and self._stale(self.threshold_us):
            recent = self._runs(self.threshold_us)[-1]
            self._gaps = deque(list(self._gaps)[-recent:], maxlen=self.config.history)
            self._times = deque(list(self._times)[-recent:], maxlen=self.config.history)
            self._first = None
            self.threshold_us = self._split()
        if self.threshold_us is not None and not any(self._runs(self.threshold_us)[1:-1]):
            self.threshold_us = None   # no short gap between two long ones yet: nothing shows sub-bursts
        return self.threshold_us is None or gap > self.threshold_us

    def starts_us(self) -> list[int]:
        """The reports in the history (the latest included) that the split in force takes for iteration
        starts, oldest first: every one while there is none. When a split first forms, the reports
        before it were all taken for starts; these are the ones that were."""
        first = [] if self._first is None else [self._first]
        if self.threshold_us is None:
            return first + list(self._times)
        return first + [t for t, g in zip(self._times, self._gaps) if g > self.threshold_us]

    def _split(self) -> float | None:
        cfg = self.config
        step = cfg.min_step if self._silences else 1.0
        if len(self._gaps) < cfg.min_gaps:
            return None
        split = split_gap(self._gaps, cfg.min_ratio, cfg.min_long, step)
        if split is None and cfg.decisive_ratio:
            split = split_gap(self._gaps, cfg.decisive_ratio, cfg.min_long - 1, step, cfg.decisive_above)
        return split

    def _runs(self, threshold: float) -> list[int]:
        """The lengths of the runs of short gaps, oldest first; the last is the run since the last long gap."""
        runs = [0]
        for g in self._gaps:
            if g > threshold:
                runs.append(0)
            else:
                runs[-1] += 1
        return runs

    def _stale(self, threshold: float) -> bool:
        """The long gaps have stopped recurring: the run of short ones since the last is long in count and
        in time, `stale_factor` times the longest long gap. In count alone, one iteration of five flights
        ended a split whose long gaps had had at most one short between them (measured: resnet's PS port
        with G learned, iteration 2 at 10 ms silences; its split was lost until iteration 5)."""
        runs = self._runs(threshold)
        between = runs[1:-1]   # runs with a long gap on both sides
        if runs[-1] <= max(self.config.min_gaps, self.config.stale_factor * max(between, default=0)):
            return False
        longs = [(t, g) for t, g in zip(self._times, self._gaps) if g > threshold]
        last_long = longs[-1][0]
        # An iteration can last longer than the silence before it (pcn-back-to-back: 600 ms iterations
        # after 164-193 ms silences; a split from those two was dropped 518 ms into the third iteration)
        longest = max([g for _, g in longs] + [b - a for (a, _), (b, _) in zip(longs, longs[1:])])
        return self._times[-1] - last_long > self.config.stale_factor * longest


def learned_gap_us(reports: Iterable[tuple[int, int | None]], config: SegmenterConfig | None = None) -> float | None:
    """The split a key's segmenter holds after these reports ((t_us, idle_us), switch clock), as the
    controller's would: the learned G, or None when the silences form one group (every report starts an
    iteration)."""
    segmenter = IterationSegmenter(config)
    for t, idle in reports:
        segmenter.starts_iteration(int(t), None if idle is None else int(idle))
    return segmenter.threshold_us


def iteration_gap_us(packet_times_us, configured: int | None = None) -> tuple[int, str]:
    """G for one job's data packets (µs, ascending): the configured G, or the one learned from the bursts
    the switch reports at REPORT_GAP_US and the silences before them (never below REPORT_GAP_US):
    (G, "configured" | "learned")."""
    if configured:
        return int(configured), "configured"
    times = np.asarray(packet_times_us, dtype=np.int64)
    silence = np.diff(times, prepend=np.iinfo(np.int64).min // 2)
    starts = silence > REPORT_GAP_US
    learned = learned_gap_us(zip(times[starts].tolist(), silence[starts].tolist()))
    return max(REPORT_GAP_US, round(learned)) if learned is not None else REPORT_GAP_US, "learned"


@dataclass(frozen=True)
class GapWriteConfig:
    steady: int = 8            # starts a key's split must have taken before it counts
    raise_factor: float = 1.2  # write only a G this much above the one in force (G only rises)
    starts: int = 16           # recent iteration starts per key whose silences bound G
    margin: float = 3.0        # G stays this many times below the shortest silence before a start (a
                               # warming PS's silences shrink: on resnet, a split of 150 ms was ready at
                               # iteration 11, the starts' silences then 225 ms and later 117-147 ms; at 1.5
                               # those starts would not have been reported; replayed on 58 learned-G runs,
                               # at 3 with `steady` starts no start of 25 ms silence or more fell under G,
                               # at 1.5, 7 did, in a resnet and a pcn-back-to-back run)


class LearnedGaps:
    """Which G to write into the switch for a job whose G is learned, so that the switch itself stops
    reporting the silences inside an iteration (each a digest, and a chance to take a sub-burst for a
    start). Per (switch, job): the smallest split of the job's keys that have taken `steady` starts since
    it formed, and never closer than `margin` to the shortest silence before an iteration start at any of
    its keys (a port whose silences form one group is all iteration starts: a G above them would merge
    its iterations). G only rises: the silences under a written G are no longer seen."""

    def __init__(self, config: GapWriteConfig | None = None):
        self.config = config or GapWriteConfig()
        self._split: dict = {}
        self._starts: dict = {}
        self.written: dict[tuple[str, int], int] = {}

    def observe(self, key, idle_us: int | None, starts_iteration: bool, split_us: float | None) -> int | None:
        """One report of `key` (a BurstKey): the G to write for its (switch, job) now, or None."""
        cfg = self.config
        if split_us is not None and key not in self._split:
            # The key's split formed: before it every report was taken for a start, flights too, and
            # their silences held G down until 16 starts had passed (measured: pcn-ring, splits of 26-87
            # ms formed at iteration 7-9, G written at iteration 21-35; the switch reported every
            # flight at 10 ms until then, 39-104 sub-bursts a run at the bottleneck).
            self._starts.pop(key, None)
        if starts_iteration and idle_us is not None:
            self._starts.setdefault(key, deque(maxlen=cfg.starts)).append(idle_us)
        if split_us is None:
            self._split.pop(key, None)
            return None
        self._split[key] = split_us
        mine = [k for k in self._split if (k.switch, k.job) == (key.switch, key.job)]
        ready = [self._split[k] for k in mine if len(self._starts.get(k, ())) >= cfg.steady]
        shortest = [min(s) for k, s in self._starts.items() if (k.switch, k.job) == (key.switch, key.job) and s]
        if not ready or not shortest:
            return None
        gap = round(min(min(ready), min(shortest) / cfg.margin))
        if gap <= self.written.get((key.switch, key.job), REPORT_GAP_US) * cfg.raise_factor:
            return None
        self.written[(key.switch, key.job)] = gap
        return gap

    def forget_switch(self, switch: str) -> None:
        for store in (self._split, self._starts):
            for key in [k for k in store if k.switch == switch]:
                del store[key]
