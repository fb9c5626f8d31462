"""The compression report's figures (compression_report.py computes what they show): the scaling
factor against the payload reduction, held-out accuracy against time per run, and the compression
ceiling's predicted progress per codec (compression_ceiling.py)."""

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


def _progress(starts: list[float], rates: list[float | None], until: float) -> tuple[list[float], list[float]]:
    """The vertices of a piecewise-linear progress curve: rates per phase from `starts`, up to the first
    phase without one or `until`."""
    t, done = [0.0], [0.0]
    for i, (start, rate) in enumerate(zip(starts, rates)):
        if rate is None or start >= until:
            break
        end = min(starts[i + 1] if i + 1 < len(starts) else until, until)
        t.append(end)
        done.append(done[-1] + rate * (end - start))
    return t, done


def plot_ceiling(result: dict, out: Path) -> Path:
    """Each codec's predicted progress (iterations' worth of none) against time, the ceiling's in black,
    none's iterations to the target dashed, and each codec's measured mean time to it marked on that line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    starts = [p["from_s"] for p in result["phases"]]
    times = [c[k] for c in result["codecs"] for k in ("predicted_s", "measured_s") if c.get(k)]
    until = 1.25 * max(times + [result.get("ceiling_s") or 0.0, 1.0])
    fig, ax = plt.subplots(figsize=(8, 4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ax.plot(*_progress(starts, [p["progress_per_s"] for p in result["ceiling_phases"]], until), color="black",
            lw=4, alpha=0.35, label="ceiling: the best codec in every phase")
    for i, c in enumerate(x for x in result["codecs"] if x.get("efficiency") is not None):
        colour = colours[i % len(colours)]
        ax.plot(*_progress(starts, c["progress_per_s"], until), color=colour, lw=1.2,
                label=f"{c['codec']} ({c['efficiency']:.2f} per iteration)")
        if c.get("measured_s"):
            ax.plot(c["measured_s"], result["none_iterations"], marker="o", color=colour, ms=5)
    ax.axhline(result["none_iterations"], color="black", lw=0.8, ls="--")
    for name, start in zip((p["name"] for p in result["phases"]), starts):
        if 0 < start < until:
            ax.axvline(start, color="grey", lw=0.5, alpha=0.5)
            ax.text(start + 0.2, 0.02, name.rsplit(" @", 1)[0], transform=ax.get_xaxis_transform(), fontsize=6,
                    color="dimgrey", rotation=90, va="bottom")
    ax.set_xlim(0, until)
    ax.set_ylim(0, 1.3 * result["none_iterations"])
    ax.set_xlabel("seconds since the job started")
    ax.set_ylabel("progress (iterations' worth of none)")
    ax.set_title(f"predicted progress to {result['target']:.0%} (dots: measured mean times)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=7, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
