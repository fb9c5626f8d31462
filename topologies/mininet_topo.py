"""A topology's layout (topos.py's TopoLayout) as Mininet's Topo: the graph a network is built from
(network.py) and its routes and queues are read from (routing.py). Mininet is imported here only, so
laying out a topology (checking an experiment file) needs none."""

from __future__ import annotations

from mininet.topo import Topo


class PcnTopo(Topo):
    """Mininet's graph of a layout, its steps taken in their order (so every port has the number it has
    in the layout's order), with the layout's roles and host lists."""

    def build(self, layout) -> None:
        self.layout = layout
        self.roles = layout.roles
        for kind, names, opts in layout.steps:
            if kind == "host":
                self.addHost(*names, **opts)
            elif kind == "switch":
                self.addSwitch(*names, **opts)
            else:
                self.addLink(*names, **opts)

    def traffic_hosts(self) -> list[str]:
        """Hosts that carry experiment traffic (all but the monitors)."""
        return self.layout.traffic_hosts()

    def has_loops(self) -> bool:
        return self.layout.has_loops()

    def monitor_port(self, switch: str) -> int | None:
        """The switch's port towards its monitor host, if it has one."""
        for mon in self.roles.get("monitor", []):
            if mon == f"m{switch[1:]}":
                return self.port(switch, mon)[0]
        return None
