"""What `pcnlab view` draws of one run, read through pcnlab.analysis.results and thinned for a browser.

Times are seconds on the host clock from the run's first queue record or iteration start (`t0_ns`), so
every switch, every worker's log and the background flows share one axis.

Thinning ("decimation") keeps what the eye can tell apart and everything a person looks for:

- the queue depth series (at enqueue, by arrival time; at dequeue, by departure time) keep, per time
  bin, their first, last, lowest and highest point (M4: a line through those is drawn with the same
  pixels as through every point while a bin is no wider than a pixel; `Decimation.bins` bins over the
  whole run, finer than any screen);
- every record from `detail_before_ms` before to `detail_after_ms` after each iteration start and
  each window's opening, so a zoom on a burst shows every packet;
- every marked, dropped or announcing (pcn-host's PCN-START) packet, every window (its edges exact) and
  every iteration of every worker, drawn as their own glyphs and never thinned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pcnlab.analysis import iterations as it
from pcnlab.analysis.plots import mode_thresholds
from pcnlab.analysis.results import RunData, on_port

POINT_COLUMNS = ("t", "depth", "seq", "class", "job", "src", "dst")


@dataclass(frozen=True)
class Decimation:
    """How far a view thins the queue series (see the module's docstring)."""

    bins: int = 4000
    detail_before_ms: float = 10.0
    detail_after_ms: float = 40.0


@dataclass(frozen=True)
class PortView:
    """One switch port: its thinned queue series and every event drawn at it (times in s from t0)."""

    switch: str
    port: int
    records: int                 # telemetry records at this port, all of them
    enq: pd.DataFrame            # t, depth: depth met on arrival, by arrival time (thinned)
    deq: pd.DataFrame            # t, depth: depth left at departure, by departure time (thinned)
    marked: pd.DataFrame         # POINT_COLUMNS, every CE-marked packet
    dropped: pd.DataFrame        # POINT_COLUMNS, every packet the program dropped early
    announced: pd.DataFrame      # POINT_COLUMNS, every pcn-host announcement (PCN-START)
    windows: pd.DataFrame        # left, right, job, armed, removed: the pcn windows the controller wrote
    held: pd.DataFrame           # left, right: where the switch held K_pre (its in_window flags)

    @property
    def label(self) -> str:
        return f"{self.switch} port {self.port}"

    @property
    def drawn(self) -> int:
        return len(self.enq) + len(self.deq)


@dataclass(frozen=True)
class RunView:
    """One run as the view draws it."""

    path: Path
    name: str
    mode: str
    status: str
    trusted: bool | None
    reasons: tuple[str, ...]
    thresholds: dict[str, int]
    t0_ns: float
    duration_s: float
    neck: tuple[str, int] | None
    ports: tuple[PortView, ...]
    iterations: pd.DataFrame     # who, job, role, rank, host, iter, start, end (s): every process's iterations
    jumps: pd.DataFrame          # iter, start, end (s): iteration N of the first job, earliest start, latest end
    flows: pd.DataFrame          # flow, start, end, mbps: background throughput per interval
    decimation: Decimation = field(default_factory=Decimation)


def envelope(t: np.ndarray, ys: list[np.ndarray], bins: int, keep: np.ndarray) -> np.ndarray:
    """Indices of the points of series sampled at `t` (sorted) to draw: per time bin, the first and last
    point and, of each of `ys`, the lowest and the highest; and every point where `keep` is true."""
    if len(t) == 0:
        return np.zeros(0, dtype=np.int64)
    span = float(t[-1] - t[0]) or 1.0
    which = np.minimum(((t - t[0]) / span * bins).astype(np.int64), bins - 1)
    frame = pd.DataFrame({"bin": which, **{f"y{i}": y for i, y in enumerate(ys)}})
    grouped = frame.groupby("bin", sort=False)
    index = frame.index.to_series()
    chosen = [index.groupby(which).first().to_numpy(), index.groupby(which).last().to_numpy(),
              np.flatnonzero(keep)]
    for i in range(len(ys)):
        chosen += [grouped[f"y{i}"].idxmin().to_numpy(), grouped[f"y{i}"].idxmax().to_numpy()]
    return np.unique(np.concatenate(chosen).astype(np.int64))


def within(t: np.ndarray, starts: np.ndarray, before: float, after: float) -> np.ndarray:
    """True where t (sorted) lies within [start - before, start + after] of any of `starts`."""
    mark = np.zeros(len(t) + 1, dtype=np.int64)
    for lo, hi in zip(np.searchsorted(t, starts - before), np.searchsorted(t, starts + after, side="right")):
        mark[lo] += 1
        mark[hi] -= 1
    return np.cumsum(mark)[:-1] > 0


def _points(rows: pd.DataFrame, t0_ns: float) -> pd.DataFrame:
    return pd.DataFrame({"t": (rows["ingress_ns"].to_numpy() - t0_ns) / 1e9, "depth": rows["enq_qdepth"].to_numpy(),
                         "seq": rows["seq"].to_numpy(), "class": rows["class"].astype(str).to_numpy(),
                         "job": rows["job"].to_numpy(), "src": rows["src"].astype(str).to_numpy(),
                         "dst": rows["dst"].astype(str).to_numpy()}, columns=list(POINT_COLUMNS))


def _thinned(t_ns: np.ndarray, depth: np.ndarray, keep: np.ndarray, t0_ns: float, bins: int) -> pd.DataFrame:
    order = np.argsort(t_ns, kind="stable")
    t_ns, depth, keep = t_ns[order], depth[order], keep[order]
    chosen = envelope(t_ns, [depth], bins, keep)
    return pd.DataFrame({"t": (t_ns[chosen] - t0_ns) / 1e9, "depth": depth[chosen]})


def _flag(rows: pd.DataFrame, name: str) -> pd.Series:
    return rows[name] == 1 if name in rows else pd.Series(False, index=rows.index)


def port_view(run: RunData, port: tuple[str, int], windows: pd.DataFrame, starts_ns: np.ndarray, t0_ns: float,
              decimation: Decimation) -> PortView:
    """One port of `run`: `windows` are the controller's windows at this port (switch clock, as
    iterations.window_intervals gives them), `starts_ns` every iteration start (host clock)."""
    q = run.queue
    at = q[on_port(q, port[0], port[1])] if not q.empty else q
    clock = run.clocks.get(port[0])
    to_s = (lambda us: (clock.to_host_ns(us) - t0_ns) / 1e9) if clock else (lambda us: np.full(len(us), np.nan))
    wins = pd.DataFrame({"left": to_s(windows["start_us"].to_numpy(dtype=float)),
                         "right": to_s(windows["end_us"].to_numpy(dtype=float)),
                         "job": windows["job"].to_numpy(),
                         "armed": (windows["armed_ns"].to_numpy(dtype=float) - t0_ns) / 1e9,
                         "removed": (windows["removed_ns"].to_numpy(dtype=float) - t0_ns) / 1e9})
    if at.empty:
        empty = pd.DataFrame(columns=["t", "depth"])
        none = pd.DataFrame(columns=list(POINT_COLUMNS))
        return PortView(port[0], port[1], 0, empty, empty, none, none, none, wins, pd.DataFrame(columns=["left", "right"]))
    held = it.flagged_windows(q, port)
    held = pd.DataFrame({"left": to_s(held["start_us"].to_numpy(dtype=float)),
                         "right": to_s(held["end_us"].to_numpy(dtype=float))})
    marked, dropped, announced = _flag(at, "marked"), _flag(at, "dropped"), _flag(at, "announce")
    before, after = decimation.detail_before_ms * 1e6, decimation.detail_after_ms * 1e6
    opening = t0_ns + wins["left"].dropna().to_numpy() * 1e9
    moments = np.sort(np.concatenate([np.asarray(starts_ns, dtype=float), opening]))
    special = (marked | dropped | announced).to_numpy()

    def series(t_col: str, depth_col: str) -> pd.DataFrame:
        t_ns = at[t_col].to_numpy(dtype=float)
        order = np.argsort(t_ns, kind="stable")
        keep = np.empty(len(t_ns), dtype=bool)
        keep[order] = within(t_ns[order], moments, before, after)
        return _thinned(t_ns, at[depth_col].to_numpy(), keep | special, t0_ns, decimation.bins)

    return PortView(port[0], port[1], len(at), series("ingress_ns", "enq_qdepth"), series("egress_ns", "deq_qdepth"),
                    _points(at[marked], t0_ns), _points(at[dropped], t0_ns), _points(at[announced], t0_ns),
                    wins, held)


def _iterations(run: RunData, t0_ns: float) -> pd.DataFrame:
    cols = ["who", "job", "role", "rank", "host", "iter", "start", "end"]
    its = run.iterations
    if its.empty or "comm_start_ns" not in its:
        return pd.DataFrame(columns=cols)
    its = its[its["comm_start_ns"].notna()]
    rank = its["rank"].map(lambda r: "" if pd.isna(r) or int(r) < 0 else f" {int(r)}")
    return pd.DataFrame({"who": its["job"].astype(str) + " " + its["role"].astype(str) + rank + " (" + its["host"].astype(str) + ")",
                         "job": its["job"].astype(str), "role": its["role"].astype(str), "rank": its["rank"],
                         "host": its["host"].astype(str), "iter": its["iter"].astype(int),
                         "start": (its["comm_start_ns"].to_numpy(dtype=float) - t0_ns) / 1e9,
                         "end": (its["comm_end_ns"].to_numpy(dtype=float) - t0_ns) / 1e9}, columns=cols)


def _jumps(iterations: pd.DataFrame) -> pd.DataFrame:
    """Where "jump to iteration N" goes: the first job's iteration N, from its earliest start to its
    latest end over the job's processes."""
    if iterations.empty:
        return pd.DataFrame(columns=["iter", "start", "end"])
    first = iterations[iterations["job"] == iterations["job"].iloc[0]]
    out = first.groupby("iter").agg(start=("start", "min"), end=("end", "max")).reset_index()
    return out.sort_values("iter").reset_index(drop=True)


def _flows(run: RunData, t0_ns: float) -> pd.DataFrame:
    f = run.flows
    if f.empty:
        return pd.DataFrame(columns=["flow", "start", "end", "mbps"])
    return pd.DataFrame({"flow": f["flow"].astype(str), "start": (f["start_ns"].to_numpy(dtype=float) - t0_ns) / 1e9,
                         "end": (f["end_ns"].to_numpy(dtype=float) - t0_ns) / 1e9, "mbps": f["mbps"].to_numpy(dtype=float)})


def _natural(port: tuple[str, int]) -> tuple:
    """s2 before s10; a name's digits compared as numbers."""
    return (*[int(x) if x.isdigit() else x for x in re.split(r"(\d+)", port[0])], port[1])


def run_view(run: RunData, decimation: Decimation = Decimation()) -> RunView:
    """Everything the view draws of `run`."""
    q = run.queue
    its = run.iterations
    firsts = [float(q["ingress_ns"].min())] if not q.empty else []
    if not its.empty and "comm_start_ns" in its and its["comm_start_ns"].notna().any():
        firsts.append(float(its["comm_start_ns"].min()))
    t0_ns = min(firsts) if firsts else 0.0
    iterations = _iterations(run, t0_ns)
    windows = it.window_intervals(run.events)
    ports = set(zip(q["switch"], q["port"].astype(int))) if not q.empty else set()
    ports |= {(str(w.switch), int(w.port)) for w in windows.itertuples() if str(w.switch) in run.clocks}
    starts_ns = iterations["start"].to_numpy(dtype=float) * 1e9 + t0_ns
    views = tuple(port_view(run, p, windows[on_port(windows, p[0], p[1])], starts_ns, t0_ns,
                            decimation) for p in sorted(ports, key=_natural))
    neck = run.metrics.get("bottleneck") or {}
    ends = [float(q["egress_ns"].max()) if not q.empty else t0_ns]
    if not iterations.empty:
        ends.append(t0_ns + float(iterations["end"].max()) * 1e9)
    trusted = run.fidelity.get("trusted") if run.fidelity else None
    return RunView(run.path, run.name, run.mode, str(run.status.get("status", "?")), trusted,
                   tuple(run.fidelity.get("reasons") or ()), mode_thresholds(run.config), t0_ns,
                   (max(ends) - t0_ns) / 1e9, (neck["switch"], int(neck["port"])) if neck else None, views,
                   iterations, _jumps(iterations), _flows(run, t0_ns), decimation)
