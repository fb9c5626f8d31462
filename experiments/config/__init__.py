"""Experiment files: the YAML schema, its validation, `--set` overrides and sweeps.

    exp = load_experiment("experiments/smoke.yaml", overrides=["duration_s=10"])
    for run in exp.runs():          # the sweep's cartesian product times the repetitions
        run.name                    # "mode=pcn" (or "mode=pcn,rep=2"), stable across loads
        run.seed                    # the file's seed + repetition - 1: the modes of one repetition share it
        run.to_dict()               # the resolved config (every default filled in), for the run folder

Every key, its type, unit, default and allowed values are in the key table (schema.py);
`reference_markdown()` renders them as the README's YAML reference (docs/yaml-reference.md, checked by a
test). Units are fixed by the key: link rates in Mbit/s, queue depths and thresholds in packets, times in
the unit their name ends with (`_s`, `_ms`, `_us`), sizes in bytes.

Every mistake a user can make in a file is a one-line `UsageError` (exit code 2) that starts with the file
and line (or the `--set` that caused it) and names the dotted key, what is wrong and what is allowed.
Nothing here starts a process or needs root, nor imports Mininet, finsy or the run ledger: topologies are
laid out (topologies/topos.py) only to learn their hosts and roles (each distinct topology once per load).

The package, in the order a document goes through it:

    yamlpos.py   the file as a plain tree that remembers where each key and value came from
    schema.py    limits, `Key`, the key table (SECTIONS, TOPOLOGY_PARAMS)
    runs.py      the typed configs: RunConfig and its sections (a schedule's Change), Experiment
    convert.py   raw YAML nodes to typed values; the one-line errors
    sweeps.py    dotted keys, --set overrides, the sweep section, run labels
    load.py      load_experiment: overrides, sweep expansion, run names and order
    build.py     one run's document, section by section, and the checks across sections
    timescale.py time_scale: the rates divided and the times multiplied (the key table's `scales` marks)
    jobs.py      jobs and background flows placed on the topology
    changes.py   the schedule section checked against the topology and the flows (`problems`)
    markdown.py  reference_markdown: docs/yaml-reference.md

Import the public entry points from here; everything else from the module that owns it.
"""

from pcnlab.experiments.config.load import load_experiment
from pcnlab.experiments.config.markdown import reference_markdown
from pcnlab.experiments.config.runs import Experiment, RunConfig

__all__ = ["Experiment", "RunConfig", "load_experiment", "reference_markdown"]
