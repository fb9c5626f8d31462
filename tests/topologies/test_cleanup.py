"""A run that dies by SIGKILL leaves its network behind; `pcnlab clean` removes exactly that."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import needs_mininet, needs_root
from pcnlab.ledger import LedgerData, ifindex, is_running

CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pcnlab.experiments.rundir import RunFolder
    from pcnlab.topologies.network import NetworkOptions, PcnNetwork
    from pcnlab.topologies.topos import make_topology
    run = RunFolder.create(Path(sys.argv[1]), "crash", "dumbbell")
    net = PcnNetwork(make_topology("dumbbell"), run.path, run.ledger, NetworkOptions(switch=sys.argv[2])).start()
    # Something a workload would start inside a host: it must go too.
    net.host("h1").popen(["sleep", "600"])
    print(run.path, flush=True)
    time.sleep(600)
""")


def _mine_alive(data: LedgerData) -> list[str]:
    alive = [f"{p.what} {p.pid}" for p in data.processes if is_running(p.pid, p.start_time)]
    alive += [f"{n.node} {n.pid}" for n in data.namespaces if is_running(n.pid, n.start_time)]
    alive += [i.name for i in data.interfaces if ifindex(i.name) == i.ifindex]
    return alive


@needs_mininet
def test_clean_after_sigkill_removes_exactly_that_run(tmp_path):
    switch = "bmv2" if shutil.which("simple_switch_grpc") else "bridge"
    # An unrelated interface that happens to look like Mininet's: clean must not touch it.
    subprocess.run(["ip", "link", "add", "s9-eth1", "type", "veth", "peer", "name", "pcntest1"], check=True)
    child = None
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), switch],
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)
        lines = []
        for line in child.stdout:  # it may first report what it cleaned up after earlier runs
            lines.append(line)
            if line.startswith(str(tmp_path)):
                break
        run_dir = Path(lines[-1].strip()) if lines else Path("/nonexistent")
        assert run_dir.is_dir(), f"the child did not start its network: {lines}"
        data = LedgerData.from_json((run_dir / "started.json").read_text())
        assert data.namespaces and data.interfaces
        if switch == "bmv2":
            assert any("simple_switch_grpc" in p.what for p in data.processes)
        assert _mine_alive(data)

        before = json.loads((run_dir / "status.json").read_text())
        assert before["status"] == "running"
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        # Everything of the run is still there after the crash...
        data = LedgerData.from_json((run_dir / "started.json").read_text())
        left = _mine_alive(data)
        assert any(name.startswith("s1-eth") for name in left)
        sleeper_ns = {n.inode for n in data.namespaces}

        proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "clean"], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        # "removed ..." -- or nothing, where a run started meanwhile cleaned it first (runs do that).
        assert "removed" in proc.stdout or "nothing to clean" in proc.stdout

        # ...and nothing of it afterwards: processes, namespaces (with what ran in them), interfaces.
        assert _mine_alive(data) == [], proc.stdout
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                in_run_ns = os.stat(f"/proc/{pid}/ns/net").st_ino in sleeper_ns
            except OSError:
                continue  # gone, a zombie (no namespace any more), or not ours to look at
            assert not in_run_ns, f"pid {pid} still runs in one of the run's namespaces"
        assert ifindex("s9-eth1") is not None and ifindex("pcntest1") is not None
        again = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "clean"], capture_output=True, text=True)
        assert "nothing to clean" in again.stdout
        # It never finished: whoever cleaned it (this clean, or a run that started meanwhile) marked it
        # killed, with when it was found, and kept what the run had written there.
        status = json.loads((run_dir / "status.json").read_text())
        assert status["status"] == "killed", status
        assert before["started"] <= status["found_dead"] <= time.time() and status["started"] == before["started"]
        assert status["host"] == before["host"] and str(child.pid) in status["error"]
    finally:
        if child is not None and child.poll() is None:  # a failed assertion must not leave the network (and its lock) behind
            child.kill()
            child.wait()
            subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "clean"], capture_output=True)
        subprocess.run(["ip", "link", "del", "s9-eth1"], capture_output=True)


def test_closing_a_ledger_removes_what_a_cut_short_teardown_left(tmp_path):
    """A run's ledger closed while something it started still runs (its teardown was cut short) kills
    exactly that, and leaves an unrelated process alone."""
    from pcnlab.ledger import RunLedger, process_start_time
    from pcnlab.topologies.cleanup import close_ledger

    ours = subprocess.Popen(["sleep", "60"])
    theirs = subprocess.Popen(["sleep", "60"])
    try:
        ledger = RunLedger("close-test", tmp_path / "run", state_dir=tmp_path / "state")
        ledger.add_process(ours.pid, "a switch the teardown missed")
        report = close_ledger(ledger)
        ours.wait(timeout=5)
        assert report.killed == [f"a switch the teardown missed (pid {ours.pid})"]
        assert is_running(theirs.pid, process_start_time(theirs.pid))
        assert not (tmp_path / "state" / "close-test.json").exists()
    finally:
        for p in (ours, theirs):
            p.kill()
            p.wait()


@needs_root
def test_a_namespace_inode_a_live_run_reused_is_left_alone(tmp_path):
    """A dead run's namespace is gone and the kernel gave its inode to a new namespace of another, live
    run (made while the first run's teardown still cleaned): clean must not touch it. Measured before
    the fix: two runs one after the other, the first one's ledger close killed the second one's
    collectors and background flows."""
    from pcnlab.ledger import NamespaceEntry, RunLedger, netns_inode
    from pcnlab.topologies.cleanup import clean_ledger, close_ledger

    state = tmp_path / "state"
    other = subprocess.Popen(["unshare", "--net", "sleep", "60"])   # the live run's host
    try:
        deadline = time.monotonic() + 5
        while netns_inode(other.pid) == netns_inode(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.01)
        inode = netns_inode(other.pid)
        live = RunLedger("live", tmp_path / "live", state)             # owned by this (live) process
        live.add_namespace("h1", other.pid)
        dead = LedgerData(run_id="dead", run_dir=str(tmp_path), owner_pid=1, owner_start_time=1, started_wall=0.0,
                          namespaces=[NamespaceEntry("h1", other.pid, 1, inode)])   # made earlier, same inode
        report = clean_ledger(dead, state)
        assert other.poll() is None and not report.killed
        close_ledger(live)                                              # the live run's own close: its host goes
        assert other.wait(timeout=10) is not None
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


@needs_root
def test_a_namespace_being_made_and_not_yet_recorded_is_left_alone(tmp_path):
    """A run makes a namespace that carries a dead run's inode and records it a moment later; a cleaner
    of the dead run waits for the record and then leaves it alone. Measured before the fix (CI,
    2026-11-26): a run's close killed the next run's monitor hosts' shells between the two, and that
    run hung in Mininet's teardown."""
    import threading

    from pcnlab.ledger import NamespaceEntry, RunLedger, netns_inode
    from pcnlab.topologies.cleanup import clean_ledger, close_ledger

    state = tmp_path / "state"
    live = RunLedger("live", tmp_path / "live", state)
    reports: list = []
    with live.making_namespace():
        other = subprocess.Popen(["unshare", "--net", "sleep", "60"])   # the live run's new host
        try:
            deadline = time.monotonic() + 5
            while netns_inode(other.pid) == netns_inode(os.getpid()) and time.monotonic() < deadline:
                time.sleep(0.01)
            dead = LedgerData(run_id="dead", run_dir=str(tmp_path), owner_pid=1, owner_start_time=1,
                              started_wall=0.0, namespaces=[NamespaceEntry("h1", 1, 1, netns_inode(other.pid))])
            cleaner = threading.Thread(target=lambda: reports.append(clean_ledger(dead, state)))
            cleaner.start()
            cleaner.join(0.5)
            assert cleaner.is_alive()                                   # it waits for the namespace's record
            live.add_namespace("h1", other.pid)
        except BaseException:
            other.kill()
            other.wait()
            raise
    try:
        cleaner.join(10)
        assert reports and not reports[0].killed and other.poll() is None
    finally:
        other.kill()
        other.wait()
        close_ledger(live)
