"""Iterations of a job that logs none (a user's own program, `kind: torchrun`, without the hook), found
in the network as the data plane finds bursts: the job's data packets, each rank's at the switch it is
attached to, with a new iteration at a packet of at least `burst_min_payload` bytes after more than G
(`burst_gap_us`, or where the job leaves it out, the G learned from the job's gaps as the controller
learns it: segments.iteration_gap_us) of the whole job's silence. So one iteration number means one moment for every rank
(an all-reduce, or gradients and the PS's answer, are one iteration). Exchanges far smaller than the
job's typical one (under SMALL_SHARE of the median: the rendezvous store's messages) are not
iterations. Each rank's part of an iteration becomes a row of the workers' iteration schema (comm
start: its first such packet into the switch; comm end: its last out), with `source` "network", so
every per-iteration metric is computed from them as from a log. A rank's compute is not visible on
the wire: `compute_start_ns` is the communication's start, so an iteration's time is start to start.

Counted this way an iteration is the job's bursts: a program that pauses longer than G inside one
iteration, or exchanges much outside training (DDP broadcasts the parameters once before the first
step: one more), shows more; `printed_iterations` is the check against what the program says.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from pcnlab.controller.segments import iteration_gap_us

NETWORK = "network"
SMALL_SHARE = 0.1   # an exchange under this share of the median one is not an iteration


def attached_switch(network: dict) -> dict[str, str]:
    """Host -> the switch it is attached to (network.json)."""
    return {host: sw for sw, info in (network.get("switches") or {}).items()
            for host in (info.get("ports") or {}).values()}


def port_peer(network: dict, switch: str, port: int) -> str | None:
    """The node at the far end of a switch's port (network.json), None where it is not known."""
    return ((network.get("switches") or {}).get(switch) or {}).get("ports", {}).get(str(port))


def network_iterations(queue: pd.DataFrame, network: dict, job_id: int, job: dict) -> pd.DataFrame:
    """One iteration row per (iteration, rank that sent in it), ranks in the order of the job's workers."""
    if queue.empty or "src" not in queue:
        return pd.DataFrame()
    min_payload = int(job.get("burst_min_payload") or 0)
    at = attached_switch(network)
    ranks = {host: rank for rank, host in enumerate(job.get("workers") or ())}
    ddl = queue[(queue["class"] == "ddl") & (queue["job"] == job_id) & queue["data"]
                & (queue["payload_bytes"] >= min_payload) & queue["src"].isin(list(ranks))]
    sent = ddl[ddl["switch"].to_numpy() == ddl["src"].map(at).to_numpy()].sort_values("ingress_ns")
    if sent.empty:
        return pd.DataFrame()
    ingress_ns = sent["ingress_ns"].to_numpy()
    gap_us, _ = iteration_gap_us(ingress_ns // 1000, job.get("burst_gap_us"))
    cluster = np.cumsum(np.diff(ingress_ns, prepend=-np.inf) > gap_us * 1000) - 1
    sent = sent.assign(cluster=cluster)
    size = sent.groupby("cluster")["payload_bytes"].sum()
    kept = size[size >= SMALL_SHARE * size.median()].index
    number = {c: k for k, c in enumerate(kept)}
    rows = []
    for (c, host), part in sent[sent["cluster"].isin(kept)].groupby(["cluster", "src"], sort=True):
        start = float(part["ingress_ns"].min())
        rows.append({"job": job["name"], "role": "worker", "rank": ranks[host], "host": host, "iter": number[c],
                     "compute_start_ns": start, "compute_end_ns": start, "comm_start_ns": start,
                     "comm_end_ns": float(part["egress_ns"].max()), "bytes_sent": int(part["payload_bytes"].sum()),
                     "loss": None, "source": NETWORK})
    return pd.DataFrame(rows)


def printed_iterations(run_dir: Path, job: dict) -> int | None:
    """The lines rank 0 of a torchrun job printed that match its `iteration_regex` (None: no pattern)."""
    pattern = job.get("iteration_regex")
    workers = job.get("workers") or ()
    if not pattern or not workers:
        return None
    out = Path(run_dir) / "jobs" / job["name"] / f"rank0-{workers[0]}.out"
    try:
        text = out.read_text(errors="replace")
    except OSError:
        return None
    regex = re.compile(pattern)
    return sum(1 for line in text.splitlines() if regex.search(line))
