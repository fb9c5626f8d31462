"""Dotted keys (`mode.K`, `jobs.0.workers`): which exist in a document, `--set key=value` overrides, the
`sweep:` section (and `--set sweep.KEY=[...]`), and the labels that name a run from its sweep values.

A sweep key may join several dotted keys with `+`; each of its values is then a list with one value per
key, set together (a zipped sweep: points that are combinations, not a product):

    sweep:
      jobs.0.compression+jobs.0.compression_ratio: [[none, 0.01], [topk, 0.001], [topk, 0.005]]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pcnlab.experiments.config.convert import convert, error, fmt, suggest
from pcnlab.experiments.config.limits import MAX_RUNS
from pcnlab.experiments.config.schema import (LIST_SECTIONS, NOT_SWEPT, SECTIONS, SHORTHAND, TOPOLOGY_PARAMS, by_name,
                                              section_keys)
from pcnlab.experiments.config.yamlpos import Raw, Where, parse_scalar


def _valid_paths(tree: Raw, all_topology_params: bool = False) -> list[str]:
    """Every dotted key that may be set or swept in this document."""
    top = tree.value if tree.is_map else {}
    paths = [k.name for k in SECTIONS[""]]
    for section in ("switch", "mode", "telemetry", "fidelity", "containers"):
        paths += [f"{section}.{k.name}" for k in SECTIONS[section]]
    paths.append("topology.kind")
    kind = _current_kind(top.get("topology"))
    for name, params in TOPOLOGY_PARAMS.items():
        if all_topology_params or kind is None or name == kind:
            paths += [f"topology.{k.name}" for k in params if f"topology.{k.name}" not in paths]
    for section in LIST_SECTIONS:
        items = top.get(section)
        count = len(items.value) if items is not None and items.is_list else 0
        for i in range(count):
            paths.append(f"{section}.{i}")
            paths += [f"{section}.{i}.{k.name}" for k in SECTIONS[section]]
    return paths


def _current_kind(raw: Raw | None) -> str | None:
    if raw is None:
        return None
    value = raw.value.get("kind").value if raw.is_map and "kind" in raw.value else raw.value
    return value if isinstance(value, str) and value in TOPOLOGY_PARAMS else None


def check_path(key: str, tree: Raw, where: Where, what: str, all_topology_params: bool = False) -> list[str]:
    """The parts of a dotted key, if it exists in this document's schema; else a one-line error."""
    parts = key.split(".")
    valid = _valid_paths(tree, all_topology_params)
    if key in valid:
        if what == "sweep key" and parts[0] in NOT_SWEPT:
            raise error(where, "", f"{what} {key!r} cannot be swept; sweep keys name settings of a run "
                                   "(mode, topology.bw, jobs.0.workers, ...)")
        return parts
    hint = ""
    if parts[0] in LIST_SECTIONS and len(parts) > 1 and parts[1].isdigit():
        top = tree.value if tree.is_map else {}
        items = top.get(parts[0])
        count = len(items.value) if items is not None and items.is_list else 0
        if int(parts[1]) >= count:
            raise error(where, "", f"{what} {key!r} does not exist: {parts[0]} has {count} "
                                   f"entr{'y' if count == 1 else 'ies'} (numbered from 0)")
    if parts[0] in LIST_SECTIONS and len(parts) > 1 and not parts[1].isdigit():
        hint = f" (list entries are numbered: {parts[0]}.0.{'.'.join(parts[1:])})"
    if not hint:
        hint = suggest(key, valid)
        if not hint:
            hint = suggest(key, [p for p in valid if p.rsplit(".", 1)[-1] == parts[-1]] or valid)
        if not hint:
            tails = [p for p in valid if p.endswith("." + parts[-1])]
            hint = f" (did you mean {tails[0]!r}?)" if tails else ""
    raise error(where, "", f"{what} {key!r} does not exist{hint}")


def set_path(tree: Raw, parts: list[str], value: Raw) -> None:
    """Put `value` at the dotted path (creating mappings on the way; a section written as its shorthand
    scalar becomes a mapping)."""
    node = tree
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if node.is_list:
            child = node.value[int(part)]
            if last:
                value.key_where = child.key_where
                node.value[int(part)] = value
                return
            node = child
            continue
        if not node.is_map:
            section = parts[depth - 1] if depth else ""
            short = SHORTHAND.get(section)
            node.value = {short: Raw(node.value, node.where, node.where)} if short and node.value is not None else {}
        if last:
            current = node.value.get(part)
            short = SHORTHAND.get(part) if depth == 0 else None
            if short and current is not None and current.is_map and not value.is_map and not value.is_list:
                current.value[short] = value          # `mode: pcn` keeps the mode's other keys
                value.key_where = value.where
                return
            value.key_where = value.where if current is None else current.key_where
            node.value[part] = value
            return
        child = node.value.get(part)
        if child is None:
            child = Raw({}, value.where, value.where)
            node.value[part] = child
        node = child


def normal(parts: list[str]) -> str:
    """The key a sweep or override really sets: `mode` is `mode.kind`."""
    if len(parts) == 1 and parts[0] in SHORTHAND:
        return f"{parts[0]}.{SHORTHAND[parts[0]]}"
    return ".".join(parts)


def covers(fixed: str, swept: str) -> bool:
    return swept == fixed or swept.startswith(fixed + ".")


ZIP = "+"                      # joins the dotted keys of a zipped sweep


def _targets(key: str) -> list[list[str]]:
    """The parts of each dotted key a sweep key names (several when zipped with ZIP)."""
    return [part.strip().split(".") for part in key.split(ZIP)]


@dataclass
class Sweep:
    key: str                   # as written
    targets: list[list[str]]   # the parts of each dotted key it sets (one, or several zipped with ZIP)
    values: list[Raw]
    where: Where

    @property
    def zipped(self) -> bool:
        return len(self.targets) > 1

    def settings(self, value: Raw) -> list[tuple[list[str], Raw]]:
        """(parts, value) for each key the sweep value sets."""
        return list(zip(self.targets, value.value)) if self.zipped else [(self.targets[0], value)]

    def normals(self) -> list[str]:
        return [normal(parts) for parts in self.targets]


def read_sweep(raw: Raw | None) -> list[Sweep]:
    if raw is None or raw.value is None:
        return []
    if not raw.is_map:
        raise error(raw.where, "sweep", "expected a mapping of dotted keys to lists of values, e.g. "
                                        "sweep: {mode: [ecn, pcn]}")
    return [_sweep_entry(key, values, values.key_where) for key, values in raw.value.items()]


def _sweep_entry(key: str, values: Raw, where: Where) -> Sweep:
    if not values.is_list:
        raise error(values.where, f"sweep.{key}", f"expected a list of values, e.g. [{fmt(values.value)}], "
                                                  f"got {fmt(values.value)}")
    if not values.value:
        raise error(values.where, f"sweep.{key}", "empty list; give at least one value (or remove the key)")
    if len(values.value) > MAX_RUNS:
        raise error(values.where, f"sweep.{key}", f"{len(values.value)} values; an experiment has at most "
                                                  f"{MAX_RUNS} runs")
    targets = _targets(key)
    if len(targets) > 1 and not all(all(targets_part) for targets_part in targets):
        raise error(where, f"sweep.{key}", f"a zipped sweep key joins dotted keys with {ZIP!r}, e.g. "
                                           "jobs.0.compression+jobs.0.compression_ratio; one of them is empty")
    seen: list[Any] = []
    items = []
    for item in values.value:
        if len(targets) > 1 and not (item.is_list and len(item.value) == len(targets)):
            raise error(item.where, f"sweep.{key}", f"each value of a sweep of {len(targets)} keys is a list of "
                                                    f"{len(targets)} values, one per key, got "
                                                    + (f"{len(item.value)}" if item.is_list else fmt(item.plain())))
        plain = item.plain()
        if plain in seen:
            raise error(item.where, f"sweep.{key}", f"value {_shown(plain)} is listed twice")
        seen.append(plain)
        items.append(_with_via(item, "sweep"))
    return Sweep(key, targets, items, where)


def _shown(value: Any) -> str:
    """A sweep value as the file writes it (a zipped point: [topk, 0.001, false])."""
    if isinstance(value, list):
        return "[" + ", ".join(v if isinstance(v, str) else _shown(v) for v in value) + "]"
    return ("true" if value else "false") if isinstance(value, bool) else fmt(value)


def _with_via(raw: Raw, via: str) -> Raw:
    def walk(r: Raw) -> Raw:
        w = Where(r.where.source, r.where.line, via)
        if r.is_map:
            value: Any = {k: walk(v) for k, v in r.value.items()}
        elif r.is_list:
            value = [walk(v) for v in r.value]
        else:
            value = r.value
        return Raw(value, w, Where(r.key_where.source, r.key_where.line, via))
    return walk(raw)


def apply_override(item: str, tree: Raw, sweeps: list[Sweep]) -> tuple[Raw, list[Sweep]]:
    """One `--set key=value`: the document with it applied, and the sweeps left (a key set is no longer
    swept; `sweep.KEY=` adds, replaces or removes a sweep)."""
    where = Where(f"--set {item}")
    if "=" not in item:
        raise error(where, "", "expected key=value, e.g. --set mode=pcn or --set jobs.0.workers=4")
    key, text = item.split("=", 1)
    key = key.strip()
    if not key:
        raise error(where, "", "expected key=value; the key is empty")
    value = parse_scalar(text, where)
    if key == "sweep":
        new = Raw({"sweep": value}, where)
        return tree, read_sweep(new.value["sweep"])
    if key.startswith("sweep."):
        sweep_key = key[len("sweep."):]
        if value.value is None:                      # --set sweep.mode=  removes that sweep
            named = {normal(parts) for parts in _targets(sweep_key)}
            return tree, [s for s in sweeps if set(s.normals()) != named]
        entry = _sweep_entry(sweep_key, value, where)
        for parts in entry.targets:
            check_path(".".join(parts), tree, where, "sweep key", all_topology_params=True)
        kept = [s for s in sweeps if set(s.normals()) != set(entry.normals())]   # a zip's keys in any order
        return tree, kept + [entry]
    parts = check_path(key, tree, where, "key")
    fixed = normal(parts)
    for s in sweeps:
        hit = [k for k in s.normals() if covers(fixed, k)]
        if s.zipped and hit and len(hit) < len(s.targets):
            raise error(where, "", f"{key} is one key of the zipped sweep {s.key!r}; its points set the keys "
                                   f"together: give them anew, --set 'sweep.{s.key}=[[...], [...]]', or end "
                                   f"the sweep, --set sweep.{s.key}=")
    set_path(tree, parts, value)
    # A key fixed on the command line is no longer swept.
    kept = [s for s in sweeps if not any(covers(fixed, key) for key in s.normals())]
    return tree, kept


def check_swept_base(tree: Raw, sweep: Sweep) -> None:
    """The file's own value of a swept key is replaced in every run, but a typo there is still one."""
    for key in sweep.normals():
        _check_base(tree, key.split("."))


def _check_base(tree: Raw, parts: list[str]) -> None:
    node = tree
    for depth, part in enumerate(parts):
        if node.is_list and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
        elif node.is_map and part in node.value:
            node = node.value[part]
        elif not (depth == 1 and not node.is_map and SHORTHAND.get(parts[0]) == part):  # `mode: pcn`
            return                                                # not in the file: nothing to check
    if parts[0] == "topology" and len(parts) == 2:
        keys = [k for params in (section_keys("topology"), *map(by_name, TOPOLOGY_PARAMS.values()))
                for k in [params.get(parts[1])] if k is not None]
    elif parts[0] in LIST_SECTIONS and len(parts) == 3:
        keys = [section_keys(parts[0]).get(parts[2])]
    else:
        keys = [section_keys(parts[0] if len(parts) == 2 else "").get(parts[-1])]
    if keys and keys[0] is not None and keys[0].type not in ("hosts", "section", "list", "sweep"):
        convert(keys[0], node, ".".join(parts))


def label(value: Any, index: int) -> str:
    """A sweep value as a run's name shows it (index: its place in the sweep list)."""
    if isinstance(value, bool):
        text = "on" if value else "off"
    elif isinstance(value, float):
        text = f"{value:g}"
    elif value is None:
        text = "null"
    elif isinstance(value, list) and all(not isinstance(v, (list, dict)) for v in value):
        text = "+".join(label(v, index) for v in value)
    elif isinstance(value, (list, dict)):
        kind = value.get("kind") if isinstance(value, dict) else None
        text = kind if isinstance(kind, str) else f"#{index + 1}"
    else:
        text = str(value)
    return re.sub(r"[^A-Za-z0-9._+#-]", "-", text)


def labels(sweeps: list[Sweep]) -> list[str]:
    """Each sweep's label in run names: the key's last part (`workers`, `mode` for `mode.kind`), or the whole
    key when two sweeps would share it."""
    def short(parts: list[str]) -> str:
        if len(parts) > 1 and parts[-1] == "kind" and not parts[-2].isdigit():
            return parts[-2]
        return parts[-1]
    shorts = [ZIP.join(short(parts) for parts in s.targets) for s in sweeps]
    return [sh if shorts.count(sh) == 1 else s.key for sh, s in zip(shorts, sweeps)]
