"""Telling iteration starts from sub-bursts in a key's burst reports (controller/segments.py)."""

from __future__ import annotations

import random

from burst_traces import T0, lattice, with_sub_bursts
from pcnlab.controller.segments import IterationSegmenter, SegmenterConfig, split_gap


def test_two_groups_of_gaps_split_between_them():
    gaps = [8_000, 12_000, 25_000, 15_000] * 4 + [400_000, 380_000, 420_000, 390_000]
    threshold = split_gap(gaps)
    assert 25_000 < threshold < 380_000


def test_one_group_and_a_lone_pause_do_not_split():
    assert split_gap([100_000 + 3_000 * (i % 5) for i in range(20)]) is None     # jitter only
    assert split_gap([100_000] * 30 + [3_000_000]) is None                        # one pause
    assert split_gap([100_000, 200_000] * 10) is None                             # a missed report now and then


def test_a_pause_among_sub_bursts_keeps_the_split_between_flights_and_iterations():
    gaps = [20_000] * 18 + [400_000] * 6 + [5_000_000]
    assert 20_000 < split_gap(gaps) < 400_000


def test_segmenter_finds_every_iteration_start_after_a_few():
    rng = random.Random(3)
    starts = lattice(rng, 60, 500_000, 0.05)
    times = with_sub_bursts(rng, starts)
    segmenter = IterationSegmenter()
    verdicts = {t: segmenter.starts_iteration(t) for t in times}
    later = [t for t in times if t > starts[5]]
    assert all(verdicts[t] == (t in set(starts)) for t in later)


def test_without_sub_bursts_every_report_starts_an_iteration_and_a_restart_resets():
    segmenter = IterationSegmenter()
    assert all(segmenter.starts_iteration(T0 + k * 100_000) for k in range(30))
    assert segmenter.starts_iteration(1_000)   # the switch's clock went back: it restarted


def test_long_pauses_that_stop_recurring_do_not_make_every_iteration_a_sub_burst():
    # Measured on pcn-ring: the ranks' setup left gaps of 2.6 s, 2.5 s and 450 ms before iterations about
    # 330 ms apart; the long group of three outlived them and every iteration was a 'sub-burst'.
    rng = random.Random(5)
    t, times = T0, [T0]
    for gap in [2_585_000, 2_549_000, 448_000] + [int(rng.uniform(290_000, 380_000)) for _ in range(40)]:
        t += gap
        times.append(t)
    segmenter = IterationSegmenter()
    verdicts = [segmenter.starts_iteration(t) for t in times]
    missed = verdicts.count(False)
    assert missed <= SegmenterConfig().min_gaps, verdicts
    assert all(verdicts[-30:])
