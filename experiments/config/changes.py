"""The `schedule:` list checked against the run's topology, switches and background flows (`problems`),
into Change entries (runs.py; how they are applied during a run: experiments/schedule_runner.py)."""

from __future__ import annotations

import re
from typing import Iterable

from pcnlab.experiments.config.convert import error, first_where, fmt, list_section, mapped_items, value_of
from pcnlab.experiments.config.runs import BackgroundFlowConfig, Change, SwitchConfig, TopologyConfig, link_limit
from pcnlab.experiments.config.schema import section_keys
from pcnlab.experiments.config.yamlpos import Raw, Where


def _flow_names(name: str, flows: tuple[BackgroundFlowConfig, ...]) -> tuple[str, ...]:
    """The flows a schedule entry names: the flow itself, or every flow its name became (name-1, ...)."""
    names = [f.name for f in flows]
    if name in names:
        return (name,)
    return tuple(n for n in names if re.fullmatch(re.escape(name) + r"-\d+", n))


def problems(changes: Iterable[Change], duration_s: float, bmv2: bool, links: set[frozenset],
             switches: set[str], flows: set[str]) -> list[tuple[int, str, str]]:
    """(entry index, key, what is wrong and how to fix it) for every change that cannot be applied:
    the config turns the first into its one-line error."""
    out = []
    started: dict[str, float] = {}
    stopped: dict[str, float] = {}
    for i, c in enumerate(changes):
        if not c.link and c.bw is None and c.loss is None and not c.start and not c.stop:
            out.append((i, "", "a change needs link and bw or loss, start or stop"))
        if c.at_s >= duration_s:
            out.append((i, "at_s", f"{c.at_s:g} s is not before the run ends (duration_s {duration_s:g} s after "
                                   f"the jobs start); change it earlier or run longer"))
        if c.link:
            sw, peer = c.link
            if c.bw is None and c.loss is None:
                out.append((i, "bw", "a link change needs bw (Mbit/s), the rate the port drains at from then on, "
                                      "or loss, the share of DDL data packets it loses"))
            if not bmv2:
                why = {"rate": "the rate is the switch's queue rate", "loss": "the loss is its P4 program's"}
                what = [k for k, v in (("rate", c.bw), ("loss", c.loss)) if v is not None] or ["rate"]
                out.append((i, "link", f"changing a link's {' and '.join(what)} during a run needs BMv2 switches "
                                       f"(switch: bmv2): {', '.join(why[k] for k in what)}"))
            if sw not in switches:
                out.append((i, "link", f"{sw!r} is not a switch of this topology ({', '.join(sorted(switches))}); "
                                       f"write link: <switch>-<peer>"))
            elif frozenset((sw, peer)) not in links:
                out.append((i, "link", f"{sw} has no link to {peer!r}; write link: <switch>-<peer> for a pair "
                                       f"the topology links"))
        else:
            for key in ("bw", "loss"):
                if getattr(c, key) is not None:
                    out.append((i, key, f"{key} needs link: <switch>-<peer>, the port it changes"))
        for what, names, seen in (("start", c.start, started), ("stop", c.stop, stopped)):
            for name in names:
                if name not in flows:
                    out.append((i, what, f"no background flow is named {name!r} (flows: "
                                          f"{', '.join(sorted(flows)) or 'none'})"))
                elif name in seen:
                    out.append((i, what, f"flow {name!r} is {what}ed twice; a flow starts at most once and "
                                          f"stops at most once"))
                seen[name] = c.at_s
    for name, t in stopped.items():
        if name in started and started[name] >= t:
            out.append((0, "stop", f"flow {name!r} stops at {t:g} s, not after it starts at {started[name]:g} s"))
    return out


def schedule(raw: Raw | None, topology: TopologyConfig, switch: SwitchConfig,
             background: tuple[BackgroundFlowConfig, ...], duration_s: float) -> tuple[Change, ...]:
    items = list_section(raw, "schedule", "changes (each item `- at_s: ... link: s1-h1 bw: ...` or "
                                           "`- at_s: ... start: <flow>`)")
    if items is None:
        return ()
    keys = section_keys("schedule")
    limit, why = link_limit(switch)
    changes: list[Change] = []
    wheres: list[tuple[Where, dict[str, Raw]]] = []
    for path, item, present in mapped_items(items, "schedule", keys, "at_s: ..., link: ..., bw: ..."):
        if "at_s" not in present:
            raise error(item.where, path, "missing key 'at_s': when the change happens, in seconds after the "
                                          "jobs start")
        values = {k.name: value_of(k, present, path) for k in keys.values()}
        link = None
        if values["link"] is not None:
            parts = values["link"].split("-")
            if len(parts) != 2 or not all(parts):
                raise error(present["link"].where, f"{path}.link", f"expected <switch>-<peer> (e.g. s1-h1), "
                                                                   f"got {fmt(values['link'])}")
            link = (parts[0], parts[1])
        if values["bw"] is not None and values["bw"] > limit:
            raise error(present["bw"].where, f"{path}.bw", f"{values['bw']:g} Mbit/s is more than {why}; "
                                                           f"use at most {limit:g} Mbit/s")
        flows = {}
        for what in ("start", "stop"):
            if values[what] is not None:
                flows[what] = _flow_names(values[what], background)
                if not flows[what]:
                    raise error(present[what].where, f"{path}.{what}",
                                f"no background flow is named {values[what]!r} (flows: "
                                f"{', '.join(f.name for f in background) or 'none'})")
        changes.append(Change(values["at_s"], link, values["bw"], flows.get("start", ()), flows.get("stop", ()),
                              values["loss"]))
        wheres.append((item.where, present))
    built = topology.build(monitors=False) if any(c.link for c in changes) else None
    links = {frozenset(pair) for pair in built.links()} if built else set()
    switches = set(built.switches()) if built else set()
    found = problems(changes, duration_s, switch.kind == "bmv2", links, switches, {f.name for f in background})
    if not found and switch.pace_hosts:
        found = _raised_paced_links(changes, built)
    if found:
        index, key, message = found[0]
        item_where, present = wheres[index]
        raise error(first_where(present.get(key), fallback=item_where), f"schedule.{index}" + (f".{key}" if key else ""),
                    message)
    return tuple(changes)


def _raised_paced_links(changes: list[Change], built) -> list[tuple[int, str, str]]:
    """A paced host keeps the rate it started with (topologies.network.host_pacing): a change that
    raises a host's link above it would be capped at the host without a word."""
    hosts = set(built.hosts()) if built else set()
    for index, change in enumerate(changes):
        if change.link and change.bw is not None:
            host = next((n for n in change.link if n in hosts), None)
            first = built.linkInfo(*change.link).get("bw") if host else None
            if first is not None and change.bw > first:
                return [(index, "bw", f"{change.bw:g} Mbit/s raises {host}'s link above the {first:g} Mbit/s its "
                                      f"host is paced at (switch.pace_hosts paces at the starting rate); "
                                      f"start the link at the highest rate and lower it, or drop pace_hosts")]
    return []
