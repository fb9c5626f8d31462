"""A switch that crashes or restarts in the middle of a run forwards again within a few hundred ms: the
network starts a dead BMv2 again (PcnNetwork.revive) and the controller replaces the lost P4Runtime
session as soon as the switch listens (sessions.py `_supervise`), instead of finsy's fixed 10 s
back-off. Measured here as the longest gap between replies of a 10 ms ping through the switch."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time

import pytest

from conftest import needs_bmv2
from pcnlab.jsonlines import read_json_lines
from pcnlab.controller.sessions import ControllerThread, PcnController, _other_spelling
from pcnlab.controller.program import P4Program
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology

FINSY_BACKOFF_S = 10.0   # what a lost session cost before (10.1-10.3 s in 6 of 6 tries; docs/results.md, Faults)


def _stamps(out: str) -> list[float]:
    """The times of ping -D's replies (s, the wall clock)."""
    return [float(m) for m in re.findall(r"^\[(\d+\.\d+)\].*time=", out, re.MULTILINE)]


def _hole_s(net, switch, how: str) -> tuple[float, int]:
    """Ping h1 -> h3 every 10 ms, end `switch` (SIGKILL, or restart()), keep reviving; the longest
    silence between replies (s), and how many replies there were. Pinged until 50 replies came after a
    silence of over 100 ms that ended after the switch did (the hole), at most 4 s."""
    ping = net.host("h1").popen(["ping", "-D", "-i", "0.01", "-W", "1", net.host("h3").IP()],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = ""
    try:
        time.sleep(1.0)
        ended = time.time()                # ping -D's clock
        if how == "kill":
            os.kill(switch.process.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while not net.revive():   # as the runner does every 0.2 s
                assert time.monotonic() < deadline, "the killed switch was never started again"
                time.sleep(0.05)
        else:
            switch.restart()
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            if select.select([ping.stdout], [], [], 0.1)[0]:
                out += os.read(ping.stdout.fileno(), 1 << 16).decode()
            stamps = _stamps(out)
            holes = [k for k in range(1, len(stamps)) if stamps[k] - stamps[k - 1] > 0.1 and stamps[k] > ended]
            if holes and len(stamps) - holes[-1] >= 50:
                break                      # the hole is over: 50 replies since
    finally:
        ping.send_signal(signal.SIGINT)
        out += ping.communicate(timeout=10)[0]
    stamps = _stamps(out)
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
            # The bound is finsy's back-off, not the goal: the goal (2 s) is measured in docs/results.md.
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


@needs_bmv2
def test_windows_a_crashed_switch_lost_are_armed_again_in_its_new_clock(run_folder):
    """A window armed for 3 s ahead, then the switch is killed and started again: its clock starts from
    zero and its table is empty; once configured, the window is in its table again, at the same moment
    of the host's clock, in the new switch clock (within the clock map's error)."""
    from pcnlab.controller.events import EventLog
    from pcnlab.controller.scheduler import PcnScheduler
    from pcnlab.controller.windows import PlannerConfig, Window

    topo = make_topology("dumbbell", left=1, right=1)
    with PcnNetwork(topo, run_folder.path, run_folder.ledger, NetworkOptions(switch="bmv2")) as net:
        controller = PcnController(net.endpoints(), P4Program.named())
        events = EventLog(run_folder.path / "events.jsonl")
        scheduler = PcnScheduler(controller, events, PlannerConfig(k_pre=5))
        with ControllerThread(controller) as thread:
            time.sleep(1.5)                                      # the clock map has a few samples
            now = scheduler.switch_now_us("s2")
            window = Window("s2", 1, 1, now + 3_000_000, now + 3_200_000)
            thread.call(scheduler._apply([scheduler.core.planner.carry(window, now)]), 10)
            start_ns = scheduler.clocks["s2"].map.to_host_ns(window.start_us)
            s2 = next(sw for sw in net.bmv2_switches if sw.name == "s2")
            os.kill(s2.process.pid, signal.SIGKILL)
            while not net.revive():
                time.sleep(0.05)
            thread.call(controller.wait_configured(times=2, timeout=10, switches=["s2"]), 15)
            time.sleep(0.3)

            import finsy as fy

            async def windows():
                return [e async for e in controller.switches["s2"].read(fy.P4TableEntry("predrain_windows"))]

            entries = thread.call(windows(), 10)
            assert len(entries) == 1, entries
            low, high = entries[0].match["now_us"]
            expected = scheduler.clocks["s2"].map.to_switch_us(start_ns)
            print(f"\nwindow armed again at {low} us of the new clock (expected {expected}; before the crash "
                  f"{window.start_us})")
            assert low < window.start_us and abs(low - expected) < 5_000
            assert high - low == window.end_us - window.start_us - 1
        events.close()
        carried = [e for e in read_json_lines(run_folder.path / "events.jsonl")[1] if e["type"] == "arm"
                   and e["reason"] == "carried"]
        assert len(carried) == 2                                 # the test's own, and the switch's again
