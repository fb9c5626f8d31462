"""load_experiment: an experiment file read, its --set overrides applied, its sweep expanded into runs
(named from their values, repetitions outermost), each run's document checked and typed (build.py)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from pcnlab.errors import UsageError
from pcnlab.experiments.config.build import Context, build
from pcnlab.experiments.config.convert import error, first_where, fmt, mapping, suggest, value_of
from pcnlab.experiments.config.runs import Experiment, RunConfig
from pcnlab.experiments.config.limits import MAX_RUNS
from pcnlab.experiments.config.schema import section_keys
from pcnlab.experiments.config.sweeps import (Sweep, apply_override, check_path, check_swept_base, covers, label,
                                              labels, read_sweep, set_path)
from pcnlab.experiments.config.yamlpos import load_tree


def alone_variants(built: dict, fragments: list[str]) -> list[tuple[list[str], tuple, str | None]]:
    """A sweep point's runs before repetitions, each as (name fragments, jobs, the job it holds alone): the
    point itself and, with `alone: true` and several jobs, one per job with only that job (data-plane id 1),
    the rest of the network (topology, background, schedule, mode) as the point has it."""
    out = [(fragments, built["jobs"], None)]
    if built["alone"] and len(built["jobs"]) > 1:
        out += [(fragments + [f"alone={job.name}"], (replace(job, id=1),), job.name) for job in built["jobs"]]
    return out


def load_experiment(path: Path | str, overrides: Iterable[str] = ()) -> Experiment:
    """Read, validate and expand an experiment file. Every error is a one-line UsageError."""
    path = Path(path)
    overrides = tuple(overrides)
    tree = load_tree(path)
    source = str(path)
    if tree is None:
        raise UsageError(f"{source}:1: the file is empty; an experiment needs at least a topology "
                         "(see docs/yaml-reference.md)")
    if not tree.is_map:
        raise error(tree.where, "", f"expected a mapping of keys (name:, topology:, jobs:, ...) at the top "
                                    f"level, got {fmt(tree.value)}")
    mapping(tree, "", "", section_keys(""))            # unknown top-level keys first, with their lines
    sweeps = read_sweep(tree.value.pop("sweep", None))
    for item in overrides:
        tree, sweeps = apply_override(item, tree, sweeps)

    swept_topology = any(parts[0] == "topology" for s in sweeps for parts in s.targets)
    seen_keys: dict[str, Sweep] = {}
    for sweep in sweeps:
        if sweep.where.source.startswith("--set"):
            continue
        for parts in sweep.targets:
            check_path(".".join(parts), tree, sweep.where, "sweep key", all_topology_params=swept_topology)
    for sweep in sweeps:
        keys = sweep.normals()
        twice = [key for i, key in enumerate(keys) if key in keys[:i]]
        if twice:
            raise error(sweep.where, "", f"sweep key {sweep.key!r}: {twice[0]!r} appears twice in the zipped key; "
                                         "name each key once")
        for key in keys:
            for other, first in seen_keys.items():
                if covers(other, key) or covers(key, other):
                    raise error(sweep.where, "", f"sweep key {sweep.key!r} overlaps {first.key!r}; sweep each "
                                                 "setting once")
            seen_keys[key] = sweep
        check_swept_base(tree, sweep)

    ctx = Context(path.stem.removesuffix(".yaml"))
    top = tree.value
    repetitions = value_of(section_keys("")["repetitions"], top, "")
    points = math.prod(len(s.values) for s in sweeps) if sweeps else 1
    if points * repetitions > MAX_RUNS:
        where = sweeps[0].where if sweeps else tree.where
        raise error(where, "sweep", f"{points} sweep points x {repetitions} repetitions = "
                                    f"{points * repetitions} runs; at most {MAX_RUNS}")

    sweep_labels = labels(sweeps)
    runs: list[RunConfig] = []
    names: set[str] = set()
    for combo in itertools.product(*(range(len(s.values)) for s in sweeps)):
        point = tree.copy()
        sweep_values: dict[str, Any] = {}
        fragments = []
        for sweep, sweep_label, i in zip(sweeps, sweep_labels, combo):
            value = sweep.values[i].copy()
            for parts, one in sweep.settings(value):
                set_path(point, parts, one)
            sweep_values[sweep.key] = value.plain()
            fragments.append(f"{sweep_label}={label(value.plain(), i)}")
        built = build(point, ctx)
        for frags, jobs, alone in alone_variants(built, fragments):
            base_name = ",".join(frags) or "run"
            for rep in range(1, repetitions + 1):
                name = base_name if repetitions == 1 else (f"{base_name},rep={rep}" if frags else f"rep={rep}")
                unique, k = name, 2
                while unique in names:
                    unique, k = f"{name}-{k}", k + 1
                names.add(unique)
                runs.append(RunConfig(
                    experiment=built["name"], name=unique, index=len(runs), repetition=rep,
                    seed=built["seed"] + rep - 1, sweep=dict(sweep_values), topology=built["topology"],
                    switch=built["switch"], mode=built["mode"], telemetry=built["telemetry"], jobs=jobs,
                    background=built["background"], duration_s=built["duration_s"], warmup_s=built["warmup_s"],
                    description=built["description"], source=source, overrides=overrides,
                    fidelity=built["fidelity"], reference=built["reference"], schedule=built["schedule"],
                    time_scale=built["time_scale"], alone=alone))
    if len(runs) > MAX_RUNS:
        raise error(first_where(top.get("alone"), fallback=tree.where), "alone",
                    f"{len(runs)} runs with each job alone too; at most {MAX_RUNS}")
    # Repetitions outermost: each repetition runs every sweep point once before the next begins, so a
    # machine that drifts (load, heat) affects every point alike (interleaved, as benchmarks should be).
    runs = [replace(r, index=i) for i, r in enumerate(sorted(runs, key=lambda r: (r.repetition, r.index)))]
    first = runs[0]
    baseline = value_of(section_keys("")["baseline"], top, "")
    point_names = list(dict.fromkeys(r.name.rsplit(",rep=", 1)[0] for r in runs))
    shared_points = {r.name.rsplit(",rep=", 1)[0] for r in runs if r.alone is None}
    if baseline is not None and baseline not in point_names and len(shared_points) == 1:
        baseline = None  # a --set fixed the swept key: one point, nothing to compare
    if baseline is not None and baseline not in point_names:
        raise error(first_where(top.get("baseline"), fallback=tree.where), "baseline",
                    f"{baseline!r} is not a point of this sweep{suggest(baseline, point_names)}; "
                    f"the points are {', '.join(point_names)}")
    return Experiment(name=first.experiment, path=path, description=first.description, repetitions=repetitions,
                      sweep={s.key: tuple(v.plain() for v in s.values) for s in sweeps}, overrides=overrides,
                      _runs=tuple(runs), baseline=baseline)
