"""Plots a person would rather look at than read: the queue over time with bursts, armed windows and
marks; BCT CDFs per mode; headline metrics across modes with 95 % intervals; peak-to-mean curves."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pcnlab.experiments import metrics as m  # noqa: E402

CLASS_COLOURS = {"ddl": "tab:blue", "background": "tab:gray"}


def plot_queue(path: Path, log: pd.DataFrame, port: tuple[str, int], bursts: list[m.Burst],
               windows: list[dict], title: str = "", span_us: tuple[int, int] | None = None) -> Path:
    """Queue depth each packet met at one port over time; DDL bursts shaded blue, armed pre-drain
    windows shaded green, CE marks as red crosses, early drops as black crosses."""
    at = log[(log["switch"] == port[0]) & (log["port"] == port[1])]
    if span_us is not None:
        at = at[(at["ingress_us"] >= span_us[0]) & (at["ingress_us"] < span_us[1])]
    t0 = at["ingress_us"].min() if span_us is None else span_us[0]
    fig, ax = plt.subplots(figsize=(11, 4.2))
    for burst in bursts:
        if span_us is None or span_us[0] <= burst.start_us < span_us[1]:
            ax.axvspan((burst.start_us - t0) / 1e6, (burst.end_us - t0) / 1e6, color="tab:blue", alpha=0.12, lw=0)
    for w in windows:
        if (w["switch"], w["port"]) == port and (span_us is None or w["end_us"] > span_us[0] and w["start_us"] < span_us[1]):
            ax.axvspan((w["start_us"] - t0) / 1e6, (w["end_us"] - t0) / 1e6, color="tab:green", alpha=0.18, lw=0)
    for cls, rows in at.groupby("class"):
        ax.plot((rows["ingress_us"] - t0) / 1e6, rows["enq_qdepth"], ".", ms=2, color=CLASS_COLOURS.get(cls, "k"),
                label=f"{cls} packets")
    marked = at[at["marked"] == 1]
    ax.plot((marked["ingress_us"] - t0) / 1e6, marked["enq_qdepth"], "x", ms=3, color="tab:red", label="CE marked")
    dropped = at[at["dropped"] == 1]
    if not dropped.empty:
        ax.plot((dropped["ingress_us"] - t0) / 1e6, dropped["enq_qdepth"], "x", ms=4, color="k", label="dropped early")
    ax.plot([], [], color="tab:blue", alpha=0.3, lw=8, label="DDL burst")
    ax.plot([], [], color="tab:green", alpha=0.4, lw=8, label="pre-drain window")
    ax.set_xlabel("time (s, switch clock)")
    ax.set_ylabel("queue met on arrival (packets)")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8, ncol=3)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _runs_by_mode(paths: list[Path]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for run in paths:
        metrics_path = run / "metrics.json"
        if metrics_path.exists():
            metrics = json.loads(metrics_path.read_text())
            out.setdefault(metrics.get("mode", "?"), []).append({"path": run, **metrics})
    return out


def plot_sweep(sweep_dir: Path, paths: list[Path]) -> list[Path]:
    from pcnlab.experiments.analysis import HEADLINE, _dig

    by_mode = _runs_by_mode(paths)
    written = []
    # BCT CDF per mode, from every iteration of every run of that mode.
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, runs in by_mode.items():
        bcts = []
        for run in runs:
            table = run["path"] / "iterations.csv"
            if table.exists() and table.stat().st_size > 0:
                bcts += list(pd.read_csv(table)["bct_ms"].dropna())
        if bcts:
            xs = np.sort(bcts)
            ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=mode)
    written.append(_finish_line_plot(fig, ax, "burst completion time (ms)", "fraction of bursts",
                                     sweep_dir / "bct-cdf.png"))

    # Headline metrics across modes, mean and 95 % interval over repetitions.
    keys = [(k, t) for k, t, _ in HEADLINE if any(_dig(r, k) is not None for rs in by_mode.values() for r in rs)]
    if keys:
        cols = min(4, len(keys))
        rows = -(-len(keys) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
        for ax in axes.flat[len(keys):]:
            ax.axis("off")
        axes = axes.flat
        modes = list(by_mode)
        for ax, (key, title) in zip(axes, keys):
            stats = [m.mean_ci95([_dig(r, key) for r in by_mode[mode]]) for mode in modes]
            means = [s[0] for s in stats]
            errs = [0 if s[1] != s[1] else s[1] for s in stats]
            ax.bar(modes, means, yerr=errs, capsize=4, color="tab:blue", alpha=0.75)
            ax.set_title(title, fontsize=9)
            ax.tick_params(axis="x", labelrotation=45, labelsize=8)
            ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        written.append(sweep_dir / "headline.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)

    # Peak-to-mean ratio of DDL traffic at each time scale.
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, runs in by_mode.items():
        curves = [r["burstiness"]["peak_to_mean"] for r in runs if r.get("burstiness")]
        if curves:
            scales = list(m.BURSTINESS_SCALES_MS)
            ax.plot(scales, [np.nanmean([c[f"{s}ms"] for c in curves]) for s in scales], "o-", label=mode)
    ax.set_xscale("log")
    written.append(_finish_line_plot(fig, ax, "time scale (ms)", "peak / mean bytes per bin (DDL)",
                                     sweep_dir / "peak-to-mean.png"))
    return written


def _finish_line_plot(fig, ax, xlabel: str, ylabel: str, path: Path) -> Path:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
