"""The rules a port's plan follows beyond the interleaving core (controller/turn_rules.py)."""

from __future__ import annotations

import math

import pytest

from pcnlab.controller.interleave import JobPhase, plan
from pcnlab.controller.turn_rules import (MeasuredPhase, cheapest, closing, obeyed, repays, same_periods, shared,
                                         stuck, unmoved, within)

MS = 1000


def test_periods_within_their_spread_or_their_slip_are_one_and_others_stay_apart():
    near = [MeasuredPhase(JobPhase(1, 940 * MS, 400 * MS), 10 * MS), MeasuredPhase(JobPhase(2, 960 * MS, 400 * MS), 12 * MS)]
    assert {p.period_us for p in same_periods(near, horizon=10)} == {950 * MS}
    exact = [MeasuredPhase(JobPhase(1, 940 * MS, 400 * MS), 0), MeasuredPhase(JobPhase(2, 946 * MS, 400 * MS), 0)]
    assert {p.period_us for p in same_periods(exact, horizon=10)} == {943 * MS}      # 6 ms < a tenth of 940 / 10
    far = [MeasuredPhase(JobPhase(1, 850 * MS, 250 * MS), 5 * MS), MeasuredPhase(JobPhase(2, 1150 * MS, 250 * MS), 5 * MS)]
    assert [p.period_us for p in same_periods(far, horizon=10)] == [850 * MS, 1150 * MS]
    planned = (JobPhase(1, 950 * MS, 400 * MS),)
    again = [MeasuredPhase(JobPhase(1, 955 * MS, 400 * MS), 10 * MS)]
    assert same_periods(again, 10, planned)[0].period_us == 950 * MS             # as close to its planned one


def test_a_period_near_a_multiple_of_a_shorter_one_is_that_multiple_and_the_plan_then_clears_them():
    # Plan 3 of interleave-three with jobs.2.compute_ms=1450 (d78a1f6, 2026-11-30): c at 1,717 ms beside
    # two jobs at 866 ms. On their LCM circle c slid across the others (0.578 of it left overlapped);
    # 1,717 / 2 is 7.8 ms from 866, under a tenth of 866 over 10 periods: one circle of 2 x 866.
    measured = [MeasuredPhase(JobPhase(1, 866_357, 268_780, 10_887_494), 0),
                MeasuredPhase(JobPhase(2, 866_357, 231_252, 10_845_952), 0),
                MeasuredPhase(JobPhase(3, 1_717_084, 248_687, 10_884_811), 0)]
    taken = same_periods(measured, horizon=10)
    assert [p.period_us for p in taken] == [866_357, 866_357, 2 * 866_357]
    assert plan([m.phase for m in measured]).overlap_fraction[3] > 0.5
    assert plan(taken).overlap_us == 0.0
    # Not a multiple: 1.39 s beside 1.04 s (their ratio rounds to 1), or 1.80 s beside 0.85 s (2.12).
    for long_us in (1_390_000, 1_800_000):
        other = [measured[0], MeasuredPhase(JobPhase(3, long_us, 250_000, 0), 0)]
        assert [p.period_us for p in same_periods(other, horizon=10)] == [866_357, long_us]
    # Within twice the spread: 1,760 / 2 = 880, 13.6 ms off; c's periods spread 12 ms (6 over 2: 12 ms
    # allowed, no), the shorter job's 7.5 (15 ms allowed, yes).
    spread = [measured[0], MeasuredPhase(JobPhase(3, 1_760_000, 250_000, 0), 12_000)]
    assert [p.period_us for p in same_periods(spread, horizon=10)] == [866_357, 1_760_000]
    spread[0] = MeasuredPhase(measured[0].phase, 7_500)
    assert [p.period_us for p in same_periods(spread, horizon=10)] == [866_357, 2 * 866_357]


def test_the_cheapest_common_delay_and_whether_a_plan_repays_it():
    made = plan([JobPhase(1, 1000 * MS, 350 * MS, 0), JobPhase(2, 1000 * MS, 350 * MS, 700 * MS)])
    cheap = cheapest(made)
    assert sum(cheap.shifts_us.values()) <= sum(made.shifts_us.values())
    assert repays(cheap, horizon=10) and not repays(cheap, horizon=10, extra_us=10_000 * MS)
    still = unmoved(made)
    assert still.shifts_us == {1: 0.0, 2: 0.0} and still.overlap_fraction == made.before_fraction
    assert stuck(still) and not stuck(made)


def test_only_the_paying_jobs_overlap_repays_the_delays():
    # Job 1 anchors at 0 (250 ms), job 2 (350 ms) starts 300 ms before it: 50 ms of each one's
    # communication overlap the other's a period; clearing them delays job 2 by most of a period.
    made = plan([JobPhase(1, 1000 * MS, 250 * MS, 0), JobPhase(2, 1000 * MS, 350 * MS, 700 * MS)])
    assert made.shared_us(before=True) == 100 * MS and made.shared_us([2], before=True) == 50 * MS
    assert made.overlap_us == 0.0 and 650 * MS <= made.shifts_us[2] < 1000 * MS
    assert repays(made, horizon=14) and not repays(made, horizon=14, paying=[2])
    assert repays(made, horizon=20, paying=[2])


def test_the_share_of_communication_that_overlapped_another_jobs():
    # Job 1: 0-400 and 1,000-1,400; job 2: 300-500 (100 with job 1) and 2,000-2,200 (alone): 200 of 1,200.
    assert shared({1: [(0, 400), (1000, 1400)], 2: [(300, 500), (2000, 2200)]}) == pytest.approx(200 / 1200)
    assert shared({1: [(0, 400)], 2: [(400, 800)]}) == 0.0 and shared({}) == 0.0


def test_a_job_is_held_back_when_it_would_cross_its_room_ahead_before_the_check_after_next():
    # The anchor (fixed) communicates 0-290 ms of 948; job 2 (410 ms) starts after that. Seen at 941 ms a
    # period it comes 7 ms closer each period; with spreads of 3 and 1 ms its reach over 3 + 1 periods is
    # 4 x 7 + 3 x 2 x 1.4826 x 3.16 = 56.1 ms: 70 ms of room is more; 40 ms, or an overlap of 10 ms at its
    # head, is held back; an overlap of 90 ms is more than it could have crossed since the last check (the
    # plan's overlap rules are for that). Seen at 955 it moves away, and is not held back; nor one whose
    # period is measured 15 % shorter (not slipping: another period); nor one whose periods, read while
    # colliding, spread 40 ms: a reach of 385 ms, more than the 248 ms of room both sides.
    def measured(seen_2, start_2, spread_2=1):
        return {1: MeasuredPhase(JobPhase(1, 948 * MS, 290 * MS, 0), 3 * MS, 948 * MS),
                2: MeasuredPhase(JobPhase(2, seen_2 * MS, 410 * MS, start_2 * MS), spread_2 * MS, seen_2 * MS)}
    reach = 4 * 7 * MS + 3 * 2 * 1.4826 * math.hypot(3 * MS, 1 * MS)
    for seen_2, start_2, ahead in ((941, 360, None), (941, 330, 40), (941, 280, -10), (941, 200, None),
                                   (955, 300, None), (806, 330, None)):
        m = measured(seen_2, start_2)
        found = closing([m[1].phase, m[2].phase], m, check_every=3)
        assert found == ({} if ahead is None else {2: (pytest.approx(ahead * MS), pytest.approx(reach), 7 * MS)}), \
            (seen_2, start_2)
    assert closing([measured(941, 330, 40)[1].phase, measured(941, 330, 40)[2].phase], measured(941, 330, 40), 3) == {}


def test_a_hold_moves_a_job_only_later_within_its_room_and_was_taken_when_the_room_grew_by_half_of_it():
    # The anchor 0-290 ms of 948, job 2 (410 ms) 40 ms after it: 208 ms behind it. Centred, it is moved 84 ms.
    phases = [JobPhase(1, 948 * MS, 290 * MS, 0), JobPhase(2, 948 * MS, 410 * MS, 330 * MS)]
    made = plan(phases)
    assert made.shifts_us[2] == pytest.approx(84 * MS, abs=1 * MS) and within(made, {2})
    assert not within(made, {3}) and not within(unmoved(made), {2})   # moves another; moves nobody
    wrapped = plan([JobPhase(1, 948 * MS, 290 * MS, 0), JobPhase(2, 948 * MS, 410 * MS, 600 * MS)])
    assert wrapped.shifts_us[2] > 500 * MS and not within(wrapped, {2})   # past the anchor's next communication
    # Held back 84 ms at 40 ms of room, slipping 7 ms a period: 3 periods later, taken it has 103 ms, ignored 19.
    before = (40 * MS, 84 * MS, 0)
    assert obeyed(before, 103 * MS, 7 * MS, 3 * 948 * MS, 948 * MS)
    assert not obeyed(before, 19 * MS, 7 * MS, 3 * 948 * MS, 948 * MS)


def test_a_stretch_seen_repays_a_plan_that_leaves_the_job_apart_where_the_models_overlap_would_not():
    # Job 2 overlaps the fixed job 1 by 41 ms of its 410 (the model's); clearing it costs a 700-odd ms
    # delay, which 10 periods of 41 ms do not repay. Seen 200 ms a period slower than alone, they do; a
    # stretch of the fixed job's own does not pay for job 2's delay.
    made = plan([JobPhase(1, 948 * MS, 290 * MS, 0), JobPhase(2, 948 * MS, 410 * MS, 579 * MS)])   # its tail
    assert made.overlap_fraction[2] == 0 and made.before_fraction[2] == pytest.approx(0.1, abs=0.001)
    assert made.shifts_us[2] > 410 * MS
    assert not repays(made, 10, paying=[2])
    assert repays(made, 10, paying=[2], stretch={2: 200 * MS})
    assert not repays(made, 10, paying=[2], stretch={1: 200 * MS, 2: -5 * MS})
