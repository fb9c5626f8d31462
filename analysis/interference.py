"""Jobs that share a port take turns, or collide: per job, how much of its communication at the shared port
overlapped another job's, what the overlap cost it, and the figures a plan to interleave them starts
from (controller/interleave.py's JobPhase: a period, a communication time, a start). Computed from one
run's own tables (the iterations at the bottleneck, iterations.csv, and the workers' logs), so a run
folder is enough; the report puts each job beside the same job alone (`alone: true`,
analysis/interference_report.py).

Definitions, per job at the port (times in its switch's clock, µs):

- its communication in an iteration: first data packet in to last out (the iteration's BCT interval),
  for the iterations its workers' logs close (`closed_by_logs`);
- its iteration: its workers' start to start of communication, from their logs (`start_gaps_ms`);
- **overlap fraction**: the time of its communications during which another job's communication was
  under way at the port too, over the time of all its communications;
- **stretch**: what the overlap added to an iteration's communication, the BCT above the job's clean BCT
  (the median BCT of its iterations that overlapped nothing, in this run: the same network, background
  and mode), and never more than the overlap itself; averaged over all its iterations;
- **ideal iteration**: its iteration (the workers' start to start) minus the stretch, the iteration it
  would have had if its communication had never overlapped another job's: what interleaving could
  recover, measured in the run itself rather than taken from a run alone, which also lacks the other
  job's load outside the overlaps. A generator clocked by `period_ms` starts its bursts on the clock, not
  after its communication, so its ideal never falls below its period. Null when no iteration was clean.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals as disjoint, sorted intervals."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def overlap_spans(table: pd.DataFrame, context: pd.DataFrame | None = None) -> pd.Series:
    """Per iteration row at one port: the (start_us, end_us) stretches of its communication ([first_in_us,
    last_out_us]) during which another job's was under way there too: another job's rows in `context`
    (default: the table itself)."""
    out = pd.Series([[] for _ in table.index], index=table.index, dtype=object)
    if table.empty:
        return out
    context = table if context is None else context
    for job in table["job"].unique():
        others = context[context["job"] != job]
        union = merged(list(zip(others["first_in_us"].astype(float), others["last_out_us"].astype(float))))
        mine = table[table["job"] == job]
        out[mine.index] = pd.Series([[(max(a, x), min(b, y)) for x, y in union if x < b and y > a]
                                     for a, b in zip(mine["first_in_us"].astype(float),
                                                     mine["last_out_us"].astype(float))],
                                    index=mine.index, dtype=object)
    return out


def overlap_us(table: pd.DataFrame, context: pd.DataFrame | None = None) -> pd.Series:
    """Per iteration row at one port: the µs of its communication during which another job's was under
    way there too (the length of its `overlap_spans`)."""
    return overlap_spans(table, context).map(lambda spans: float(sum(b - a for a, b in spans))).astype(float)


def job_figures(rows: pd.DataFrame, gaps_ms: list[float], comm_ms: list[float], period_ms: float) -> dict:
    """One job's figures from its iteration rows at the port (with their `overlap_us`), its workers'
    iteration times and communication times (ms, from their logs) and its configured period (0: none)."""
    rows = rows.sort_values("first_in_us")
    bct_us = (rows["last_out_us"] - rows["first_in_us"]).astype(float).clip(lower=1.0)
    over = rows["overlap_us"].astype(float)
    clean = bct_us[over <= 0]
    clean_us = float(clean.median()) if len(clean) else None
    iteration = float(np.mean(gaps_ms)) if gaps_ms else None
    stretch = None
    if clean_us is not None and len(rows):
        stretch = float(np.minimum(over, (bct_us - clean_us).clip(lower=0)).where(over > 0, 0).mean()) / 1000
    ideal = max(period_ms, iteration - stretch) if iteration is not None and stretch is not None else None
    starts = rows["first_in_us"].astype(float).to_numpy()
    return {
        "iterations": int(len(rows)),
        "iteration_ms": iteration,
        "comm_ms": float(np.mean(comm_ms)) if comm_ms else None,
        "bct_ms": float(bct_us.mean()) / 1000 if len(rows) else None,
        "overlap_fraction": float(over.sum() / bct_us.sum()) if len(rows) else None,
        "overlapped_iterations": int((over > 0).sum()),
        "clean_bct_ms": clean_us / 1000 if clean_us is not None else None,
        "stretch_ms": stretch,
        "ideal_iteration_ms": ideal,
        # what a plan starts from (controller/interleave.py JobPhase): its rhythm at the port, its
        # communication when nothing overlaps it (else its median), and its last start there
        "period_ms": float(np.median(np.diff(starts))) / 1000 if len(starts) > 1 else None,
        "plan_comm_ms": (clean_us if clean_us is not None else float(bct_us.median())) / 1000 if len(rows) else None,
        "last_start_us": float(starts[-1]) if len(starts) else None,
    }


def closed_by_logs(table: pd.DataFrame, workers: pd.DataFrame, jobs: dict[int, dict]) -> pd.Series:
    """Per iteration row: its workers logged its end (comm_end_ns, host clock) no earlier than its last packet
    left the port. A worker's communication ends with the PS's answer, after its gradients left; a row
    that ends later took in packets of iterations no log recorded (a job cut at the run's end: their
    packets are attributed to its last logged iteration), and is no one iteration."""
    if table.empty or workers.empty:
        return pd.Series(False, index=table.index)
    ids = {j["name"]: int(jid) for jid, j in jobs.items()}
    ends = workers.groupby(["job", "iter"])["comm_end_ns"].max()
    end = {(ids[job], int(k)): float(v) for (job, k), v in ends.items() if job in ids}
    last_out_ns = table["first_in_ns"].astype(float) + (table["last_out_us"] - table["first_in_us"]).astype(float) * 1000
    logged = [end.get((int(j), int(k)), -np.inf) for j, k in zip(table["job"], table["iteration"])]
    return pd.Series(last_out_ns.to_numpy() <= np.asarray(logged), index=table.index)


def start_gaps_ms(workers: pd.DataFrame) -> dict[str, list[float]]:
    """Per job: its workers' iteration times as start to start of their communication (comm_start_ns), ms.
    Not the compute starts training.iteration_ms counts from: a generator logs as an iteration's compute
    start the previous answer's arrival, so its first compute start (the clock's) makes a short first gap."""
    out: dict[str, list[float]] = {}
    if workers.empty:
        return out
    for (job, _), rows in workers.sort_values("iter").groupby(["job", "host"]):
        out.setdefault(str(job), []).extend(np.diff(rows["comm_start_ns"].to_numpy(dtype=float)) / 1e6)
    return out


def comm_times_ms(workers: pd.DataFrame) -> dict[str, list[float]]:
    """Per job: each worker's communication per iteration (comm_start_ns to comm_end_ns, ms), from its log."""
    if workers.empty:
        return {}
    comm = (workers["comm_end_ns"] - workers["comm_start_ns"]) / 1e6
    return {str(job): [float(v) for v in values if np.isfinite(v)] for job, values in comm.groupby(workers["job"])}


def interference_metrics(table: pd.DataFrame, jobs: dict[int, dict], workers: pd.DataFrame,
                         port: tuple[str, int] | None, port_host: str | None = None) -> dict:
    """metrics.json `interference`: per job (by name) its figures at the shared port (`job_figures`, over the
    iterations its workers' logs close: `closed_by_logs`; `left_out`: the others), and the share of all
    the jobs' communication time there that overlapped another job's. A job that logs nothing (an
    unmodified script) has no iteration of its own closed there, but what the others overlapped includes
    its communication as the network found it (`found_in_network`; `port_host`: the host at the port's
    far end, whose ranks' sends leave it and never cross the port)."""
    out: dict = {"port": {"switch": port[0], "port": port[1]} if port else None, "jobs": {}, "overlap_fraction": None}
    gaps, comm = start_gaps_ms(workers), comm_times_ms(workers)
    closed = closed_by_logs(table, workers, jobs)
    kept = table[closed]
    kept = kept.assign(overlap_us=overlap_us(kept, pd.concat([kept, found_in_network(table, workers, jobs, port_host)])))
    for job_id, job in sorted(jobs.items()):
        name = job["name"]
        rows = kept[kept["job"] == int(job_id)]
        period = float(job.get("period_ms") or 0) if job.get("kind") == "generator" else 0.0
        out["jobs"][name] = {**job_figures(rows, gaps.get(name, []), comm.get(name, []), period),
                             "left_out": int(((table["job"] == int(job_id)) & ~closed).sum()) if not table.empty else 0}
    if not kept.empty:
        bct = (kept["last_out_us"] - kept["first_in_us"]).astype(float).clip(lower=1.0)
        out["overlap_fraction"] = float(kept["overlap_us"].sum() / bct.sum())
    return out


def found_in_network(table: pd.DataFrame, workers: pd.DataFrame, jobs: dict[int, dict],
                     away: str | None = None) -> pd.DataFrame:
    """The communication of the jobs whose iterations were found in the network (`source` network: no log of
    their own) as rows like the table's, in the switch's clock: its rows there run from an iteration's first
    packet to the next one's first small messages, its compute silence inside them (a DDP script's gloo
    sends 48-byte messages 660 ms after its gradients: docs/results.md), where the finder's ends do not.
    A rank on host `away` (the port's far end) is left out: its sends go away from the port."""
    if table.empty or workers.empty or "source" not in workers:
        return table.iloc[0:0]
    ids = {j["name"]: int(jid) for jid, j in jobs.items()}
    found = workers[(workers["source"] == "network") & workers["job"].isin(ids)].dropna(subset=["comm_start_ns", "comm_end_ns"])
    if away is not None and "host" in found:
        found = found[found["host"] != away]
    offset_us = float(np.median(table["first_in_ns"].astype(float) / 1000 - table["first_in_us"].astype(float)))
    return pd.DataFrame({"job": found["job"].map(ids).to_numpy(),
                         "first_in_us": found["comm_start_ns"].to_numpy(dtype=float) / 1000 - offset_us,
                         "last_out_us": found["comm_end_ns"].to_numpy(dtype=float) / 1000 - offset_us})


def interleave_metrics(events: pd.DataFrame, jobs: dict[int, dict]) -> dict:
    """metrics.json `interleave` (`mode.interleave`, controller/turns.py), from the controller's events:
    each plan (when in the switch's clock, and from when its shifts hold; why, its shifts by job name, the overlap it predicted before
    and after), each shift sent (to how many of the job's hosts, and which refused), and the jobs left
    where they were because none of their processes listens, and those no longer shifted because their
    processes ended (they had answered the controller's probe)."""
    name = {str(jid): j["name"] for jid, j in jobs.items()}

    def named(d) -> dict:
        return {name.get(str(k), str(k)): v for k, v in (d or {}).items()}
    rows = events.to_dict("records") if not events.empty and "type" in events else []
    plans = [{"plan": int(r["plan"]), "switch": r["switch"], "port": int(r["port"]), "t_us": int(r["t_us"]),
              "holds_us": int(r["holds_us"] if pd.notna(r.get("holds_us")) else r["t_us"]), "reason": r["reason"],
              "shifts_ms": {k: v / 1000 for k, v in named(r["shifts_us"]).items()},
              "overlap_before": named(r["overlap_before"]), "overlap_after": named(r["overlap_after"])}
             for r in rows if r["type"] == "interleave_plan"]
    shifts = [{"plan": int(r["plan"]), "job": name.get(str(int(r["job"])), str(r["job"])), "shift_ms": r["shift_us"] / 1000,
               "hosts": len(r["hosts"] or {}), "sent": sum(v == "sent" for v in (r["hosts"] or {}).values()),
               "refused": sorted(h for h, v in (r["hosts"] or {}).items() if v != "sent")}
              for r in rows if r["type"] == "shift"]

    def jobs_of(kind: str) -> list:
        return sorted({name.get(str(int(r["job"])), str(r["job"])) for r in rows if r["type"] == kind})
    return {"plans": plans, "shifts": shifts, "left_alone": jobs_of("interleave_skip"),
            "ended": jobs_of("interleave_ended")}
