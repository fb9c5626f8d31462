"""Random faults across real runs (issue 21's goal: 50 faults, 0 hangs, 0 leftovers, 0 corrupt files).

    sudo .venv/bin/python bench/bench_faults.py [--faults 50] [--seed 1]

Runs `pcnlab run` of a small pcn experiment (dumbbell, a generator, a background flow, telemetry) again
and again; in each, up to five faults at random moments of the job: SIGKILL of a switch (s1 or s2), of a
queue-log collector, of the background sender, of a worker (which ends the run), or SIGINT to
`pcnlab run` itself (which aborts it). After each run: did it end within 180 s (else a hang), is any
process, namespace, nftables table of its ledger left, does every status.json / metrics.json /
fidelity.json / summary.json parse. Prints one line per run and the totals.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pcnlab.jsonlines import read_json_lines
from pcnlab.ledger import LedgerData, is_running
from pcnlab.topologies import control_ports
from pcnlab.cmdline import OneLineParser, count

SPEC = """
name: faults
topology: {kind: dumbbell, left: 3, right: 1, bw: 20, bottleneck_bw: 10, queue: 60}
mode: {kind: pcn, K: 20, K_pre: 5}
telemetry: 1
jobs:
  - {name: gen, kind: generator, pattern: ps, ps: h4, workers: [h1, h2], burst_bytes: 30000, reply_bytes: 0,
     period_ms: 300, iterations: 50, burst_gap_us: 20000}
background:
  - {src: h3, dst: h4}
duration_s: 20
warmup_s: 1
"""
FAULTS = ("switch s1", "switch s2", "collector", "sender", "worker", "interrupt")
WEIGHTS = (3, 3, 2, 2, 1, 1)


def _pid(run: Path, what: str) -> int | None:
    """The newest live process of the run's ledger whose description starts with `what`."""
    ledger = LedgerData.from_json((run / "started.json").read_text())
    live = [p for p in ledger.processes if p.what.startswith(what) and is_running(p.pid, p.start_time)]
    return live[-1].pid if live else None


def _apply(fault: str, run: Path, proc: subprocess.Popen) -> bool:
    if fault == "interrupt":
        proc.send_signal(signal.SIGINT)
        return True
    what = {"switch s1": "simple_switch_grpc s1", "switch s2": "simple_switch_grpc s2",
            "collector": "collector for s", "sender": "background flows background: h3-h4.sender",
            "worker": "job gen: worker1"}[fault]
    pid = _pid(run, what)
    if pid is None:
        return False
    os.kill(pid, signal.SIGKILL)
    return True


def one_run(spec: Path, results: Path, rng: random.Random) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "pcnlab.cli", "run", str(spec), "--results", str(results)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    applied: list[str] = []
    run = None
    deadline = time.monotonic() + 90
    while run is None and time.monotonic() < deadline:
        run = next((p.parent for p in results.glob("faults/*/run/events.jsonl")), None)
        time.sleep(0.2)
    while run is not None and time.monotonic() < deadline and proc.poll() is None:
        if any(r.get("type") == "job_started" for r in read_json_lines(run / "events.jsonl")[1]):
            break
        time.sleep(0.2)
    moments = sorted(rng.uniform(1.0, 12.0) for _ in range(5))
    started = time.monotonic()
    for at in moments:
        time.sleep(max(0.0, started + at - time.monotonic()))
        if proc.poll() is not None or run is None:
            break
        fault = rng.choices(FAULTS, WEIGHTS)[0]
        if _apply(fault, run, proc):
            applied.append(f"{fault}@{at:.1f}s")
    try:
        proc.wait(timeout=180)
        hung = False
    except subprocess.TimeoutExpired:
        hung = True
        proc.kill()
        proc.wait()
    row = {"faults": applied, "exit": proc.returncode, "hung": hung}
    if run is None:
        return {**row, "error": "no run folder"}
    ledger = LedgerData.from_json((run / "started.json").read_text())
    row["left"] = ([p.what for p in ledger.processes if is_running(p.pid, p.start_time)]
                   + [n.node for n in ledger.namespaces if is_running(n.pid, n.start_time)]
                   + [t for t in ledger.nft_tables if control_ports.exists(t)])
    corrupt = []
    for path in [*run.parent.parent.rglob("status.json"), *run.parent.parent.rglob("metrics.json"),
                 *run.parent.parent.rglob("fidelity.json"), *run.parent.parent.rglob("summary.json")]:
        try:
            json.loads(path.read_text())
        except ValueError:
            corrupt.append(str(path))
    row["corrupt"] = corrupt
    row["status"] = json.loads((run / "status.json").read_text()).get("status")
    return row


def main() -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=count, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="pcnlab-faults-"))
    spec = work / "faults.yaml"
    spec.write_text(SPEC)
    total = hangs = leftovers = corrupt = runs = 0
    while total < args.faults:
        runs += 1
        row = one_run(spec, work / f"r{runs}", rng)
        total += len(row["faults"])
        hangs += row["hung"]
        leftovers += len(row.get("left", []))
        corrupt += len(row.get("corrupt", []))
        print(json.dumps(row), flush=True)
    print(f"{total} faults in {runs} runs: {hangs} hangs, {leftovers} leftovers, {corrupt} corrupt result files")


if __name__ == "__main__":
    main()
