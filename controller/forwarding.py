"""Table entries for forwarding, built by P4Info names from the routes a topology computed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pcnlab.controller.dataplane import action, table_entry
from pcnlab.controller.endpoints import Route

if TYPE_CHECKING:
    import finsy as fy


def route_entry(route: Route) -> fy.P4TableEntry:
    return table_entry("ipv4_routes", {"ipv4_dst": route.prefix}, action("forward", port=route.port,
                                                                         dst_mac=route.dst_mac))


def route_entries(routes: tuple[Route, ...] | list[Route]) -> list[fy.P4TableEntry]:
    return [route_entry(route) for route in routes]
