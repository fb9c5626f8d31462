"""The view's thinning on made-up series: per time bin the first, last, lowest and highest point of each
series survive, and so does every point asked for; nothing else."""

from __future__ import annotations

import numpy as np

from pcnlab.analysis.view_data import envelope, within


def test_envelope_keeps_each_bins_extremes_and_every_kept_point():
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 10, 100_000))
    y = rng.integers(0, 60, len(t))
    z = rng.integers(0, 60, len(t))
    keep = np.zeros(len(t), dtype=bool)
    keep[rng.choice(len(t), 50, replace=False)] = True
    chosen = envelope(t, [y, z], 100, keep)
    assert len(chosen) <= 100 * 6 + 50 and np.all(np.diff(chosen) > 0)
    assert set(np.flatnonzero(keep)) <= set(chosen)
    bins = np.minimum((t / (t[-1] - t[0]) * 100).astype(int), 99)
    drawn = np.zeros(len(t), dtype=bool)
    drawn[chosen] = True
    for b in (0, 37, 99):
        inside = np.flatnonzero(bins == b)
        # A line through the drawn points reaches the same extremes in every bin as through all of them.
        assert y[inside][drawn[inside]].max() == y[inside].max() and y[inside][drawn[inside]].min() == y[inside].min()
        assert z[inside][drawn[inside]].max() == z[inside].max() and z[inside][drawn[inside]].min() == z[inside].min()
        assert drawn[inside[0]] and drawn[inside[-1]]


def test_a_spike_between_thinned_points_survives():
    t = np.arange(100_000, dtype=float)
    y = np.zeros(len(t), dtype=int)
    y[54_321] = 60                                   # one packet met a full queue
    chosen = envelope(t, [y], 50, np.zeros(len(t), dtype=bool))
    assert 54_321 in chosen and len(chosen) <= 50 * 4


def test_within_marks_records_near_any_moment():
    t = np.arange(0, 100, 1.0)
    near = within(t, np.array([10.0, 50.0]), before=2, after=3)
    assert list(np.flatnonzero(near)) == [8, 9, 10, 11, 12, 13, 48, 49, 50, 51, 52, 53]
    assert not within(t, np.array([]), 1, 1).any()


def test_an_empty_series_draws_nothing():
    assert len(envelope(np.zeros(0), [np.zeros(0)], 10, np.zeros(0, dtype=bool))) == 0
