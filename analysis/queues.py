"""`pcnlab queues RUN`: a run's switch queue log at one port: its DDL iterations (from the run's
iterations.csv, or measured at the asked port), and the records around iteration N, printed and plotted."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pcnlab.errors import UsageError
from pcnlab.analysis import iterations as it
from pcnlab.analysis.results import RunData, on_port, run_folders


def _iterations_at(run: RunData, port: tuple[str, int]) -> pd.DataFrame:
    neck = run.metrics.get("bottleneck") or {}
    if not run.iteration_table.empty and (neck.get("switch"), neck.get("port")) == port:
        return run.iteration_table
    attributed = it.attribute(run.queue, run.iterations, run.jobs)
    return it.per_iteration(attributed, run.queue, port, run.port_rates.get(port), run.telemetry_every,
                            it.min_payloads(run.jobs))


def show_queues(path: Path, switch: str | None, port: int | None, around: int | None,
                margin_ms: float, rows: int, say=print) -> Path | None:
    from pcnlab.analysis.plots import plot_run_queue

    runs = run_folders(path)
    if len(runs) != 1:
        raise UsageError(f"{path} holds {len(runs)} runs; give one run's folder, e.g. {runs[0]}")
    run = RunData(runs[0])
    log = run.queue
    if log.empty:
        raise UsageError(f"{run.path} has no queue log (telemetry off, or the run ended before traffic)")
    say("records per port: " + ", ".join(f"{s} port {p}: {n}" for (s, p), n in log.groupby(["switch", "port"]).size().items()))
    if port is None:
        neck = run.metrics.get("bottleneck") or {}
        if not neck:
            found = it.bottleneck(it.attribute(log, run.iterations, run.jobs))
            if found is None:
                raise UsageError("no DDL iterations in this queue log: choose a port with --port")
            neck = {"switch": found[0], "port": found[1]}
        switch, port = switch or neck["switch"], int(neck["port"])
    switch = switch or str(log["switch"].iloc[0])
    at = log[on_port(log, switch, port)]
    if at.empty:
        raise UsageError(f"no records for {switch} port {port}; ports with records: "
                         f"{sorted(set(zip(log['switch'], log['port'])))}")
    table = _iterations_at(run, (switch, port))
    say(f"{switch} port {port}: {len(at)} records, {len(table)} DDL iterations")
    for r in table.head(50).itertuples():
        say(f"  iteration {r.iteration} (job {r.job}): start {r.first_in_us / 1e6:.3f} s, {r.packets} pkts, "
            f"start queue {r.start_queue}, max queue {r.max_queue}, BCT {r.bct_ms:.1f} ms")
    if around is None:
        return None
    chosen = table[table["iteration"] == around]
    if chosen.empty:
        have = f"{table['iteration'].min()}..{table['iteration'].max()}" if len(table) else "none"
        raise UsageError(f"--around-iteration {around}: this port saw iterations {have}")
    first, last = int(chosen["first_in_us"].min()), int(chosen["last_out_us"].max())
    margin = int(margin_ms * 1000)
    span = (first - margin, last + margin)
    near = at[(at["ingress_us"] >= span[0]) & (at["ingress_us"] < span[1])]
    say(f"{'t (ms)':>9} {'class':10} {'job':>3} {'src':>5} {'bytes':>5} {'enq':>4} {'deq':>4} {'delay us':>9} flags")
    for _, r in near.head(rows).iterrows():
        flags = ",".join(f for f in ("marked", "dropped", "burst_start", "in_window") if r[f])
        say(f"{(r['ingress_us'] - first) / 1000:9.3f} {r['class']:10} {r['job']:>3} {str(r['src']):>5} "
            f"{r.get('payload_bytes', 0):>5} {r['enq_qdepth']:>4} {r['deq_qdepth']:>4} {r['queue_delay_us']:>9} {flags}")
    if len(near) > rows:
        say(f"  ... {len(near) - rows} more rows (--rows)")
    out = run.path / f"queue-{switch}-p{port}-iteration{around}.png"
    plot_run_queue(run, (switch, port), path=out, span_us=span,
                   title=f"{run.name}: iteration {around} on {switch} port {port}")
    say(f"plot: {out}")
    return out
