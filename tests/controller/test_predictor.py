"""The burst predictor on generated report traces (seeded): steady, jitter, a missed report, a spurious
report, a change of period, a pause and resume, interleaved jobs; the error distribution asserted."""

from __future__ import annotations

import math
import random

import pytest

from burst_traces import T0, feed, lattice, p95, renewal, reports
from pcnlab.controller.chainfit import fit_chain
from pcnlab.controller.predictor_types import BurstKey, BurstReport, PredictorConfig
from pcnlab.controller.predictor import BurstPredictor, PredictorBank

P = 100_000  # 100 ms
KEY = BurstKey("s1", 2, 1)


def tracked(observations, since: int = 0):
    """Errors of the reports that matched a prediction, from report `since` on."""
    return [o.error_us for o in observations[since:] if o.kind in ("match", "missed")]


def test_steady_period_learned_and_armed_after_three_reports():
    rng = random.Random(1)
    # The switch timestamps packets, not iterations: a little timing noise (+-50 us) on each report.
    times = [t + rng.randint(-50, 50) for t in renewal(rng, 200, P)]
    predictor = BurstPredictor(KEY)
    obs = feed(predictor, times)
    assert [o.kind for o in obs[:2]] == ["first", "learning"]
    assert obs[1].prediction is not None and not obs[1].prediction.confident  # one interval is a guess
    assert obs[2].prediction.confident                                        # two agreeing ones arm
    assert all(o.prediction.confident for o in obs[2:])
    assert p95(tracked(obs, 3)) < 1000
    assert abs(predictor.period_us - P) < 100
    last = obs[-1].prediction
    assert abs(last.next_start_us - (times[-1] + P)) < 1000 and last.confidence > 0.9
    assert last.jitter_us < 200


@pytest.mark.parametrize("model", [renewal, lattice])
def test_ten_percent_jitter_errors_stay_on_the_jitter_scale(model):
    times = model(random.Random(2), 400, P, 0.1)
    predictor = BurstPredictor(KEY)
    obs = feed(predictor, times)
    errors = tracked(obs, 10)
    assert len(errors) == len(obs) - 10  # nothing rejected as spurious
    # Uniform +-10 ms jitter: a renewal error is U(+-10 ms); the line through a fixed cadence does as well.
    assert p95(errors) < 12_000
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    assert 4_000 < rms < 8_000
    # The predicted jitter is the spread the errors actually have.
    jitters = [o.prediction.jitter_us for o in obs[20:]]
    assert 0.7 * rms < sum(jitters) / len(jitters) < 1.3 * rms
    assert sum(o.prediction.confident for o in obs[10:]) >= 0.95 * len(obs[10:])


def test_a_missed_report_counts_as_two_periods():
    times = renewal(random.Random(3), 60, P)
    missing = times[30]
    del times[30]
    predictor = BurstPredictor(KEY)
    obs = feed(predictor, times[:30])
    # While the missed burst's slot goes by, the forecast rolls on to the next one, still confident.
    rolled = predictor.forecast(missing + 30_000)
    assert rolled.missed == 1 and rolled.confident and abs(rolled.next_start_us - (missing + P)) < 1000
    obs += feed(predictor, times[30:])
    assert obs[30].kind == "missed" and abs(obs[30].error_us) < 1000 and obs[30].was_confident
    assert abs(predictor.period_us - P) < 100
    assert all(o.prediction.confident for o in obs[30:])
    assert p95(tracked(obs, 3)) < 1000


@pytest.mark.parametrize("where", [0.5, 0.3, 0.85])
def test_a_spurious_report_is_outvoted(where):
    times = renewal(random.Random(4), 60, P)
    spurious = times[30] + round(where * P)
    predictor = BurstPredictor(KEY)
    obs = feed(predictor, times[:31] + [spurious] + times[31:])
    assert obs[31].kind == "between"  # between two slots of a confident rhythm: ignored
    assert obs[31].prediction.confident and abs(obs[31].prediction.next_start_us - times[31]) < 1000
    assert obs[32].kind == "match" and abs(obs[32].error_us) < 1000
    assert all(o.prediction.confident for o in obs[2:])
    assert abs(predictor.period_us - P) < 100


def test_a_spurious_report_under_jitter():
    times = renewal(random.Random(5), 80, P, 0.05)
    spurious = times[40] + P // 2
    obs = feed(BurstPredictor(KEY), times[:41] + [spurious] + times[41:])
    assert obs[41].kind == "between"
    assert p95(tracked(obs[42:])) < 6_000  # back on the 5 % jitter's scale at once
    assert sum(o.prediction.confident for o in obs[42:]) >= 0.95 * len(obs[42:])


@pytest.mark.parametrize("factor", [1.5, 0.8, 1.2, 2.0, 0.5, 3.0])
def test_a_change_of_period_is_relearned_within_a_few_iterations(factor):
    rng = random.Random(6)
    before = renewal(rng, 40, P)
    new = factor * P
    after = renewal(rng, 40, new, t0=before[-1] + new)
    predictor = BurstPredictor(KEY)
    obs = feed(predictor, before + after)
    k = 4  # within k reports after the change the error is back within bounds, and stays there
    assert p95(tracked(obs[40 + k:])) < 1000
    assert all(o.prediction.confident for o in obs[40 + k:])
    assert abs(predictor.period_us - new) < 100
    # No confident prediction after the change is far off for long: at most k - 1 of them miss.
    wrong = [o for o in obs[40:] if o.was_confident and abs(o.error_us) > 1000]
    assert len(wrong) < k


def test_a_pause_disarms_and_a_resume_rearms():
    rng = random.Random(7)
    first = renewal(rng, 30, P, 0.05)
    pause_us = 2_345_678
    second = renewal(rng, 30, P, 0.05, t0=first[-1] + pause_us)
    predictor = BurstPredictor(KEY)
    feed(predictor, first)
    last = first[-1]
    assert predictor.predict(last + P // 2) is not None
    # One slot without a report may be a lost digest; two mean the job paused: nothing confident from
    # then on, however long the pause lasts (no stale windows forever).
    tol = predictor.forecast(last).tolerance_us
    for now in range(round(last + 2 * P + tol) + 1, second[0], 10_000):
        assert predictor.predict(now) is None
        assert predictor.forecast(now).confidence == 0.0
    obs = feed(predictor, second)
    assert obs[0].kind == "resync" and not obs[0].was_confident and not obs[0].prediction.confident
    assert all(o.prediction.confident for o in obs[2:])  # two agreeing intervals again
    assert p95(tracked(obs, 3)) < 6_000  # the 5 % jitter's scale


def test_a_pause_then_a_new_period():
    rng = random.Random(8)
    first = renewal(rng, 30, P)
    second = renewal(rng, 30, 0.6 * P, t0=first[-1] + 1_500_000)
    predictor = BurstPredictor(KEY)
    obs = feed(predictor, first + second)
    assert all(o.prediction.confident for o in obs[33:])
    assert p95(tracked(obs[33:])) < 1000 and abs(predictor.period_us - 0.6 * P) < 100


def test_interleaved_jobs_on_one_port_are_learned_apart():
    rng = random.Random(9)
    job1 = renewal(rng, 100, P, 0.02)
    job2 = renewal(rng, 140, 70_000, 0.02, t0=T0 + 33_000)
    merged = sorted([BurstReport("s1", 2, 1, t, 20) for t in job1] + [BurstReport("s1", 2, 2, t, 5) for t in job2],
                    key=lambda r: r.t_us)
    bank = PredictorBank()
    errors: dict[int, list[int]] = {1: [], 2: []}
    for report in merged:
        other = BurstKey("s1", 2, 3 - report.job)
        before = bank.forecast(other, report.t_us)
        obs = bank.record(report)
        assert bank.forecast(other, report.t_us) == before  # one job's report leaves the other alone
        if obs.kind in ("match", "missed") and bank.predictors[report.key].reports > 5:
            errors[report.job].append(obs.error_us)
    assert set(bank.predictors) == {BurstKey("s1", 2, 1), BurstKey("s1", 2, 2)}
    assert abs(bank.predictors[BurstKey("s1", 2, 1)].period_us - P) < 1000
    assert abs(bank.predictors[BurstKey("s1", 2, 2)].period_us - 70_000) < 1000
    assert len(errors[1]) > 90 and len(errors[2]) > 130
    assert p95(errors[1]) < 3000 and p95(errors[2]) < 2500
    assert bank.predictors[BurstKey("s1", 2, 1)].counts.get("spurious", 0) == 0
    # The confident forecast is the job's own, and its queue is its own.
    assert bank.predict(BurstKey("s1", 2, 1), job1[-1]).queue_pkts == 20
    assert bank.predict(BurstKey("s1", 2, 2), job2[-1]).queue_pkts == 5


def test_the_same_job_on_other_ports_and_switches_is_another_key():
    bank = PredictorBank()
    for switch, port, offset in (("s1", 2, 0), ("s1", 3, 5_000), ("s2", 2, 9_000)):
        for report in reports(renewal(random.Random(10), 10, P, t0=T0 + offset), switch=switch, port=port):
            bank.observe(report)
    assert len(bank.predictors) == 3
    starts = {k: bank.forecast(k, T0 + 10 * P).next_start_us for k in bank.predictors}
    assert len(set(starts.values())) == 3
    bank.forget_switch("s1")
    assert list(bank.predictors) == [BurstKey("s2", 2, 1)]


def test_random_reports_never_arm():
    rng = random.Random(11)
    t, times = T0, []
    for _ in range(300):
        t += round(rng.expovariate(1 / P)) + 2_000  # bursts with no rhythm (and gaps > G)
        times.append(t)
    obs = feed(BurstPredictor(KEY), times)
    assert sum(o.prediction is not None and o.prediction.confident for o in obs) < 0.05 * len(obs)


def test_duplicate_and_restart():
    times = renewal(random.Random(12), 10, P)
    predictor = BurstPredictor(KEY)
    obs = feed(predictor, times + [times[-1]])
    assert obs[-1].kind == "duplicate" and obs[-1].prediction.confident
    # The switch restarted: its clock starts again near 0; what was learned is void.
    obs = feed(predictor, [50_000, 150_000])
    assert obs[0].kind == "first" and predictor.counts["reset"] == 1
    assert not obs[1].prediction.confident


def test_fit_chain_prefers_the_true_period_over_its_multiples_and_fractions():
    times = renewal(random.Random(13), 12, P)
    fit = fit_chain(times, [P / 2, 2 * P, P / 3], PredictorConfig())
    assert abs(fit.period_us - P) < 10 and fit.anchor_us == times[-1] and len(fit.points) == 12


def test_error_record_is_actual_minus_predicted():
    times = renewal(random.Random(14), 10, P)
    times[-1] += 3_000  # late by 3 ms
    obs = feed(BurstPredictor(KEY), times)
    assert obs[-1].error_us == pytest.approx(3_000, abs=50)
    assert obs[-1].predicted_us == pytest.approx(times[-1] - 3_000, abs=50)


def test_a_rhythm_learned_at_a_multiple_of_the_period_is_given_up():
    """PyTorch ranks start one by one (~880 ms apart here) and each start reaches the PS's port as a
    burst: three such reports teach a period three times the iterations' (~290 ms, renewal, 8 %
    jitter). Every third iteration then falls on a slot and the others between: most reports being
    between the slots, the rhythm is re-fitted at a third, and the iterations are predicted."""
    rng = random.Random(13)
    startup = [T0, T0 + 880_000, T0 + 1_760_000]
    iterations = renewal(rng, 60, 290_000, jitter=0.08, t0=startup[-1] + 870_000)
    predictor = BurstPredictor(KEY)
    obs = feed(predictor, startup + iterations)
    assert abs(predictor.period_us - 290_000) < 0.1 * 290_000
    late = obs[3 + 20:]
    assert sum(o.kind == "between" for o in late) <= 2
    assert sum(o.was_confident and o.kind == "match" for o in late) >= 0.8 * len(late)


def test_sub_bursts_between_the_slots_keep_the_rhythm():
    """Back-to-back iterations: flights of each iteration reported between the slots at scattered
    times are no rhythm of a half, third or quarter of the period: the period stays."""
    rng = random.Random(14)
    starts = lattice(rng, 40, 600_000, jitter=0.01)
    times = sorted(starts + [s + rng.randint(150_000, 450_000) for s in starts[3:] for _ in range(2)])
    predictor = BurstPredictor(KEY)
    feed(predictor, times)
    assert abs(predictor.period_us - 600_000) < 0.05 * 600_000
