"""The `schedule:` list checked against the run's topology, switches and background flows, into
experiments.schedule.Change entries (what they mean and how they are applied: experiments/schedule.py)."""

from __future__ import annotations

import re

from pcnlab.experiments.config.convert import error, first_where, fmt, list_section, mapped_items, value_of
from pcnlab.experiments.config.runs import BackgroundFlowConfig, SwitchConfig, TopologyConfig, link_limit
from pcnlab.experiments.config.schema import section_keys
from pcnlab.experiments.schedule import Change, problems
from pcnlab.experiments.yamlpos import Raw, Where


def _flow_names(name: str, flows: tuple[BackgroundFlowConfig, ...]) -> tuple[str, ...]:
    """The flows a schedule entry names: the flow itself, or every flow its name became (name-1, ...)."""
    names = [f.name for f in flows]
    if name in names:
        return (name,)
    return tuple(n for n in names if re.fullmatch(re.escape(name) + r"-\d+", n))


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
