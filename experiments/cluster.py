"""Sweeps on a Ray cluster: one run per machine at a time, each judged by its own machine, every folder home.

Each machine of the cluster is a Ray node that advertises the custom resource `pcnlab: 1` (`pcnlab cluster
start` / `join`: app/cluster_cli.py); each run of a sweep is a Ray task that asks for it, so a machine
runs one at a time (a verdict needs the whole machine). Ray places, queues and cancels the tasks and
carries the folders back; what it does not know is written here: what a node must share with the
submitter (`node_facts`, `differences`), one run on a node (`run_on_node`, a streaming generator: a
line when it starts, its outcome, then its folder packed as tar in chunks), and the submitter's side
(`ClusterSweep`: progress lines naming the node, a run lost with its node done again once on another,
Ctrl-C cancelling every task so each node tears its run down, the folders unpacked into exactly the
layout of a local sweep).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
from pathlib import Path

from pcnlab.calibration import describe, provenance, read_calibration
from pcnlab.errors import UsageError
from pcnlab.experiments.calibrate import ensure_calibration
from pcnlab.experiments.config import load_experiment
from pcnlab.experiments.provenance import PROJECT_DIR, versions
from pcnlab.experiments.runner import ExperimentRunner, prepare_images
from pcnlab.ledger import is_running, process_start_time
from pcnlab.toolchain import find_program
from pcnlab.topologies.network import NETWORK_LOCK

RESOURCE = "pcnlab"                         # what a node advertises, one; each run asks for it
CHUNK_BYTES = 16 << 20                      # a run folder comes home in pieces of this size
P4_BUILD = PROJECT_DIR / "p4src" / "build"  # the compiled program every node must share
# versions.json's fields a node must share with the submitter (the kernel and the machine may differ)
SHARED = ("commit", "changes", "p4", "python", "packages", "p4c", "bmv2")
CODE = ("pcnlab", "controller", "topologies", "workloads", "experiments", "analysis", "p4src")   # what a run imports
WORK_ROOT = Path(tempfile.gettempdir()) / "pcnlab-cluster"   # a node's run folders until they are home
RAY_HINT = "`make deps` installs Ray (or: .venv/bin/pip install 'ray>=2.9')"


def ray_module():
    """Ray, or one line saying how to get it."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--cluster and pcnlab cluster need Ray, which is not installed here: {RAY_HINT}") from None
    return ray


def p4_digest(build: Path = P4_BUILD) -> str:
    """sha256 (first 16) of the compiled P4 program and its P4Info, as every node loads them."""
    digest = hashlib.sha256()
    for path in sorted(build.glob("*")):
        if path.is_file() and path.suffix in (".json", ".txtpb"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def changes_digest(folder: Path = PROJECT_DIR) -> str | None:
    """sha256 (first 16) of what the checkout's code holds beyond its commit: `git diff HEAD` of the
    folders a run imports and their new files not ignored (None: nothing). Two checkouts run the same
    code when their commits and these agree; other new files (a YAML of the user's) do not count."""
    git = ["git", "--no-optional-locks", "-c", f"safe.directory={folder}", "-C", str(folder)]
    try:
        diff = subprocess.run([*git, "diff", "HEAD", "--binary", "--", *CODE], capture_output=True, timeout=60)
        new = subprocess.run([*git, "ls-files", "-o", "--exclude-standard", "-z", "--", *CODE], capture_output=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if diff.returncode != 0 or new.returncode != 0:
        return None
    digest = hashlib.sha256(diff.stdout)
    names = sorted(n for n in new.stdout.decode().split("\0") if n)
    for name in names:
        if (folder / name).is_file():
            digest.update(name.encode() + b"\0" + (folder / name).read_bytes())
    return digest.hexdigest()[:16] if diff.stdout or names else None


def node_facts() -> dict:
    """This machine as a node: who it is, what code and tools it runs, its calibration and whether a
    PCN Lab network runs on it now."""
    known = versions()
    git = known.get("git", {})
    found = read_calibration()
    return {"host": platform.node(), "commit": git.get("commit"), "dirty": git.get("dirty"),
            "changes": changes_digest(), "p4": p4_digest(),
            "python": known.get("python"), "packages": known["packages"], "p4c": known.get("p4c"),
            "bmv2": known.get("bmv2"), "root": os.geteuid() == 0,
            "toolchain": all(find_program(p) for p in ("simple_switch_grpc", "p4c")),
            "calibration": provenance(found.data) if found.state == "ok" else {"state": found.state},
            "calibration_line": describe(found.data) if found.state == "ok" else f"{found.state}: {found.why}",
            "busy": network_busy()}


def network_busy() -> bool:
    """A PCN Lab network runs on this machine now (its lock is held: topologies/network.py)."""
    try:
        fd = os.open(NETWORK_LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def differences(mine: dict, theirs: dict) -> list[str]:
    """What a node (`theirs`) runs differently from the submitter (`mine`), each as a short phrase."""
    out = []
    for key in SHARED:
        if key == "packages":
            names = sorted(set(mine["packages"]) | set(theirs["packages"]))
            diff = [f"{n} {mine['packages'].get(n, 'absent')} here, {theirs['packages'].get(n, 'absent')} there"
                    for n in names if mine["packages"].get(n) != theirs["packages"].get(n)]
            out += [f"package {d}" for d in diff[:3]] + ([f"{len(diff) - 3} more packages"] if len(diff) > 3 else [])
        elif mine.get(key) != theirs.get(key):
            out.append(f"{key} {_short(mine.get(key))} here, {_short(theirs.get(key))} there")
    return out


def _short(value) -> str:
    return value[:12] if isinstance(value, str) and len(value) == 40 else str(value)


def pack(folder: Path, into: Path) -> Path:
    """A run folder as one tar file (`into`), its paths relative to the folder's parent."""
    with tarfile.open(into, "w") as tar:
        tar.add(folder, arcname=folder.name)
    return into


def chunks(path: Path, size: int = CHUNK_BYTES):
    with open(path, "rb") as handle:
        while piece := handle.read(size):
            yield piece


def unpack(pieces, sweep_dir: Path) -> Path:
    """Write the chunks of a packed run folder under `sweep_dir`; the folder's path. Only members under
    that one folder, no links out of it (tarfile's data filter)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=sweep_dir) as buffer:
        for piece in pieces:
            buffer.write(piece)
        buffer.seek(0)
        with tarfile.open(fileobj=buffer, mode="r:") as tar:
            members = tar.getmembers()
            names = {m.name.split("/", 1)[0] for m in members}
            if len(names) != 1:
                raise UsageError(f"a run folder came home holding {len(names)} top folders, not one")
            for member in members:
                _check_member(member)
            tar.extractall(sweep_dir, members=members)
    return sweep_dir / names.pop()


def _check_member(member: tarfile.TarInfo) -> None:
    """Only files and folders inside the run folder (hand-written: this Python's tarfile predates its
    `data` filter, 3.11.4)."""
    parts = Path(member.name).parts
    if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
        raise tarfile.TarError(f"a run folder came home with {member.name!r}, which is not a file or folder "
                               "inside it")


def run_on_node(text: str, file_name: str, overrides: list[str], index: int, stamp: str, submitter: dict):
    """One run of a sweep on this node (a Ray task's body): yields {"started": facts}, then
    {"outcome": ...}, then the run folder packed as tar in chunks (bytes). A node whose code differs
    from the submitter's, or that is not root, yields {"refused": why} instead of running."""
    facts = node_facts()
    host = facts["host"]
    differ = differences(submitter, facts)
    if differ:
        yield {"refused": f"node {host} runs other code than this machine: {'; '.join(differ)}; check out the same "
                          "commit there (and make deps), then pcnlab cluster join again"}
        return
    if not facts["root"]:
        yield {"refused": f"node {host} runs Ray as a user; runs need root: start it with sudo pcnlab cluster join"}
        return
    yield {"started": {"host": host, "node_id": _ray_node_id(), "calibration": facts["calibration"]}}
    work = _work_folder()
    os.chdir(PROJECT_DIR)      # a file's relative paths (a torchrun script) read as from the checkout's top
    try:
        spec = work / file_name
        spec.write_text(text)
        experiment = load_experiment(spec, overrides)
        run = experiment.runs()[index]
        lines: list[str] = []
        results = work / "results"
        calibration = ensure_calibration(results, say=lines.append) if run.switch.kind == "bmv2" else None
        images = prepare_images([run], lines.append)
        runner = ExperimentRunner(experiment, results, say=lines.append, calibration=calibration, stamp=stamp)
        outcome = runner.run_one(run, images, node={"host": host, "ray_node": _ray_node_id()})
        yield {"outcome": {"status": outcome.status, "error": outcome.error, "trusted": outcome.fidelity.get("trusted"),
                           "reasons": outcome.fidelity.get("reasons", []), "lines": lines[-20:]}}
        packed = pack(outcome.path, work / "run.tar")
        yield from chunks(packed)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _work_folder(root: Path = WORK_ROOT) -> Path:
    """A folder for one run on this node, named by the process that owns it (pid and start time); the
    folders of processes that are gone (a node killed mid-run) are removed first."""
    root.mkdir(parents=True, exist_ok=True)
    for old in root.iterdir():
        pid, _, start = old.name.partition("-")
        owner = start.split("-", 1)[0]
        if pid.isdigit() and owner.isdigit() and not is_running(int(pid), int(owner)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-{process_start_time(os.getpid())}-", dir=root))


def _ray_node_id() -> str | None:
    ray = ray_module()
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 -- outside a Ray worker: no node
        return None


def lost_errors():
    """(Ray's errors for a run lost with its machine, a task's own error, the node placement class)."""
    ray_module()
    from ray import exceptions as ex
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    lost = tuple(getattr(ex, name) for name in ("NodeDiedError", "WorkerCrashedError", "LocalRayletDiedError",
                                                 "ObjectLostError", "OwnerDiedError", "TaskUnschedulableError",
                                                 "TaskCancelledError", "RaySystemError") if hasattr(ex, name))
    return lost, ex.RayTaskError, NodeAffinitySchedulingStrategy


def alive_nodes(ray) -> list[dict]:
    """The cluster's live nodes that offer a PCN Lab machine."""
    return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(RESOURCE, 0) >= 1]


def status_rows(ray) -> list[dict]:
    """Per live machine of the cluster, what a task placed on it reads there: its host, commit,
    calibration and whether a PCN Lab network runs on it now."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    facts = ray.remote(node_facts)
    refs = [facts.options(num_cpus=0, max_retries=0,
                          scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
            for n in alive_nodes(ray)]
    rows = []
    for found in ray.get(refs, timeout=120):
        commit = (found["commit"] or "none")[:12] + ("+changes" if found["changes"] else "")
        rows.append({"host": found["host"], "commit": commit,
                     "busy": "yes" if found["busy"] else "no", "calibration": found["calibration_line"]})
    return sorted(rows, key=lambda r: r["host"])


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """One line, at once, when nothing listens at host:port (ray.init would retry for minutes)."""
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"cluster address {address!r}: give host:port, as pcnlab cluster start printed it")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UsageError(f"no Ray cluster at {address} ({exc.strerror or exc}); start one with pcnlab cluster "
                         "start, or give its address") from None


def connect(address: str):
    """ray.init to the cluster at `address`, quietly; one line when there is none there."""
    ray = ray_module()
    _reachable(address)
    here, on_term = os.getcwd(), signal.getsignal(signal.SIGTERM)
    os.chdir("/")      # Ray puts the driver's folder first on its workers' sys.path: a node runs its own code
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UsageError(f"no Ray cluster at {address} ({str(exc).splitlines()[0][:160]}); submit from a machine "
                         "of the cluster (pcnlab cluster start or join on it first)") from None
    finally:
        os.chdir(here)
        signal.signal(signal.SIGTERM, on_term)   # ray.init's own handler would exit without cancelling the runs
    if not alive_nodes(ray):
        ray.shutdown()
        raise UsageError(f"the Ray cluster at {address} has no node offering {RESOURCE}: start machines with "
                         "pcnlab cluster start / pcnlab cluster join, not ray start alone")
    return ray
