"""A switch that crashes or restarts in the middle of a run forwards again within a few hundred ms: the
network starts a dead BMv2 again (PcnNetwork.revive) and the controller replaces the lost P4Runtime
session as soon as the switch listens (controller.py `_supervise`), instead of finsy's fixed 10 s
back-off. Measured here as the longest gap between replies of a 10 ms ping through the switch."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from conftest import needs_bmv2
from pcnlab.controller.controller import ControllerThread, PcnController, _other_spelling
from pcnlab.controller.program import P4Program
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology

FINSY_BACKOFF_S = 10.0   # what a lost session cost before (issue 21: 10.1-10.3 s in 6 of 6 tries)


def _hole_s(net, switch, how: str) -> tuple[float, int]:
    """Ping h1 -> h3 every 10 ms, end `switch` (SIGKILL, or restart()), keep reviving; the longest
    silence between replies (s), and how many replies there were."""
    ping = net.host("h1").popen(["ping", "-D", "-i", "0.01", "-W", "1", net.host("h3").IP()],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        time.sleep(1.0)
        if how == "kill":
            os.kill(switch.process.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while not net.revive():   # as the runner does every 0.2 s
                assert time.monotonic() < deadline, "the killed switch was never started again"
                time.sleep(0.05)
        else:
            switch.restart()
        time.sleep(4.0)
    finally:
        ping.send_signal(signal.SIGINT)
        out, _ = ping.communicate(timeout=10)
    stamps = [float(m) for m in re.findall(r"^\[(\d+\.\d+)\].*time=", out, re.MULTILINE)]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return max(gaps, default=float("inf")), len(stamps)


def test_each_new_session_spells_the_address_the_other_way():
    assert _other_spelling("127.0.0.1:9559") == "[::ffff:127.0.0.1]:9559"
    assert _other_spelling("[::ffff:127.0.0.1]:9559") == "127.0.0.1:9559"
    assert _other_spelling("switch.example:9559") == "switch.example:9559"   # not an IPv4 address: as it is


@needs_bmv2
@pytest.mark.parametrize("how", ["kill", "restart"])
def test_a_switch_that_ends_forwards_again_without_finsys_backoff(run_folder, how):
    topo = make_topology("dumbbell", left=2, right=1)
    with PcnNetwork(topo, run_folder.path, run_folder.ledger, NetworkOptions(switch="bmv2")) as net:
        controller = PcnController(net.endpoints(), P4Program.named())
        downs: list[str] = []
        controller.on_down.append(downs.append)
        with ControllerThread(controller) as thread:
            s2 = next(sw for sw in net.bmv2_switches if sw.name == "s2")
            time.sleep(2.5)          # past finsy's 2 s: a session that lived long, as in a run
            holes = []
            for attempt in range(2):
                old = s2.process.pid
                hole, replies = _hole_s(net, s2, how)
                assert s2.process.pid != old and replies > 100
                thread.call(controller.wait_configured(times=2 + attempt, timeout=30, switches=["s2"]), 40)
                holes.append(hole)
            print(f"\n{how}: forwarding hole {', '.join(f'{h * 1e3:.0f} ms' for h in holes)}")
            assert downs == ["s2", "s2"] and controller.configured["s1"] == 1
            # The bound is finsy's back-off, not the goal: the goal (2 s) is measured in the README.
            assert all(h < FINSY_BACKOFF_S / 2 for h in holes), holes


@needs_bmv2
def test_a_second_primary_is_noticed(run_folder):
    import asyncio

    import finsy as fy

    topo = make_topology("dumbbell", left=1, right=1)
    with PcnNetwork(topo, run_folder.path, run_folder.ledger, NetworkOptions(switch="bmv2")) as net:
        controller = PcnController(net.endpoints(), P4Program.named(), election_id=10)
        backups: list[str] = []
        controller.on_backup.append(backups.append)
        with ControllerThread(controller) as thread:
            address = controller.endpoints["s1"].grpc_address

            async def intrude() -> bool:   # any local process may ask with a higher election id
                async with fy.Switch("intruder", address, fy.SwitchOptions(initial_election_id=20)) as other:
                    await asyncio.sleep(0.5)
                    return other.is_primary

            assert thread.call(intrude(), 30)
            assert backups == ["s1"] and controller.switches["s2"].is_primary
            # The other client gone, the controller is primary again and reconfigures s1 (its entries
            # may have been changed meanwhile).
            started = time.monotonic()
            thread.call(controller.wait_configured(times=2, timeout=15, switches=["s1"]), 20)
            print(f"\nprimary again and s1 reconfigured {time.monotonic() - started:.2f} s after the other left")
            assert controller.switches["s1"].is_primary
