"""From a finished run folder to metrics.json and plots, and from a sweep's runs to its summary table.
Reads files only: it never re-runs anything, so it can be repeated on old results."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from pcnlab.controller.events import read_events
from pcnlab.errors import UsageError
from pcnlab.experiments import metrics as m

HEADLINE = (  # (metrics key path, column title, format)
    ("bursts.start_queue_pkts.mean", "start queue (pkts)", "{:.1f}"),
    ("bursts.max_queue_pkts.mean", "max queue (pkts)", "{:.1f}"),
    ("bursts.bct_ms.mean", "BCT (ms)", "{:.2f}"),
    ("bursts.bct_over_ideal.mean", "BCT / ideal", "{:.2f}"),
    ("throughput_mbps.ddl", "DDL Mbit/s", "{:.2f}"),
    ("throughput_mbps.background", "background Mbit/s", "{:.2f}"),
    ("training.iteration_ms.mean", "iteration (ms)", "{:.1f}"),
    ("controller.window_coverage", "window coverage", "{:.0%}"),
)


def _dig(data: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _stats(values) -> dict:
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    if arr.size == 0:
        return {}
    return {"mean": float(arr.mean()), "p50": float(np.percentile(arr, 50)), "p95": float(np.percentile(arr, 95)),
            "max": float(arr.max()), "n": int(arr.size)}


def load_queue_log(run_dir: Path) -> pd.DataFrame:
    parts = [pd.read_csv(p) for p in sorted(Path(run_dir).glob("queue-s*.csv")) if p.stat().st_size > 0]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame()
    return pd.concat(parts, ignore_index=True)


def port_rates(run_dir: Path) -> dict[tuple[str, int], int]:
    path = Path(run_dir) / "endpoints.json"
    if not path.exists():
        return {}
    return {(ep["name"], q["port"]): q["rate_pps"] for ep in json.loads(path.read_text())
            for q in ep["queues"] if q.get("rate_pps")}


def bottleneck(log: pd.DataFrame) -> tuple[str, int] | None:
    """The port where DDL packets queued the most: where the paper's metrics are taken."""
    ddl = log[log["class"] == "ddl"]
    if ddl.empty:
        return None
    deepest = ddl.groupby(["switch", "port"])["enq_qdepth"].quantile(0.95).idxmax()
    return str(deepest[0]), int(deepest[1])


def windows_from_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == "arm"]


def training_metrics(run_dir: Path) -> dict:
    iterations = []
    for log in sorted(Path(run_dir).glob("jobs/*/*.jsonl")):
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        its = [r for r in records if r.get("type") == "iteration" and "worker" in log.name]
        for a, b in zip(its, its[1:]):
            iterations.append((b["compute_start_ns"] - a["compute_start_ns"]) / 1e6)
    return {"iteration_ms": _stats(iterations)} if iterations else {}


def controller_metrics(events: list[dict]) -> dict:
    due = [e for e in events if e["event"] == "actual" and e.get("was_confident")]
    out: dict = {"reports": sum(e["event"] == "report" for e in events)}
    if due:
        out["prediction_error_us"] = _stats([abs(e["error_us"]) for e in due])
        out["window_coverage"] = sum(bool(e.get("covered")) for e in due) / len(due)
    writes = [e["write_ms"] for e in events if e["event"] == "arm"]
    if writes:
        out["arm_write_ms"] = {"p50": float(np.percentile(writes, 50)), "p99": float(np.percentile(writes, 99)),
                               "n": len(writes)}
    clocks = [e["error_us"] for e in events if e["event"] == "clock"]
    if clocks:
        out["clock_error_us"] = _stats(clocks)
    return out


def analyse_run(run_dir: Path, plots: bool = True) -> dict:
    """Compute metrics.json (and the run's plots) from the files in `run_dir`."""
    run_dir = Path(run_dir)
    config = yaml.safe_load((run_dir / "config.yaml").read_text()) if (run_dir / "config.yaml").exists() else {}
    mode = _dig(config, "mode.kind") or "?"
    out: dict = {"run": run_dir.name, "mode": mode, "sweep": config.get("sweep", {}),
                 "workers": len((config.get("jobs") or [{}])[0].get("workers") or ())}
    events = read_events(run_dir / "events.jsonl") if (run_dir / "events.jsonl").exists() else []
    log = load_queue_log(run_dir)
    bursts: list[m.Burst] = []
    neck = None
    if not log.empty:
        neck = bottleneck(log)
        gap = int(_dig(config, "mode.burst_gap_us") or 2000)
        if neck is not None:
            at = log[(log["switch"] == neck[0]) & (log["port"] == neck[1])]
            bursts = m.bursts_from_queue_log(at, gap)
            rate = port_rates(run_dir).get(neck)
            out["bottleneck"] = {"switch": neck[0], "port": neck[1], "rate_pps": rate}
            out["bursts"] = {
                "count": len(bursts),
                "start_queue_pkts": _stats([b.start_queue for b in bursts]),
                "max_queue_pkts": _stats([b.max_queue for b in bursts]),
                "bct_ms": _stats([b.bct_us / 1000 for b in bursts]),
                "bct_over_ideal": _stats([b.bct_us / m.ideal_bct_us(b.bytes, rate) for b in bursts]) if rate else {},
            }
            out["throughput_mbps"] = {"ddl": m.throughput_mbps(at, "ddl"),
                                      "background": m.throughput_mbps(at, "background")}
            out["queue_delay_us"] = {c: m.delay_percentiles(at, c) for c in ("ddl", "background")}
            out["marks_drops"] = m.marks_and_drops(at)
        out["burstiness"] = m.burstiness(log)
        summaries = [json.loads(p.read_text()) for p in run_dir.glob("queue-s*.summary.json")]
        out["telemetry"] = {"records": sum(s["records"] for s in summaries), "lost": sum(s["lost"] for s in summaries)}
    out["training"] = training_metrics(run_dir)
    out["controller"] = controller_metrics(events)
    if mode != "pcn":  # windows were only planned, never written: coverage says nothing of this run
        out["controller"].pop("window_coverage", None)
    out["queue_full_drops"] = full_queue_drops(run_dir, neck)
    (run_dir / "metrics.json").write_text(json.dumps(out, indent=1, default=float))
    if plots and not log.empty and neck is not None:
        from pcnlab.experiments.plots import plot_queue

        plot_queue(run_dir / f"queue-{neck[0]}-p{neck[1]}.png", log, neck, bursts, windows_from_events(events),
                   title=f"{run_dir.name}: {neck[0]} port {neck[1]} ({mode})")
    return out


def full_queue_drops(run_dir: Path, neck: tuple[str, int] | None) -> dict:
    """Packets dropped at a full queue (invisible to P4): handed to the queue minus sent minus dropped
    by the program, from the switch's counters at the end of the run."""
    path = Path(run_dir) / "counters.json"
    if neck is None or not path.exists():
        return {}
    rows = json.loads(path.read_text()).get(neck[0], [])
    if not isinstance(rows, list):
        return {}
    out = {}
    for cls in ("ddl", "background"):
        get = lambda k: sum(r["packets"] for r in rows if r["port"] == neck[1] and r["class"] == cls and r["counter"] == k)  # noqa: E731
        out[cls] = get("to_queue") - get("tx") - get("dropped")
    return out


# --- a sweep ----------------------------------------------------------------------------------------

def run_dirs(path: Path) -> list[Path]:
    """The run folders under `path`: a run folder, a sweep folder, or an experiment folder (its latest)."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist; give a results folder, e.g. results/smoke/latest")
    if (path / "status.json").exists():
        return [path]
    if (path / "latest").exists():
        path = path / "latest"
    found = sorted(p.parent for p in path.glob("*/status.json"))
    if not found:
        raise UsageError(f"no runs under {path}; give results/<experiment>/latest or a run folder")
    return found


def _group_key(metrics: dict) -> str:
    sweep = {k: v for k, v in (metrics.get("sweep") or {}).items()}
    return ",".join(f"{k}={v}" for k, v in sweep.items()) or metrics.get("mode", "?")


def summarise(paths: list[Path]) -> list[dict]:
    """One row per sweep point: each headline metric's mean and 95 % interval over repetitions."""
    groups: dict[str, list[dict]] = {}
    for run in paths:
        status = json.loads((run / "status.json").read_text())
        if status.get("status") != "finished":
            groups.setdefault(f"{run.name} ({status.get('status')})", [])
            continue
        metrics_path = run / "metrics.json"
        metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else analyse_run(run, plots=False)
        groups.setdefault(_group_key(metrics), []).append(metrics)
    rows = []
    for name, members in groups.items():
        row = {"point": name, "runs": len(members), "mode": members[0]["mode"] if members else ""}
        for key, title, _ in HEADLINE:
            mean, half = m.mean_ci95([_dig(x, key) for x in members])
            row[title] = (mean, half)
        row["workers"] = members[0].get("workers") if members else None
        rows.append(row)
    add_scaling(rows)
    return rows


def add_scaling(rows: list[dict]) -> None:
    """Scaling factor ("Is Network the Bottleneck for Distributed Training?"): throughput with N
    workers over N times one worker's, i.e. T_1 / T_N for iteration times, where a 1-worker run exists."""
    single = [r for r in rows if r.get("workers") == 1 and r["iteration (ms)"][0] == r["iteration (ms)"][0]
              and r["iteration (ms)"][0] is not None]
    if not single:
        return
    t1 = single[0]["iteration (ms)"][0]
    for row in rows:
        tn = row["iteration (ms)"][0]
        row["scaling"] = (t1 / tn, float("nan")) if tn else (float("nan"), float("nan"))


def format_table(rows: list[dict], markdown: bool = False) -> str:
    columns = [t for _, t, _ in HEADLINE] + (["scaling"] if any("scaling" in r for r in rows) else [])
    titles = ["point", "runs"] + columns
    formats = {t: f for _, t, f in HEADLINE} | {"scaling": "{:.2f}"}
    cells = []
    for row in rows:
        line = [row["point"], str(row["runs"])]
        for title in columns:
            mean, half = row[title]
            if mean is None or (isinstance(mean, float) and math.isnan(mean)):
                line.append("-")
            else:
                text = formats[title].format(mean)
                if half == half and half:  # not NaN, not zero
                    text += " ± " + formats[title].format(half).rstrip("%")
                line.append(text)
        cells.append(line)
    if markdown:
        out = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
        out += ["| " + " | ".join(c) + " |" for c in cells]
        return "\n".join(out)
    widths = [max(len(t), *(len(c[i]) for c in cells)) if cells else len(t) for i, t in enumerate(titles)]
    lines = ["  ".join(t.ljust(w) for t, w in zip(titles, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in cells]
    return "\n".join(lines)


def summarise_sweep(sweep_dir: Path, say=print) -> list[dict]:
    paths = run_dirs(sweep_dir)
    rows = summarise(paths)
    table = format_table(rows)
    (Path(sweep_dir) / "report.md").write_text(format_table(rows, markdown=True) + "\n")
    (Path(sweep_dir) / "summary.json").write_text(json.dumps(rows, indent=1, default=float))
    try:
        from pcnlab.experiments.plots import plot_sweep

        plot_sweep(Path(sweep_dir), paths)
    except Exception as exc:  # a missing metric must not hide the table
        say(f"(sweep plots skipped: {exc})")
    say(table)
    say(f"results: {sweep_dir} (report.md, summary.json, plots; each run's folder has metrics.json and its queue plot)")
    return rows
