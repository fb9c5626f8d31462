"""Telling iteration starts from sub-bursts in a key's burst reports (controller/segments.py)."""

from __future__ import annotations

import random

from burst_traces import T0, lattice, with_sub_bursts
from pcnlab.controller.segments import (REPORT_GAP_US, IterationSegmenter, iteration_gap_us,
                                       split_gap)


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


def test_the_starts_in_the_history_are_the_ones_the_split_in_force_finds():
    rng = random.Random(4)
    starts = lattice(rng, 8, 500_000, 0.02)
    times = with_sub_bursts(rng, starts, flights=(3, 5))
    segmenter = IterationSegmenter()
    for t in times:
        segmenter.starts_iteration(t)
    assert segmenter.threshold_us is not None
    assert segmenter.starts_us() == starts   # the first report among them, though it has no gap


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
    assert all(verdicts), verdicts   # no sub-burst ever lay between two of the pauses


def test_setup_pauses_with_no_sub_burst_between_them_do_not_split_the_iterations_that_follow():
    # Measured on pcn-training (2026-11-25): the PS's port was silent 991, 870 and 432 ms during the job's
    # setup, then 175-200 ms before each iteration. The three pauses passed for the iteration gap, and
    # iterations 2-4 (4 of the first 9) for sub-bursts, until the pauses went stale. No sub-burst lay
    # between two long silences: nothing showed there were sub-bursts to tell apart.
    rng = random.Random(6)
    segmenter = IterationSegmenter()
    t = T0
    verdicts = [segmenter.starts_iteration(t)]
    for idle in [991_197, 870_305, 431_546] + [int(rng.uniform(175_000, 200_000)) for _ in range(40)]:
        t += idle + 60_000
        verdicts.append(segmenter.starts_iteration(t, idle_us=idle))
    assert all(verdicts), verdicts.index(False)
    # and one later pause among the iterations does not bring the setup's pauses back as a second group
    t += 2_000_000
    verdicts = [segmenter.starts_iteration(t, idle_us=1_940_000)]
    for _ in range(20):
        idle = int(rng.uniform(175_000, 200_000))
        t += idle + 60_000
        verdicts.append(segmenter.starts_iteration(t, idle_us=idle))
    assert all(verdicts), verdicts.index(False)


def test_an_iteration_of_many_flights_early_on_keeps_the_split():
    # Measured on pcn-training-resnet with G learned (2026-11-26): the PS's port reported the job's set-up
    # (silences of 833 and 864 ms), then iterations 340-390 ms of silence apart; iteration 2 came in five
    # flights 10-13 ms apart. Five short gaps since the last long one, where at most one had lain between
    # two long ones, ended the split: two of its flights and one of iteration 3's became starts.
    reports = [(5_708_657, None), (6_542_135, 833_478), (7_406_387, 864_252), (7_751_723, 345_336),
               (8_043_894, 10_860), (8_469_167, 389_525), (9_186_308, 361_609), (9_469_118, 10_291),
               (9_538_733, 10_192), (9_565_417, 10_913), (9_581_214, 12_133), (9_597_504, 12_744),
               (9_613_878, 12_714), (9_995_634, 379_329), (10_268_002, 10_195), (10_672_742, 354_427)]
    segmenter = IterationSegmenter()
    verdicts = [segmenter.starts_iteration(t, idle) for t, idle in reports]
    assert verdicts[7:] == [False] * 6 + [True, False, True]
    assert 12_744 < segmenter.threshold_us < 345_336


def packets(rng, iterations, flights, flight_gap_us, compute_us, setup_pauses=()):
    """A job's data packet times (µs): `setup_pauses` first, then per iteration `flights` flights of 10
    packets 0.6 ms apart, separated by `flight_gap_us` (a (low, high) range), then the compute gap."""
    t, times = T0, []
    for pause in setup_pauses:
        times.append(t)
        t += pause
    for _ in range(iterations):
        for f in range(flights):
            times += [t + 600 * i for i in range(10)]
            t += 6_000 + (int(rng.uniform(*flight_gap_us)) if f < flights - 1 else compute_us + int(rng.uniform(0, 30_000)))
    return times


def test_g_is_learned_between_the_flights_and_the_compute_gap():
    # TCP's flights of one iteration 15-35 ms apart, 150-180 ms of compute between iterations.
    times = packets(random.Random(1), 60, 3, (15_000, 35_000), 150_000)
    gap, source = iteration_gap_us(times)
    assert source == "learned" and 41_000 < gap < 156_000, gap
    assert iteration_gap_us(times, configured=50_000) == (50_000, "configured")


def test_g_stays_at_the_report_gap_when_no_silence_inside_an_iteration_reaches_it():
    # gloo's steps a few ms apart: every report the switch makes at REPORT_GAP_US is an iteration.
    times = packets(random.Random(2), 60, 4, (1_000, 3_000), 150_000)
    assert iteration_gap_us(times) == (REPORT_GAP_US, "learned")


def test_setup_pauses_before_steady_iterations_do_not_become_the_learned_g():
    # A ring's setup (2.6 s, 2.5 s, 0.45 s) then iterations without sub-bursts: a G above the iteration
    # gap would merge every iteration into one.
    times = packets(random.Random(4), 60, 1, (0, 0), 300_000, setup_pauses=(2_600_000, 2_500_000, 450_000))
    gap, _ = iteration_gap_us(times)
    assert gap < 300_000, gap


def test_the_controller_and_the_analysis_learn_one_g_from_the_same_reports():
    from burst_traces import reports

    from pcnlab.controller.predictor_types import BurstKey
    from pcnlab.controller.scheduler_core import WindowScheduler, replay
    from pcnlab.controller.segments import learned_gap_us

    rng = random.Random(6)
    times = with_sub_bursts(rng, lattice(rng, 50, 400_000, 0.05))
    core = WindowScheduler()
    replay(reports(times), core)
    live = core.iteration_gap_us(BurstKey("s1", 2, 1))
    assert 25_000 < live < 300_000 and live == round(learned_gap_us((t, None) for t in times))


def test_the_silence_the_switch_reports_tells_a_late_workers_part_from_an_iteration():
    # Measured shape (a 4-worker generator, 400 ms period, through a leaf-spine, G 10 ms): the first
    # workers' flights 15-30 ms apart, the last worker's part 70-140 ms after the start (after 30-60 ms of
    # silence), then 200+ ms of silence. Start to start, the late part looks like an iteration.
    rng = random.Random(8)
    t, trace, truth = T0, [], []
    for _ in range(60):
        start = t
        trace.append((start, 400_000 - 130_000)); truth.append(True)
        trace.append((start + rng.randint(15_000, 30_000), rng.randint(11_000, 16_000))); truth.append(False)
        late = start + rng.randint(70_000, 140_000)
        trace.append((late, rng.randint(30_000, 60_000))); truth.append(False)
        trace.append((late + rng.randint(15_000, 25_000), rng.randint(11_000, 14_000))); truth.append(False)
        t += 400_000 + rng.randint(-20_000, 20_000)
    by_silence, by_time = IterationSegmenter(), IterationSegmenter()
    silence = [by_silence.starts_iteration(t, idle) for t, idle in trace]
    time_only = [by_time.starts_iteration(t) for t, _ in trace]
    assert silence[20:] == truth[20:]
    assert sum(a != b for a, b in zip(time_only[20:], truth[20:])) >= 10   # what the idle time mends


def test_an_iteration_of_many_sub_bursts_still_leaves_three_long_silences_in_the_history():
    # pcn-paper at the switch's 10 ms G: 10-20 reports an iteration (silences 10-19 ms), 1.5 s between
    # iterations. A history of 32 gaps held two long ones at most: no split, every report a 'start'.
    rng = random.Random(9)
    t, trace, truth = T0, [], []
    for _ in range(12):
        t += 1_500_000
        trace.append((t, 1_500_000)); truth.append(True)
        for _ in range(rng.randint(10, 20)):
            t += 30_000
            trace.append((t, rng.randint(10_000, 19_000))); truth.append(False)
    segmenter = IterationSegmenter()
    verdicts = [segmenter.starts_iteration(t, idle) for t, idle in trace]
    later = len(trace) // 3
    assert verdicts[later:] == truth[later:]


def _first_split(long_us: int) -> int:
    """The iteration (0 the first) at which a segmenter's split forms: 15 flights 10-19 ms apart an
    iteration, `long_us` of silence between iterations."""
    rng, segmenter, t = random.Random(2), IterationSegmenter(), T0
    for k in range(6):
        t += long_us
        segmenter.starts_iteration(t, long_us)
        if segmenter.threshold_us is not None:
            return k
        for _ in range(15):
            t += 30_000
            segmenter.starts_iteration(t, rng.randint(10_000, 19_000))
    return 6


def test_a_split_forms_at_the_second_long_silence_only_when_the_groups_are_decisively_apart():
    assert _first_split(1_500_000) == 2     # pcn-paper with G learned: 1.5 s against 10-19 ms
    assert _first_split(180_000) == 2       # a PS's compute gap, about 13 x its flights
    assert _first_split(80_000) == 3        # about 6 x: three


# pcn-back-to-back with G learned (2026-11-26), the PS's port: (switch time, silence before), µs
BACK_TO_BACK_745 = [  # seed 745 (results/s39/ab4): iteration 3 came after 48 ms of silence
    (4426353, 4426353), (4708355, 16642), (4725335, 14542), (4744486, 16574), (4766710, 18396),
    (4788622, 17815), (5020133, 221500), (5251385, 11339), (5271116, 11898), (5289733, 11341),
    (5309153, 12431), (5331064, 12381), (5355310, 15555), (5377921, 18646), (5620336, 240868),
    (5646252, 10606), (5873279, 12026), (6084814, 10695), (6100940, 10118), (6116014, 10554),
    (6130572, 10151), (6148209, 12362), (6166362, 12193), (6220154, 48341), (6266413, 12248)]
BACK_TO_BACK_752 = [  # seed 752 (results/s40/gab): iterations of 600 ms after 165 and 193 ms of silence
    (4452574, 4452574), (4473919, 12978), (4507170, 10042), (4686453, 10194), (4733295, 12296),
    (4838742, 16989), (4852204, 13230), (4865619, 13089), (4882139, 14479), (5047621, 164829),
    (5356063, 12180), (5380253, 14123), (5417876, 24324), (5433181, 15305), (5454928, 13106),
    (5647749, 192821), (5670746, 16377), (5699367, 13777), (5880067, 10880), (5980322, 10961),
    (6022315, 12684), (6049429, 17667), (6075758, 18421), (6107913, 11400), (6124357, 10667),
    (6152048, 22446), (6166061, 13784), (6247710, 81649)]


def test_a_split_from_two_long_silences_lies_just_above_the_flights():
    # Midway between 18.6 and 221 ms (64 ms), it took iteration 3, 48 ms after iteration 2's last
    # flight, for a sub-burst.
    segmenter = IterationSegmenter()
    verdicts = [segmenter.starts_iteration(t, idle) for t, idle in BACK_TO_BACK_745]
    starts = [k for k, v in enumerate(verdicts) if v and k >= 14]
    assert starts == [14, 23]     # iterations 2 and 3; the flights between and after are sub-bursts
    assert 18_646 < segmenter.threshold_us < 48_341


def test_a_split_holds_while_an_iteration_lasts_longer_than_the_silence_before_it():
    # The split formed at iteration 2 (193 ms of silence); 518 ms into that iteration, longer than twice
    # either long silence, it was taken for history and dropped, and iteration 2's flights for starts.
    segmenter = IterationSegmenter()
    verdicts = [segmenter.starts_iteration(t, idle) for t, idle in BACK_TO_BACK_752]
    assert verdicts[15:] == [True] + [False] * 11 + [True]


def test_the_g_written_into_the_switch_is_the_steady_split_bounded_by_every_ports_iteration_silences():
    from pcnlab.controller.predictor_types import BurstKey
    from pcnlab.controller.dataplane import DataPlaneConfig, FlowClass
    from pcnlab.controller.segments import GapWriteConfig, LearnedGaps

    gaps, ps, worker = LearnedGaps(), BurstKey("s1", 1, 1), BurstKey("s1", 2, 1)
    writes = []
    for _ in range(7):   # seven starts and their flights: sub-bursts do not count
        writes += [gaps.observe(ps, 160_000, True, 50_000), gaps.observe(ps, 15_000, False, 50_000)]
    assert writes == [None] * 14                                   # not steady yet
    assert gaps.observe(ps, 160_000, True, 51_000) == 51_000       # the 8th start with a split: written
    assert gaps.observe(ps, 150_000, True, 55_000) is None         # within 1.2x of what is in force
    # A port of the same job whose silences form one group, all iteration starts 45 ms apart: a G above
    # them would merge its iterations, so G stays `margin` x below them.
    other = LearnedGaps(GapWriteConfig(steady=1, margin=1.5))
    other.observe(worker, 45_000, True, None)
    assert other.observe(ps, 150_000, True, 80_000) == 30_000
    assert gaps.observe(BurstKey("s2", 1, 1), 15_000, False, None) is None   # no split: nothing to write
    # The data plane: classes without a G of their own take the learned one; configured ones keep theirs.
    config = DataPlaneConfig(switch_id=1, classes=(FlowClass(job=1, src="10.0.0.2/32"),
                                                   FlowClass(job=1, src="10.0.0.3/32", burst_gap_us=20_000),
                                                   FlowClass(job=2, src="10.0.0.4/32")))
    learned, changed = config.with_learned_gap(1, 50_000)
    assert [c.src for c in changed] == ["10.0.0.2/32"] and [c.gap_us for c in learned.classes] == [50_000, 20_000, REPORT_GAP_US]
    assert learned.with_learned_gap(1, 50_000)[1] == []            # already in force: nothing to write


def test_the_starts_before_a_keys_split_formed_do_not_hold_g_down():
    """Before its split forms every report of a key is taken for a start, flights 10-13 ms apart too;
    their silences are forgotten when it forms (measured: pcn-ring, splits formed at iteration 7-9 and
    G was written at iteration 21-35, the switch reporting every flight meanwhile). A start taken after
    the split (a flight in a confident rhythm's slot) still bounds it."""
    from pcnlab.controller.predictor_types import BurstKey
    from pcnlab.controller.segments import GapWriteConfig, LearnedGaps

    gaps, rank = LearnedGaps(GapWriteConfig(steady=2)), BurstKey("s1", 1, 1)
    for idle in (300_000, 12_000, 11_000, 160_000, 13_000):     # no split yet: every report a start
        assert gaps.observe(rank, idle, True, None) is None
    assert gaps.observe(rank, 165_000, True, 54_000) is None     # the split forms (one start since)
    assert gaps.observe(rank, 12_000, False, 54_000) is None     # a flight
    assert gaps.observe(rank, 170_000, True, 54_000) == 54_000   # not 11 ms / 3: those were flights
    gaps.observe(rank, 40_000, True, 54_000)                     # a start after the split bounds G
    assert gaps.observe(rank, 170_000, True, 80_000) is None and gaps.written[("s1", 1)] == 54_000
