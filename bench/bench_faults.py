"""Random faults across real runs (the goal: 50 faults, 0 hangs, 0 leftovers, 0 corrupt files).

    sudo .venv/bin/python bench/bench_faults.py [--faults 50] [--seed 1] [--containers]

Runs `pcnlab run` of a small pcn experiment (dumbbell, a generator, a background flow, telemetry) again
and again; in each, up to five faults at random moments of the job: SIGKILL of a switch (s1 or s2), of a
queue-log collector, of the background sender, of a worker (which ends the run), or SIGINT to
`pcnlab run` itself (which aborts it). After each run: did it end within 180 s (else a hang), is any
process, namespace, nftables table of its ledger left, does every status.json / metrics.json /
fidelity.json / summary.json parse. Prints one line per run and the totals.

--containers: a PyTorch PS job (a PS and three workers, each in its own container of the default image)
instead of the generator, and the faults that containers add: SIGKILL of a rank (the process inside
its container), of a rank's podman client, and of `pcnlab run` itself (then `pcnlab clean`, as a user
would, removes what it left). Leftovers then count the ledger's containers that still exist.
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
from pcnlab.topologies.cleanup import container_ident
from pcnlab.cmdline import OneLineParser, count
from pcnlab.workloads.containers import DEFAULT_IMAGE, container_exists

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from small_experiment import small_experiment  # noqa: E402 (tests/: the one owner of the small experiment)

SPEC = small_experiment("faults", "pcn", 50, 20)
FAULTS = ("switch s1", "switch s2", "collector", "sender", "worker", "interrupt")
WEIGHTS = (3, 3, 2, 2, 1, 1)
CONTAINER_SPEC = f"""
name: faults
topology: {{kind: star, hosts: 5, bw: 20, queue: 60}}
mode: {{kind: pcn, K: 20, K_pre: 5}}
telemetry: 1
containers: {DEFAULT_IMAGE}
jobs:
  - {{name: train, kind: ps, ps: h1, workers: [h2, h3, h4], model: digits-mlp, iterations: 60, compute_ms: 100,
     burst_gap_us: 20000}}
background:
  - {{src: h5, dst: h1}}
duration_s: 25
warmup_s: 1
"""
CONTAINER_FAULTS = ("switch s1", "collector", "sender", "rank", "podman", "interrupt", "kill run")
CONTAINER_WEIGHTS = (2, 2, 2, 2, 2, 1, 1)
TARGETS = {"switch s1": "simple_switch_grpc s1", "switch s2": "simple_switch_grpc s2",
           "collector": "collector for s", "sender": "background flows background: ",
           "worker": "job gen: worker1", "rank": "job train: rank", "podman": "podman client of job train"}


def _pid(run: Path, what: str) -> int | None:
    """The newest live process of the run's ledger whose description starts with `what` (a background
    flow: its sender)."""
    ledger = LedgerData.from_json((run / "started.json").read_text())
    live = [p for p in ledger.processes if p.what.startswith(what) and is_running(p.pid, p.start_time)
            and (".sender" in p.what or not what.startswith("background"))]
    return live[-1].pid if live else None


def _apply(fault: str, run: Path, proc: subprocess.Popen) -> bool:
    if fault == "interrupt":
        proc.send_signal(signal.SIGINT)
        return True
    if fault == "kill run":
        proc.kill()
        return True
    pid = _pid(run, TARGETS[fault])
    if pid is None:
        return False
    os.kill(pid, signal.SIGKILL)
    return True


def one_run(spec: Path, results: Path, rng: random.Random, faults=FAULTS, weights=WEIGHTS) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "pcnlab.app.cli", "run", str(spec), "--results", str(results)],
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
        fault = rng.choices(faults, weights)[0]
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
    if proc.returncode == -signal.SIGKILL:     # nothing of its own removed what it started: a user's clean does
        cleaned = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "clean"], capture_output=True, text=True,
                                 timeout=180)
        row["clean"] = cleaned.stdout.strip().splitlines()[:1]
    ledger = LedgerData.from_json((run / "started.json").read_text())
    row["left"] = ([p.what for p in ledger.processes if is_running(p.pid, p.start_time)]
                   + [n.node for n in ledger.namespaces if is_running(n.pid, n.start_time)]
                   + [t for t in ledger.nft_tables if control_ports.exists(t)]
                   + [c.name for c in ledger.containers if container_exists(container_ident(c))])
    corrupt = []
    for path in [*run.parent.parent.rglob("status.json"), *run.parent.parent.rglob("metrics.json"),
                 *run.parent.parent.rglob("fidelity.json"), *run.parent.parent.rglob("summary.json")]:
        try:
            json.loads(path.read_text())
        except ValueError:
            corrupt.append(str(path))
    row["corrupt"] = corrupt
    status = run / "status.json"
    row["status"] = json.loads(status.read_text()).get("status") if status.exists() else "none (killed)"
    return row


def main() -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=count, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--containers", action="store_true", help="a PyTorch PS job in containers, and their faults")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="pcnlab-faults-"))
    spec = work / "faults.yaml"
    spec.write_text(CONTAINER_SPEC if args.containers else SPEC)
    kinds = (CONTAINER_FAULTS, CONTAINER_WEIGHTS) if args.containers else (FAULTS, WEIGHTS)
    total = hangs = leftovers = corrupt = runs = 0
    while total < args.faults:
        runs += 1
        row = one_run(spec, work / f"r{runs}", rng, *kinds)
        total += len(row["faults"])
        hangs += row["hung"]
        leftovers += len(row.get("left", []))
        corrupt += len(row.get("corrupt", []))
        print(json.dumps(row), flush=True)
    print(f"{total} faults in {runs} runs: {hangs} hangs, {leftovers} leftovers, {corrupt} corrupt result files")


if __name__ == "__main__":
    main()
