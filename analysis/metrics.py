"""From a finished run folder to metrics.json, iterations.csv and the run's queue plot. Reads files only
(through pcnlab.analysis.results): it never re-runs anything, so it can be repeated on old results.

The unit of the headline metrics is the DDL iteration, at the bottleneck port, as the workers' logs
define it (analysis/iterations.py). What the switch reported as bursts (a job's data packets split
at silences longer than its G) is kept as `switch_bursts`: TCP splits one iteration into several of
them, so they are evidence about detection, not the paper's metrics.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from pcnlab.controller.modes import K_PRE_MODES, WINDOW_MODES
from pcnlab.controller.segments import iteration_gap_us
from pcnlab.analysis import iterations as it
from pcnlab.analysis import traffic_stats as m
from pcnlab.analysis.interference import interference_metrics, interleave_metrics
from pcnlab.analysis.network_iterations import NETWORK, port_peer, printed_iterations
from pcnlab.files import write_json
from pcnlab.analysis.results import RunData, load_run, on_port
from pcnlab.rates import rate_mbps

STALL_MS = 150  # an iteration this much over its job's fast ones waited on a timer (Linux's are >= 200 ms)
LEARNING = 5   # iterations a prediction needs before it can be held to cover every iteration (issue 12)


def stats(values) -> dict:
    """mean, p50, p95, min, max and n of the finite values (all null when there are none)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return {"mean": None, "p50": None, "p95": None, "min": None, "max": None, "n": 0}
    return {"mean": float(arr.mean()), "p50": float(np.percentile(arr, 50)), "p95": float(np.percentile(arr, 95)),
            "min": float(arr.min()), "max": float(arr.max()), "n": int(arr.size)}


def training_metrics(run: RunData) -> dict:
    """Iteration time between a worker's iteration starts, and the loss the real models report."""
    table = run.iterations
    if table.empty:
        return {}
    workers = table[table["role"] == "worker"].sort_values("iter")
    gaps = []
    for _, rows in workers.groupby(["job", "host"]):
        gaps += list(np.diff(rows["compute_start_ns"].to_numpy()) / 1e6)
    out: dict = {"iteration_ms": stats(gaps)}
    if gaps:  # training throughput: iterations per second of every worker, and the tail of their times
        out["iteration_ms"]["p99"] = float(np.percentile(gaps, 99))
        out["iterations_per_s"] = 1000.0 / float(np.mean(gaps))
    out.update(gradient_delivery(table))
    out.update(push_spread(workers))
    out.update(host_tcp_events(table))
    if "loss" in workers and workers["loss"].notna().any():
        per_iter = workers.groupby("iter")["loss"].mean().dropna()
        out["loss_first"], out["loss_last"] = float(per_iter.iloc[0]), float(per_iter.iloc[-1])
    if "accuracy" in table and table["accuracy"].notna().any():
        # Test accuracy on held-out data, from the evaluating rank's records (the PS, or ring rank 0).
        evals = table[table["accuracy"].notna()].groupby("iter")[["accuracy", "test_loss"]].mean()
        out["accuracy_first"], out["accuracy_final"] = float(evals["accuracy"].iloc[0]), float(evals["accuracy"].iloc[-1])
        out["test_loss_final"] = float(evals["test_loss"].iloc[-1])
        out["accuracy_iteration"] = int(evals.index[-1])
    return out


def push_spread(workers: pd.DataFrame) -> dict:
    """How far apart a job's workers start communicating in one iteration (their comm_start_ns, one host
    clock): max - min per (job, iteration) over the workers that logged it, in ms. A PS whose pushes
    reach its workers together gives a spread of about a millisecond: the synchronised incast."""
    if workers.empty or workers.groupby("job")["host"].nunique().max() < 2:
        return {}
    per_iter = workers.groupby(["job", "iter"])["comm_start_ns"].agg(["max", "min", "count"])
    per_iter = per_iter[per_iter["count"] > 1]
    spread_ms = ((per_iter["max"] - per_iter["min"]) / 1e6).tolist()
    spread = stats(spread_ms)
    if spread["n"]:
        spread["p99"] = float(np.percentile(spread_ms, 99))
    return {"push_spread_ms": spread}


def host_tcp_events(table: pd.DataFrame) -> dict:
    """Per iteration, the retransmission timeouts and tail-loss probes of the job's hosts (each rank's
    namespace counters, logged by workloads/ps.py: tcpsense.HostTcpCounters), summed over its ranks, the
    workers' gradients and the PS's parameters alike: the mean per iteration, and the share of
    iterations with at least one timeout. And the stalls they explain: iterations whose longest
    communication (any rank's) exceeds the job's 5th percentile (an exchange that waited on no timer;
    the median does not do when most iterations wait) by STALL_MS, and how many of those had a
    timeout or a probe on one of the job's hosts (a probe with one segment out waits 2 RTTs + 200 ms)."""
    if "tcp_timeouts" not in table or table["tcp_timeouts"].isna().all():
        return {}
    per_iter = table.groupby(["job", "iter"])[["tcp_timeouts", "tcp_loss_probes"]].sum()
    comm = (table["comm_end_ns"] - table["comm_start_ns"]) / 1e6
    longest = comm.groupby([table["job"], table["iter"]]).max()
    stalled = longest > longest.groupby(level="job").transform(lambda v: np.percentile(v, 5)) + STALL_MS
    timers = (per_iter["tcp_timeouts"] + per_iter["tcp_loss_probes"]) > 0
    return {"tcp_timeouts_per_iteration": float(per_iter["tcp_timeouts"].mean()),
            "tcp_loss_probes_per_iteration": float(per_iter["tcp_loss_probes"].mean()),
            "iterations_with_timeout": float((per_iter["tcp_timeouts"] > 0).mean()),
            "stalled_iterations": int(stalled.sum()),
            "stalled_with_tcp_timer": int((stalled & timers.reindex(stalled.index, fill_value=False)).sum())}


def gradient_delivery(table: pd.DataFrame) -> dict:
    """The share of the workers' gradient bytes the PS used: LTP's PS logs what arrived before each
    iteration closed (and how it closed); over TCP every byte arrives or the iteration never ends (1)."""
    ps = table[table["role"] == "ps"]
    if ps.empty:
        return {}
    if "delivered_fraction" not in ps or ps["delivered_fraction"].isna().all():
        return {"gradient_fraction": 1.0} if "params_sha" in ps else {}
    ltp = ps[ps["delivered_fraction"].notna()]
    closes = ltp["ltp_close"].value_counts().to_dict() if "ltp_close" in ltp else {}
    return {"gradient_fraction": float(ltp["bytes_recv"].sum() / ltp["gradient_bytes"].sum()),
            "gradient_fraction_min": float(ltp["delivered_fraction"].min()),
            "early_close": {str(k): int(v) for k, v in closes.items() if k != "complete"},
            "bytes_lost": int(ltp["bytes_lost"].sum()),
            # the generator's LTP PS has no model to fill: it logs no bytes_filled
            "bytes_filled": int(ltp["bytes_filled"].sum()) if "bytes_filled" in ltp else 0}


def controller_metrics(run: RunData, table: pd.DataFrame, neck: tuple[str, int] | None) -> dict:
    """Reports, and for pcn runs how the windows served the iterations (the workers' truth): the
    share of iterations whose first data packet at the bottleneck met a window written before it, the
    prediction error against the true starts, and the share of the run the bottleneck's windows were open."""
    events = run.events
    out: dict = {"reports": int((events["type"] == "report").sum()) if not events.empty else 0}
    if events.empty:
        return out
    writes = events.loc[events["type"] == "arm", "write_ms"] if "write_ms" in events else pd.Series([], dtype=float)
    if not writes.empty:
        out["arm_write_ms"] = {"p50": float(writes.quantile(0.5)), "p99": float(writes.quantile(0.99)),
                               "n": int(writes.size)}
    clocks = events.loc[events["type"] == "clock", "error_us"] if "error_us" in events else pd.Series([], dtype=float)
    if not clocks.empty:
        out["clock_error_us"] = stats(clocks)
    if neck is None or table.empty:
        return out
    out["prediction_error_us"] = stats(np.abs(it.prediction_errors(table, events, neck)))
    if run.mode in WINDOW_MODES:
        windows = it.window_intervals(events)
        out["iteration_coverage"] = float(table["covered"].mean()) if "covered" in table else None
        # The same once the rhythm could have been learned: each job's first LEARNING iterations left out.
        settled = table[table.groupby("job").cumcount() >= LEARNING]
        out["iteration_coverage_after_learning"] = float(settled["covered"].mean()) if len(settled) else None
        # The controller's own verdicts on the iteration starts it was reported there, beside the truth.
        hit, starts = it.controller_coverage(events, neck, table)
        out["controller_coverage"] = hit / starts if starts else None
        out["controller_starts"] = starts
        at = run.queue[on_port(run.queue, neck[0], neck[1])]
        span = (int(at["ingress_us"].min()), int(at["ingress_us"].max()))
        out["window_open_share"] = it.open_share(windows, neck, run.clocks[neck[0]], span)
        out["windows"] = int(len(windows))
    if run.mode in K_PRE_MODES:
        # What the switch itself did: the share of the run the bottleneck held K_pre for background, as
        # its packets saw it (for pcn-host, the only measure of what its announcements cost).
        at = run.queue[on_port(run.queue, neck[0], neck[1])]
        span = (int(at["ingress_us"].min()), int(at["ingress_us"].max()))
        out["k_pre_held_share"] = it.held_share(it.flagged_windows(run.queue, neck), span)
    return out


def queue_metrics(at: pd.DataFrame, table: pd.DataFrame, every: int) -> dict:
    """Throughput per class (overall, and the background's during and between iterations), queueing
    delay per class, marks and drops, at one port."""
    sent = at[at["dropped"] == 0]
    span_us = float(sent["egress_us"].max() - sent["egress_us"].min()) if len(sent) > 1 else 0.0
    out: dict = {"throughput_mbps": {}}
    for cls in ("ddl", "background"):
        nbytes = float(sent.loc[sent["class"] == cls, "packet_length"].sum()) * every
        out["throughput_mbps"][cls] = nbytes * 8 / span_us if span_us else None
    bg = sent[sent["class"] == "background"]
    if not table.empty and span_us:
        inside = np.zeros(len(bg), dtype=bool)
        t = bg["egress_us"].to_numpy()
        for first, last in zip(table["first_in_us"], table["last_out_us"]):
            inside |= (t >= first) & (t <= last)
        busy = sum(last - first for first, last in zip(table["first_in_us"], table["last_out_us"]))
        in_bytes = float(bg["packet_length"].to_numpy()[inside].sum()) * every
        out_bytes = float(bg["packet_length"].to_numpy()[~inside].sum()) * every
        out["throughput_mbps"]["background_during_iterations"] = in_bytes * 8 / busy if busy else None
        idle = span_us - busy
        out["throughput_mbps"]["background_between_iterations"] = out_bytes * 8 / idle if idle > 0 else None
    out["queue_delay_us"] = {}
    for cls in ("ddl", "background"):
        delays = at.loc[at["class"] == cls, "queue_delay_us"].to_numpy(dtype=float)
        out["queue_delay_us"][cls] = ({"mean": float(delays.mean()), **{f"p{q}": float(np.percentile(delays, q))
                                                                          for q in (50, 95, 99)}}
                                      if delays.size else {})
    out["marks_drops"] = m.marks_and_drops(at)
    return out


def switch_bursts(at: pd.DataFrame, jobs: dict[int, dict]) -> dict:
    """What the switch would call bursts at this port: each job's data packets split at its G (configured,
    or learned from the gaps as the controller learns it: segments.iteration_gap_us)."""
    data = at[(at["class"] == "ddl") & at["data"]]
    bursts, gaps = [], {}
    for job, rows in data.groupby("job"):
        gap, source = iteration_gap_us(np.sort(rows["ingress_us"].to_numpy()),
                                       (jobs.get(int(job)) or {}).get("burst_gap_us"))
        gaps[str(int(job))] = {"us": gap, "source": source}
        bursts += m.bursts_from_queue_log(rows, gap)
    return {"count": len(bursts), "start_queue_pkts": stats([b.start_queue for b in bursts]),
            "bct_ms": stats([b.bct_us / 1000 for b in bursts]), "burst_gap": gaps}


def job_iterations(run: RunData) -> dict:
    """Per job: where its iterations come from (its ranks' logs, or the network for a program that
    logs none), how many rank 0 had, and for a torchrun job with `iteration_regex` how many it printed."""
    table = run.iterations
    out = {}
    for job in run.jobs.values():
        rows = table[table["job"] == job["name"]] if not table.empty else table
        source = "network" if "source" in rows and (rows["source"] == NETWORK).any() else "log"
        first = rows[rows["rank"] == (0 if job.get("kind") == "torchrun" else rows["rank"].min())] \
            if not rows.empty else rows
        entry = {"source": source, "found": int(first["iter"].nunique()) if not first.empty else 0}
        printed = printed_iterations(run.path, job) if job.get("kind") == "torchrun" else None
        if printed is not None:
            entry.update(printed=printed, consistent=abs(entry["found"] - printed) <= 1)
        out[job["name"]] = entry
    return out


def iteration_metrics(table: pd.DataFrame, rate_mbps: float | None = None) -> dict:
    """Per-iteration figures at the bottleneck; with its rate, the share of it the iteration's own and the
    background's packets used during its BCT ("Is Network the Bottleneck for Distributed Training?":
    utilisation during communication, beside the what-if ideal B/R in bct_over_ideal)."""
    ratio = table["bct_ms"] / table["ideal_ms"] if not table.empty else []
    out = {"start_queue_pkts": stats(table["start_queue"]), "max_queue_pkts": stats(table["max_queue"]),
           "bct_ms": stats(table["bct_ms"]), "bct_over_ideal": stats(ratio),
           "ddl_mbps": stats(table["ddl_mbps"]), "background_mbps": stats(table["background_mbps"])}
    if rate_mbps:
        out["ddl_utilisation"] = stats(table["ddl_mbps"] / rate_mbps)
        out["link_utilisation"] = stats((table["ddl_mbps"] + table["background_mbps"]) / rate_mbps)
    return out


def analyse_run(run_dir: Path, plots: bool = True) -> dict:
    """Compute metrics.json and iterations.csv (and the run's queue plot) from the files in `run_dir`."""
    run = load_run(run_dir)
    config = run.config
    every = run.telemetry_every
    out: dict = {"run": run.name, "mode": run.mode, "sweep": config.get("sweep", {}),
                 "repetition": config.get("repetition"),
                 "workers": len((config.get("jobs") or [{}])[0].get("workers") or ()), "telemetry_every": every}
    queue = run.queue
    table = pd.DataFrame(columns=it.ITERATION_COLUMNS)
    neck = None
    if not queue.empty:
        attributed = it.attribute(queue, run.iterations, run.jobs)
        neck = it.bottleneck(attributed)
        if neck is not None:
            rate = run.port_rates.get(neck)
            table = it.per_iteration(attributed, queue, neck, rate, every, it.min_payloads(run.jobs))
            if run.mode in WINDOW_MODES:
                table["covered"] = it.covered(table, it.window_intervals(run.events), neck)
            at = queue[on_port(queue, neck[0], neck[1])]
            span = (float(queue["ingress_ns"].min()), float(queue["ingress_ns"].max()))
            out["bottleneck"] = {"switch": neck[0], "port": neck[1], "rate_pps": rate,
                                 "rate_mbps": rate_mbps(rate) if rate else None}
            out["iterations"] = {**it.count_check(table, it.expected_iterations(run.iterations, run.jobs, span)),
                                 **iteration_metrics(table, rate_mbps(rate) if rate else None)}
            out.update(queue_metrics(at, table, every))
            out["switch_bursts"] = switch_bursts(at, run.jobs)
        out["burstiness"] = m.burstiness(queue[queue["data"]])
        summaries = [json.loads(p.read_text()) for p in run.path.glob("queue-s*.summary.json")]
        out["telemetry"] = {"records": sum(s["records"] for s in summaries), "lost": sum(s["lost"] for s in summaries)}
    if len(run.jobs) > 1 or config.get("alone"):
        workers = run.iterations[run.iterations["role"] == "worker"] if not run.iterations.empty else run.iterations
        far = port_peer(run.network, *neck) if neck else None
        out["interference"] = interference_metrics(table, run.jobs, workers, neck, far)
    if (config.get("mode") or {}).get("interleave"):
        out["interleave"] = interleave_metrics(run.events, run.jobs)
    out["training"] = training_metrics(run)
    out["job_iterations"] = job_iterations(run)
    out["controller"] = controller_metrics(run, table, neck)
    out["queue_full_drops"] = full_queue_drops(run, neck)
    out["random_loss"] = random_loss(run)
    table.to_csv(run.path / "iterations.csv", index=False)
    write_json(run.path / "metrics.json", m.json_safe(out), allow_nan=False)
    if plots and neck is not None:
        from pcnlab.analysis.plots import plot_run_queue

        plot_run_queue(run, neck)
        if len(run.jobs) > 1:
            from pcnlab.analysis.turns_plot import moving_plans, plot_turns

            plot_turns(run.path / f"turns-{neck[0]}-p{neck[1]}.png", table,
                       {int(jid): j["name"] for jid, j in run.jobs.items()},
                       moving_plans((out.get("interleave") or {}).get("plans"), neck),
                       title=f"{run.name}: the jobs at {neck[0]} port {neck[1]}")
    return out


def random_loss(run: RunData) -> list[dict]:
    """The packets each port lost at random (a `schedule:` entry's loss, p4src/loss.p4), by class."""
    return [{"switch": name, "port": r["port"], "class": r["class"], "packets": r["packets"]}
            for name, rows in sorted(run.counters.items()) for r in rows or () if r["counter"] == "lost"]


def full_queue_drops(run: RunData, neck: tuple[str, int] | None) -> dict:
    """Packets dropped at a full queue (invisible to P4): handed to the queue minus sent minus dropped
    by the program, from the switch's counters at the end of the run."""
    rows = run.counters.get(neck[0]) if neck is not None else None
    if rows is None:
        return {}
    out = {}
    for cls in ("ddl", "background"):
        get = lambda k: sum(r["packets"] for r in rows if r["port"] == neck[1] and r["class"] == cls and r["counter"] == k)  # noqa: E731
        out[cls] = get("to_queue") - get("tx") - get("dropped")
    return out

