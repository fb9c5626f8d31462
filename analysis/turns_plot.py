"""Jobs taking turns at a port, drawn (turns-<switch>-p<port>.png in a run folder with several jobs at its
bottleneck): each job's communications there in a lane of its own, the stretches that overlapped another
job's in red, and each job's iteration (start to start at the port) below; the plans that moved a job
(`mode.interleave`, metrics.json interleave.plans) are vertical lines labelled with their shifts. Read
from iterations.csv (first data packet in to last out, the switch's clock) and the plans as
interference.py and metrics.py leave them; matplotlib draws, as the other per-run plots (plots.py)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pcnlab.analysis.interference import overlap_spans  # noqa: E402

OVERLAP_COLOUR = "tab:red"
PLAN_COLOUR = "k"


def overlapped_spans(table: pd.DataFrame) -> dict[int, list[tuple[float, float]]]:
    """Per job: the (start_us, end_us) stretches of its communications at the port during which another
    job's was under way there too (interference.overlap_spans, gathered by job)."""
    spans = overlap_spans(table)
    return {int(job): [s for row in spans[table["job"] == job] for s in row] for job in table["job"].unique()}


def moving_plans(plans: list[dict], port: tuple[str, int]) -> list[dict]:
    """The plans at `port` that moved a job (a shift above zero): metrics.json interleave.plans rows."""
    return [p for p in plans or () if (p.get("switch"), int(p.get("port", -1))) == port
            and any(s > 0 for s in (p.get("shifts_ms") or {}).values())]


def plot_turns(path: Path, table: pd.DataFrame, names: dict[int, str], plans: list[dict] = (),
               title: str = "") -> Path | None:
    """The turns plot of one port's iterations (iterations.csv rows: job, first_in_us, last_out_us) with
    the jobs' `names` and the `plans` that moved one (moving_plans). None with fewer than two jobs."""
    if table.empty or table["job"].nunique() < 2:
        return None
    jobs = sorted(int(j) for j in table["job"].unique())
    t0 = float(table["first_in_us"].min())
    x = lambda us: (np.asarray(us, dtype=float) - t0) / 1e6  # noqa: E731
    fig, (lanes, pace) = plt.subplots(2, 1, figsize=(12, 5.6), sharex=True, gridspec_kw={"height_ratios": [1.2, 1]})
    over = overlapped_spans(table)
    for row, job in enumerate(jobs):
        mine = table[table["job"] == job].sort_values("first_in_us")
        colour = f"C{row % 10}"
        starts, ends = x(mine["first_in_us"]), x(mine["last_out_us"])
        lanes.broken_barh(list(zip(starts, ends - starts)), (row - 0.35, 0.7), facecolor=colour, alpha=0.75)
        spans = over.get(job, [])
        if spans:
            lanes.broken_barh([(x(a), x(b) - x(a)) for a, b in spans], (row - 0.35, 0.7), facecolor=OVERLAP_COLOUR)
        share = sum(b - a for a, b in spans) / max(float((mine["last_out_us"] - mine["first_in_us"]).sum()), 1.0)
        label = f"{names.get(job, job)}: {share:.0%} overlapped"
        if len(mine) > 1:
            pace.plot(starts[1:], np.diff(mine["first_in_us"].to_numpy(dtype=float)) / 1000, "o-", ms=3,
                      color=colour, label=label)
    lanes.set_yticks(range(len(jobs)), [str(names.get(j, j)) for j in jobs])
    lanes.set_ylim(-0.7, len(jobs) - 0.3)
    lanes.invert_yaxis()
    lanes.set_ylabel("job (its communications)")
    listed = []
    for row, plan in enumerate(plans):
        moved = ", ".join(f"{job} +{ms:.0f} ms" for job, ms in plan["shifts_ms"].items() if ms > 0)
        for ax in (lanes, pace):
            ax.axvline(x(plan["t_us"]), color=PLAN_COLOUR, ls="--", lw=0.9)
        lanes.annotate(str(plan["plan"]), (x(plan["t_us"]), -0.62 + 0.22 * (row % 2)), fontsize=7, ha="left",
                       va="top", xytext=(2, 0), textcoords="offset points")
        listed.append(f"plan {plan['plan']} at {float(x(plan['t_us'])):.1f} s: {moved}")
    if listed:
        pace.text(1.01, 1.0, "\n".join(listed), transform=pace.transAxes, fontsize=8, va="top", ha="left")
    pace.set_ylabel("iteration at the port (ms,\nstart to start)")
    pace.set_xlabel("time (s, switch clock; 0 = the first communication at the port)")
    lanes.set_title(title + ("; dashed: a plan that moved a job" if plans else ""))
    for ax in (lanes, pace):
        ax.grid(alpha=0.3)
    handles, labels = pace.get_legend_handles_labels()
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor=OVERLAP_COLOUR))
    labels.append("overlapped another job's")
    lanes.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
