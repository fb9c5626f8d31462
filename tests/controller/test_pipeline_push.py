"""The controller pushes the pipeline and routes over P4Runtime, by P4Info names, to real BMv2; a
switch that restarts gets everything back."""

from __future__ import annotations

import ipaddress

import finsy as fy

from conftest import needs_bmv2
from pcnlab.controller.sessions import ControllerThread, PcnController
from pcnlab.controller.program import P4Program
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.topologies.topos import make_topology


async def _read_routes(switch: fy.Switch) -> list[fy.P4TableEntry]:
    return [entry async for entry in switch.read(fy.P4TableEntry("ipv4_routes"))]


def _ping(net, src: str, dst: str) -> bool:
    return " 0% packet loss" in net.host(src).cmd(f"ping -c1 -W2 {net.host(dst).IP()}")


@needs_bmv2
def test_pipeline_and_routes_pushed_and_restored_after_restart(run_folder):
    topo = make_topology("dumbbell", left=2, right=1)
    with PcnNetwork(topo, run_folder.path, run_folder.ledger, NetworkOptions(switch="bmv2")) as net:
        controller = PcnController(net.endpoints(), P4Program.named())
        with ControllerThread(controller) as thread:
            for name, switch in controller.switches.items():
                entries = thread.call(_read_routes(switch), 10)
                # One /32 per host, each forwarding out of the port the topology says.
                expected = {(r.prefix, r.port) for r in controller.endpoints[name].routes}
                got = set()
                for e in entries:
                    value, length = e.match["ipv4_dst"]
                    got.add((f"{ipaddress.IPv4Address(value)}/{length}", e.action.args["port"]))
                assert len(entries) == len(topo.hosts()) and got == expected
            assert _ping(net, "h1", "h3")

            s2 = next(sw for sw in net.bmv2_switches if sw.name == "s2")
            old_pid = s2.process.pid
            s2.restart()  # a new process with no program and no entries
            assert s2.process.pid != old_pid
            thread.call(controller.wait_configured(times=2, timeout=30, switches=["s2"]), 40)
            assert controller.configured["s2"] == 2 and controller.configured["s1"] == 1
            assert len(thread.call(_read_routes(controller.switches["s2"]), 10)) == len(topo.hosts())
            assert _ping(net, "h1", "h3")
