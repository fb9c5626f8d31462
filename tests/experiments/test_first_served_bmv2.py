"""First served, for real (`mode.K_behind`, `pcnlab run` on BMv2): two identical generator jobs paced by
their compute, whose PSs share h1's port, start together and collide. With K_behind 0 the switch marks
the packets of the job whose burst came second while the first one's is under way; the first finishes
as if alone and starts its next iteration earlier, the second waits, and within a few iterations their
communications no longer overlap, with nothing sent to the jobs. The value goes from the YAML to the
switch (the queue log's `behind` flags); the others keep K. Where a machine starts the jobs too far apart to collide, it
skips, saying how far apart they started."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import needs_bmv2, run_experiment
from pcnlab.analysis.interference import overlap_us

pytestmark = [needs_bmv2, pytest.mark.slow]

# Paced by compute (520 ms, then 2 x 500 KB: 420 ms of the port alone). Started together, they collide
# and, with ECN at K alone, stay 60-70 % overlapped for the run (interleave.yaml's runs, docs/results.md).
JOB = ("kind: generator, pattern: ps, ps: h1, burst_bytes: 500000, reply_bytes: 1000, compute_ms: 520, "
       "iterations: 16, cc: cubic, ecn: true")
SPEC = f"""
name: first
topology: {{kind: star, hosts: 5, bw: 20, queue: 60}}
mode: {{kind: ecn, K: 40, K_behind: 0}}
telemetry: 1
jobs:
  - {{name: a, workers: [h2, h3], {JOB}}}
  - {{name: b, workers: [h4, h5], {JOB}}}
duration_s: 40
warmup_s: 1
"""


def test_two_colliding_jobs_part_when_the_first_burst_is_served_first(module_results):
    run = run_experiment(SPEC, module_results, "first") / "first" / "latest" / "run"
    table = pd.read_csv(run / "iterations.csv")
    table = table.assign(overlap_us=overlap_us(table), bct_us=table["last_out_us"] - table["first_in_us"])
    share = lambda rows: rows["overlap_us"].sum() / rows["bct_us"].sum()   # noqa: E731
    first = table[table["iteration"] == 0]
    if share(first) <= 0.2:
        starts = first.sort_values("job")["first_in_us"].tolist()
        pytest.skip(f"the jobs started {abs(starts[1] - starts[0]) / 1000:.0f} ms apart and overlapped "
                    f"{share(first):.0%} in their first iteration: nothing to serve first")
    queue = pd.read_csv(run / "queue-s1.csv")
    # ECN-capable data (a retransmission is not: Linux sets ECT on new data only) behind the other's burst
    ddl = queue[(queue["port"] == 1) & (queue["class"] == "ddl") & (queue["payload_bytes"] > 0) & (queue["ect"] == 1)]
    behind = ddl[ddl["behind"] == 1]
    assert len(behind) > 0 and (behind["marked"] == 1).all()      # K_behind 0: every one of them marked
    assert (ddl.loc[ddl["behind"] == 0, "marked"] == (ddl.loc[ddl["behind"] == 0, "enq_qdepth"] >= 40)).all()
    late = table[table["iteration"] >= 8]
    assert len(late) >= 12 and share(late) < 0.1, (share(first), share(late))
