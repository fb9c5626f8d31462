"""Plots a person would rather look at than read: the queue over time with K and K_pre, the DDL
iterations and the armed pre-drain windows; per sweep, BCT CDFs, start queue and BCT per iteration,
headline metrics with 95 % intervals, peak-to-mean curves."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from pcnlab.analysis import iterations as it  # noqa: E402
from pcnlab.analysis import traffic_stats as m  # noqa: E402
from pcnlab.analysis.comparison import Report, dig  # noqa: E402
from pcnlab.analysis.results import RunData, on_port  # noqa: E402
from pcnlab.controller.modes import ANNOUNCE_MODES, K_PRE_MODES, MARKING_MODES  # noqa: E402

CLASS_COLOURS = {"ddl": "tab:blue", "background": "tab:gray"}
CLASS_NAMES = {"ddl": "DDL", "background": "background"}
ITERATION_COLOUR = "#6fa8dc"
WINDOW_COLOUR = "tab:green"


def mode_thresholds(config: dict) -> dict[str, int]:
    """The queue levels a run's mode acts on (config.yaml): the queue's depth, K where the mode marks at
    it (ecn, pcn, pcn-host) and K_pre where it has one (pcn, pcn-host)."""
    mode = config.get("mode") or {}
    kind = mode.get("kind")
    out = {}
    if (config.get("topology") or {}).get("queue"):
        out["queue"] = int(config["topology"]["queue"])
    if kind in MARKING_MODES and mode.get("K") is not None:
        out["K"] = int(mode["K"])
    if kind in K_PRE_MODES and mode.get("K_pre") is not None:
        out["K_pre"] = int(mode["K_pre"])
    return out


def _intervals(iterations) -> list[tuple[int, int]]:
    """(start_us, end_us) of each iteration: rows of iterations.csv (first data packet in, last out), or
    metrics.Burst objects."""
    if isinstance(iterations, pd.DataFrame):
        if iterations.empty:
            return []
        return list(zip(iterations["first_in_us"].astype(int), iterations["last_out_us"].astype(int)))
    return [(b.start_us, b.end_us) for b in iterations or ()]


def plot_queue(path: Path, log: pd.DataFrame, port: tuple[str, int], iterations=(), windows=(),
               title: str = "", span_us: tuple[int, int] | None = None, thresholds: dict | None = None) -> Path:
    """The queue each packet met at one port over time (switch clock). DDL iterations (iterations.csv
    rows, or Bursts) are a blue lane above the data, armed pre-drain windows a hatched green lane below it
    (and a faint green shade over it); K and K_pre (`thresholds`, see mode_thresholds) dashed lines; CE
    marks red crosses, early drops black crosses. The legend sits outside the axes."""
    at = log[on_port(log, port[0], port[1])]
    if span_us is not None:
        at = at[(at["ingress_us"] >= span_us[0]) & (at["ingress_us"] < span_us[1])]
    t0 = (at["ingress_us"].min() if not at.empty else 0) if span_us is None else span_us[0]
    scale = 1e3 if span_us is not None else 1e6        # a zoomed plot reads in ms
    unit = "ms" if span_us is not None else "s"
    x = lambda us: (np.asarray(us, dtype=float) - t0) / scale  # noqa: E731
    levels = thresholds or {}
    top = max([int(at["enq_qdepth"].max()) if not at.empty else 0, *levels.values(), 1])
    lane = 0.07 * top
    fig, ax = plt.subplots(figsize=(12, 4.6))
    visible = lambda a, b: span_us is None or (b > span_us[0] and a < span_us[1])  # noqa: E731
    spans = [(a, b) for a, b in _intervals(iterations) if visible(a, b)]
    if spans:
        ax.broken_barh([(x(a), x(b) - x(a)) for a, b in spans], (top + 0.6 * lane, lane), facecolor=ITERATION_COLOUR,
                       edgecolor="navy", lw=0.6)
    ours = [w for w in windows if (w["switch"], int(w["port"])) == port and visible(w["start_us"], w["end_us"])]
    if ours:
        bars = [(x(w["start_us"]), x(w["end_us"]) - x(w["start_us"])) for w in ours]
        ax.broken_barh(bars, (-1.6 * lane, lane), facecolor="none", edgecolor=WINDOW_COLOUR, hatch="////", lw=0.8)
        for start, width in bars:
            ax.axvspan(start, start + width, color=WINDOW_COLOUR, alpha=0.10, lw=0)
    for cls, rows in at.groupby("class"):
        ax.plot(x(rows["ingress_us"]), rows["enq_qdepth"], ".", ms=2.5 if span_us is None else 4,
                color=CLASS_COLOURS.get(cls, "k"), label=f"{CLASS_NAMES.get(cls, cls)} packet", zorder=3)
    marked = at[at["marked"] == 1]
    if not marked.empty:
        ax.plot(x(marked["ingress_us"]), marked["enq_qdepth"], "x", ms=3, mew=0.7, color="tab:red", label="CE marked",
                zorder=4)
    dropped = at[at["dropped"] == 1]
    if not dropped.empty:
        ax.plot(x(dropped["ingress_us"]), dropped["enq_qdepth"], "x", ms=5, color="k", label="dropped early", zorder=4)
    styles = {"queue": ("k", "-", "queue depth"), "K": ("tab:red", "--", "K"), "K_pre": ("tab:orange", "--", "K_pre")}
    for name, level in levels.items():
        colour, style, label = styles.get(name, ("k", ":", name))
        ax.axhline(level, color=colour, ls=style, lw=1.1, label=f"{label} = {level}", zorder=2)
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Patch(facecolor=ITERATION_COLOUR, edgecolor="navy"))
    labels.append("DDL iteration: first data\npacket in to last out (top)")
    if ours:
        handles.append(Patch(facecolor="none", edgecolor=WINDOW_COLOUR, hatch="////"))
        labels.append("pre-drain: K_pre held\n(bottom lane, green shade)")
    ax.set_ylim(-2 * lane if ours else -0.5 * lane, top + 2 * lane)
    if span_us is not None:
        ax.set_xlim(0, x(span_us[1]))
    ax.set_yticks([t for t in ax.get_yticks() if 0 <= t <= top])
    ax.set_xlabel(f"time ({unit}, switch clock{'; 0 = start of this view' if span_us else ''})")
    ax.set_ylabel("queue met on arrival (packets)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False,
              markerscale=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_run_queue(run: RunData, port: tuple[str, int] | None = None, path: Path | None = None,
                   span_us: tuple[int, int] | None = None, title: str | None = None) -> Path | None:
    """The queue plot of a run folder at `port` (default: its bottleneck), with what the folder says:
    the mode's K and K_pre (config.yaml), the iterations measured there (iterations.csv) and the
    windows the controller armed (events.jsonl). None when there is nothing to plot."""
    neck = run.metrics.get("bottleneck") or {}
    if port is None:
        if not neck:
            return None
        port = (neck["switch"], int(neck["port"]))
    if run.queue.empty:
        return None
    at_neck = (neck.get("switch"), neck.get("port")) == port
    iterations = run.iteration_table if at_neck else pd.DataFrame()
    # pcn: the windows the controller wrote; pcn-host: when the switch held K_pre for an announcement.
    held = it.flagged_windows(run.queue, port) if run.mode in ANNOUNCE_MODES else it.window_intervals(run.events)
    windows = held.to_dict("records")
    path = path or run.path / f"queue-{port[0]}-p{port[1]}.png"
    return plot_queue(path, run.queue, port, iterations, windows, span_us=span_us,
                      title=title or f"{run.name}: {port[0]} port {port[1]} ({run.mode})",
                      thresholds=mode_thresholds(run.config))


def _colours(report: Report) -> dict[str, str]:
    return {p.name: f"C{i % 10}" for i, p in enumerate(report.points)}


def short_labels(names: list[str]) -> tuple[str, list[str]]:
    """Points named by one swept key (`mode=pcn`, ...) are labelled by their values; (key, labels)."""
    keys = {n.split("=", 1)[0] for n in names if "=" in n and "," not in n}
    if len(keys) == 1 and all("=" in n and "," not in n for n in names):
        return keys.pop(), [n.split("=", 1)[1] for n in names]
    return "", list(names)


def plot_sweep(sweep_dir: Path, report: Report) -> list[Path]:
    """The sweep's plots from the report's points (the runs it counted): bct-cdf.png, iterations.png,
    headline.png, peak-to-mean.png."""
    sweep_dir = Path(sweep_dir)
    colours = _colours(report)
    tables = {p.name: [_own_units(r) for r in p.runs if not r.iteration_table.empty] for p in report.points}
    tables = {name: pd.concat(ts, ignore_index=True) for name, ts in tables.items() if ts}
    written = [plot_bct_cdf(sweep_dir / "bct-cdf.png", tables, colours),
               plot_iterations(sweep_dir / "iterations.png", tables, colours),
               plot_headline(sweep_dir / "headline.png", report, colours),
               plot_peak_to_mean(sweep_dir / "peak-to-mean.png", report, colours)]
    return [p for p in written if p is not None]


def _own_units(run: RunData) -> pd.DataFrame:
    """A run's iterations.csv with its name, BCT in the experiment's own units (divided by its time_scale)."""
    table = run.iteration_table.assign(run=run.name)
    return table.assign(bct_ms=table["bct_ms"] / run.time_scale) if "bct_ms" in table else table


def plot_bct_cdf(path: Path, tables: dict[str, pd.DataFrame], colours: dict[str, str]) -> Path:
    """The fraction of DDL iterations finished within a BCT, per point (every iteration of its runs)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for name, table in tables.items():
        bcts = np.sort(table["bct_ms"].dropna().to_numpy())
        if bcts.size:
            ax.step(np.concatenate([[bcts[0]], bcts]), np.arange(0, bcts.size + 1) / bcts.size, where="post",
                    color=colours[name], label=f"{name} ({bcts.size} iterations)")
    ax.set_title("BCT per DDL iteration (left is better)")
    return _finish(fig, ax, "BCT (ms): iteration's first data packet in to its last out", "fraction of iterations",
                   path)


def plot_iterations(path: Path, tables: dict[str, pd.DataFrame], colours: dict[str, str]) -> Path:
    """Start queue and BCT per iteration index, per point: the mean over its runs (and jobs), with the
    range between the runs' lowest and highest shaded when there are several."""
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for name, table in tables.items():
        for ax, column in zip(axes, ("start_queue", "bct_ms")):
            per_run = table.groupby(["iteration", "run"])[column].mean().unstack("run")
            mean = per_run.mean(axis=1)
            ax.plot(mean.index, mean.to_numpy(), "o-", ms=4, color=colours[name],
                    label=f"{name} (mean of {per_run.shape[1]} run{'s' if per_run.shape[1] > 1 else ''})")
            if per_run.shape[1] > 1:
                ax.fill_between(mean.index, per_run.min(axis=1), per_run.max(axis=1), color=colours[name],
                                alpha=0.15, lw=0)
    axes[0].set_ylabel("start queue (packets)")
    axes[1].set_ylabel("BCT (ms)")
    axes[1].set_xlabel("DDL iteration (index in the workers' logs)")
    axes[0].set_title("per iteration at the bottleneck (shaded: lowest to highest run)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_headline(path: Path, report: Report, colours: dict[str, str]) -> Path | None:
    """Each headline metric per point: the mean over its runs with its 95 % interval, n under each bar."""
    rows = report.metrics
    if not rows:
        return None
    cols = min(4, len(rows))
    nrows = -(-len(rows) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.4 * cols, 3.3 * nrows), squeeze=False)
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    names = [p.name for p in report.points]
    key_of, labels = short_labels(names)
    for ax, (key, title, fmt) in zip(axes.flat, rows):
        cells = [report.cells[name][key] for name in names]
        scale = 100.0 if fmt.endswith("%}") else 1.0
        means = np.array([c["mean"] if c["n"] else 0.0 for c in cells]) * scale
        ax.bar(range(len(names)), means, color=[colours[n] for n in names], alpha=0.8)
        with_ci = [i for i, c in enumerate(cells) if c["n"] > 1 and np.isfinite(c["ci95"])]
        if with_ci:
            ax.errorbar(with_ci, means[with_ci], yerr=[cells[i]["ci95"] * scale for i in with_ci], fmt="none",
                        ecolor="k", capsize=4, lw=1)
        ax.set_xticks(range(len(names)), [f"{n}\nn={c['n']}" for n, c in zip(labels, cells)], fontsize=7,
                      rotation=0 if max(map(len, labels)) <= 10 else 30, ha="center")
        ax.set_title(title + (" (%)" if scale == 100 else ""), fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{'points by ' + key_of + '; ' if key_of else ''}bars: mean over runs; whiskers: its 95 % interval "
                 "(Student's t; none when n = 1); n: runs with the metric", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_peak_to_mean(path: Path, report: Report, colours: dict[str, str]) -> Path:
    """Peak over mean DDL bytes per bin at each time scale, per point (mean over its runs)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    scales = list(m.BURSTINESS_SCALES_MS)
    for point in report.points:
        curves = [dig(r.metrics, "burstiness.peak_to_mean") for r in point.runs]
        curves = [c for c in curves if c]
        if curves:
            values = [[c[f"{s}ms"] for c in curves if c.get(f"{s}ms") is not None] for s in scales]
            ys = [float(np.mean(v)) if v else np.nan for v in values]        # a scale no run measured: no point
            own = [s / point.runs[0].time_scale for s in scales]     # bins in the experiment's own units
            ax.plot(own, ys, "o-", color=colours[point.name], label=point.name)
    ax.set_xscale("log")
    ax.set_xticks(scales, [str(s) for s in scales])
    ax.minorticks_off()
    ax.set_title("burstiness of DDL traffic (1 = smooth)")
    return _finish(fig, ax, "time scale (ms)", "peak / mean bytes per bin", path)


def _finish(fig, ax, xlabel: str, ylabel: str, path: Path) -> Path:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
