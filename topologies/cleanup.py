"""Removing what a run's ledger (pcnlab/ledger.py) lists, exactly that: for `pcnlab clean`, for a run's own
end (`close_ledger`: what a teardown cut short left), and for a network's start after a dead run.

The entries whose owner process is gone are cleaned: their processes (by PID and start time), every
process in a network namespace the run made (by the namespace's inode, never one a live run made
since), root-namespace interfaces (by name and ifindex), podman containers (workloads/containers.py) and
nftables tables (the control-port guard, control_ports.py). Nothing is matched by a name pattern.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from pcnlab.ledger import (DEFAULT_STATE_DIR, ContainerEntry, LedgerData, RunLedger, cleaners_turn,
                           index_entries, is_running, netns_inode, process_start_time, stale_ledgers)
from pcnlab.status import status_of, write_status
from pcnlab.topologies.control_ports import remove as remove_table
from pcnlab.workloads.containers import container_exists, container_id, remove


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


def close_ledger(ledger: RunLedger) -> "CleanReport":
    """The run tore down what it started. Whatever of it is still there (a teardown cut short: an
    aborted sweep once left two BMv2 switches running) is removed now, exactly as `pcnlab clean`
    would; then the run no longer needs cleaning."""
    leftover = clean_ledger(ledger.data, ledger.index_entry.parent)  # silent: an error being reported stays one line
    ledger.unlist()
    return leftover


def container_ident(entry: ContainerEntry) -> str:
    """The id podman wrote to the entry's --cidfile, else the container's name."""
    return (container_id(Path(entry.cidfile)) if entry.cidfile else None) or entry.name


def _namespaces_of_live_runs(state_dir: Path, other_than: str) -> dict[int, int]:
    """inode -> the latest start time of a namespace with it, in the ledgers of live runs but one."""
    taken: dict[int, int] = {}
    for _, live in index_entries(state_dir):
        if live is not None and live.run_id != other_than and live.owner_alive():
            for ns in live.namespaces:
                taken[ns.inode] = max(taken.get(ns.inode, -1), ns.start_time)
    return taken


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
    for entry in containers:
        ident = container_ident(entry)
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
