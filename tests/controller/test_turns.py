"""Turns at a shared port (controller/turns.py), fed as the scheduler feeds it: jobs' starts and the
silence before each, in a switch's clock, from a fluid model of the port (tests/fluid_port.py: while k
jobs send, each gets a k-th of it). A plan comes once both showed `after` iterations, with the shift
that puts them half a period apart; jobs that obey it are not planned again; one that ignores it is
fixed after IGNORED of them (one); jobs apart are not moved on estimates that read them colliding; a job
without the channel is the fixed anchor; a job at a second port is fixed there; a third job that comes is
planned in. Holds: test_turns_holds.py."""

from __future__ import annotations

import pytest

from fluid_port import MS, feed, overlapped
from pcnlab.controller.turns import IGNORED, TurnConfig, Turns


def test_two_equal_jobs_starting_together_are_planned_half_a_period_apart_once():
    turns = Turns(TurnConfig(after=4, check_every=3))
    plans = feed(turns, {1: (1000, 400, 0), 2: (1000, 400, 10)}, 30, obey={1, 2})
    assert len(plans) == 1, [p.reason for p in plans]
    first = plans[0]
    assert first.reason == "first plan" and first.number == 1
    assert first.plan.before_fraction[2] > 0.9 and first.plan.overlap_fraction == {1: 0.0, 2: 0.0}
    (order,) = [o for o in first.orders if o.shift_us > 0]      # the anchor keeps its place: one job is moved
    assert order.job == 2 and order.shift_us == pytest.approx(490 * MS, abs=2 * MS)
    fields = first.fields()
    assert fields["period_us"] == {"1": 1000 * MS, "2": 1000 * MS} and fields["comm_us"] == {"1": 400 * MS, "2": 400 * MS}


def _colliding_starts(turns: Turns, split_at: int, earlier: bool) -> int | None:
    """Two jobs colliding every 1.2 s (800 ms of communication each, 400 ms of silence), their splits formed
    at their `split_at`-th start (as the scheduler feeds them: not split before; `earlier`: the starts
    before the split given with its first). The start (0-based, of job 2) the first plan came at."""
    starts = {job: [(k * 1200 * MS + job * 10 * MS, None if k == 0 else 400 * MS) for k in range(8)]
              for job in (1, 2)}
    for k in range(8):
        for job in (1, 2):
            t, idle = starts[job][k]
            split = k >= split_at
            record = turns.on_start("s1", 1, job, t, idle, split, earlier=starts[job][:k] if earlier else ())
            if record is not None:
                assert record.reason == "first plan" and record.plan.before_fraction[2] > 0.9, record
                for phase in record.plan.phases:      # alone: its silence and its half of the 800 ms
                    assert phase.period_us == pytest.approx(800 * MS, abs=10 * MS), phase
                return k
    return None


def test_the_starts_before_the_split_begin_the_track_and_bring_the_first_plan_forward():
    # Split at the third start: given the two before it, both jobs have 4 starts at their fourth (k=3);
    # without them, 4 starts from the split come at k=5.
    assert _colliding_starts(Turns(TurnConfig(after=4)), split_at=2, earlier=True) == 3
    assert _colliding_starts(Turns(TurnConfig(after=4)), split_at=2, earlier=False) == 5
    turns = Turns(TurnConfig(after=4))
    assert not turns.told("s1", 1, 1)
    turns.on_start("s1", 1, 1, 5000 * MS, 400 * MS, True, earlier=[(1000 * MS, None), (5000 * MS, 400 * MS),
                                                                     (6000 * MS, 400 * MS)])
    assert turns.told("s1", 1, 1)
    assert list(turns._ports[("s1", 1)].tracks[1].starts) == [1000 * MS, 5000 * MS]   # none at or after it


def test_a_flight_taken_for_a_start_in_its_rhythms_slot_is_no_iteration_here():
    # After a shift the predictor's rhythm still expects the old period; a flight 16 ms after a packet came
    # in its slot and was taken for a start. Its silence is below the split (100 ms): not a start here.
    turns = Turns(TurnConfig(after=4))
    for k in range(3):
        turns.on_start("s1", 1, 1, k * 1000 * MS, None if k == 0 else 600 * MS, gap_us=100 * MS)
    assert turns.on_start("s1", 1, 1, 2400 * MS, 16 * MS, gap_us=100 * MS) is None
    track = turns._ports[("s1", 1)].tracks[1]
    assert list(track.starts) == [0, 1000 * MS, 2000 * MS] and len(track.comms) == 2
    turns.on_start("s1", 1, 1, 3000 * MS, 500 * MS, gap_us=100 * MS)
    assert list(track.starts)[-1] == 3000 * MS and track.comms[-1] == (2000 * MS, 2500 * MS, 3000 * MS)


def test_jobs_that_ignore_their_shifts_are_not_shifted_for_ever():
    # Neither job waits for its slot: the one moved IGNORED times is fixed (it ignores its shifts), the
    # other is then moved around it; no more than IGNORED shifts each, also with max_plans 1.
    turns = Turns(TurnConfig(after=4, check_every=3, max_plans=3))
    plans = [p for p in feed(turns, {1: (1000, 400, 0), 2: (1000, 400, 10)}, 60, obey=set()) if p.orders]
    moving = [[o.job for o in p.orders if o.shift_us > 0] for p in plans]
    first = moving[0][0]
    assert moving[:IGNORED] == [[first]] * IGNORED and turns.ignored[first] == IGNORED, [p.reason for p in plans]
    assert plans[IGNORED].fixed == (first,) and moving[IGNORED] == [3 - first] and len(moving) <= 2 * IGNORED
    once = Turns(TurnConfig(after=4, check_every=3, max_plans=1))     # found ignoring, each gives the plan back
    sent = [o.job for p in feed(once, {1: (1000, 400, 0), 2: (1000, 400, 10)}, 60, obey=set()) for o in p.orders
            if o.shift_us > 0]
    assert sorted(sent) == [1] * IGNORED + [2] * IGNORED


def test_a_job_twice_as_slow_is_planned_once_and_stays_in_its_slot():
    # 2:1, as interleave.yaml with jobs.1.compute_ms=1460: the slow job keeps twice the faster one's
    # history, so its collisions from before the plan outlived the faster job's samples and read as its
    # time alone (850 ms of 445): its period read 2,082 ms, and the checks moved it four times more.
    turns = Turns(TurnConfig())
    plans = feed(turns, {1: (940, 410, 0), 2: (1880, 445, 5)}, 40, obey={1, 2})
    assert [p.reason for p in plans] == ["first plan"], [(p.reason, p.fields()["comm_us"]) for p in plans]
    assert plans[0].fields()["period_us"] == {"1": 940 * MS, "2": 1880 * MS}
    assert overlapped(turns, since_us=0) == 0.0


def test_unequal_periods_are_planned_on_their_common_circle():
    turns = Turns(TurnConfig(after=4, check_every=4))
    plans = feed(turns, {1: (600, 150, 0), 2: (900, 200, 5)}, 30, obey={1, 2})
    assert plans[0].plan.circle.length_us == 1800 * MS
    assert sum(plans[0].plan.overlap_fraction.values()) < sum(plans[0].plan.before_fraction.values())


def test_a_job_without_the_channel_is_the_fixed_anchor():
    turns = Turns(TurnConfig(after=4, check_every=3))
    first = feed(turns, {1: (1000, 400, 0), 2: (1000, 400, 10)}, 6, obey={1, 2})[0]
    mover = next(o.job for o in first.orders if o.shift_us > 0)
    turns.fix(mover)                              # its hosts refused the datagram: plan again without moving it
    replanned = feed(turns, {1: (1000, 400, 0), 2: (1000, 400, 10)}, 6, from_ms=10_000)
    assert replanned and replanned[0].fixed == (mover,)
    assert [o.job for o in replanned[0].orders] == [3 - mover]


def test_a_job_planned_at_one_port_is_fixed_at_another():
    turns = Turns(TurnConfig(after=4, check_every=3))
    jobs = {1: (1000, 300, 0), 2: (1000, 300, 10)}
    at_one = feed(turns, jobs, 6, port=1)[0]
    moved = next(o.job for o in at_one.orders if o.shift_us > 0)
    at_two = feed(turns, {moved: jobs[moved], 3: (1000, 300, 20)}, 6, port=2)[0]
    assert at_two.fixed == (moved,) and [o.job for o in at_two.orders] == [3]


def test_a_third_job_that_comes_is_planned_in():
    turns = Turns(TurnConfig(after=4, check_every=50))
    feed(turns, {1: (900, 200, 0), 2: (900, 200, 5)}, 6, obey={1, 2})
    plans = feed(turns, {1: (900, 200, 0), 2: (900, 200, 5), 3: (900, 200, 7)}, 12, obey={1, 2, 3}, from_ms=10_000)
    assert any(p.reason == "job 3 came" and set(p.plan.jobs) == {1, 2, 3} for p in plans), [p.reason for p in plans]


def test_flights_before_the_split_are_not_iterations():
    turns = Turns(TurnConfig(after=4))
    for k in range(12):                          # both jobs' flights, 15 ms apart, before any split
        for job in (1, 2):
            assert turns.on_start("s1", 1, job, k * 15 * MS + job, 10 * MS, split=False) is None
    plans = feed(turns, {1: (500, 200, 0), 2: (500, 200, 3)}, 8, obey={1, 2}, from_ms=1000)
    assert plans and plans[0].fields()["period_us"] == {"1": 500 * MS, "2": 500 * MS}


def test_periods_that_agree_within_their_spread_are_one():
    # Two identical jobs paced by compute (100 ms of communication, apart): their measured periods differ by
    # noise (512 and 489 ms medians).
    turns = Turns(TurnConfig(after=6))
    t = {1: 0, 2: 350 * MS}
    noise = {1: [0, 20, -20, 10, -10, 25, -15, 5], 2: [0, -22, 18, -8, 12, -25, 15, -5]}
    made = None
    for k in range(8):
        for job, base in ((1, 512), (2, 489)):
            made = made or turns.on_start("s1", 1, job, t[job], None if k == 0 else base * MS - 100 * MS)
            t[job] += (base + noise[job][k]) * MS
    assert made is not None
    periods = set(made.fields()["period_us"].values())
    assert len(periods) == 1 and 489 * MS <= periods.pop() <= 512 * MS
    assert made.plan.overlap_fraction == {1: 0.0, 2: 0.0}


def test_jobs_already_apart_are_recorded_where_they_are_and_sent_nothing():
    turns = Turns(TurnConfig(after=4, check_every=3))
    plans = feed(turns, {1: (1000, 400, 0), 2: (1000, 400, 500)}, 12)
    assert plans[0].orders == () and plans[0].plan.shifts_us == {1: 0.0, 2: 0.0}
    assert plans[0].plan.overlap_fraction == {1: 0.0, 2: 0.0} and plans[0].fields()["clearance_us"] == 100 * MS


def test_a_small_overlap_that_only_nearly_a_period_of_delay_would_remove_is_left():
    # Job 1 is fixed (no channel); job 2 starts 300 ms before it and its last 50 ms meet job 1's first: the
    # only delay that clears them is most of a period (it cannot start earlier). Job 2's own 50 ms of
    # overlap a period (job 1's gain does not pay for job 2's delay) do not repay 750 ms over 10 periods,
    # and do over 20; counting job 1's 50 ms too, 10 periods would have repaid it.
    for horizon, sent in ((10, False), (20, True)):
        turns = Turns(TurnConfig(after=4, check_every=3, horizon=horizon))
        turns.fix(1)
        plans = feed(turns, {1: (1000, 250, 300), 2: (1000, 350, 0)}, 8)
        assert plans, horizon
        first = plans[0]
        assert first.plan.before_fraction[1] == pytest.approx(0.2) and bool(first.orders) is sent, horizon
        if sent:
            assert first.orders[0].shift_us > 500 * MS


def test_beside_a_job_another_port_plans_both_overlaps_repay_the_delay():
    # As above, but job 1 is fixed at port 2 because port 1 plans it (it listens, and takes turns there):
    # its gain counts too, so 2 x 50 ms a period repay 750 ms over 10 periods.
    turns = Turns(TurnConfig(after=4, check_every=3, horizon=10))
    feed(turns, {1: (1000, 250, 0), 3: (1000, 250, 500)}, 6, port=1)
    plans = feed(turns, {1: (1000, 250, 300), 2: (1000, 350, 0)}, 8, port=2, from_ms=7000)
    first = plans[0]
    assert first.fixed == (1,) and first.plan.before_fraction[1] == pytest.approx(0.2)
    assert [o.job for o in first.orders] == [2] and first.orders[0].shift_us > 500 * MS


def test_regular_jobs_whose_periods_differ_by_a_few_ms_are_planned_as_one_period():
    # Two regular jobs (no spread) of 940 and 946 ms, colliding: on their exact common circle no shift
    # removes any overlap; taken as one period (they slip 60 ms in 10 periods, under a tenth of one), one
    # shift puts them apart. 940 and 1,240 ms stay two periods.
    turns = Turns(TurnConfig(after=4, check_every=3))
    first = feed(turns, {1: (940, 400, 0), 2: (946, 400, 10)}, 6)[0]
    assert set(first.fields()["period_us"].values()) == {943 * MS}
    assert first.orders and first.plan.overlap_fraction == {1: 0.0, 2: 0.0}
    apart = feed(Turns(TurnConfig(after=4, check_every=3)), {1: (940, 300, 0), 2: (1240, 300, 10)}, 6)[0]
    assert apart.fields()["period_us"] == {"1": 940 * MS, "2": 1240 * MS}


def test_where_no_job_is_fixed_the_anchor_moves_when_that_is_the_cheaper_delay():
    # Job 1 (seen first, the anchor) sends over 0-350 ms, job 2 over 700-1050: into job 1's next start,
    # which stretches both (the fluid port) until job 2 settles 750 ms after job 1, job 1's next start
    # 300 ms after job 2's. Moving job 2 clear of it (150 ms either side) takes a delay of 650 ms; moving
    # job 1, 200 ms does the same: once, and they stay 500 ms apart.
    turns = Turns(TurnConfig(after=4, check_every=3))
    plans = feed(turns, {1: (1000, 350, 0), 2: (1000, 350, 700)}, 20, obey={1, 2})
    assert len(plans) == 1, [p.reason for p in plans]
    (order,) = [o for o in plans[0].orders if o.shift_us > 0]
    assert order.job == 1 and order.shift_us == pytest.approx(200 * MS, abs=5 * MS)
    assert plans[0].plan.overlap_fraction == {1: 0.0, 2: 0.0} and plans[0].plan.shifts_us[2] == 0.0
    tracks = turns._ports[("s1", 1)].tracks
    assert tracks[2].starts[-1] - tracks[1].starts[-1] == 500 * MS


def test_an_unmoved_plan_that_left_overlap_is_made_again_as_the_estimates_change():
    # First 1,000 and 1,300 ms: on their circle no shift removes the overlap, nothing is sent. Then both
    # 1,000 ms (a job's period as first measured can be off): planned again at a check, and one shift
    # puts them apart (the next start of each, stretched as they collide, is where the plan starts from).
    turns = Turns(TurnConfig(after=4, check_every=3))
    first = feed(turns, {1: (1000, 300, 0), 2: (1300, 300, 10)}, 8, obey={1, 2})
    assert len(first) == 1 and not first[0].orders      # made again at each check, recorded only when it moves
    again = feed(turns, {1: (1000, 300, 0), 2: (1000, 300, 10)}, 14, obey={1, 2}, from_ms=20_000)
    moving = [p for p in again if p.orders]
    assert len(moving) == 1 and moving[0].reason == "overlap left: planned again", [p.reason for p in again]
    assert moving[-1] == again[-1] and moving[0].plan.overlap_fraction == {1: 0.0, 2: 0.0}


def test_an_unmoved_plan_is_made_again_at_the_anchors_next_start_not_a_check_later():
    # Two identical compute-paced jobs colliding, as the switch saw them (9c7ef61, rep 2, ms): from three
    # communications job 1 reads as a clock (1,250 ms; its periods varied less than its silences), so
    # the first plan moves nobody. At its next start, one communication more, it reads 956 ms and the
    # plan moves job 2; made again only three starts later, the jobs collided 2.5 s longer.
    seen = [(1, 1827, None), (2, 1835, None), (1, 3099, 546), (2, 3191, 528), (1, 4349, 539), (2, 4465, 532),
            (1, 5599, 532), (2, 5714, 534), (1, 6776, 539)]
    turns = Turns(TurnConfig(after=4, check_every=3))
    made = [turns.on_start("s1", 1, job, t * MS, None if idle is None else idle * MS, holds_us=(t + 50) * MS)
            for job, t, idle in seen]
    assert [r is not None for r in made] == [False] * 7 + [True, True]
    first, again = made[-2], made[-1]
    assert first.reason == "first plan" and not any(first.plan.shifts_us.values())
    assert {p.job: round(p.period_us / MS) for p in first.plan.phases}[1] == 1250
    assert again.reason == "overlap left: planned again" and again.plan.shifts_us[2] > 250 * MS
    # Beside a fixed job (here job 1, the anchor: an unmodified script) only at the next check.
    turns = Turns(TurnConfig(after=4, check_every=3))
    turns.fix(1)
    made = [turns.on_start("s1", 1, job, t * MS, None if idle is None else idle * MS, holds_us=(t + 50) * MS)
            for job, t, idle in seen]
    assert made[-2] is not None and made[-2].fixed == (1,) and not any(made[-2].plan.shifts_us.values())
    assert made[-1] is None


def test_plans_take_each_job_as_it_would_be_alone_paced_by_its_compute_or_by_a_clock():
    # Job 1 sends 300 ms every 1,000 (a clock); job 2 sends 200 ms and computes 500 (700 ms alone). Job 2
    # runs through job 1's communication, so both stretch (the fluid port): job 1's silences vary, its
    # periods do not (read as compute-paced it would be 900 ms); job 2's periods vary (median 800), its
    # silences do not.
    turns = Turns(TurnConfig(after=6, check_every=3))
    first = feed(turns, {1: (1000, 300, 0), 2: (700, 200, 50)}, 8, clocked={1})[0]
    stretched = [e - s for s, e, _ in turns._ports[("s1", 1)].tracks[2].comms]
    assert max(stretched) >= 350 * MS                      # what the switch saw: up to 400 ms of 200
    fields = first.fields()
    assert fields["comm_us"] == {"1": 300 * MS, "2": 200 * MS}
    assert fields["period_us"] == {"1": 1000 * MS, "2": 700 * MS}


def test_a_job_that_left_the_port_is_not_planned():
    turns = Turns(TurnConfig(after=4, check_every=3))
    feed(turns, {1: (1000, 300, 0), 2: (1000, 300, 500)}, 6)
    plans = feed(turns, {1: (1000, 300, 0), 3: (1000, 300, 10)}, 8, obey={1, 3}, from_ms=20_000)
    assert plans and all(set(p.plan.jobs) == {1, 3} for p in plans), [p.plan.jobs for p in plans]


def test_jobs_colliding_when_planned_are_put_where_the_collision_leaves_them():
    # Three jobs of 850 ms alone (250 ms of communication: 88 % of the port), started 0, 100 and 200 ms
    # apart: when they are planned they still collide, and the round that is under way (its starts
    # decided before a shift can hold) stretches each one's next start by a different amount. Placed
    # from their latest starts at the pace alone they missed their slots, were planned again four times
    # and stayed 63 % overlapped (as on BMv2, 483b88a: 142-304 ms off after each of four shifts); from
    # where the fluid port puts them, one plan settles them.
    turns = Turns(TurnConfig(after=4, check_every=3))
    plans = feed(turns, {1: (850, 250, 0), 2: (850, 250, 100), 3: (850, 250, 200)}, 30, obey={1, 2, 3})
    moving = [p for p in plans if p.orders]
    assert len(moving) == 1, [(p.reason, p.fields()["shifts_us"]) for p in plans]
    assert moving[0].plan.overlap_fraction == {1: 0.0, 2: 0.0, 3: 0.0}
    assert overlapped(turns, moving[0].at_us + 2 * 850 * MS) == 0.0


def test_moved_jobs_are_sent_slots_a_margin_later_than_planned_when_starts_came_later_than_foreseen():
    # Job 3 computed 80 and 40 ms longer in two iterations: starts the port's model foresaw came that
    # much later, and it measured so. Every job of the plan is sent its slot (its first communication
    # decided from the plan's moment starts no sooner than that), the 90th percentile of that lateness
    # later than planned, so a job a little later than foreseen still makes its slot; each makes it.
    turns = Turns(TurnConfig(after=4, check_every=3))
    jobs = {1: (850, 250, 0), 2: (850, 250, 100), 3: (850, 250, 200)}
    seen: list = []
    plans = feed(turns, jobs, 30, obey={1, 2, 3}, longer={3: {2: 80, 3: 40}}, seen=seen)
    moving = [p for p in plans if p.orders]
    assert len(moving) == 1, [(p.reason, p.fields()["shifts_us"]) for p in plans]
    first = moving[0]
    assert 0 < first.margin_us <= 80 * MS and {o.job for o in first.orders} == {1, 2, 3}
    phases = {p.job: p for p in first.plan.phases}
    for order in first.orders:
        assert order.start_us == pytest.approx(phases[order.job].start_us + order.shift_us + first.margin_us)
        assert any(j == order.job and abs(t - order.start_us) < 1 for j, t in seen), order
    assert overlapped(turns, first.at_us + 2 * 850 * MS) == 0.0


def test_beside_a_fixed_job_slots_have_no_margin():
    turns = Turns(TurnConfig(after=4, check_every=3))
    turns.fix(1)
    plans = feed(turns, {1: (850, 250, 0), 2: (850, 250, 100)}, 12, obey={2}, longer={2: {2: 80}})
    (order,) = next(p for p in plans if p.orders).orders
    assert order.job == 2 and next(p for p in plans if p.orders).margin_us == 0


def test_a_wait_for_a_slot_is_not_counted_as_lateness():
    # After a plan, the jobs wait for their slots (up to 385 ms after where the model, which does not know
    # them, would put them): none of that is how late the port's starts came (before the plan, up to the
    # margin; after the slots, exactly as foreseen).
    turns = Turns(TurnConfig(after=4, check_every=3))
    plans = feed(turns, {1: (850, 250, 0), 2: (850, 250, 100), 3: (850, 250, 200)}, 10, obey={1, 2, 3})
    (first,) = [p for p in plans if p.orders]
    state = turns._ports[("s1", 1)]
    assert not state.waiting and max(state.late) <= first.margin_us, (list(state.late), first.margin_us)


def test_a_job_whose_communication_comes_well_before_its_slot_ignores_its_shifts_and_is_fixed():
    # Both jobs answered the probe; job 1's shifts are sent but it starts where it would have (its own
    # pacing takes up the wait). After IGNORED such slots it is fixed, and job 2 is planned around it:
    # the plans job 1 spent are the port's again (max_plans = IGNORED: none would be left).
    turns = Turns(TurnConfig(after=4, check_every=3, max_plans=IGNORED))
    plans = [p for p in feed(turns, {1: (941, 410, 0), 2: (948, 290, 10)}, 30, obey={2}) if p.orders]
    moved = [[o.job for o in p.orders if o.shift_us > 0] for p in plans]
    assert moved[:IGNORED] == [[1]] * IGNORED and turns.ignored[1] == IGNORED and turns.ignored.get(2, 0) == 0
    assert plans[IGNORED].fixed == (1,) and moved[IGNORED] == [2]


def test_a_job_that_does_not_wait_out_the_margin_of_a_slot_that_shifts_it_not_at_all_ignores_its_shifts():
    # Job 3 computed 80 and 40 ms longer in two iterations: the plan leaves it where it is (shift 0) and
    # sends every job its slot 80 ms (the margin) later. Jobs 1 and 2 wait for theirs; job 3 comes where it
    # would have: found ignoring at once, and the next plan that moves jobs has it fixed. Judged on its
    # shift alone it was found only once a plan shifted it (d2dbc6f's sweeps: a script sent no shift beside
    # a 637 ms margin went on unnoticed, and job a was moved 225 + 637, then 368 + 637 ms beside it).
    turns = Turns(TurnConfig(after=4, check_every=3))
    jobs = {1: (850, 250, 0), 2: (850, 250, 100), 3: (850, 250, 200)}
    moving = [p for p in feed(turns, jobs, 30, obey={1, 2}, longer={3: {2: 80, 3: 40}}) if p.orders]
    assert moving[0].plan.shifts_us[3] == 0 < moving[0].margin_us and turns.ignored[3] == IGNORED
    assert moving[1].fixed == (3,) and moving[1].margin_us == 0
    assert turns.ignored.get(1, 0) == turns.ignored.get(2, 0) == 0


def test_jobs_apart_are_not_moved_on_estimates_that_read_them_colliding():
    # Job 2's iterations reach the port in two flights 150 ms apart (a script's buckets) and its segmenter
    # takes the second for a start too (60 ms of silence, over the split): its period reads as half, its
    # communication short, and the model puts it on job 1's. Its communications are 400 ms from job 1's:
    # no plan moves either (at 5ad0080 one moved job 2 255 ms into job 1, then twice more).
    turns = Turns(TurnConfig(after=4, check_every=3))
    made = []
    for k in range(10):
        t = k * 950 * MS
        made.append(turns.on_start("s1", 1, 1, t, None if k == 0 else 530 * MS, gap_us=40 * MS))
        for start, idle in ((t + 500 * MS, 680 * MS), (t + 650 * MS, 60 * MS)):     # 500-590, 650-770 ms
            made.append(turns.on_start("s1", 1, 2, start, None if k == 0 and idle > 100 * MS else idle, gap_us=40 * MS))
    plans = [p for p in made if p is not None]
    assert plans and not any(p.orders for p in plans), [(p.reason, p.fields()["period_us"]) for p in plans]
