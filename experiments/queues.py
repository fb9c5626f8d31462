"""`pcnlab queues RUN`: the switch queue log of a finished run, per port, zoomed on a burst if asked."""

from __future__ import annotations

from pathlib import Path

import yaml

from pcnlab.errors import UsageError
from pcnlab.experiments import metrics as m
from pcnlab.experiments.analysis import _dig, bottleneck, load_queue_log, run_dirs, windows_from_events


def show_queues(path: Path, switch: str | None, port: int | None, around_burst: int | None,
                margin_ms: float, rows: int, say=print) -> Path | None:
    from pcnlab.controller.events import read_events
    from pcnlab.experiments.plots import plot_queue

    runs = run_dirs(path)
    if len(runs) != 1:
        raise UsageError(f"{path} holds {len(runs)} runs; give one run's folder, e.g. {runs[0]}")
    run = runs[0]
    log = load_queue_log(run)
    if log.empty:
        raise UsageError(f"{run} has no queue log (telemetry off, or the run ended before traffic)")
    say("records per port: " + ", ".join(f"{s} port {p}: {n}" for (s, p), n in log.groupby(["switch", "port"]).size().items()))
    neck = bottleneck(log)
    if port is None:
        if neck is None:
            raise UsageError("no DDL traffic in this queue log: choose a port with --port")
        switch, port = neck
    switch = switch or (neck[0] if neck else str(log["switch"].iloc[0]))
    at = log[(log["switch"] == switch) & (log["port"] == port)]
    if at.empty:
        raise UsageError(f"no records for {switch} port {port}; ports with records: "
                         f"{sorted(set(zip(log['switch'], log['port'])))}")
    config = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").exists() else {}
    bursts = m.bursts_from_queue_log(at, int(_dig(config, "mode.burst_gap_us") or 2000))
    say(f"{switch} port {port}: {len(at)} records, {len(bursts)} DDL bursts")
    for i, b in enumerate(bursts[:50]):
        say(f"  burst {i}: start {b.start_us / 1e6:.3f} s, {b.packets} pkts, start queue {b.start_queue}, "
            f"max queue {b.max_queue}, BCT {b.bct_us / 1000:.2f} ms")
    if around_burst is None:
        return None
    if not 0 <= around_burst < len(bursts):
        raise UsageError(f"--around-burst {around_burst}: this port has bursts 0..{len(bursts) - 1}")
    burst = bursts[around_burst]
    margin = int(margin_ms * 1000)
    span = (burst.start_us - margin, burst.end_us + margin)
    near = at[(at["ingress_us"] >= span[0]) & (at["ingress_us"] < span[1])]
    say(f"{'t (ms)':>9} {'class':10} {'job':>3} {'enq':>4} {'deq':>4} {'delay us':>9} flags")
    for _, r in near.head(rows).iterrows():
        flags = ",".join(f for f in ("marked", "dropped", "burst_start", "in_window") if r[f])
        say(f"{(r['ingress_us'] - burst.start_us) / 1000:9.3f} {r['class']:10} {r['job']:>3} {r['enq_qdepth']:>4} "
            f"{r['deq_qdepth']:>4} {r['queue_delay_us']:>9} {flags}")
    if len(near) > rows:
        say(f"  ... {len(near) - rows} more rows (--rows)")
    events = read_events(run / "events.jsonl") if (run / "events.jsonl").exists() else []
    out = run / f"queue-{switch}-p{port}-burst{around_burst}.png"
    plot_queue(out, log, (switch, port), bursts, windows_from_events(events), span_us=span,
               title=f"{run.name}: burst {around_burst} on {switch} port {port}")
    say(f"plot: {out}")
    return out
