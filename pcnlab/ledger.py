"""What a run started, written down as it is started, so a crash can be cleaned up exactly.

Each run keeps a ledger (JSON) in its run folder; an index entry in the state directory points at it
while the run is live. `pcnlab clean` reads the entries whose owner process is gone and removes what
they list: processes (identified by PID *and* start time, so a recycled PID is never hit), every
process in a network namespace the run made (identified by the namespace's inode), and root-namespace
interfaces (identified by name *and* ifindex), podman containers (by the id podman wrote to the
run's --cidfile, else by their name, which holds the run's id) and nftables tables (the network's
control-port guard, by the name the run gave it). Nothing is matched by a name pattern.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pcnlab.files import write_json
from pcnlab.status import status_of, write_status

DEFAULT_STATE_DIR = Path(os.environ.get("PCNLAB_STATE_DIR", "/run/pcnlab/runs"))


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of a process (clock ticks since boot), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields after its closing parenthesis are fixed.
    return int(stat.rsplit(")", 1)[1].split()[19])


def netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def ifindex(name: str) -> int | None:
    try:
        return int(Path(f"/sys/class/net/{name}/ifindex").read_text())
    except (OSError, ValueError):
        return None


@dataclass
class ProcessEntry:
    pid: int
    start_time: int
    what: str

    def alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time


@dataclass
class NamespaceEntry:
    """A Mininet host: the shell that holds its network namespace, and that namespace's inode."""

    node: str
    pid: int
    start_time: int
    inode: int


@dataclass
class InterfaceEntry:
    name: str
    ifindex: int

    def present(self) -> bool:
        return ifindex(self.name) == self.ifindex


@dataclass
class ContainerEntry:
    """A rank's podman container, recorded before `podman run` starts it."""

    name: str
    cidfile: str | None = None  # podman writes the container's id there as it creates it

    def ident(self) -> str:
        from pcnlab.workloads.containers import container_id

        return (container_id(Path(self.cidfile)) if self.cidfile else None) or self.name


@dataclass
class LedgerData:
    run_id: str
    run_dir: str
    owner_pid: int
    owner_start_time: int
    started_wall: float
    processes: list[ProcessEntry] = field(default_factory=list)
    namespaces: list[NamespaceEntry] = field(default_factory=list)
    interfaces: list[InterfaceEntry] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    containers: list[ContainerEntry] = field(default_factory=list)
    nft_tables: list[str] = field(default_factory=list)   # the network's control-port guard (nftables)

    @classmethod
    def from_json(cls, text: str) -> "LedgerData":
        raw = json.loads(text)
        return cls(
            run_id=raw["run_id"],
            run_dir=raw["run_dir"],
            owner_pid=raw["owner_pid"],
            owner_start_time=raw["owner_start_time"],
            started_wall=raw["started_wall"],
            processes=[ProcessEntry(**p) for p in raw.get("processes", [])],
            namespaces=[NamespaceEntry(**n) for n in raw.get("namespaces", [])],
            interfaces=[InterfaceEntry(**i) for i in raw.get("interfaces", [])],
            files=list(raw.get("files", [])),
            containers=[ContainerEntry(**c) for c in raw.get("containers", [])],
            nft_tables=list(raw.get("nft_tables", [])),
        )

    def owner_alive(self) -> bool:
        return is_running(self.owner_pid, self.owner_start_time)


class RunLedger:
    """The ledger of one live run. Every add_* call is written to disk before it returns."""

    def __init__(self, run_id: str, run_dir: Path, state_dir: Path = DEFAULT_STATE_DIR):
        self.path = Path(run_dir) / "started.json"
        self.index_entry = Path(state_dir) / f"{run_id}.json"
        pid = os.getpid()
        self.data = LedgerData(
            run_id=run_id,
            run_dir=str(run_dir),
            owner_pid=pid,
            owner_start_time=process_start_time(pid) or 0,
            started_wall=time.time(),
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.index_entry.parent.mkdir(parents=True, exist_ok=True)
        self._save()
        if self.index_entry.is_symlink() or self.index_entry.exists():
            self.index_entry.unlink()
        self.index_entry.symlink_to(self.path.resolve())

    def add_process(self, pid: int, what: str) -> None:
        start = process_start_time(pid)
        if start is not None:
            self.data.processes.append(ProcessEntry(pid, start, what))
            self._save()

    def making_namespace(self) -> contextlib.AbstractContextManager:
        """Hold this around making a namespace and recording it (add_namespace): no cleaner scans
        namespaces between the two, when the new namespace may carry a dead run's inode unrecorded."""
        return cleaners_turn(self.index_entry.parent)

    def add_namespace(self, node: str, pid: int) -> None:
        start, inode = process_start_time(pid), netns_inode(pid)
        if start is not None and inode is not None:
            self.data.namespaces.append(NamespaceEntry(node, pid, start, inode))
            self._save()

    def add_interface(self, name: str) -> None:
        index = ifindex(name)  # None: not in our namespace (a host's side); it dies with the host
        if index is not None and all(i.name != name for i in self.data.interfaces):
            self.data.interfaces.append(InterfaceEntry(name, index))
            self._save()

    def add_container(self, name: str, cidfile: str | Path | None = None) -> None:
        """Record a container before starting it (`run_argv(..., cidfile=...)` writes its id there)."""
        self.data.containers.append(ContainerEntry(name, None if cidfile is None else str(cidfile)))
        self._save()

    def add_nft_table(self, table: str) -> None:
        """Record an nftables table before making it (topologies/control_ports.py)."""
        self.data.nft_tables.append(table)
        self._save()

    def add_file(self, path: str | Path) -> None:
        self.data.files.append(str(path))
        self._save()

    def close(self) -> "CleanReport":
        """The run tore down what it started. Whatever of it is still there (a teardown cut short: an
        aborted sweep once left two BMv2 switches running) is removed now, exactly as `pcnlab clean`
        would; then the run no longer needs cleaning."""
        leftover = clean_ledger(self.data, self.index_entry.parent)  # silent: an error being reported stays one line
        if self.index_entry.is_symlink() or self.index_entry.exists():
            self.index_entry.unlink()
        return leftover

    def _save(self) -> None:
        write_json(self.path, asdict(self.data))


@dataclass
class CleanReport:
    run_id: str
    killed: list[str] = field(default_factory=list)
    removed_interfaces: list[str] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    removed_containers: list[str] = field(default_factory=list)
    removed_nft_tables: list[str] = field(default_factory=list)
    marked_killed: bool = False     # its status.json said running: now killed

    def summary(self) -> str:
        parts = [f"{len(self.killed)} processes", f"{len(self.removed_interfaces)} interfaces"]
        if self.removed_containers:
            parts.append(f"{len(self.removed_containers)} containers")
        if self.removed_nft_tables:
            parts.append(f"{len(self.removed_nft_tables)} nftables tables")
        if self.removed_files:
            parts.append(f"{len(self.removed_files)} files")
        marked = "; status.json marked killed" if self.marked_killed else ""
        return f"run {self.run_id}: removed " + ", ".join(parts) + marked


def _index(state_dir: Path) -> list[tuple[Path, LedgerData | None]]:
    """Every index entry with its ledger (None: the ledger file itself is gone or unreadable)."""
    found: list[tuple[Path, LedgerData | None]] = []
    for entry in sorted(state_dir.glob("*.json")) if state_dir.is_dir() else []:
        try:
            found.append((entry, LedgerData.from_json(entry.read_text())))
        except (OSError, ValueError, KeyError, TypeError):
            found.append((entry, None))
    return found


def stale_ledgers(state_dir: Path = DEFAULT_STATE_DIR) -> list[tuple[Path, LedgerData | None]]:
    """Index entries whose owner is gone (None data: the ledger file itself is gone or unreadable)."""
    return [(entry, data) for entry, data in _index(state_dir) if data is None or not data.owner_alive()]


def _namespaces_of_live_runs(state_dir: Path, other_than: str) -> dict[int, int]:
    """inode -> the latest start time of a namespace with it, in the ledgers of live runs but one."""
    taken: dict[int, int] = {}
    for _, live in _index(state_dir):
        if live is not None and live.run_id != other_than and live.owner_alive():
            for ns in live.namespaces:
                taken[ns.inode] = max(taken.get(ns.inode, -1), ns.start_time)
    return taken


@contextlib.contextmanager
def cleaners_turn(state_dir: Path = DEFAULT_STATE_DIR) -> Iterator[None]:
    """One at a time: a cleaner, or a run making a namespace and recording it. Without it a run's
    close scanned /proc while the next run had made its monitor hosts' namespaces with the inodes of
    the first run's, not yet recorded, and killed their shells (measured in CI: the second run then
    hung in Mininet's teardown on a dead shell)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".clean.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def clean_ledger(data: LedgerData, state_dir: Path = DEFAULT_STATE_DIR) -> CleanReport:
    """Remove exactly what the ledger lists, in the order that lets the kernel do the rest; never a
    namespace a live run (its ledger in `state_dir`) has made since."""
    with cleaners_turn(state_dir):
        return _clean_ledger(data, state_dir)


def _clean_ledger(data: LedgerData, state_dir: Path) -> CleanReport:
    report = CleanReport(data.run_id)
    victims: dict[int, str] = {}
    for proc in data.processes:
        if proc.alive():
            victims[proc.pid] = proc.what
    # Every process inside one of the run's namespaces belongs to the run (workers, iperf3, ...),
    # even when the host's shell is already gone. A namespace lives while any process is in it, so
    # its inode cannot have been reused while such a process exists. Once it is gone the kernel reuses
    # the inode at once: a namespace that a live run's ledger lists with that inode, made after ours,
    # is that run's (two runs one after the other: the first one's teardown killed the second one's
    # collectors and flows, measured) and is left alone.
    taken = _namespaces_of_live_runs(state_dir, data.run_id)
    namespaces = {ns.inode: ns for ns in data.namespaces if taken.get(ns.inode, -1) <= ns.start_time}
    if namespaces:
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            pid = int(pid_dir.name)
            ns = namespaces.get(netns_inode(pid) or -1)
            if ns is not None and (process_start_time(pid) or -1) >= ns.start_time:
                victims.setdefault(pid, f"process in {ns.node}")
    _terminate(victims, report)
    if data.containers:  # after the processes: a killed `podman run` leaves its container running
        _remove_containers(data.containers, report)
    if data.nft_tables:
        from pcnlab.topologies.control_ports import remove as remove_table

        report.removed_nft_tables += [t for t in data.nft_tables if remove_table(t)]
    for intf in data.interfaces:
        if intf.present():
            subprocess.run(["ip", "link", "del", intf.name], capture_output=True)
            if not intf.present():
                report.removed_interfaces.append(intf.name)
    for name in data.files:
        path = Path(name)
        if path.exists() or path.is_symlink():
            path.unlink()
            report.removed_files.append(name)
    return report


def _remove_containers(containers: list[ContainerEntry], report: CleanReport) -> None:
    from pcnlab.workloads.containers import container_exists, remove

    for entry in containers:
        ident = entry.ident()
        try:
            if container_exists(ident):
                remove(ident)
                report.removed_containers.append(entry.name)
        except (OSError, RuntimeError, subprocess.SubprocessError):
            pass  # podman gone or stuck: not counted as removed (the summary says what was)


def _terminate(victims: dict[int, str], report: CleanReport) -> None:
    starts = {pid: process_start_time(pid) for pid in victims}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in victims:
            if starts[pid] is not None and process_start_time(pid) == starts[pid]:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and any(
            is_running(pid, starts[pid]) for pid in victims
        ):
            time.sleep(0.05)
    report.killed.extend(f"{what} (pid {pid})" for pid, what in victims.items())


def is_running(pid: int, start: int | None) -> bool:
    """The process with this PID and start time exists and has not exited (a zombie has)."""
    if start is None or process_start_time(pid) != start:
        return False
    try:  # a zombie has exited; only its parent can reap it
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def clean_stale(state_dir: Path = DEFAULT_STATE_DIR) -> list[CleanReport]:
    """Clean every dead run; concurrent cleaners take turns, so each dead run is cleaned once, whole.
    A dead run still "running" in its status.json is marked "killed", with when it was found."""
    reports = []
    with cleaners_turn(state_dir):
        for entry, data in stale_ledgers(state_dir):
            if data is not None:
                reports.append(_clean_ledger(data, state_dir))
                reports[-1].marked_killed = status_of(data.run_dir) == "running"
                if reports[-1].marked_killed:
                    write_status(Path(data.run_dir), "killed", {
                        "found_dead": time.time(),
                        "error": f"its process (pid {data.owner_pid}) died before the run ended; found and "
                                 "cleaned up by pcnlab clean or the next run"})
            entry.unlink(missing_ok=True)
    return reports

