"""`time_scale`: the same regime, slower. One run's typed sections (build.py's result) with every key the
key table marks RATE divided by the factor and every key it marks TIME multiplied (schema.Key.scales), each
scaled value checked against its key's bounds. The RunConfig carries what runs, so every consumer (the
runner, the controller, the fidelity check, queue rates) sees the scaled values; config.yaml records the
factor and the reading side (analysis/comparison.py) gives times back in the file's units.

Keys the table does not mark stay: queue depths and thresholds (packets), sizes (bytes), shares, and the
times that measure the machine rather than the regime (KEPT, e.g. fidelity.max_controller_lag_ms).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from pcnlab.experiments.config.convert import error, fmt
from pcnlab.experiments.config.schema import RATE, TIME, TOPOLOGY_PARAMS, Key, by_name, section_keys
from pcnlab.experiments.config.yamlpos import Where

# The typed sections of build.py's result that hold keys of the table (the rest holds none that scale).
SECTIONS_SCALED = ("mode", "fidelity", "jobs", "background", "schedule")


def scaled_keys(keys: dict[str, Key]) -> dict[str, Key]:
    """The keys of a section that time_scale changes."""
    return {name: key for name, key in keys.items() if key.scales in (RATE, TIME)}


def time_scaled(built: dict, factor: float, where: Where) -> dict:
    """build.py's sections with the factor applied (unchanged at 1); `where` is the time_scale's line."""
    if factor == 1:
        return built
    out = dict(built)
    topology = built["topology"]
    params = _scaled(dict(topology.params), by_name(TOPOLOGY_PARAMS[topology.kind]), factor, "topology", where)
    out["topology"] = replace(topology, params=params)
    for name, value in _scaled({k: built[k] for k in scaled_keys(section_keys(""))}, section_keys(""), factor,
                               "", where).items():
        out[name] = value
    for section in SECTIONS_SCALED:
        keys = section_keys(section)
        if isinstance(built[section], tuple):
            out[section] = tuple(_scaled_fields(item, keys, factor, f"{section}.{i}", where)
                                 for i, item in enumerate(built[section]))
        else:
            out[section] = _scaled_fields(built[section], keys, factor, section, where)
    return out


def rescaled(run, factor: float):
    """A resolved RunConfig `factor` times slower again, as `--set time_scale` (its own x factor) makes it;
    a value the factor pushes out of its key's bounds is a UsageError naming it."""
    names = ("topology", *SECTIONS_SCALED, *scaled_keys(section_keys("")))
    sections = time_scaled({name: getattr(run, name) for name in names}, factor,
                           Where(f"--set time_scale={run.time_scale * factor:g}"))
    return replace(run, **sections, time_scale=run.time_scale * factor)


def _scaled_fields(item, keys: dict[str, Key], factor: float, path: str, where: Where):
    """A typed config (a dataclass whose fields are named as the section's keys) with its keys scaled."""
    names = scaled_keys(keys)
    values = _scaled({name: getattr(item, name) for name in names}, keys, factor, path, where)
    return replace(item, **values)


def _scaled(values: dict[str, Any], keys: dict[str, Key], factor: float, path: str, where: Where) -> dict:
    out = dict(values)
    for name, key in scaled_keys(keys).items():
        value = values.get(name)
        if value is None or isinstance(value, (bool, str)):      # null, auto: nothing to scale
            continue
        new = value / factor if key.scales == RATE else value * factor
        if key.type in ("int", "lead"):
            new = int(round(new))
        _check(key, value, new, factor, f"{path}.{name}" if path else name, where)
        out[name] = new
    return out


def _check(key: Key, value: float, new: float, factor: float, path: str, where: Where) -> None:
    """A scaled value within its key's bounds, or one line naming the key, the product and time_scale."""
    unit = f" {key.unit}" if key.unit else ""
    op = "/" if key.scales == RATE else "x"
    what = f"{path} {fmt(value)}{unit} {op} time_scale {factor:g} = {fmt(new)}{unit}"
    if key.min is not None and new < key.min:
        bound = f"below the least allowed, {key.min:g}{unit}"
    elif key.above is not None and new <= key.above:
        bound = f"not above {key.above:g}{unit}"
    elif key.max is not None and new > key.max:
        bound = f"above the most allowed, {key.max:.15g}{unit}"
    elif not math.isfinite(new):
        bound = "not a finite number"
    else:
        return
    raise error(where, "time_scale", f"{what} is {bound}; choose a smaller time_scale or change {path}")
