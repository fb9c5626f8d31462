"""The scheduler core (scheduler_core.py): what it does when the segmenter's split first forms."""

from __future__ import annotations

import random

from burst_traces import T0, lattice
from pcnlab.controller.predictor_types import BurstKey, BurstReport
from pcnlab.controller.scheduler_core import WindowScheduler, replay

WRITE_US = 5_000


def generator_reports(rng: random.Random, n: int, period_us: int, flights: int) -> list[BurstReport]:
    """A clock-driven job whose G is learned: the switch reports every flight after 10 ms of silence, so
    each iteration is one start (silent most of a period before it) and `flights` sub-bursts 10-20 ms
    apart, as pcn-paper's PS port with G learned (about 30 reports per 2 s iteration)."""
    out, end = [], None
    for start in lattice(rng, n, period_us, 0.01):
        t = start
        out.append(BurstReport("s1", 1, 1, t, 20, t - T0 + 1_000_000 if end is None else t - end))
        for _ in range(flights):
            idle = rng.randint(10_500, 20_000)
            t += idle + rng.randint(1_000, 5_000)
            out.append(BurstReport("s1", 1, 1, t, 20, idle))
        end = t + 3_000
    return out


def split_formed(steps, iterations) -> int:
    """The first iteration after whose start, for 1 s, every report was a sub-burst: the split held."""
    return next(k for k, s in enumerate(iterations) if s.observation.kind == "match" and
                all(o.observation.kind == "sub-burst" for o in steps
                    if o.observation.report.t_us - s.observation.report.t_us in range(1, 1_000_000)))


def test_the_rhythm_learns_again_from_the_starts_once_the_split_forms():
    # Measured on pcn-paper with G learned (2026-11-25): the split formed at iteration 3, but the rhythm had
    # learned from every flight before it: period 1.79 s of 2 s at iteration 4, confident from iteration 8,
    # where a configured G armed from iteration 3.
    rng = random.Random(7)
    trace = generator_reports(rng, 16, 2_000_000, 25)
    core = WindowScheduler()
    result = replay(trace, core, write_latency_us=WRITE_US)
    key = BurstKey("s1", 1, 1)
    iterations = [s for s in result.steps if s.observation.report.idle_us > 1_000_000]
    formed = split_formed(result.steps, iterations)
    assert formed <= 5   # from then on, every flight is a sub-burst
    covered = "".join("x" if s.covered else "." for s in iterations)
    assert covered[formed + 1:] == "x" * (len(iterations) - formed - 1), (formed, covered)
    assert abs(core.bank.predictors[key].period_us - 2_000_000) < 20_000


def test_the_starts_the_split_takes_are_the_iterations_before_and_after_it_formed():
    # What turns.py begins a job's track with once its split forms (issue 47): the iterations' reports,
    # silence and all, from the first, and none of the flights between them.
    rng = random.Random(7)
    trace = generator_reports(rng, 8, 2_000_000, 25)
    core = WindowScheduler()
    key = BurstKey("s1", 1, 1)
    assert core.iteration_starts(key) == []
    told = None
    for report in trace:
        core.on_report(report)
        if told is None and core.iteration_gap_us(key) is not None:
            told = report
            assert core.iteration_starts(key) == [r for r in trace if r.t_us <= report.t_us and r.idle_us > 100_000]
    assert told is not None and told.idle_us > 100_000     # flights: at most 20 ms
    got, starts = core.iteration_starts(key), [r for r in trace if r.idle_us > 100_000]
    assert len(got) >= 4 and got == starts[-len(got):]      # those still in the history (128 reports)


def test_what_the_chain_learned_from_flights_is_void_once_the_split_forms():
    # Measured on pcn-paper with G learned (2026-11-26): the switch reported each flight's end, so its END
    # chain (a flight's end to the next flight, 10-20 ms) was chosen before the split; when the split formed
    # at iteration 3 the rhythm learned 2 s again but END stayed chosen, and iteration 4 had no window.
    rng = random.Random(5)
    trace = generator_reports(rng, 12, 2_000_000, 25)
    ends = [(r.key, r.t_us + 3_000, r.t_us + 13_000) for r in trace]   # each flight ends 3 ms on, seen at G
    core = WindowScheduler()
    result = replay(trace, core, write_latency_us=WRITE_US, ends=ends)
    iterations = [s for s in result.steps if s.observation.report.idle_us > 1_000_000]
    formed = split_formed(result.steps, iterations)
    assert formed <= 5
    covered = "".join("x" if s.covered else "." for s in iterations)
    assert covered[formed + 1:] == "x" * (len(iterations) - formed - 1), (formed, covered)


def test_a_flight_in_a_wide_slot_but_farther_than_the_split_from_it_is_no_start():
    # pcn-back-to-back with G learned (2026-11-26, seed 745): iterations 600 ms apart, jittered, flights
    # 10-22 ms apart until 45-200 ms before the next iteration. The rhythm, confident with a slot of
    # +-105 ms or more, took the flights in it for starts, learned 578, 560, 545 and 271 ms, and
    # covered nothing until iteration 8.
    rng = random.Random(3)
    trace, truth, end = [], [], None
    for start in lattice(rng, 30, 600_000, 0.05):
        trace.append(BurstReport("s1", 1, 1, start, 20, 1_000_000 if end is None else start - end))
        truth.append(True)
        t = start
        while t + 25_000 < start + 600_000 - rng.randint(45_000, 120_000):
            idle = rng.randint(10_000, 15_000)
            t += idle + rng.randint(5_000, 8_000)
            trace.append(BurstReport("s1", 1, 1, t, 20, idle))
            truth.append(False)
        end = t + 5_000
    result = replay(trace, WindowScheduler(), write_latency_us=WRITE_US)
    taken = [s.observation.kind != "sub-burst" for s in result.steps]
    late = len(trace) // 4
    assert taken[late:] == truth[late:], [s.observation.report.idle_us for s, t, k in
                                          zip(result.steps[late:], truth[late:], taken[late:]) if t != k]


def test_a_confident_rhythm_is_kept_when_the_split_forms():
    # pcn-back-to-back at G 40 ms: the first split took one of four iterations, 77 ms after the one before,
    # for a sub-burst; the rhythm that predicted them all stays as it is.
    rng = random.Random(2)
    idles = [200_000, 230_000, 76_000, 194_000, 287_000] + [rng.randint(150_000, 300_000) for _ in range(25)]
    trace = [BurstReport("s1", 1, 1, T0 + k * 600_000, 20, idle) for k, idle in enumerate(idles)]
    core = WindowScheduler()
    result = replay(trace, core, write_latency_us=WRITE_US)
    assert all(s.covered for s in result.steps[4:])


# pcn-back-to-back with G learned (2026-11-26, seed 755, results/s40/nab): the PS's port's reports,
# (switch time, silence before) µs. Iteration 0's flights came 11-16 ms apart, and the rhythm was
# confident on them when the split formed at iteration 2.
BACK_TO_BACK_755 = [
    (4511006, 4511006), (4557769, 14855), (4719278, 10047), (4730618, 11001), (4744649, 13121),
    (4760719, 14959), (4772828, 10359), (4800040, 15821), (4814003, 10806), (4842704, 13839), (4858035, 13259),
    (5106588, 247078), (5418446, 15583), (5437731, 18406), (5460845, 21298), (5484592, 20702),
    (5706145, 221239), (5726701, 12892), (5757189, 13524), (5856499, 16231), (5880585, 16127),
    (5905001, 15784), (5930450, 16913), (5965489, 10486), (6049824, 11099), (6306089, 245394),
    (6905653, 233018), (7102648, 12208), (7124539, 13361), (7141728, 13700), (7159776, 15033),
    (7176467, 14334), (7197229, 16748), (7219783, 18652), (7242681, 18611), (7268276, 21303), (7289202, 18528),
    (7307867, 16198), (7506320, 198146), (7705834, 12328), (7723101, 10778), (7740591, 11339),
    (7762612, 14342), (7783761, 16175), (7802893, 14341), (7826454, 18500), (7856351, 23478),
    (8106067, 247279), (8152366, 11530), (8270586, 10326), (8291557, 11380), (8313658, 10387),
    (8339841, 13372), (8367362, 13590), (8400005, 10108), (8510077, 10821), (8535893, 14299),
    (8705672, 161589), (8723066, 11289), (8778547, 11199), (8903037, 15042), (8997434, 14341),
    (9307597, 310163), (9552483, 12594), (9603171, 12023), (9673106, 12514), (9693210, 12822),
    (9713381, 13684), (9735761, 12615), (9906049, 164712), (10170502, 10159), (10184033, 13199),
    (10200082, 15470), (10215280, 14613), (10231845, 15509), (10506441, 274264)]


def test_a_rhythm_confident_on_flights_learns_again_when_the_split_forms():
    # Kept, it took a flight 26 ms from its slot for a start and learned a 285 ms period: iterations
    # 3, 6-10 uncovered.
    trace = [BurstReport("s1", 1, 1, t, 20, idle) for t, idle in BACK_TO_BACK_755]
    result = replay(trace, WindowScheduler(), write_latency_us=WRITE_US)
    covered = "".join("x" if s.covered else "." for s in result.steps if s.observation.report.idle_us > 100_000)
    assert covered == "..xxxxxxxxx", covered
