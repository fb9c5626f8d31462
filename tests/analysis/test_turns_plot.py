"""The turns plot (analysis/turns_plot.py): where each job's communication overlapped another's, which
plans it draws, and that it draws a picture only where jobs share the port."""

from __future__ import annotations

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from pcnlab.analysis.interference import overlap_us
from pcnlab.analysis.turns_plot import moving_plans, overlapped_spans, plot_turns

# Job 1 every 1,000 µs for 400; job 2 from 300 (overlapping 1's first 100 µs and then apart), then
# from 2,100 inside 1's third communication for 250 µs.
TABLE = pd.DataFrame({"job": [1, 1, 1, 2, 2], "first_in_us": [0, 1000, 2000, 300, 2100],
                      "last_out_us": [400, 1400, 2400, 500, 2350]})


def test_the_overlapped_spans_are_where_the_other_job_sent_and_sum_to_the_overlap():
    spans = overlapped_spans(TABLE)
    assert spans == {1: [(300.0, 400.0), (2100.0, 2350.0)], 2: [(300.0, 400.0), (2100.0, 2350.0)]}
    total = overlap_us(TABLE)
    for job, mine in spans.items():
        assert sum(b - a for a, b in mine) == pytest.approx(total[TABLE["job"] == job].sum())


def test_only_the_plans_at_the_port_that_moved_a_job_are_drawn():
    plans = [{"plan": 1, "switch": "s1", "port": 1, "t_us": 900, "shifts_ms": {"a": 0.0, "b": 0.0}},
             {"plan": 2, "switch": "s1", "port": 1, "t_us": 1500, "shifts_ms": {"a": 0.0, "b": 197.0}},
             {"plan": 1, "switch": "s2", "port": 3, "t_us": 1600, "shifts_ms": {"a": 50.0}}]
    assert [p["plan"] for p in moving_plans(plans, ("s1", 1))] == [2]
    assert moving_plans(None, ("s1", 1)) == []


def _red_pixels(path) -> int:
    image = mpimg.imread(path)[..., :3]
    return int(((image[..., 0] > 0.75) & (image[..., 1] < 0.25) & (image[..., 2] < 0.25)).sum())   # tab:red


def test_two_jobs_are_drawn_with_their_overlap_in_red_and_one_job_is_not(tmp_path):
    assert plot_turns(tmp_path / "one.png", TABLE[TABLE["job"] == 1], {1: "a"}) is None
    assert plot_turns(tmp_path / "none.png", TABLE.iloc[0:0], {}) is None
    assert not list(tmp_path.iterdir())
    plan = [{"plan": 2, "t_us": 1500, "shifts_ms": {"a": 0.0, "b": 197.0}}]
    collided = plot_turns(tmp_path / "turns.png", TABLE, {1: "a", 2: "b"}, plan, title="two")
    apart = TABLE.assign(first_in_us=TABLE["first_in_us"] + np.where(TABLE["job"] == 2, 200, 0),
                         last_out_us=TABLE["last_out_us"] + np.where(TABLE["job"] == 2, 200, 0))
    assert overlap_us(apart).sum() == 200          # 2,300-2,550 against 2,000-2,400: 100 µs of each left
    clear = plot_turns(tmp_path / "apart.png", apart.iloc[[0, 1, 3]], {1: "a", 2: "b"}, plan, title="two")
    # Red is the overlap (and the legend's swatch, in both): 350 of 2,400 µs drawn red against none.
    assert _red_pixels(collided) > _red_pixels(clear) + 500
