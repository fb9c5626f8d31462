"""A process group names the cause of a failure, not its echo (workloads/processes.py), on real processes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from pcnlab.workloads.processes import ECHO_S, ProcessGroup, WorkloadError, WorkloadProcess


def _group(tmp_path, scripts: list[str]) -> ProcessGroup:
    procs = []
    for rank, script in enumerate(scripts):
        proc = WorkloadProcess(label=f"worker{rank}", rank=rank, host=f"h{rank + 1}", ip="", argv=[],
                               log=tmp_path / f"{rank}.log", output=tmp_path / f"{rank}.out")
        proc.popen = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        procs.append(proc)
    return ProcessGroup("pair", tmp_path, procs)


def test_a_peer_failing_before_the_killed_rank_is_seen_is_its_echo(tmp_path):
    # rank 0 fails at once, as a gloo peer does on "Connection closed"; rank 1 is killed 0.3 s later,
    # as a container's podman client reports its rank's SIGKILL after the peers' own exits
    group = _group(tmp_path, ["import sys; sys.exit(1)",
                              "import os, signal, time; time.sleep(0.3); os.kill(os.getpid(), signal.SIGKILL)"])
    time.sleep(0.1)
    with pytest.raises(WorkloadError, match=r"^workload pair: rank 1 \(worker1 on h2\) was killed by SIGKILL; "
                                            r"stopped the rest"):
        group.wait(timeout=10)


def test_a_failure_with_no_death_behind_it_is_named_once_the_rest_ended_or_echo_time_passed(tmp_path):
    group = _group(tmp_path, ["import sys; sys.exit(3)", "import time; time.sleep(30)"])
    started = time.monotonic()
    with pytest.raises(WorkloadError, match=r"^workload pair: rank 0 \(worker0 on h1\) exited with status 3; "):
        group.wait(timeout=10)
    assert time.monotonic() - started < ECHO_S + 5          # the sleeper was stopped, not waited for
    assert group.procs[1].returncode == -15                  # SIGTERM, from stop()
