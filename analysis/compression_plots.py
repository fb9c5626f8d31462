"""The compression report's figures (compression_report.py computes what they show): the scaling
factor against the payload reduction, and held-out accuracy against time per run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def plot_scaling(frame: pd.DataFrame, knee_rows: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = sorted(frame["rate_mbps"].dropna().unique())
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 3.8), sharey=True, squeeze=False)
    for ax, rate in zip(axes[0], rates):
        here = frame[(frame["rate_mbps"] == rate) & (frame["workers"] > 1)]
        for workers, rows in here.groupby("workers"):
            rows = rows.sort_values("reduction")
            ax.plot(rows["reduction"], rows["scaling"], marker="o", label=f"{int(workers)} workers")
            for r in rows.itertuples():
                ax.annotate(r.compression, (r.reduction, r.scaling), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        for k in knee_rows:
            if k["rate_mbps"] == rate:
                ax.axvline(k["knee_reduction"], color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_xlabel("payload reduction (bytes of none / bytes, measured)")
        ax.set_title(f"{rate:g} Mbit/s links")
        ax.axhline(1.0, color="black", lw=0.5)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("scaling factor T1 / TN")
    axes[0][-1].legend(loc="lower right", fontsize=8)
    fig.suptitle("scaling factor against gradient compression (dashed: where more stops mattering)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_netsense(rows: list[dict], target: float, out: Path) -> Path:
    """Held-out accuracy against time from the job's start, one line per run (colour: its point), the
    schedule's phases other than the first shaded, the target dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    points = list(dict.fromkeys(r["point"] for r in rows))
    colours = dict(zip(points, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for r in rows:
        t, acc = zip(*r["curve"]) if r.get("curve") else ((), ())
        first = r is next(x for x in rows if x["point"] == r["point"])
        name = r["point"].split("=", 1)[-1] if "," not in r["point"] else r["point"]   # one sweep key: its value
        ax.plot(t, acc, color=colours[r["point"]], lw=1.2, alpha=0.85, label=name if first else None)
    longest = max(rows, key=lambda r: len(r.get("phases", []))).get("phases", []) if rows else []
    state = lambda phase: phase["phase"].rsplit(" @", 1)[0]   # noqa: E731  (the label without its time)
    for phase in longest[1:]:
        if state(phase) != state(longest[0]):
            ax.axvspan(phase["from_s"], phase["from_s"] + phase["seconds"], color="grey", alpha=0.15, lw=0)
            ax.text(phase["from_s"] + 0.3, 0.52, state(phase), fontsize=7, color="dimgrey", rotation=90,
                    va="bottom")
    ax.axhline(target, color="black", lw=0.8, ls="--")
    ax.set_xlabel("seconds since the job started")
    ax.set_ylabel("held-out accuracy (digits)")
    ax.set_ylim(0.5, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
