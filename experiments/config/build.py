"""One run's document (the file after --set and one sweep point) checked and typed, section by section,
with the checks that join sections (K within the queue, K_pre within K, link rates the switches keep up
with, modes and telemetry a Linux bridge cannot do). Jobs and flows are placed on the topology by jobs.py;
last, time_scale divides the rates and multiplies the times (timescale.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pcnlab.controller.dataplane import k_behind_fits, k_pre_fits
from pcnlab.controller.modes import DROPTAIL, MARKING_MODES
from pcnlab.errors import UsageError
from pcnlab.experiments.config.changes import schedule
from pcnlab.experiments.config.convert import convert, error, first_where, mapping, suggest, value_of
from pcnlab.experiments.config.jobs import ContainerDefault, flows, jobs
from pcnlab.analysis.fidelity_limits import FidelityConfig
from pcnlab.experiments.config.runs import ModeConfig, SwitchConfig, TelemetryConfig, TopologyConfig, link_limit
from pcnlab.experiments.config.schema import SAME_AS_BW, SECTIONS, TOPOLOGY_PARAMS, by_name, section_keys
from pcnlab.experiments.config.timescale import time_scaled
from pcnlab.experiments.config.yamlpos import Raw, Where
from pcnlab.topologies.topos import TOPOLOGIES, layout_of
from pcnlab.workloads.specs import NAME_RE


@dataclass
class Context:
    """What the sweep points of one load_experiment call share."""

    stem: str                              # the file's name without .yaml: the experiment's default name
    # (kind, parameters) -> the topology's (traffic hosts, roles): each distinct topology is built once
    topologies: dict[tuple, tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = field(default_factory=dict)


def build(tree: Raw, ctx: Context) -> dict:
    """Validate one document (after overrides and one sweep point) into the typed sections."""
    top = mapping(tree, "", "", section_keys(""))
    doc_where = tree.where

    name = value_of(section_keys("")["name"], top, "") if "name" in top else ctx.stem
    if not NAME_RE.fullmatch(name):
        raise error(doc_where, "name", f"the file name {ctx.stem!r} is not a valid experiment name; "
                                       "add name: with letters, digits, '.', '_' and '-'")
    description = value_of(section_keys("")["description"], top, "")

    if "topology" not in top:
        raise error(doc_where, "topology", f"missing; give one of {', '.join(TOPOLOGIES)}, e.g. topology: tree")
    topology, topo_raws = _topology(top["topology"], ctx)

    switch_raw = top.get("switch")
    sw = mapping(switch_raw, "switch", "switch", section_keys("switch")) if switch_raw is not None else {}
    switch = SwitchConfig(**{k.name: value_of(k, sw, "switch") for k in SECTIONS["switch"]})
    _check_link_rates(topology, topo_raws, switch, top["topology"].where)
    if switch.pace_hosts and switch.kind != "bmv2":
        raise error(first_where(sw.get("pace_hosts"), fallback=doc_where), "switch.pace_hosts",
                    f"applies to bmv2 switches only (on {switch.kind}, links are shaped at both ends already); "
                    "remove it")
    if switch.realtime and switch.kind != "bmv2":
        raise error(first_where(sw.get("realtime"), fallback=doc_where), "switch.realtime",
                    f"applies to bmv2 switches only ({switch.kind} forwards in the kernel); remove it")
    if switch.host_queue != "fifo" and not switch.pace_hosts:
        raise error(first_where(sw.get("host_queue"), fallback=doc_where), "switch.host_queue",
                    "is the queue of a paced host: add pace_hosts: true, or remove it")

    mode_raw = top.get("mode")
    md = mapping(mode_raw, "mode", "mode", section_keys("mode")) if mode_raw is not None else {}
    mode = ModeConfig(**{k.name: value_of(k, md, "mode") for k in SECTIONS["mode"]})
    mode_where = mode_raw.where if mode_raw is not None else doc_where
    if mode.kind in MARKING_MODES and mode.K > topology.queue:
        where = first_where(md.get("K"), topo_raws.get("queue"), fallback=mode_where)
        raise error(where, "mode.K", f"{mode.K} packets is above the queue depth (topology.queue: "
                                     f"{topology.queue}): the queue would drop before it marks; "
                                     f"K must be at most {topology.queue}")
    if not k_pre_fits(mode.kind, mode.K, mode.K_pre):      # the data plane's rule (PortMode), at the file's line
        where = first_where(md.get("K_pre"), md.get("K"), fallback=mode_where)
        raise error(where, "mode.K_pre", f"{mode.K_pre} is above K ({mode.K}); K_pre must be at most K "
                                         "(it is the lower threshold used while a burst is expected)")
    if not k_behind_fits(mode.kind, mode.K, mode.K_behind):
        where = first_where(md.get("K_behind"), md.get("K"), fallback=mode_where)
        raise error(where, "mode.K_behind", f"{mode.K_behind} is above K ({mode.K}); K_behind must be at most K "
                                            "(the lower threshold a job behind another's earlier burst is marked "
                                            "at)" if mode.kind in MARKING_MODES else f"applies to the marking modes "
                                            f"({', '.join(MARKING_MODES)}); {mode.kind} never marks: remove it, "
                                            "or change mode.kind")
    if switch.kind == "bridge" and mode.kind != DROPTAIL:
        where = first_where(md.get("kind"), sw.get("kind"), fallback=mode_where)
        raise error(where, "mode.kind", f"mode {mode.kind} needs switch kind bmv2: a Linux bridge only drops "
                                        "at a full queue; use mode droptail or switch bmv2")

    tel_raw = top.get("telemetry")
    tl = mapping(tel_raw, "telemetry", "telemetry", section_keys("telemetry")) if tel_raw is not None else {}
    if "every" in tl:
        every = convert(section_keys("telemetry")["every"], tl["every"], "telemetry.every")
        if every is not None and switch.kind == "bridge":
            raise error(tl["every"].where, "telemetry.every", "a Linux bridge has no telemetry; use off, "
                                                              "or switch kind bmv2")
    else:
        every = 1 if switch.kind == "bmv2" else None
    telemetry = TelemetryConfig(every)

    fid_raw = top.get("fidelity")
    fd = mapping(fid_raw, "fidelity", "fidelity", section_keys("fidelity")) if fid_raw is not None else {}
    fidelity = FidelityConfig(**{k.name: value_of(k, fd, "fidelity") for k in SECTIONS["fidelity"]})

    out = {"name": name, "description": description, "topology": topology, "switch": switch, "mode": mode,
           "telemetry": telemetry, "jobs": jobs(top.get("jobs"), topology, mode, _containers(top.get("containers"))),
           "background": flows(top.get("background"), topology, switch), "fidelity": fidelity}
    for key_name in ("duration_s", "warmup_s", "repetitions", "seed", "reference", "alone"):
        out[key_name] = value_of(section_keys("")[key_name], top, "")
    out["schedule"] = schedule(top.get("schedule"), topology, switch, out["background"], out["duration_s"])
    # Checked as the file writes them above (the switches' link limits too); then what runs: time_scale.
    out["time_scale"] = value_of(section_keys("")["time_scale"], top, "")
    return time_scaled(out, out["time_scale"], first_where(top.get("time_scale"), fallback=doc_where))


def _containers(raw: Raw | None) -> ContainerDefault | None:
    """The experiment's `containers` section: what every PyTorch job runs in unless it says otherwise."""
    if raw is None or raw.value is None:
        return None
    given = mapping(raw, "containers", "containers", section_keys("containers"))
    values = {k.name: value_of(k, given, "containers") for k in SECTIONS["containers"]}
    return ContainerDefault(values, {name: child.where for name, child in given.items()}, raw.where)


def _topology(raw: Raw, ctx: Context) -> tuple[TopologyConfig, dict[str, Raw]]:
    allowed = dict(section_keys("topology"))
    for params in TOPOLOGY_PARAMS.values():
        allowed.update(by_name(params))
    present = mapping(raw, "topology", "topology", allowed)
    if "kind" not in present:
        raise error(raw.where, "topology.kind", f"missing; choose one of {', '.join(TOPOLOGIES)}")
    kind = convert(section_keys("topology")["kind"], present["kind"], "topology.kind")
    params_keys = by_name(TOPOLOGY_PARAMS[kind])
    for name, child in present.items():
        if name != "kind" and name not in params_keys:
            raise error(child.key_where, f"topology.{name}",
                        f"not a parameter of the {kind} topology{suggest(name, params_keys)}; "
                        f"{kind} takes {', '.join(params_keys)}")
    params: dict[str, Any] = {}
    for key in TOPOLOGY_PARAMS[kind]:
        if key.name in present:
            params[key.name] = convert(key, present[key.name], f"topology.{key.name}")
        elif key.default == SAME_AS_BW:
            params[key.name] = params["bw"]
        else:
            params[key.name] = key.default
    built = (kind, tuple(params.items()))
    if built not in ctx.topologies:
        try:
            topo = layout_of(kind, **params)
        except UsageError as exc:
            raise error(raw.where, "topology", str(exc)) from None
        ctx.topologies[built] = (tuple(topo.traffic_hosts()),
                                 {role: tuple(members) for role, members in topo.roles.items()
                                  if role != "monitor" and members})
    hosts, roles = ctx.topologies[built]
    if len(hosts) < 2:
        raise error(raw.where, "topology", f"this {kind} topology has {len(hosts)} host; an experiment needs "
                                           "at least two")
    return TopologyConfig(kind, params, hosts, dict(roles)), present


def _check_link_rates(topology: TopologyConfig, present: dict[str, Raw], switch: SwitchConfig,
                      fallback: Where) -> None:
    limit, why = link_limit(switch)
    for name, mbps in topology.link_rates_mbps().items():
        if mbps > limit:
            where = first_where(present.get(name), present.get("bw"), fallback=fallback)
            raise error(where, f"topology.{name}", f"{mbps:g} Mbit/s is more than {why}; "
                                                    f"use at most {limit:g} Mbit/s per link")
