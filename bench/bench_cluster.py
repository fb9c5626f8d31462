"""Sweeps on a Ray cluster (experiments/cluster.py), measured on this machine with real Ray nodes
(ray.cluster_utils.Cluster, each advertising pcnlab: 1):

    sudo .venv/bin/python bench/bench_cluster.py [--repeats 3] [--kills 10] [--megabytes 200]

1. overhead: the same sweep (bridge switches, a generator and a background flow; 4 runs) run locally
   and through the cluster, interleaved, `--repeats` times each: the wall time per run of each, and the
   difference (the machine lock serializes the nodes' networks here, as one machine holds one run).
2. folders home: a folder of `--megabytes` of incompressible files packed on a worker node and brought
   home through Ray's object store in chunks, as a run's folder is (pack, chunks, unpack): MB/s.
3. lost nodes: a sweep of 12 runs while a worker node is killed and another started, `--kills` times:
   every run must end finished (a run lost with its node is done again once elsewhere).
Prints one line per measurement and the totals; exits 1 when a run was lost.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pcnlab.cmdline import OneLineParser, count

ROOT = Path(__file__).resolve().parents[1]
SPEC = """
name: bench-cluster
topology: {{kind: star, hosts: 3, bw: 20}}
switch: bridge
jobs:
  - {{name: gen, kind: generator, pattern: ps, ps: h1, workers: [h2], burst_bytes: 20000, period_ms: 100,
     iterations: {iterations}}}
background:
  - {{src: h3, dst: h1}}
duration_s: {duration}
warmup_s: 0.5
sweep:
  jobs.0.period_ms: {periods}
"""


def _sweep(spec: Path, results: Path, cluster: str | None) -> tuple[float, subprocess.CompletedProcess]:
    args = [sys.executable, "-m", "pcnlab.app.cli", "run", str(spec), "--results", str(results)]
    started = time.monotonic()
    done = subprocess.run(args + (["--cluster", cluster] if cluster else []), capture_output=True, text=True,
                          cwd=ROOT, timeout=1800)
    return time.monotonic() - started, done


def overhead(cluster, work: Path, repeats: int) -> None:
    spec = work / "overhead.yaml"
    spec.write_text(SPEC.format(iterations=50, duration=6, periods="[100, 110, 120, 130]"))
    walls = {"local": [], "cluster": []}
    for rep in range(repeats):
        for how in ("local", "cluster"):
            wall, done = _sweep(spec, work / f"{how}{rep}", cluster.address if how == "cluster" else None)
            if done.returncode != 0:
                raise SystemExit(f"{how} sweep failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")
            walls[how].append(wall / 4)
            print(f"overhead rep {rep + 1}: {how} {wall / 4:.2f} s per run", flush=True)
    local, far = statistics.median(walls["local"]), statistics.median(walls["cluster"])
    spread = {k: f"{min(v):.2f}-{max(v):.2f}" for k, v in walls.items()}
    print(f"overhead: per run local {local:.2f} s ({spread['local']}), cluster {far:.2f} s ({spread['cluster']}): "
          f"{far - local:+.2f} s, {100 * (far - local) / local:+.1f} % (medians of {repeats})", flush=True)


def _packed_folder(megabytes: int) -> str:
    """On a node: a folder of `megabytes` random bytes (files of 8 MB), packed; the tar's path."""
    from pcnlab.experiments.cluster import pack

    folder = Path(tempfile.mkdtemp(prefix="pcnlab-bench-")) / "run"
    folder.mkdir()
    for i in range(megabytes // 8):
        (folder / f"part{i}.bin").write_bytes(os.urandom(8 << 20))
    return str(pack(folder, folder.parent / "run.tar"))


def _stream(path: str):
    from pcnlab.experiments.cluster import chunks

    try:
        yield from chunks(Path(path))
    finally:
        import shutil

        shutil.rmtree(Path(path).parent, ignore_errors=True)


def folders_home(ray, worker_id: str, megabytes: int, work: Path) -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from pcnlab.experiments.cluster import unpack

    there = NodeAffinitySchedulingStrategy(worker_id, soft=False)
    path = ray.get(ray.remote(_packed_folder).options(num_cpus=0, scheduling_strategy=there).remote(megabytes))
    started = time.monotonic()
    stream = ray.remote(_stream).options(num_cpus=0, num_returns="streaming", scheduling_strategy=there).remote(path)
    home = unpack((ray.get(ref) for ref in stream), work / "home")
    seconds = time.monotonic() - started
    size = sum(p.stat().st_size for p in home.rglob("*") if p.is_file()) / 1e6
    print(f"folders home: {size:.0f} MB in {seconds:.2f} s: {size / seconds:.0f} MB/s (pack excluded)", flush=True)


def lost_nodes(cluster, work: Path, kills: int) -> int:
    spec = work / "kills.yaml"
    spec.write_text(SPEC.format(iterations=60, duration=6, periods="[" + ", ".join(str(100 + 5 * i)
                                                                                    for i in range(12)) + "]"))
    sweep = subprocess.Popen([sys.executable, "-m", "pcnlab.app.cli", "run", str(spec), "--cluster", cluster.address,
                              "--results", str(work / "kills")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, cwd=ROOT)
    node = cluster.add_node(num_cpus=1, resources={"pcnlab": 1})
    done_kills = 0
    while done_kills < kills and sweep.poll() is None:
        time.sleep(7)
        cluster.remove_node(node, allow_graceful=False)
        done_kills += 1
        node = cluster.add_node(num_cpus=1, resources={"pcnlab": 1})
        print(f"lost nodes: killed a worker node ({done_kills}/{kills}), started another", flush=True)
    out, _ = sweep.communicate(timeout=1800)
    record = json.loads(((work / "kills" / "bench-cluster" / "latest").resolve() / "cluster.json").read_text())
    finished = sum(r["attempts"][-1]["status"] == "finished" for r in record["runs"])
    lost = sum(a["status"] == "lost" for r in record["runs"] for a in r["attempts"])
    print(f"lost nodes: {done_kills} kills; {len(record['runs'])} runs, {finished} finished, {lost} attempts lost and "
          f"done again, exit {sweep.returncode}", flush=True)
    if sweep.returncode != 0:
        print(out[-2000:])
    return len(record["runs"]) - finished


def main() -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=count, default=3)
    parser.add_argument("--kills", type=count, default=10)
    parser.add_argument("--megabytes", type=count, default=200)
    parser.add_argument("--parts", default="overhead,home,kills", help="which measurements, comma-separated")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not parts <= {"overhead", "home", "kills"}:
        parser.error(f"--parts {args.parts!r}: choose among overhead, home, kills")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"pcnlab": 1},
                                                            "include_dashboard": False})
    worker = cluster.add_node(num_cpus=1, resources={"pcnlab": 1})
    cluster.wait_for_nodes()
    work = Path(tempfile.mkdtemp(prefix="pcnlab-bench-cluster-"))
    try:
        missing = 0
        if "overhead" in parts:
            overhead(cluster, work, args.repeats)
        if "home" in parts:
            ray.init(address=cluster.address, log_to_driver=False)
            folders_home(ray, worker.node_id, args.megabytes, work)
            ray.shutdown()
        if "kills" in parts:
            missing = lost_nodes(cluster, work, args.kills)
    finally:
        cluster.shutdown()
    print(f"results in {work}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
