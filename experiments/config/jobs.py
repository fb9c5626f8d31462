"""The `jobs:` and `background:` lists placed on a run's topology: host names, roles and counts resolved
to hosts, each job's PS, workers and kind-specific settings checked, one background flow per (src, dst)
pair, named."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from pcnlab.controller.dataplane import MAX_JOB_ID
from pcnlab.controller.modes import ANNOUNCE_MODES
from pcnlab.errors import UsageError
from pcnlab.experiments.config.convert import (convert, error, first_where, fmt, list_section, mapped_items, suggest,
                                                value_of)
from pcnlab.experiments.config.runs import (BackgroundFlowConfig, JobConfig, ModeConfig, SwitchConfig, TopologyConfig,
                                            link_limit)
from pcnlab.experiments.config.limits import MAX_FLOWS
from pcnlab.experiments.config.schema import CONTAINER_KINDS, JOB_KINDS, LTP_KINDS, SECTIONS, TRAIN_KINDS, section_keys
from pcnlab.experiments.config.yamlpos import Raw, Where
from pcnlab.workloads.compression_methods import error_feedback_problem
from pcnlab.workloads.containers import DEFAULT_IMAGE, ContainerSpec, podman_available
from pcnlab.workloads.images import image_exists
from pcnlab.workloads.netutil import available_cc, kernel_has_cc


def topology_summary(topology: TopologyConfig) -> str:
    roles = "; ".join(f"{role}: {' '.join(members)}" for role, members in topology.roles.items())
    return f"the {topology.kind} topology has hosts {topology.hosts[0]}..{topology.hosts[-1]} ({roles})"


def resolve_hosts(raw: Raw, path: str, topology: TopologyConfig, allow_count: bool = False,
                  pool: tuple[str, ...] = (), pool_what: str = "") -> tuple[str, ...]:
    """Host names from a host, a role, a list of hosts and roles, or (allow_count) a count from `pool`."""
    value = raw.value
    if allow_count and isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != int(value) or value < 1:
            raise error(raw.where, path, f"a count of hosts must be a whole number of at least 1, got {fmt(value)}")
        if value > len(pool):
            raise error(raw.where, path, f"{int(value)} hosts asked for, but {pool_what} has only {len(pool)} "
                                         f"({', '.join(pool) or 'none'}); ask for fewer, list hosts, "
                                         "or enlarge the topology")
        return tuple(pool[: int(value)])
    items = value if raw.is_list else [raw]
    if raw.is_list and not items:
        raise error(raw.where, path, "empty list; give at least one host or role")
    out: list[str] = []
    for item in items:
        name = item.value
        if not isinstance(name, str):
            allowed = "a count, " if allow_count else ""
            raise error(item.where, path, f"expected {allowed}a host name (e.g. {topology.hosts[0]}) or a role "
                                          f"({', '.join(topology.roles)}), got {fmt(name)}")
        if name in topology.roles:
            members = topology.roles[name]
        elif name in topology.hosts:
            members = (name,)
        else:
            hint = suggest(name, list(topology.roles) + list(topology.hosts))
            raise error(item.where, path, f"{name!r} is not a host or role in the topology{hint}; "
                                          f"{topology_summary(topology)}")
        for host in members:
            if host in out:
                raise error(item.where, path, f"host {host} is listed twice")
            out.append(host)
    return tuple(out)


@dataclass(frozen=True)
class ContainerDefault:
    """The experiment's `containers` section (build.py): its values, and where the file gave each."""

    values: dict
    wheres: dict
    where: Where


def jobs(raw: Raw | None, topology: TopologyConfig, mode: ModeConfig,
         containers: ContainerDefault | None = None) -> tuple[JobConfig, ...]:
    items = list_section(raw, "jobs", f"jobs (each item `- kind: {'|'.join(JOB_KINDS)} ...`)")
    if items is None:
        return ()
    if len(items) > MAX_JOB_ID:
        raise error(raw.where, "jobs", f"{len(items)} jobs; the data plane tells at most {MAX_JOB_ID} apart")
    keys = section_keys("jobs")
    out: list[JobConfig] = []
    for index, (path, item, present) in enumerate(mapped_items(items, "jobs", keys, "kind: ..., workers: ...")):
        if "kind" not in present:
            raise error(item.where, path, f"missing key 'kind'; choose one of {', '.join(JOB_KINDS)}")
        kind = convert(keys["kind"], present["kind"], f"{path}.kind")
        # Keys of other kinds are refused, unless the kind comes from a sweep or --set: then the file's
        # keys serve the runs they apply to and are ignored in the others.
        kind_where = present["kind"].where
        lenient = kind_where.via == "sweep" or kind_where.line is None
        for name, child in present.items():
            key = keys[name]
            if key.applies and kind not in key.applies and not lenient:
                why = (f"a {kind} job has no PyTorch processes to run in a container (it runs in its hosts); "
                       if key.applies == CONTAINER_KINDS else f"applies to {' and '.join(key.applies)} jobs, not "
                                                              f"to a {kind} job; ")
                raise error(child.key_where, f"{path}.{name}", why + "remove it")
        values = {k.name: value_of(k, present, path) for k in SECTIONS["jobs"]
                  if k.type != "hosts" and k.name not in ("name", "kind")}
        name = value_of(keys["name"], present, path) if "name" in present else f"job{index + 1}"
        if any(j.name == name for j in out):
            raise error(first_where(present.get("name"), fallback=item.where), f"{path}.name",
                        f"job name {name!r} is used twice; give each job its own name")
        file_pattern = values.pop("pattern")
        pattern = file_pattern if kind == "generator" else kind
        ps, workers = _placement(item, present, path, kind, pattern, lenient, topology)

        _transport(values, present, path, item, kind, pattern)
        problem = error_feedback_problem(values["compression"], values["error_feedback"]) \
            if kind in TRAIN_KINDS else None
        if problem:
            raise error(first_where(present.get("error_feedback"), present.get("compression"), fallback=item.where),
                        f"{path}.error_feedback", problem)
        if values["cc"] == "dctcp" and not values["ecn"]:
            raise error(first_where(present.get("ecn"), present.get("cc"), fallback=item.where), f"{path}.ecn",
                        "dctcp needs ECN; set ecn: true or choose reno, cubic or bbr")
        _check_kernel_cc(values["cc"], first_where(present.get("cc"), present.get("transport"), fallback=item.where),
                         f"{path}.{'cc' if 'cc' in present else 'transport'}", ltp=kind in LTP_KINDS)
        if kind == "generator" and values["period_ms"] > 0 and values["jitter_ms"] >= values["period_ms"]:
            raise error(first_where(present.get("jitter_ms"), fallback=item.where), f"{path}.jitter_ms",
                        f"{values['jitter_ms']:g} ms is not below period_ms ({values['period_ms']:g} ms); "
                        "bursts would overlap")
        if kind in CONTAINER_KINDS:
            wheres = _inherit(values, present, containers)
            if kind == "torchrun":
                values["argv"] = _program(values["argv"], present, path, item, in_image=values["image"] is not None)
                _pattern(values["iteration_regex"], present, path)
            _container(values, wheres, path)
        else:
            values.update(image=None, cpus=None, memory=None)
        if values["reply_bytes"] is None:
            values["reply_bytes"] = values["burst_bytes"]
        if values["pcn_start"] == "auto":
            values["pcn_start"] = mode.kind in ANNOUNCE_MODES
        out.append(JobConfig(id=index + 1, name=name, kind=kind, pattern=pattern, ps=ps, workers=workers, **values))
    return tuple(out)


def _transport(values: dict, present: dict[str, Raw], path: str, item: Raw, kind: str, pattern: str) -> None:
    """Resolve the job's transport in `values`: tcp-<cc> becomes tcp with that cc; ltp only where there
    is a PS and the gradients travel as they are."""
    if kind not in LTP_KINDS:          # a ring (its kind swept or --set): the key serves the other runs
        values["transport"] = "tcp"
        return
    where = first_where(present.get("transport"), fallback=item.where)
    transport = values["transport"]
    if transport.startswith("tcp-"):
        cc = transport[len("tcp-"):]
        chosen_here = where.via != "sweep" and where.line is not None   # not a sweep's or --set's value
        if "cc" in present and values["cc"] != cc and chosen_here:
            raise error(present["cc"].where, f"{path}.cc", f"cc {values['cc']} disagrees with transport "
                                                           f"{transport} (which means cc {cc}); remove cc or "
                                                           "make them agree")
        values["cc"], values["transport"] = cc, "tcp"
    if values["transport"] == "ltp":
        if pattern != "ps":
            raise error(where, f"{path}.transport", "ltp carries a parameter server's gradients and a ring "
                                                    "pattern has no PS; use transport: tcp")
        if values.get("compression", "none") != "none":
            raise error(first_where(present.get("compression"), fallback=where), f"{path}.compression",
                        "ltp sends the gradients' own float32 values; use compression: none with ltp, or a "
                        "tcp transport with compression")


def _program(argv: tuple[str, ...], present: dict[str, Raw], path: str, item: Raw,
             in_image: bool = False) -> tuple[str, ...]:
    """A torchrun job's program: there, with a script's path made absolute (the ranks run elsewhere).
    A program that is not a script, run in a container, is the image's: this machine's PATH says nothing."""
    where = first_where(present.get("argv"), fallback=item.where)
    if not argv:
        raise error(where, f"{path}.argv", "a torchrun job needs the program its ranks run, e.g. "
                                           "argv: [examples/ddp_train.py, --steps, 100]")
    first = argv[0]
    if first.endswith(".py"):
        script = Path(first).expanduser()
        if not script.is_file():
            raise error(where, f"{path}.argv", f"script {first} does not exist (relative to {Path.cwd()}, the "
                                               "current folder); give its path")
        return (str(script.resolve()), *argv[1:])
    if not in_image and not shutil.which(first):
        raise error(where, f"{path}.argv", f"program {first!r} is not on PATH nor a file; give its path, or a "
                                           ".py script")
    return argv


def _inherit(values: dict, present: dict[str, Raw], containers: ContainerDefault | None) -> dict[str, Where]:
    """A PyTorch job's image, cpus and memory: its own where it gives them (`image: null`: in its hosts),
    else the experiment's `containers`; where each came from, for the errors."""
    wheres = {k: present[k].where for k in ("image", "cpus", "memory") if k in present}
    if containers is None or ("image" in present and values["image"] is None):
        return wheres
    for key in ("image", "cpus", "memory"):     # each key the job leaves out: the experiment's
        if key not in present:
            values[key] = containers.values[key]
            wheres[key] = containers.wheres.get(key, containers.where)
    return wheres


def _container(values: dict, wheres: dict[str, Where], path: str) -> None:
    """A job in containers: limits podman takes, podman able to run here, the image present (podman run
    never pulls: no registry need be reachable; the default image is built on first use). Known at
    --dry-run, so refused then; what the image holds is probed before the run (workloads/images.py)."""
    if values["image"] is None:
        for key in ("cpus", "memory"):
            if values[key] is not None:
                raise error(wheres[key], f"{path}.{key}", f"{key} limits a container; set image: too (e.g. image: "
                                                          f"{DEFAULT_IMAGE}, or containers: at the top) or remove it")
        return
    where = wheres["image"]
    try:
        ContainerSpec(values["image"], values["cpus"], values["memory"])
    except UsageError as exc:
        key = next((k for k in ("cpus", "memory") if str(exc).startswith(f"container {k}")), "image")
        raise error(wheres.get(key, where), f"{path}.{key}", str(exc)) from None
    why = podman_available(as_root=False)           # the run itself needs root, and says so
    if why is not None:
        raise error(where, f"{path}.image", f"cannot run containers here: {why}; or containers: null to run "
                                            "the jobs in their hosts")
    # root's images are the ones a run sees (podman keeps a store per user); the run probes every image again
    if values["image"] != DEFAULT_IMAGE and os.geteuid() == 0 and not image_exists(values["image"]):
        raise error(where, f"{path}.image", f"image {values['image']} is not on this machine: build or load it "
                                            f"here (podman images lists them; `make image` builds {DEFAULT_IMAGE})")


def _pattern(pattern: str | None, present: dict[str, Raw], path: str) -> None:
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise error(present["iteration_regex"].where, f"{path}.iteration_regex",
                    f"not a regular expression ({exc}); e.g. '^step [0-9]+'") from None


def _check_kernel_cc(cc: str, where, path: str, ltp: bool = False) -> None:
    if not kernel_has_cc(cc):
        others = ", ".join(available_cc()) or "none"
        raise error(where, path, f"congestion control {cc} is not in this machine's kernel (it has {others}); "
                                 f"choose one of those{' or transport: ltp' if ltp else ''}")


def _placement(item: Raw, present: dict[str, Raw], path: str, kind: str, pattern: str, lenient: bool,
               topology: TopologyConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A job's PS hosts (none for a ring) and workers."""
    ps: tuple[str, ...] = ()
    if pattern == "ps":
        if "ps" in present:
            ps = resolve_hosts(present["ps"], f"{path}.ps", topology)
        elif "ps" in topology.roles:
            ps = topology.roles["ps"]
        else:
            raise error(item.where, path, f"missing key 'ps': this {topology.kind} topology has no role "
                                          f"'ps'; name the PS host (roles: {', '.join(topology.roles)})")
        if kind == "generator" and len(ps) != 1:
            raise error(present["ps"].where, f"{path}.ps", f"a generator has exactly one PS host, "
                                                           f"got {len(ps)} ({', '.join(ps)})")
    elif "ps" in present and not lenient:
        raise error(present["ps"].key_where, f"{path}.ps", "a ring has no PS; remove ps "
                                                          "(every host is a worker)")
    if "pool" in present:
        pool = resolve_hosts(present["pool"], f"{path}.pool", topology)
        pool_what = f"{path}.pool"
    elif "workers" in topology.roles:
        pool, pool_what = topology.roles["workers"], f"role 'workers' of the {topology.kind} topology"
    else:
        # A ps key ignored in this run (a swept kind) still keeps its hosts out of the pool, so the
        # runs of the sweep use the same workers.
        no_pool = ps or (resolve_hosts(present["ps"], f"{path}.ps", topology) if "ps" in present else ())
        pool = tuple(h for h in topology.hosts if h not in no_pool)
        pool_what = f"the {topology.kind} topology (every host but the PS)"
    if "workers" in present:
        workers = resolve_hosts(present["workers"], f"{path}.workers", topology, allow_count=True, pool=pool,
                                pool_what=pool_what)
    elif "workers" in topology.roles:
        workers = topology.roles["workers"]
    else:
        raise error(item.where, path, f"missing key 'workers': give a count, hosts or a role "
                                      f"({topology_summary(topology)})")
    workers_where = first_where(present.get("workers"), fallback=item.where)
    both = [h for h in workers if h in ps]
    if both:
        raise error(workers_where, f"{path}.workers", f"{', '.join(both)} is this job's PS and cannot also "
                                                      "be a worker")
    if not workers:
        raise error(workers_where, f"{path}.workers", "no worker hosts; a job needs at least one")
    if pattern == "ring" and len(workers) < 2:
        raise error(workers_where, f"{path}.workers", f"a ring needs at least 2 workers, got "
                                                      f"{len(workers)} ({', '.join(workers)})")
    return ps, workers


def flows(raw: Raw | None, topology: TopologyConfig, switch: SwitchConfig) -> tuple[BackgroundFlowConfig, ...]:
    items = list_section(raw, "background", "flows (each item `- src: ... dst: ...`)")
    if items is None:
        return ()
    keys = section_keys("background")
    limit, why = link_limit(switch)
    out: list[BackgroundFlowConfig] = []
    for path, item, present in mapped_items(items, "background", keys, "src: ..., dst: ..."):
        for required in ("src", "dst"):
            if required not in present:
                raise error(item.where, path, f"missing key {required!r}; give a host or a role "
                                              f"({topology_summary(topology)})")
        srcs = resolve_hosts(present["src"], f"{path}.src", topology)
        dsts = resolve_hosts(present["dst"], f"{path}.dst", topology)
        count = len(out) + len(srcs) * len(dsts) - len(set(srcs) & set(dsts))
        if count > MAX_FLOWS:
            raise error(item.where, path, f"{count} background flows so far (one per src x dst pair); one machine "
                                          f"runs at most {MAX_FLOWS}")
        pairs = [(s, d) for s in srcs for d in dsts if s != d]
        if not pairs:
            raise error(present["dst"].where, f"{path}.dst", "a flow needs a receiver other than its sender")
        cc = value_of(keys["cc"], present, path)
        ecn = value_of(keys["ecn"], present, path)
        rate = value_of(keys["rate"], present, path)
        if cc == "dctcp" and not ecn:
            raise error(first_where(present.get("ecn"), fallback=item.where), f"{path}.ecn",
                        "dctcp needs ECN; set ecn: true or choose reno, cubic or bbr")
        _check_kernel_cc(cc, first_where(present.get("cc"), fallback=item.where), f"{path}.cc")
        if rate is not None and rate > limit:
            raise error(present["rate"].where, f"{path}.rate", f"{rate:g} Mbit/s is more than {why}; "
                                                               f"use at most {limit:g} Mbit/s")
        base = value_of(keys["name"], present, path) if "name" in present else None
        for n, (src, dst) in enumerate(pairs, start=1):
            name = (base if len(pairs) == 1 else f"{base}-{n}") if base else f"{src}-{dst}"
            taken = {f.name for f in out}
            unique, k = name, 2
            while unique in taken:
                if base and len(pairs) == 1:
                    raise error(present["name"].where, f"{path}.name", f"flow name {name!r} is used twice")
                unique, k = f"{name}-{k}", k + 1
            out.append(BackgroundFlowConfig(unique, src, dst, cc, ecn, rate))
    return tuple(out)
