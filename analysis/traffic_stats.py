"""The measures metrics.py and report.py draw on: a queue log's bursts, marks and drops and burstiness,
and the statistics of a sweep (finite values, means and differences with 95 % intervals, JSON-safe
numbers), and the robust line results.py maps a switch's clock with (`theil_sen`). metrics.py turns a
run folder into metrics.json with them; nothing here reads a folder.

The queue log has one row per telemetry record of a port; with sampling 1 in 1 each row is a packet.
Times in the queue log are the switch's microseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

BURSTINESS_SCALES_MS = (1, 5, 10, 50, 100)


@dataclass(frozen=True)
class Burst:
    """One DDL burst on a port, as the switch saw it."""

    port: int
    job: int
    start_us: int          # ingress time of its first packet
    end_us: int            # egress time of its last packet
    packets: int
    bytes: int
    start_queue: int       # queue its first packet met (packets): the paper's "start queue length"
    max_queue: int         # deepest queue any of its packets met

    @property
    def bct_us(self) -> int:
        """Burst completion time: first packet in to last packet out."""
        return self.end_us - self.start_us


def bursts_from_queue_log(log: pd.DataFrame, gap_us: int) -> list[Burst]:
    """Split each (port, job)'s DDL packets into bursts at silences longer than `gap_us` (the same G
    the switch uses), and measure each burst."""
    ddl = log[log["class"] == "ddl"].sort_values("ingress_us")
    bursts: list[Burst] = []
    for (port, job), group in ddl.groupby(["port", "job"], sort=True):
        ingress = group["ingress_us"].to_numpy()
        starts = np.flatnonzero(np.diff(ingress, prepend=-(10**18)) > gap_us)
        bounds = list(starts) + [len(group)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            part = group.iloc[a:b]
            bursts.append(Burst(
                port=int(port), job=int(job), start_us=int(part["ingress_us"].iloc[0]),
                end_us=int(part["egress_us"].max()), packets=len(part),
                bytes=int(part["packet_length"].sum()), start_queue=int(part["enq_qdepth"].iloc[0]),
                max_queue=int(part["enq_qdepth"].max())))
    return sorted(bursts, key=lambda b: b.start_us)


def marks_and_drops(log: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per class: packets, CE marks and drops by the program; DDL also `behind` (first served: packets
    behind another job's earlier burst; a queue log from before the flag has none)."""
    out = {}
    for cls, rows in log.groupby("class"):
        out[str(cls)] = {"packets": int(len(rows)), "marked": int(rows["marked"].sum()),
                         "dropped": int(rows["dropped"].sum())}
        if cls == "ddl" and "behind" in rows:
            out[str(cls)]["behind"] = int(rows["behind"].fillna(0).sum())
    return out


def peak_to_mean(times_us: np.ndarray, sizes: np.ndarray, scale_ms: float) -> float:
    """Peak over mean of the bytes per bin of `scale_ms` ("On the Burstiness of Distributed ML
    Traffic"): 1 for smooth traffic, large for on/off bursts."""
    if len(times_us) == 0:
        return float("nan")
    width = scale_ms * 1000
    bins = ((times_us - times_us.min()) // width).astype(np.int64)
    per_bin = np.bincount(bins, weights=sizes)
    mean = per_bin.mean()
    return float(per_bin.max() / mean) if mean > 0 else float("nan")


def max_backlog(times_us: np.ndarray, sizes: np.ndarray, rate_mbps: float) -> float:
    """B_max(r): the largest backlog (bytes) a queue served at `rate_mbps` would build on this
    arrival sequence."""
    if len(times_us) == 0:
        return 0.0
    order = np.argsort(times_us)
    t = times_us[order].astype(float)
    s = sizes[order].astype(float)
    rate = rate_mbps * 1e6 / 8 / 1e6  # bytes per microsecond
    backlog, peak, last = 0.0, 0.0, t[0]
    for ti, si in zip(t, s):
        backlog = max(0.0, backlog - (ti - last) * rate) + si
        peak = max(peak, backlog)
        last = ti
    return peak


def burstiness(log: pd.DataFrame, traffic_class: str = "ddl", rates_mbps=(5, 10, 20, 50, 100)) -> dict:
    rows = log[log["class"] == traffic_class]
    times = rows["ingress_us"].to_numpy(dtype=np.int64)
    sizes = rows["packet_length"].to_numpy(dtype=np.int64)
    return {
        "peak_to_mean": {f"{ms}ms": peak_to_mean(times, sizes, ms) for ms in BURSTINESS_SCALES_MS},
        "max_backlog_bytes": {f"{r}Mbps": max_backlog(times, sizes, r) for r in rates_mbps},
    }


def json_safe(value):
    """Plain data for strict JSON (allow_nan=False): NaN and infinities become None, numpy scalars
    Python ones, tuples lists."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def finite(values) -> np.ndarray:
    """The values that are numbers (None and NaN left out), as floats."""
    arr = np.asarray([v for v in values if v is not None and not isinstance(v, bool)], dtype=float)
    return arr[np.isfinite(arr)]


def mean_ci95(values) -> tuple[float, float]:
    """Mean and the half-width of its 95 % interval (Student's t with n - 1 degrees of freedom), over
    repetitions. None and NaN are left out; the half-width is NaN with fewer than two values."""
    data = finite(values)
    if data.size == 0:
        return float("nan"), float("nan")
    if data.size == 1:
        return float(data[0]), float("nan")
    import scipy.stats   # here, not at the top: 1.1 s of every `pcnlab run`'s start, for runs that have no interval

    half = scipy.stats.t.ppf(0.975, data.size - 1) * data.std(ddof=1) / math.sqrt(data.size)
    return float(data.mean()), float(half)


def diff_ci95(values, baseline) -> tuple[float, float]:
    """95 % interval of mean(values) - mean(baseline) (Welch's t: unequal variances, Welch-Satterthwaite
    degrees of freedom). NaN, NaN when either side has fewer than two values or both have no spread."""
    a, b = finite(values), finite(baseline)
    if a.size < 2 or b.size < 2 or (a.std() == 0 and b.std() == 0):
        return float("nan"), float("nan")
    import scipy.stats

    ci = scipy.stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    return float(ci.low), float(ci.high)


def theil_sen(y, x) -> tuple[float, float]:
    """The Theil-Sen line through the points (x, y): (slope, intercept), the median of the slopes between
    every two points with different x, and median(y) - slope x median(x), as scipy.stats.theilslopes
    gives by default (tests/analysis/test_iterations.py compares them). Hand-written: importing
    scipy.stats for it cost every `pcnlab run` and `pcnlab report` 1.3 s here, for a line through one
    point a second of a run."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    i, j = np.triu_indices(x.size, 1)
    dx = x[j] - x[i]
    apart = dx != 0
    slope = float(np.median((y[j] - y[i])[apart] / dx[apart]))
    return slope, float(np.median(y) - slope * np.median(x))
