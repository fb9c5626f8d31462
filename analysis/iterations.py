"""DDL iterations as the switches saw them, measured against the workers' own logs (the truth).

Every DDL data packet (an L4 payload: pure ACKs are not data) in the queue log is attributed to its
job, its worker and its iteration: the worker is the packet's source host when that host is one of the
job's workers, else its destination (a PS's answer); the iteration is the worker's last one whose
communication had started (`comm_start_ns`, host clock) when the packet reached the switch (the queue
log's times mapped onto the host clock: pcnlab.analysis.results.SwitchClock). A worker cannot send iteration
k + 1 before it starts it, nor iteration k after, so the attribution needs no guess about gaps.

Per iteration at a port, as the PCN paper defines them: the start queue (the queue the iteration's
first data packet met), the max queue, the BCT (first data packet in to last out, all workers), B/R,
the DDL throughput during the burst (bytes over BCT) and the background's throughput meanwhile.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pcnlab.analysis.results import on_port
from pcnlab.rates import FRAME_BYTES

ITERATION_COLUMNS = ("job", "iteration", "workers", "first_in_us", "last_out_us", "first_in_ns", "start_queue",
                     "max_queue", "packets", "bytes", "bct_ms", "ideal_ms", "ddl_mbps", "background_mbps")


def ideal_bct_us(burst_bytes: float, rate_pps: float) -> float:
    """B/R: the time the burst alone needs at the port's rate (BMv2 drains packets, so bytes are
    counted in full frames)."""
    return math.ceil(burst_bytes / FRAME_BYTES) / rate_pps * 1e6


def worker_starts(iterations: pd.DataFrame, jobs: dict[int, dict]) -> pd.DataFrame:
    """(job id, worker host, iteration, comm_start_ns) of every worker's iteration, from its log."""
    if iterations.empty:
        return pd.DataFrame(columns=["job_id", "worker", "iteration", "comm_start_ns"])
    ids = {j["name"]: jid for jid, j in jobs.items()}
    w = iterations[(iterations["role"] == "worker") & iterations["job"].isin(ids)]
    return pd.DataFrame({"job_id": w["job"].map(ids).astype(int), "worker": w["host"],
                         "iteration": w["iter"].astype(int),
                         "comm_start_ns": w["comm_start_ns"].astype(np.float64)})


def attribute(queue: pd.DataFrame, iterations: pd.DataFrame, jobs: dict[int, dict]) -> pd.DataFrame:
    """The queue log's DDL data packets, each with its `worker` and `iteration` (rows before a worker's
    first iteration, e.g. its handshake, get none and are left out)."""
    ddl = queue[(queue["class"] == "ddl") & queue["data"] & (queue["dropped"] == 0)].copy()
    starts = worker_starts(iterations, jobs)
    if ddl.empty or starts.empty:
        return ddl.iloc[0:0].assign(worker=[], iteration=[])
    workers = {jid: set(j.get("workers") or ()) for jid, j in jobs.items()}
    src_is_worker = [s in workers.get(j, ()) for s, j in zip(ddl["src"], ddl["job"])]
    ddl["worker"] = np.where(src_is_worker, ddl["src"], ddl["dst"])
    ddl["job_id"] = ddl["job"].astype(int)
    ddl = ddl.sort_values("ingress_ns")
    starts = starts.sort_values("comm_start_ns")
    merged = pd.merge_asof(ddl, starts, left_on="ingress_ns", right_on="comm_start_ns", by=["job_id", "worker"],
                           direction="backward")
    merged = merged[merged["iteration"].notna()].copy()
    merged["iteration"] = merged["iteration"].astype(int)
    return merged.drop(columns=["job_id", "comm_start_ns"])


def min_payloads(jobs: dict[int, dict]) -> dict[int, int]:
    """Per job id: the L4 payload from which a packet starts a burst (the run's `burst_min_payload`)."""
    return {int(jid): int(job.get("burst_min_payload") or 0) for jid, job in jobs.items()}


def per_iteration(attributed: pd.DataFrame, queue: pd.DataFrame, port: tuple[str, int], rate_pps: float | None,
                  every: int = 1, min_payload: dict[int, int] | None = None) -> pd.DataFrame:
    """One row per (job, iteration) with data packets at `port`; times in that switch's clock.
    With telemetry sampling 1 in `every`, packet and byte counts are scaled by it.

    The iteration starts (first_in, start queue) at its first packet with at least the job's
    `min_payload` bytes of L4 payload, as the data plane starts a burst (`burst_min_payload`): gloo
    opens each ring all-reduce with 48-byte control messages 25-35 ms before the gradients, and
    taking those for the start judged the controller's windows against a packet no window is for
    (the iteration's first packet of any size, if none is that large)."""
    at = attributed[on_port(attributed, port[0], port[1])]
    if at.empty:
        return pd.DataFrame(columns=ITERATION_COLUMNS)
    background = queue[on_port(queue, port[0], port[1]) & (queue["class"] == "background")
                       & (queue["dropped"] == 0)].sort_values("egress_us")
    bg_t = background["egress_us"].to_numpy()
    bg_bytes = np.concatenate([[0], np.cumsum(background["packet_length"].to_numpy())])
    rows = []
    for (job, it), part in at.groupby(["job", "iteration"], sort=True):
        part = part.sort_values(["ingress_us", "seq"])
        large = part[part["payload_bytes"] >= (min_payload or {}).get(int(job), 0)]
        first = large if not large.empty else part
        first_in, last_out = int(first["ingress_us"].iloc[0]), int(part["egress_us"].max())
        bct_us = max(last_out - first_in, 1)
        nbytes = int(part["packet_length"].sum()) * every
        lo, hi = np.searchsorted(bg_t, first_in), np.searchsorted(bg_t, last_out, side="right")
        rows.append({
            "job": int(job), "iteration": int(it), "workers": int(part["worker"].nunique()),
            "first_in_us": first_in, "last_out_us": last_out, "first_in_ns": int(first["ingress_ns"].iloc[0]),
            "start_queue": int(first["enq_qdepth"].iloc[0]), "max_queue": int(part["enq_qdepth"].max()),
            "packets": len(part) * every, "bytes": nbytes, "bct_ms": bct_us / 1000,
            "ideal_ms": ideal_bct_us(nbytes, rate_pps) / 1000 if rate_pps else float("nan"),
            "ddl_mbps": nbytes * 8 / bct_us,
            "background_mbps": float(bg_bytes[hi] - bg_bytes[lo]) * every * 8 / bct_us,
        })
    return pd.DataFrame(rows, columns=ITERATION_COLUMNS)


def bottleneck(attributed: pd.DataFrame) -> tuple[str, int] | None:
    """The port where the iterations' data packets met the deepest queue (95th percentile): where the
    paper's metrics are taken."""
    if attributed.empty:
        return None
    deepest = attributed.groupby(["switch", "port"])["enq_qdepth"].quantile(0.95).idxmax()
    return str(deepest[0]), int(deepest[1])


def expected_iterations(iterations: pd.DataFrame, jobs: dict[int, dict], span_ns: tuple[float, float]
                        ) -> dict[int, int]:
    """Per job: the iterations the workers logged whose communication began inside the queue log's span."""
    starts = worker_starts(iterations, jobs)
    inside = starts[(starts["comm_start_ns"] >= span_ns[0]) & (starts["comm_start_ns"] <= span_ns[1])]
    return {int(j): int(g["iteration"].nunique()) for j, g in inside.groupby("job_id")}


def count_check(table: pd.DataFrame, expected: dict[int, int]) -> dict:
    """The iterations seen at the bottleneck against the workers' logs: equal but for the cut ends."""
    seen = {int(j): int(g["iteration"].nunique()) for j, g in table.groupby("job")} if not table.empty else {}
    notes = []
    for job in sorted(set(seen) | set(expected)):
        s, e = seen.get(job, 0), expected.get(job, 0)
        if abs(s - e) > 1:
            notes.append(f"job {job}: {s} iterations at the bottleneck, {e} in the workers' logs")
    return {"count": sum(seen.values()), "expected": sum(expected.values()), "consistent": not notes,
            "note": "; ".join(notes)}


def window_intervals(events: pd.DataFrame) -> pd.DataFrame:
    """Every pre-drain window the controller wrote: switch, port, job, start_us, end_us (switch clock),
    armed_ns and removed_ns (host clock; removed_ns NaN if it was left to expire), and the same two
    moments in the switch's clock as the controller decided them (armed_us: the decision plus the
    write's latency; removed_us), NaN in event logs older than those fields; lead_us, the lead it was
    planned with (NaN: older logs)."""
    cols = ["switch", "port", "job", "start_us", "end_us", "armed_ns", "removed_ns", "armed_us", "removed_us",
            "lead_us"]
    if events.empty or "type" not in events:
        return pd.DataFrame(columns=cols)
    arms = events[events["type"] == "arm"]
    if arms.empty:
        return pd.DataFrame(columns=cols)
    out = arms[["switch", "port", "job", "start_us", "end_us", "host_ns"]].rename(columns={"host_ns": "armed_ns"})
    out = out.astype({"port": int, "job": int, "start_us": np.int64, "end_us": np.int64})
    decided = arms["decided_us"] if "decided_us" in arms else pd.Series(np.nan, index=arms.index)
    write_us = arms["write_ms"].fillna(0) * 1000 if "write_ms" in arms else 0
    out["armed_us"] = (decided + write_us).astype(float).to_numpy()
    removed = events[events["type"] == "disarm"]
    keyed = {(r.switch, int(r.port), int(r.start_us), int(r.end_us)): (r.host_ns, getattr(r, "decided_us", np.nan))
             for r in removed.itertuples()}
    gone = [keyed.get((r.switch, r.port, r.start_us, r.end_us), (np.nan, np.nan)) for r in out.itertuples()]
    out["removed_ns"] = [g[0] for g in gone]
    out["removed_us"] = [float(g[1]) for g in gone]
    out["lead_us"] = arms["lead_us"].astype(float).to_numpy() if "lead_us" in arms else np.nan
    return out[cols].reset_index(drop=True)


def covering(table: pd.DataFrame, windows: pd.DataFrame, port: tuple[str, int]) -> pd.DataFrame:
    """Per iteration, the window of `port` in force when its first data packet arrived (written before
    it and not yet removed) that had been open longest, as the controller judges a start by it: its
    start_us and lead_us, NaN when none was. Judged in the switch's clock, as the controller judges
    its own reports (the arm and disarm decisions carry their switch time), so no clock map between
    the switch and the host enters; older event logs fall back to host times."""
    w = windows[on_port(windows, port[0], port[1])]
    switch_clock = "armed_us" in w and w["armed_us"].notna().all()
    rows = []
    for r in table.itertuples():
        inside = w[(w["start_us"] <= r.first_in_us) & (r.first_in_us < w["end_us"])]
        if switch_clock:
            # A window removed at the start's own moment was in force for it: the controller removes an
            # awaited window (scheduler_core.py), and an unconfident one, on the very report of that start.
            inside = inside[(inside["armed_us"] <= r.first_in_us) & ~(inside["removed_us"] < r.first_in_us)]
        else:
            inside = inside[(inside["armed_ns"] <= r.first_in_ns) & ~(inside["removed_ns"] <= r.first_in_ns)]
        longest = inside.loc[inside["start_us"].idxmin()] if not inside.empty else None
        rows.append((np.nan, np.nan) if longest is None else
                    (float(longest["start_us"]), float(longest.get("lead_us", np.nan))))
    return pd.DataFrame(rows, index=table.index, columns=["start_us", "lead_us"], dtype=float)


def covered(table: pd.DataFrame, windows: pd.DataFrame, port: tuple[str, int]) -> pd.Series:
    """Per iteration: its first data packet at `port` arrived inside a window of that port that had
    been written before it and not yet removed (`covering`)."""
    return covering(table, windows, port)["start_us"].notna().astype(bool)


def controller_coverage(events: pd.DataFrame, port: tuple[str, int], table: pd.DataFrame | None = None
                        ) -> tuple[int, int]:
    """(covered, starts): the controller's own view at `port`: the iteration starts it was reported
    (every `report` but sub-bursts) and those a window of its was open for (each report's verdict; event
    logs older than that verdict on reports: the `actual` events', written only for a start with a
    prediction near it, so there it undercounts). Given the iterations' `table`, a job's reports before
    its first iteration's first data packet at the port are left out, as the analysis leaves them: a
    PyTorch job's set-up exchanges reach the PS's port as bursts, but they are no iteration."""
    if events.empty or "type" not in events or "kind" not in events:
        return 0, 0
    here = events[on_port(events, port[0], port[1])]
    starts = here[(here["type"] == "report") & (here["kind"] != "sub-burst")]
    if table is not None and not table.empty and "job" in starts:
        first = table.groupby("job")["first_in_us"].min()
        starts = starts[starts["t_us"] >= starts["job"].map(first).fillna(-np.inf)]
    if "covered" in starts and starts["covered"].notna().all():
        return int(starts["covered"].astype(bool).sum()), int(len(starts))
    actual = here[here["type"] == "actual"]
    covered = int(actual["covered"].astype(bool).sum()) if "covered" in actual else 0
    return covered, int(len(starts))


def open_share(windows: pd.DataFrame, port: tuple[str, int], clock, span_us: tuple[int, int]) -> float:
    """The share of `span_us` (switch clock) during which a written window of `port` was open."""
    w = windows[on_port(windows, port[0], port[1])]
    if w.empty or span_us[1] <= span_us[0]:
        return 0.0
    armed = clock.to_switch_us(w["armed_ns"].to_numpy())
    removed = clock.to_switch_us(w["removed_ns"].fillna(np.inf).to_numpy())
    begin = np.maximum(np.maximum(w["start_us"].to_numpy(), armed), span_us[0])
    end = np.minimum(np.minimum(w["end_us"].to_numpy(), removed), span_us[1])
    total, reach = 0.0, -np.inf
    for b, e in sorted(zip(begin, end)):
        if e <= b:
            continue
        if b >= reach:
            total += e - b
        elif e > reach:
            total += e - reach
        reach = max(reach, e)
    return total / (span_us[1] - span_us[0])


def prediction_errors(table: pd.DataFrame, events: pd.DataFrame, port: tuple[str, int]) -> list[float]:
    """Per iteration with a prediction: true start (its first data packet at `port`) minus the start the
    controller last predicted for that port and job before it, in µs. "Before" in the switch's clock
    (the switch time of the report that made the prediction: decided_us), or, in event logs older
    than that field, the host clock."""
    if events.empty or "type" not in events:
        return []
    pred = events[(events["type"] == "prediction") & on_port(events, port[0], port[1])]
    if pred.empty or table.empty:
        return []
    switch_clock = "decided_us" in pred and pred["decided_us"].notna().all()
    # A prediction decided within a millisecond of the start was made by that start's own report.
    when, start, slack = ("decided_us", "first_in_us", 1000) if switch_clock else ("host_ns", "first_in_ns", 0)
    pred = pred.sort_values(when)
    out = []
    for job, rows in table.groupby("job"):
        p = pred[pred["job"] == job]
        if p.empty:
            continue
        idx = np.searchsorted(p[when].to_numpy(), rows[start].to_numpy() - slack, side="left") - 1
        for i, first in zip(idx, rows["first_in_us"]):
            if i >= 0:
                out.append(float(first - p["next_start_us"].iloc[i]))
    return out


def flagged_windows(queue: pd.DataFrame, port: tuple[str, int], join_us: int = 5_000) -> pd.DataFrame:
    """When the switch itself held K_pre at `port`, from its telemetry: spans of background records
    flagged in_window (pcn-host's announcements, or pcn's windows as the packets met them), records
    closer than `join_us` joined. Columns as window_intervals' (armed_ns, removed_ns NaN)."""
    cols = ["switch", "port", "job", "start_us", "end_us", "armed_ns", "removed_ns"]
    at = queue[on_port(queue, port[0], port[1]) & (queue["class"] == "background")
               & (queue["in_window"] == 1)]
    if at.empty:
        return pd.DataFrame(columns=cols)
    t = np.sort(at["ingress_us"].to_numpy(dtype=np.int64))
    breaks = np.flatnonzero(np.diff(t) > join_us)
    starts, ends = np.r_[t[0], t[breaks + 1]], np.r_[t[breaks], t[-1]] + 1
    return pd.DataFrame({"switch": port[0], "port": port[1], "job": 0, "start_us": starts, "end_us": ends,
                         "armed_ns": np.nan, "removed_ns": np.nan}, columns=cols)


def held_share(spans: pd.DataFrame, span_us: tuple[int, int]) -> float:
    """The share of `span_us` the spans cover (they do not overlap)."""
    if spans.empty or span_us[1] <= span_us[0]:
        return 0.0
    begin = np.maximum(spans["start_us"].to_numpy(), span_us[0])
    end = np.minimum(spans["end_us"].to_numpy(), span_us[1])
    return float(np.clip(end - begin, 0, None).sum()) / (span_us[1] - span_us[0])
