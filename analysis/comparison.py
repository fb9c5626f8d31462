"""What a sweep report is made of, apart from how it is built (report.py) and drawn (plots.py): the
headline metrics, the sweep points with their runs, and the Report they make. Both sides import it;
neither imports the other for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pcnlab.analysis import reference as references
from pcnlab.analysis import traffic_stats as m
from pcnlab.analysis.results import RunData

HEADLINE = (  # (metrics.json key path, title, format)
    ("iterations.start_queue_pkts.mean", "start queue (pkts)", "{:.1f}"),
    ("iterations.max_queue_pkts.mean", "max queue (pkts)", "{:.1f}"),
    ("iterations.bct_ms.mean", "BCT (ms)", "{:.1f}"),
    ("iterations.bct_over_ideal.mean", "BCT / ideal", "{:.2f}"),
    ("iterations.ddl_mbps.mean", "DDL Mbit/s during iterations", "{:.2f}"),
    ("throughput_mbps.background", "background Mbit/s", "{:.2f}"),
    ("throughput_mbps.background_during_iterations", "background Mbit/s during iterations", "{:.2f}"),
    ("queue_delay_us.ddl.mean", "DDL queueing delay (µs)", "{:.0f}"),
    ("training.iteration_ms.mean", "iteration (ms)", "{:.1f}"),
    ("training.iteration_ms.p50", "iteration p50 (ms)", "{:.1f}"),
    ("training.iteration_ms.p99", "iteration p99 (ms)", "{:.1f}"),
    ("training.iterations_per_s", "training throughput (it/s)", "{:.2f}"),
    ("training.gradient_fraction", "gradient delivered", "{:.2%}"),
    ("training.accuracy_final", "test accuracy", "{:.1%}"),
    ("training.push_spread_ms.p50", "push spread p50 (ms)", "{:.1f}"),
    ("training.tcp_timeouts_per_iteration", "TCP RTOs per iteration", "{:.2f}"),
    ("training.tcp_loss_probes_per_iteration", "TCP tail-loss probes per iteration", "{:.2f}"),
    ("training.stalled_iterations", "iterations stalled 150 ms over the fast ones", "{:.0f}"),
    ("controller.iteration_coverage", "iteration coverage", "{:.0%}"),
    ("controller.iteration_coverage_after_learning", "coverage after 5 iterations", "{:.0%}"),
    ("controller.window_open_share", "window-open share", "{:.1%}"),
    ("controller.k_pre_held_share", "K_pre held share", "{:.1%}"),
    ("interference.overlap_fraction", "communication overlapped by another job", "{:.1%}"),
)
# Scaling factor ("Is Network the Bottleneck for Distributed Training?"): throughput with N workers over
# N times one worker's, i.e. T_1 / T_N of iteration times; shown where a sweep has a 1-worker point.
SCALING = ("scaling", "scaling (T1 / TN)", "{:.2f}")
ITERATION_KEY = "training.iteration_ms.mean"
# A run with time_scale k ran its rates / k and its times x k, and metrics.json holds what was measured: the
# report gives a time back divided by k (power 1) and a rate multiplied by k (power -1). The headline metrics
# not listed (packets, shares, ratios, counts) do not change with it.
TIME_SCALE_POWER = {
    **dict.fromkeys(("iterations.bct_ms.mean", "queue_delay_us.ddl.mean", "training.iteration_ms.mean",
                     "training.iteration_ms.p50", "training.iteration_ms.p99", "training.push_spread_ms.p50"), 1),
    **dict.fromkeys(("iterations.ddl_mbps.mean", "throughput_mbps.background",
                     "throughput_mbps.background_during_iterations", "training.iterations_per_s"), -1),
}


def cell(values, baseline=None) -> dict:
    """n, mean and ci95 (the half-width of the mean's 95 % interval) of `values`; with `baseline`
    values: delta (difference of means), delta_pct (in % of the baseline's mean) and delta_ci95
    ([low, high], Welch). NaN where a figure does not exist (e.g. ci95 of one run)."""
    data = m.finite(values)
    mean, half = m.mean_ci95(data)
    out = {"n": int(data.size), "mean": mean, "ci95": half}
    if baseline is not None:
        base = m.finite(baseline)
        base_mean = float(base.mean()) if base.size else math.nan
        delta = mean - base_mean
        out["delta"] = delta
        out["delta_pct"] = delta / base_mean * 100 if base_mean else math.nan
        out["delta_ci95"] = list(m.diff_ci95(data, base))
    return out


def dig(data: dict, dotted: str):
    """data["a"]["b"]["c"] for "a.b.c"; None where a part is missing."""
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def unscaled(run: RunData, key: str):
    """A run's headline metric in the experiment file's own units (TIME_SCALE_POWER)."""
    value = dig(run.metrics, key)
    power = TIME_SCALE_POWER.get(key, 0)
    if not power or isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return value / run.time_scale ** power


@dataclass
class Point:
    """One sweep point: the runs counted in its means, and the runs left out with why."""

    name: str
    runs: list[RunData] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)    # (run name, why)
    order: float = math.inf                                          # the experiment's run index
    scaling: list = field(default_factory=list)                      # per run, T_1 / T_N (see SCALING)

    def values(self, key: str) -> list:
        if key == SCALING[0]:
            return self.scaling
        return [unscaled(r, key) for r in self.runs]

    @property
    def workers(self):
        return self.runs[0].metrics.get("workers") if self.runs else None


@dataclass
class Report:
    points: list[Point]
    metrics: list[tuple[str, str, str]]        # the rows shown: HEADLINE keys some run has (+ SCALING)
    cells: dict[str, dict[str, dict]]          # point -> metric key -> cell (see `cell`)
    baseline: str | None = None
    reference: references.Reference | None = None
    include_untrusted: bool = False
    notes: list[str] = field(default_factory=list)   # runs whose iteration count disagrees with the workers'
    time_scales: list[float] = field(default_factory=list)   # the runs' (experiments/config/timescale.py)
    interference: list[dict] = field(default_factory=list)   # per shared point and job (interference_report.py)
