"""The host <-> switch clock map, fitted on synthetic samples: offset, drift and read noise recovered."""

from __future__ import annotations

import random

import pytest

from pcnlab.controller.clock import ClockEstimator, ClockMap, ClockSample

HOST0 = 1_234_567_890_000  # host monotonic ns at the first sample


def samples(n=100, step_ns=100_000_000, offset_us=-1_234_000_000.0, drift_ppm=50.0, seed=1, rtt_us=(50, 500)):
    """Reads of the switch's elapsed-time counter between two host readings: the read happens at a
    random instant inside the round trip, which itself varies."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        before = HOST0 + i * step_ns + rng.randint(0, 1_000_000)
        rtt = rng.randint(*rtt_us) * 1000
        read_at = before + rng.random() * rtt
        switch_us = round(offset_us + read_at / 1000 * (1 + drift_ppm * 1e-6))
        out.append(ClockSample(before, switch_us, before + rtt))
    return out


def truth(host_ns, offset_us=-1_234_000_000.0, drift_ppm=50.0):
    return offset_us + host_ns / 1000 * (1 + drift_ppm * 1e-6)


def test_offset_and_drift_recovered_within_the_read_uncertainty():
    data = samples()
    clock = ClockMap.fit(data)
    assert clock.drift_ppm == pytest.approx(50.0, abs=5.0)
    worst = max(abs(clock.to_switch_us(h) - truth(h)) for h in range(HOST0, HOST0 + 10_000_000_000, 100_000_000))
    assert worst < 150  # well inside half the slowest round trip (250 us)
    assert worst <= clock.error_us  # the measured error bounds the real one
    assert clock.error_us < 300


def test_round_trip_conversion():
    clock = ClockMap.fit(samples())
    for host in (HOST0, HOST0 + 5_000_000_000):
        assert abs(clock.to_host_ns(clock.to_switch_us(host)) - host) <= 1_000


def test_offset_only_over_a_short_span():
    data = samples(n=10, step_ns=10_000_000, drift_ppm=0.0)  # 0.1 s: too short to see drift
    clock = ClockMap.fit(data)
    assert clock.rate == 1.0
    assert abs(clock.to_switch_us(HOST0) - truth(HOST0, drift_ppm=0.0)) < 250
    single = ClockMap.fit(data[:1])
    assert abs(single.to_switch_us(HOST0) - truth(HOST0, drift_ppm=0.0)) < 1_000 and single.samples == 1


def test_slow_reads_are_left_out():
    data = samples(n=60, drift_ppm=0.0, rtt_us=(20, 40))
    rng = random.Random(2)
    # A third of the reads stall for up to 20 ms (a busy switch), with the read at the stall's end.
    for i in range(0, 60, 3):
        s = data[i]
        stall = rng.randint(5_000, 20_000) * 1000
        data[i] = ClockSample(s.host_before_ns, round(truth(s.host_before_ns + stall, drift_ppm=0.0)),
                              s.host_before_ns + stall + 30_000)
    clock = ClockMap.fit(data, drift=False)
    assert abs(clock.to_switch_us(HOST0 + 3_000_000_000) - truth(HOST0 + 3_000_000_000, drift_ppm=0.0)) < 50
    assert clock.half_rtt_max_us < 25


def test_a_clock_read_that_lagged_a_few_ms_is_not_a_restart():
    estimator = ClockEstimator(window=16)
    samples = [ClockSample(HOST0 + i * 500_000_000, 1_000 + i * 500_000, HOST0 + i * 500_000_000 + 300_000)
               for i in range(10)]
    estimator.extend(samples)
    lagged = ClockSample(HOST0 + 10 * 500_000_000, 1_000 + 10 * 500_000 - 6_300, HOST0 + 10 * 500_000_000 + 370_000)
    assert estimator.add(lagged) is False and estimator.restarts == 0


def test_estimator_detects_a_switch_restart():
    estimator = ClockEstimator(window=16)
    estimator.extend(samples(n=20))
    assert estimator.map is not None and estimator.restarts == 0
    # The switch restarted 30 s after the first sample: its clock starts again from zero.
    restart_ns = HOST0 + 30_000_000_000
    later = [ClockSample(restart_ns + i * 100_000_000, 1_000 + i * 100_000, restart_ns + i * 100_000_000 + 100_000)
             for i in range(5)]
    assert estimator.add(later[0]) is True and estimator.restarts == 1
    for s in later[1:]:
        assert estimator.add(s) is False
    assert abs(estimator.map.to_switch_us(restart_ns + 50_000) - 1_000) < 100


def test_bad_samples_are_refused():
    with pytest.raises(ValueError):
        ClockSample(10, 0, 5)
    with pytest.raises(ValueError):
        ClockMap.fit([])
