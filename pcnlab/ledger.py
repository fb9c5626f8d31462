"""What a run started, written down as it is started, so a crash can be cleaned up exactly.

Each run keeps a ledger (JSON) in its run folder; an index entry in the state directory points at it
while the run is live. It lists processes (identified by PID *and* start time, so a recycled PID is never
hit), the network namespaces the run made (identified by the namespace's inode), root-namespace
interfaces (identified by name *and* ifindex), podman containers (by the id podman wrote to the run's
--cidfile, else by their name, which holds the run's id) and nftables tables (the network's control-port
guard, by the name the run gave it). Nothing is matched by a name pattern. Removing what a ledger lists
(`pcnlab clean`, a run's own end, a network's start after a dead run) is topologies/cleanup.py's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pcnlab.files import write_json

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

    def unlist(self) -> None:
        """The run no longer needs cleaning: its index entry goes. A run's own end is
        topologies/cleanup.py's `close_ledger`, which first removes whatever of it is still there."""
        if self.index_entry.is_symlink() or self.index_entry.exists():
            self.index_entry.unlink()

    def _save(self) -> None:
        write_json(self.path, asdict(self.data))


def index_entries(state_dir: Path) -> list[tuple[Path, LedgerData | None]]:
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
    return [(entry, data) for entry, data in index_entries(state_dir) if data is None or not data.owner_alive()]


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


def is_running(pid: int, start: int | None) -> bool:
    """The process with this PID and start time exists and has not exited (a zombie has)."""
    if start is None or process_start_time(pid) != start:
        return False
    try:  # a zombie has exited; only its parent can reap it
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
