"""Table entries for forwarding, built by P4Info names from the routes a topology computed."""

from __future__ import annotations

import finsy as fy

from pcnlab.controller.endpoints import Route

ROUTES_TABLE = "ipv4_routes"


def route_entry(route: Route) -> fy.P4TableEntry:
    return fy.P4TableEntry(
        ROUTES_TABLE,
        match=fy.P4TableMatch({"ipv4_dst": route.prefix}),
        action=fy.P4TableAction("forward", port=route.port, dst_mac=route.dst_mac),
    )


def route_entries(routes: tuple[Route, ...] | list[Route]) -> list[fy.P4TableEntry]:
    return [route_entry(route) for route in routes]
