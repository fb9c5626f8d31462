"""Figures of compressed and adaptive training, from run folders only (through pcnlab.analysis.results):

    python -m pcnlab.analysis.compression_report netsense results/netsense [--target 0.9]
    python -m pcnlab.analysis.compression_report scaling results/compression-scaling [MORE SWEEPS ...]

netsense: per sweep point (mean over its trusted repetitions): the time from the job's start to the
first held-out accuracy at or above the target, the accuracy at equal times (--at-s; by default when
the first point reached the target and the longest time every run covers), worker iterations per
second (overall and per phase of the schedule: rate changes, competing flows), the final accuracy,
the bytes a worker moved per iteration -- as handed to gloo, as TCP carried them (TCP_INFO) -- and the
DDL bytes the switch sent per iteration (its counters, headers and ACKs included), and the codecs
the workers used. Written as netsense.md and netsense.json into the sweep folder.

scaling: per (link rate, compression, workers), pooling the runs of every sweep folder given: the mean
iteration time, the scaling factor T_1 / T_N (T_1: the 1-worker run of the same link rate and
compression), the compute phase over T_N (`vs_compute`: against a worker that does not communicate at
all, Zhang et al.'s definition), the payload reduction measured from
the logs (bytes per iteration of none over this compression's), and per (link rate, workers) the
measured point where compression stops mattering: the least reduction whose scaling factor is within
KNEE_TOLERANCE of the best any compression reached there. Written as compression-scaling.md/.json and
compression-scaling.png (scaling factor against reduction, one line per worker count, a panel per
link rate).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from pcnlab.errors import UsageError
from pcnlab.analysis.compression_plots import plot_netsense, plot_scaling
from pcnlab.analysis.traffic_stats import json_safe
from pcnlab.analysis.results import RunData, run_folders
from pcnlab.cmdline import OneLineParser, fraction, non_negative

KNEE_TOLERANCE = 0.05


# --- one run ---------------------------------------------------------------------------------------

def _workers(run: RunData) -> pd.DataFrame:
    table = run.iterations
    return table[table["role"] == "worker"] if not table.empty else table


def job_start_ns(run: RunData) -> float | None:
    """When the job started computing: its workers' earliest iteration-0 compute start."""
    w = _workers(run)
    first = w[w["iter"] == 0] if not w.empty else w
    return float(first["compute_start_ns"].min()) if not first.empty else None


def accuracy_curve(run: RunData) -> pd.DataFrame:
    """(iter, t_s, accuracy) of every held-out evaluation, t_s from the job's start."""
    table, start = run.iterations, job_start_ns(run)
    if table.empty or "accuracy" not in table or start is None:
        return pd.DataFrame(columns=["iter", "t_s", "accuracy"])
    evals = table[table["accuracy"].notna()].sort_values("host_ns")
    return pd.DataFrame({"iter": evals["iter"].to_numpy(), "t_s": (evals["host_ns"].to_numpy() - start) / 1e9,
                         "accuracy": evals["accuracy"].to_numpy()})


def time_to_accuracy(curve: pd.DataFrame, target: float) -> tuple[float | None, int | None]:
    """(seconds, iteration) of the first evaluation at or above `target`; (None, None) if none."""
    hit = curve[curve["accuracy"] >= target]
    return (float(hit["t_s"].iloc[0]), int(hit["iter"].iloc[0])) if not hit.empty else (None, None)


def accuracy_at(curve: list, t_s: float) -> float | None:
    """Held-out accuracy of the model a run had t_s seconds after its job started: its last evaluation
    at or before then (a run that had finished keeps its final model); None before the first."""
    before = [acc for t, acc in curve or () if t <= t_s]
    return float(before[-1]) if before else None


def equal_times(rows: list[dict], table: list[dict]) -> list[float]:
    """The times at which the report compares accuracy when none are asked for: when the first point
    reached the target (mean over its runs), and the longest time every run covers (its last
    evaluation)."""
    reached = [p["time_to_target_s"] for p in table if p.get("time_to_target_s") is not None]
    ends = [r["curve"][-1][0] for r in rows if r.get("curve")]
    return sorted(set(([min(reached)] if reached else []) + ([min(ends)] if ends else [])))


def phases(run: RunData) -> list[tuple[str, float, float]]:
    """The run cut at its scheduled changes: (label, from_ns, to_ns) on the host clock."""
    start = job_start_ns(run)
    if start is None:
        return []
    end = float(_workers(run)["comm_end_ns"].max())
    return schedule_phases(run.events, start, end, (run.config.get("topology") or {}).get("bw"))


def schedule_phases(events: pd.DataFrame, start_ns: float, end_ns: float,
                    first_rate: float | None) -> list[tuple[str, float, float]]:
    """[start, end) cut at the schedule's events (events.jsonl: rate changes, flows started and
    stopped), each phase labelled by the rate then and the competing flows running, and the planned
    time it began (`40 Mbit/s + 8 flows @5s`). The events of one change (a flow group starts flow by
    flow, however long that takes) are one cut, at its first: they carry the change's planned at_s, and
    two changes planned apart stay two cuts however close they came."""
    rate = first = f"{first_rate:g} Mbit/s" if first_rate else "start"
    running: set[str] = set()
    cuts: list[tuple[float, float, str]] = []           # (host_ns, planned at_s, state)
    rows = events[events["type"] == "schedule"].sort_values("host_ns") if not events.empty and "action" in events \
        else events.iloc[0:0]
    for r in rows.itertuples():
        if r.action == "rate":
            rate = f"{r.mbps:g} Mbit/s"
        elif r.action == "start":
            running.add(r.flow)
        elif r.action == "stop":
            running.discard(r.flow)
        else:
            continue
        state = rate + (f" + {len(running)} flow{'s' if len(running) > 1 else ''}" if running else "")
        if cuts and float(r.at_s) == cuts[-1][1]:
            cuts[-1] = (cuts[-1][0], cuts[-1][1], state)
        else:
            cuts.append((float(r.host_ns), float(r.at_s), state))
    inside = [(t, f"{state} @{at:g}s") for t, at, state in cuts if start_ns < t < end_ns]
    bounds = [(start_ns, f"{first} @0s")] + inside
    return [(label, t, bounds[i + 1][0] if i + 1 < len(bounds) else end_ns) for i, (t, label) in enumerate(bounds)]


def iterations_per_s(run: RunData, since_ns: float, until_ns: float) -> float | None:
    """Worker iterations started in [since, until), per second, averaged over the workers."""
    w = _workers(run)
    if w.empty or until_ns <= since_ns:
        return None
    inside = w[(w["compute_start_ns"] >= since_ns) & (w["compute_start_ns"] < until_ns)]
    per_worker = inside.groupby("host").size()
    return float(per_worker.mean() / ((until_ns - since_ns) / 1e9)) if len(per_worker) else 0.0


def switch_ddl_bytes(run: RunData) -> float | None:
    """DDL bytes every switch sent on its traffic ports (counters.json; the monitor ports left out);
    None without counters or if a switch's could not be read."""
    if not run.counters or any(rows is None for rows in run.counters.values()):
        return None
    return float(sum(r["bytes"] for switch, rows in run.counters.items() for r in rows
                     if r["class"] == "ddl" and r["counter"] == "tx" and (switch, r["port"]) not in run.monitor_ports))


def run_figures(run: RunData, target: float | None = None) -> dict:
    """Everything the tables need from one run."""
    w = _workers(run)
    job = (run.config.get("jobs") or [{}])[0]
    method = job.get("compression", "none")
    out: dict = {"run": run.name, "point": run.point, "trusted": run.fidelity.get("trusted"),
                 "status": run.status.get("status"), "sweep": run.config.get("sweep") or {},
                 "rate_mbps": (run.config.get("topology") or {}).get("bw"), "workers": len(job.get("workers") or ()),
                 "model": job.get("model"),
                 "codec": (f"{method}-{job.get('compression_ratio'):g}" if method in ("topk", "randk") else method)
                 + ("-no-ef" if job.get("error_feedback") is False else "")}
    if w.empty:
        return out
    curve = accuracy_curve(run)
    if target is not None:
        out["time_to_target_s"], out["iteration_at_target"] = time_to_accuracy(curve, target)
    out["accuracy_final"] = float(curve["accuracy"].iloc[-1]) if not curve.empty else None
    start, end = job_start_ns(run), float(w["comm_end_ns"].max())
    out["iterations_per_s"] = iterations_per_s(run, start, end)
    out["phases"] = [{"phase": label, "from_s": (a - start) / 1e9, "seconds": (b - a) / 1e9,
                      "iterations_per_s": iterations_per_s(run, a, b),
                      "codecs": _codecs(w[(w["compute_start_ns"] >= a) & (w["compute_start_ns"] < b)])}
                     for label, a, b in phases(run)]
    out["curve"] = curve[["t_s", "accuracy"]].to_numpy().tolist()
    out["iteration_ms"] = float(np.mean([np.diff(rows.sort_values("iter")["compute_start_ns"]).mean() / 1e6
                                         for _, rows in w.groupby("host") if len(rows) > 1]))
    out["compute_ms"] = float(((w["compute_end_ns"] - w["compute_start_ns"]) / 1e6).mean())
    out["payload_bytes"] = float((w["bytes_sent"] + w["bytes_recv"]).mean())
    if "tcp" in w:
        tcp = w["tcp"].dropna().map(lambda t: t.get("bytes_sent", 0) + t.get("bytes_received", 0) if t else None)
        out["tcp_bytes"] = float(tcp.dropna().mean()) if len(tcp.dropna()) else None
    iterations = int(w.groupby("host")["iter"].max().min() + 1)
    ddl = switch_ddl_bytes(run)
    out["switch_bytes"] = ddl / iterations if ddl is not None and iterations else None
    out["codecs"] = _codecs(w)
    return out


def _codecs(rows: pd.DataFrame) -> dict:
    """Share of worker iterations per codec."""
    if rows.empty or "compression" not in rows:
        return {"none": 1.0} if not rows.empty else {}
    names = rows["compression"].map(lambda c: c.get("codec") if isinstance(c, dict) else "none")
    return {str(k): float(v) for k, v in names.value_counts(normalize=True).items()}


# --- experiments -----------------------------------------------------------------------------------

def figures(paths: list[Path], target: float | None = None, include_untrusted: bool = False) -> list[dict]:
    rows = [run_figures(RunData(p), target) for path in paths for p in run_folders(path)]
    return [r for r in rows if r.get("status") == "finished" and (include_untrusted or r.get("trusted"))]


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def netsense_table(rows: list[dict], at_s: list[float] = ()) -> list[dict]:
    """One row per sweep point, means over its runs (a run that never reached the target counts as
    missing: `reached` says how many did), with the accuracy each had at the times `at_s` (seconds
    since the job started: NetSenseML's comparison at equal time)."""
    out = []
    for point in dict.fromkeys(r["point"] for r in rows):
        mine = [r for r in rows if r["point"] == point]
        starts: dict[str, list[float]] = {}
        for p in (p for r in mine for p in r.get("phases", [])):
            starts.setdefault(p["phase"], []).append(p.get("from_s", 0.0))
        phase_names = sorted(starts, key=lambda name: float(np.mean(starts[name])))
        out.append({
            "point": point, "runs": len(mine), "reached": sum(r.get("time_to_target_s") is not None for r in mine),
            "time_to_target_s": _mean(r.get("time_to_target_s") for r in mine),
            "iterations_per_s": _mean(r.get("iterations_per_s") for r in mine),
            "phases_iterations_per_s": [_mean(p["iterations_per_s"] for r in mine for p in r.get("phases", [])
                                              if p["phase"] == name) for name in phase_names],
            "phase_names": phase_names, "phase_from_s": [float(np.mean(starts[name])) for name in phase_names],
            "accuracy_final": _mean(r.get("accuracy_final") for r in mine),
            "at_s": list(at_s), "accuracy_at": [_mean(accuracy_at(r.get("curve"), t) for r in mine) for t in at_s],
            "payload_bytes": _mean(r.get("payload_bytes") for r in mine),
            "tcp_bytes": _mean(r.get("tcp_bytes") for r in mine),
            "switch_bytes": _mean(r.get("switch_bytes") for r in mine),
            "codecs": mine[0].get("codecs", {})})
    return out


def netsense_markdown(table: list[dict], target: float) -> str:
    starts: dict[str, list[float]] = {}                   # a short run has fewer phases: every point's, in time
    for r in table:
        for name, t in zip(r["phase_names"], r.get("phase_from_s") or [0.0] * len(r["phase_names"])):
            starts.setdefault(name, []).append(t)
    phases_ = sorted(starts, key=lambda name: min(starts[name]))
    head = (["point", "time to " + f"{target:.0%}" + " (s)", "it/s"] + [f"it/s at {p}" for p in phases_]
            + ["final accuracy"] + _at_headers(table[0]["at_s"] if table else [])
            + ["bytes/it per worker (gloo)", "bytes/it per worker (TCP)",
               "switch DDL frame bytes/it (all)", "codecs used", "runs"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table:
        f = lambda v, fmt: "-" if v is None else fmt.format(v)  # noqa: E731
        ttt = f(r["time_to_target_s"], "{:.1f}") + ("" if r["reached"] == r["runs"] else f" ({r['reached']}/{r['runs']} reached)")
        codecs = ", ".join(f"{k} {v:.0%}" for k, v in sorted(r["codecs"].items(), key=lambda kv: -kv[1]))
        lines.append("| " + " | ".join([r["point"], ttt, f(r["iterations_per_s"], "{:.2f}")]
                                       + [f(dict(zip(r["phase_names"], r["phases_iterations_per_s"])).get(p), "{:.2f}")
                                          for p in phases_]
                                       + [f(r["accuracy_final"], "{:.1%}")]
                                       + [f(v, "{:.1%}") for v in r["accuracy_at"]]
                                       + [f(r["payload_bytes"], "{:,.0f}"),
                                          f(r["tcp_bytes"], "{:,.0f}"), f(r["switch_bytes"], "{:,.0f}"), codecs,
                                          str(r["runs"])]) + " |")
    return "\n".join(lines)


def _at_headers(at_s: list[float]) -> list[str]:
    """`accuracy at 2.5 s` per time: more digits where two would read alike, then a count (a column each)."""
    for digits in range(1, 7):
        head = [f"accuracy at {t:.{digits}f} s" for t in at_s]
        if len(set(head)) == len(head):
            return head
    head = [f"accuracy at {t:.1f} s" for t in at_s]
    return [f"{h} (#{head[:i + 1].count(h)})" if head.count(h) > 1 else h for i, h in enumerate(head)]


def scaling_table(rows: list[dict], reference: list[dict] | None = None) -> pd.DataFrame:
    """One row per (link rate, compression, workers) with T_N, T_1 / T_N, the compute phase over T_N
    (the scaling factor against a worker that does not communicate at all, as Zhang et al. define
    it) and the measured reduction."""
    frame = pd.DataFrame([{"rate_mbps": r.get("rate_mbps"), "compression": r.get("codec"), "workers": r.get("workers"),
                           "iteration_ms": r.get("iteration_ms"), "compute_ms": r.get("compute_ms"),
                           "payload_bytes": r.get("payload_bytes"), "switch_bytes": r.get("switch_bytes")}
                          for r in rows])
    if frame.empty:
        return frame
    frame = frame.groupby(["rate_mbps", "compression", "workers"], as_index=False).mean(numeric_only=True)
    t1 = frame[frame["workers"] == 1].set_index(["rate_mbps", "compression"])["iteration_ms"]
    frame["scaling"] = [t1.get((r.rate_mbps, r.compression), np.nan) / r.iteration_ms for r in frame.itertuples()]
    frame["vs_compute"] = frame["compute_ms"] / frame["iteration_ms"]
    none = frame[frame["compression"] == "none"].set_index(["rate_mbps", "workers"])["payload_bytes"]
    frame["reduction"] = [none.get((r.rate_mbps, r.workers), np.nan) / r.payload_bytes for r in frame.itertuples()]
    return frame.sort_values(["rate_mbps", "workers", "reduction"]).reset_index(drop=True)


def knees(frame: pd.DataFrame) -> list[dict]:
    """Per (link rate, workers > 1): the least reduction whose scaling factor is within KNEE_TOLERANCE
    of the best reached there -- where more compression stops mattering."""
    out = []
    for (rate, workers), rows in frame[frame["workers"] > 1].groupby(["rate_mbps", "workers"]):
        rows = rows.dropna(subset=["scaling", "reduction"]).sort_values("reduction")
        if rows.empty:
            continue
        best = rows["scaling"].max()
        enough = rows[rows["scaling"] >= (1 - KNEE_TOLERANCE) * best].iloc[0]
        out.append({"rate_mbps": rate, "workers": int(workers), "best_scaling": float(best),
                    "knee_compression": enough["compression"], "knee_reduction": float(enough["reduction"]),
                    "scaling_without": float(rows[rows["compression"] == "none"]["scaling"].iloc[0])
                    if (rows["compression"] == "none").any() else None})
    return out


def _markdown(frame: pd.DataFrame) -> str:
    cell = lambda v: "-" if v is None or (isinstance(v, float) and np.isnan(v)) else (  # noqa: E731
        f"{v:.3g}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _sweep_dir(path: Path) -> Path:
    folders = run_folders(path)
    return folders[0].parent


def main(argv=None) -> int:
    parser = OneLineParser(prog="python -m pcnlab.analysis.compression_report", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    ns = sub.add_parser("netsense")
    ns.add_argument("path", type=Path, nargs="+")
    ns.add_argument("--target", type=fraction, default=0.9)
    ns.add_argument("--at-s", type=non_negative, nargs="+", default=None,
                    help="seconds since the job started at which to compare accuracy (default: when the first "
                         "point reached the target, and the longest time every run covers)")
    ns.add_argument("--include-untrusted", action="store_true")
    sc = sub.add_parser("scaling")
    sc.add_argument("path", type=Path, nargs="+", help="sweep folders (their runs are pooled)")
    sc.add_argument("--include-untrusted", action="store_true")
    args = parser.parse_args(argv)
    try:
        rows = figures(args.path, getattr(args, "target", None), args.include_untrusted)
    except UsageError as exc:
        print(f"compression_report: {exc}", file=sys.stderr)
        return exc.exit_code
    folder = _sweep_dir(args.path[0])
    if args.what == "netsense":
        at_s = args.at_s if args.at_s is not None else equal_times(rows, netsense_table(rows))
        table = netsense_table(rows, at_s)
        text = netsense_markdown(table, args.target)
        (folder / "netsense.md").write_text(text + "\n")
        (folder / "netsense.json").write_text(json.dumps(json_safe({"target": args.target, "points": table,
                                                                    "runs": rows}), indent=1))
        plot_netsense(rows, args.target, folder / "netsense.png")
    else:
        frame = scaling_table(rows)
        knee_rows = knees(frame)
        text = _markdown(frame) + "\n\nwhere compression stops mattering:\n\n" + _markdown(pd.DataFrame(knee_rows))
        (folder / "compression-scaling.md").write_text(text + "\n")
        (folder / "compression-scaling.json").write_text(json.dumps(json_safe(
            {"table": frame.to_dict(orient="records"), "knees": knee_rows}), indent=1))
        plot_scaling(frame, knee_rows, folder / "compression-scaling.png")
    print(text)
    print(f"written to {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
