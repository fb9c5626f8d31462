"""The interleaving core (controller/interleave.py) on cases whose answers are known by hand: two equal
jobs half a period apart, three a third apart, CASSINI's unified circle for periods 2000 and 1300 ms
(the jobs' arrangement repeats every GCD, 100 ms, of relative shift), overlap no shift removes, the
bounded circle, and drift from a plan."""

from __future__ import annotations

import math

import pytest

from pcnlab.controller.interleave import JobPhase, drift, fractions, plan, room, unified_circle

MS = 1000.0


def test_two_equal_jobs_communicating_40_percent_go_half_a_period_apart():
    p = plan([JobPhase("a", 1000 * MS, 400 * MS), JobPhase("b", 1000 * MS, 400 * MS)])
    assert p.shifts_us == {"a": 0.0, "b": pytest.approx(500 * MS, abs=1)}
    assert p.overlap_fraction == {"a": 0.0, "b": 0.0}
    assert p.before_fraction == {"a": pytest.approx(1.0), "b": pytest.approx(1.0)}   # both at 0: all of it
    assert p.clearance_us == pytest.approx(100 * MS, abs=1)      # 100 ms free on each side of each burst
    assert p.overlap_us == 0.0


def test_the_shift_counts_from_where_each_job_starts_now():
    # a starts at 100 ms, b at 300 ms: b goes to a + 500 ms = 600 ms, a delay of 300 ms
    p = plan([JobPhase("a", 1000 * MS, 400 * MS, 100 * MS), JobPhase("b", 1000 * MS, 400 * MS, 300 * MS)])
    assert p.shifts_us["b"] == pytest.approx(300 * MS, abs=1)
    assert p.before_fraction["a"] == pytest.approx(200 / 400)


def test_three_equal_jobs_go_a_third_of_a_period_apart():
    jobs = [JobPhase(k, 900 * MS, 270 * MS) for k in ("a", "b", "c")]   # 30 % each: 90 % of the port
    p = plan(jobs)
    assert sorted(p.shifts_us.values()) == pytest.approx([0, 300 * MS, 600 * MS], abs=50)
    assert set(p.overlap_fraction.values()) == {0.0}
    assert p.clearance_us == pytest.approx(30 * MS, abs=50)      # the 10 % spare, shared out evenly


def test_unequal_periods_2000_and_1300_ms_on_the_unified_circle():
    a, b = JobPhase("a", 2000 * MS, 40 * MS), JobPhase("b", 1300 * MS, 40 * MS)
    circle = unified_circle([a.period_us, b.period_us])
    assert circle.length_us == 26_000 * MS and circle.exact and (circle.turns(0), circle.turns(1)) == (13, 20)
    p = plan([a, b])
    # b's starts meet a's at every offset 100 k + shift (mod 1300): none overlaps when shift mod 100 is in
    # [40, 60]; the middle, with the least delay, is 50 ms
    assert p.shifts_us == {"a": 0.0, "b": pytest.approx(50 * MS, abs=1)}
    assert p.overlap_fraction == {"a": 0.0, "b": 0.0}
    assert p.clearance_us == pytest.approx(10 * MS, abs=1)
    # both starting at 0 coincide once per circle: 40 ms of a's 13 x 40 and of b's 20 x 40
    assert p.before_fraction == {"a": pytest.approx(1 / 13), "b": pytest.approx(1 / 20)}


@pytest.mark.parametrize("period_b", [1000.0, 1300.0])
def test_overlap_no_shift_removes(period_b):
    if period_b == 1000.0:        # 60 % each of one period: at least 20 % of it is shared whatever the shift
        p = plan([JobPhase("a", 1000 * MS, 600 * MS), JobPhase("b", 1000 * MS, 600 * MS)])
        assert p.overlap_fraction == {"a": pytest.approx(1 / 3), "b": pytest.approx(1 / 3)}
        assert p.shifts_us["b"] == pytest.approx(500 * MS, abs=1)   # the middle of [400, 600] ms, all as good
    else:                         # 60 + 60 ms > the 100 ms GCD: 20 ms shared once per 26 s circle
        p = plan([JobPhase("a", 2000 * MS, 60 * MS), JobPhase("b", 1300 * MS, 60 * MS)])
        assert p.overlap_fraction == {"a": pytest.approx(20 / (13 * 60)), "b": pytest.approx(20 / (20 * 60))}
        assert p.shifts_us["b"] == pytest.approx(50 * MS, abs=1)
    assert p.clearance_us == 0.0
    assert p.overlap_us > 0


def test_a_large_lcm_is_bounded_by_rounding_the_periods():
    circle = unified_circle([2000 * MS, 1999 * MS])        # exact LCM: 3998 s, 1999 periods
    assert circle.length_us <= 64 * 2000 * MS and not circle.exact
    assert max(abs(e) for e in circle.period_error_us) <= circle.quantum_us / 2 + 1e-9
    p = plan([JobPhase("a", 2000 * MS, 400 * MS), JobPhase("b", 1999 * MS, 400 * MS)])
    assert p.overlap_fraction == {"a": 0.0, "b": 0.0} and p.circle == circle


def test_the_plan_is_deterministic_and_the_first_job_keeps_its_time():
    jobs = [JobPhase(1, 1700 * MS, 300 * MS, 12_345), JobPhase(2, 1100 * MS, 200 * MS, 999_000),
            JobPhase(3, 850 * MS, 100 * MS, 4_000)]
    first, again = plan(jobs), plan(list(jobs))
    assert first == again
    assert first.shifts_us[1] == 0.0
    assert all(0 <= first.shifts_us[j.job] < first.circle.periods_us[i] for i, j in enumerate(jobs))
    assert sum(first.overlap_fraction.values()) <= sum(first.before_fraction.values())
    # what it predicts is what the circle gives for the shifted starts
    shifted = [JobPhase(j.job, j.period_us, j.comm_us, j.start_us + first.shifts_us[j.job]) for j in jobs]
    assert fractions(shifted, circle=first.circle) == pytest.approx(first.overlap_fraction)


def test_a_job_that_always_communicates_overlaps_every_other():
    p = plan([JobPhase("a", 1000 * MS, 1200 * MS), JobPhase("b", 1000 * MS, 100 * MS)])
    assert p.overlap_fraction["b"] == pytest.approx(1.0) and p.overlap_fraction["a"] == pytest.approx(0.1)


def test_drift_says_when_to_plan_again():
    a, b = JobPhase("a", 1000 * MS, 400 * MS, 100 * MS), JobPhase("b", 1000 * MS, 400 * MS, 300 * MS)
    p = plan([a, b])                                    # b to 600 ms; 100 ms clear on each side

    def seen(da, db, period_b=1000 * MS):
        return [JobPhase("a", 1000 * MS, 400 * MS, 100 * MS + da + 7 * 1000 * MS),   # seven periods on
                JobPhase("b", period_b, 400 * MS, 600 * MS + db + 7 * 1000 * MS)]

    on_plan = drift(p, seen(0, 0))
    assert on_plan.offsets_us == {"a": 0.0, "b": pytest.approx(0, abs=1)} and not on_plan.replan
    together = drift(p, seen(200 * MS, 200 * MS))        # both late alike: still interleaved
    assert together.worst_us == pytest.approx(0, abs=1) and not together.replan
    small = drift(p, seen(0, 30 * MS))
    assert small.offsets_us["b"] == pytest.approx(30 * MS) and small.tolerance_us == pytest.approx(50 * MS, abs=1)
    assert not small.replan and small.overlap_fraction == {"a": 0.0, "b": 0.0}
    far = drift(p, seen(0, -470 * MS))                    # b now starts 30 ms after a: 370 ms of its 400 shared
    assert far.offsets_us["b"] == pytest.approx(-470 * MS) and far.replan and "moved 470000" in far.reason
    assert far.overlap_fraction["b"] == pytest.approx(370 / 400)
    assert drift(p, seen(0, 0, period_b=1100 * MS)).reason == "a period changed"
    assert drift(p, seen(0, 0)[:1]).replan


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        JobPhase("a", 0, 10)
    with pytest.raises(ValueError):
        JobPhase("a", 100, -1)
    with pytest.raises(ValueError):
        plan([])
    with pytest.raises(ValueError):
        plan([JobPhase("a", 100, 10), JobPhase("a", 100, 10)])
    assert math.isinf(plan([JobPhase("a", 100 * MS, 10 * MS)]).clearance_us)


def test_room_is_the_free_time_before_and_after_a_jobs_communication_round_the_circle():
    ms = 1000
    phases = [JobPhase(1, 1000 * ms, 300 * ms, 0), JobPhase(2, 1000 * ms, 400 * ms, 400 * ms)]
    circle = unified_circle([1000 * ms, 1000 * ms])
    assert room(phases, [0, 0], circle, 1) == (100 * ms, 200 * ms)
    assert room(phases, [0, 0], circle, 0) == (200 * ms, 100 * ms)      # job 1's room ahead wraps the circle
    assert room(phases, [0, 200 * ms], circle, 1) == (300 * ms, 0.0)    # its end touches job 1's next start
    assert room(phases, [0, 850 * ms], circle, 1) == (-50 * ms, 350 * ms)    # its head 50 ms into job 1's
    assert room(phases, [0, 500 * ms], circle, 1) == (600 * ms, -300 * ms)   # its tail 300 ms into the next
    assert room(phases[:1], [0], unified_circle([1000 * ms]), 0) == (math.inf, math.inf)
    # three jobs: job 1's 0-500 ms still runs when job 3 (300-350) has ended: job 2 at 450 is in job 1's
    three = [JobPhase(1, 1000 * ms, 500 * ms, 0), JobPhase(3, 1000 * ms, 50 * ms, 300 * ms),
             JobPhase(2, 1000 * ms, 300 * ms, 450 * ms)]
    assert room(three, [0, 0, 0], unified_circle([1000 * ms] * 3), 2) == (-50 * ms, 250 * ms)
    # two turns of job 2 (500 ms) to one of job 1 (1000): the least room of both
    turns = [JobPhase(1, 1000 * ms, 300 * ms, 0), JobPhase(2, 500 * ms, 100 * ms, 350 * ms)]
    assert room(turns, [0, 0], unified_circle([1000 * ms, 500 * ms]), 1) == (50 * ms, 50 * ms)
