"""switch.realtime: BMv2 under SCHED_FIFO (topologies/bmv2.py), so a packet that wakes one of its threads
does not wait for a CPU behind the hosts' processes."""

from __future__ import annotations

import os

import pytest

from conftest import needs_bmv2
from pcnlab.topologies import bmv2
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology


def test_the_prefix_is_chrt_fifo_at_the_switch_priority():
    prefix = bmv2.realtime_prefix("s1")
    assert os.path.basename(prefix[0]) == "chrt" and prefix[1:] == ["--fifo", str(bmv2.REALTIME_PRIORITY)]
    assert 1 <= bmv2.REALTIME_PRIORITY < 99


def test_without_chrt_the_error_is_one_line(monkeypatch):
    monkeypatch.setattr(bmv2.shutil, "which", lambda _name: None)
    with pytest.raises(bmv2.Bmv2StartError) as err:
        bmv2.realtime_prefix("s1")
    assert str(err.value).startswith("s1: switch.realtime needs chrt") and "\n" not in str(err.value)


def _policy(tid: int) -> int | None:
    """A thread's scheduling policy; None if it has exited since it was listed (gRPC's come and go)."""
    try:
        return os.sched_getscheduler(tid)
    except ProcessLookupError:
        return None


@needs_bmv2
@pytest.mark.parametrize("realtime", [True, False])
def test_every_thread_of_a_realtime_switch_is_fifo_and_the_others_ordinary(run_folder, realtime):
    with PcnNetwork(make_topology("star", hosts=2), run_folder.path, run_folder.ledger,
                    NetworkOptions(switch="bmv2", realtime=realtime)) as net:
        pid = net.bmv2_switches[0].process.pid
        policies = {_policy(int(t)) for t in os.listdir(f"/proc/{pid}/task")} - {None}
        assert policies == ({os.SCHED_FIFO} if realtime else {os.SCHED_OTHER}), (realtime, policies)
        if realtime:
            assert os.sched_getparam(pid).sched_priority == bmv2.REALTIME_PRIORITY
