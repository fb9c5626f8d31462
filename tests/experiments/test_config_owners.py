"""The experiment-file package against the modules that own its facts: the data plane's K_pre rule (one
check, with the file's line), the kinds, names and defaults the schema takes from the network, workloads,
controller and data plane, each distinct topology laid out once per load_experiment call (never cached
across calls), and a file checked without Mininet, finsy or the run ledger."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pcnlab.controller import dataplane, modes
from pcnlab.errors import UsageError
from pcnlab.experiments.config import build, load_experiment
from pcnlab.experiments.config.schema import JOB_KINDS, SECTIONS, TOPOLOGY_PARAMS, by_name
from pcnlab.topologies import topos
from pcnlab.workloads import catalog, compression_methods, specs
from pcnlab.workloads import process_config as workload_config
from pcnlab.workloads.ltp import earlyclose

GENERATOR = "jobs:\n  - {kind: generator, ps: h1, workers: 2}\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def test_k_pre_is_checked_by_the_data_planes_rule(tmp_path):
    # The data plane: K_pre <= K in the modes that have a K_pre; the others ignore it.
    for mode in modes.MODES:
        if mode in modes.K_PRE_MODES:
            with pytest.raises(UsageError, match=r"need 0 <= k_pre \(10\) <= k \(5\)"):
                dataplane.PortMode(mode, k=5, k_pre=10)
        else:
            assert dataplane.PortMode(mode, k=5, k_pre=10).k_pre == 10
    # The file: the same rule, at the line that set K (K_pre is the default 10).
    text = "topology: star\nmode:\n  kind: ecn\n  K: 5\n" + GENERATOR
    run = load_experiment(_write(tmp_path, text)).runs()[0]
    assert dataplane.PortMode(**run.mode.port_mode_kwargs()).k == 5
    for kind in modes.K_PRE_MODES:
        with pytest.raises(UsageError) as err:
            load_experiment(_write(tmp_path, text), overrides=[f"mode={kind}"])
        assert str(err.value) == (f"{tmp_path / 'exp.yaml'}:4: mode.K_pre: 10 is above K (5); K_pre must be at "
                                  "most K (it is the lower threshold used while a burst is expected)")


def test_the_schema_takes_its_lists_from_their_owners():
    assert by_name(SECTIONS["mode"])["kind"].choices is modes.MODES
    assert by_name(SECTIONS["switch"])["kind"].choices is topos.SWITCH_KINDS
    assert by_name(SECTIONS["jobs"])["model"].choices is catalog.MODELS
    assert by_name(SECTIONS["jobs"])["pattern"].choices is workload_config.BURST_PATTERNS
    assert by_name(SECTIONS["topology"])["kind"].choices == tuple(topos.TOPOLOGIES)
    assert by_name(SECTIONS["mode"])["K"].max == dataplane.MAX_QDEPTH
    # The file's job kinds are the launcher's, with the burst generator called a generator.
    assert JOB_KINDS == ("ps", "ring", "generator", "torchrun") and len(JOB_KINDS) == len(specs.JOB_KINDS)
    assert all(k.applies == workload_config.TRAIN_KINDS for k in SECTIONS["jobs"] if k.name in ("model", "lr"))
    # Host counts are bounded by what the topologies can build.
    assert all(k.max in (topos.MAX_HOSTS, topos.MAX_SWITCHES) for params in TOPOLOGY_PARAMS.values()
               for k in params if k.type == "int" and k.name != "queue")


def test_too_many_jobs_is_the_data_planes_limit(tmp_path):
    jobs = "".join(f"  - {{kind: generator, ps: h1, workers: [h2]}}\n" for _ in range(dataplane.MAX_JOB_ID + 1))
    with pytest.raises(UsageError, match=f"{dataplane.MAX_JOB_ID + 1} jobs; the data plane tells at most "
                                         f"{dataplane.MAX_JOB_ID} apart"):
        load_experiment(_write(tmp_path, "topology: star\njobs:\n" + jobs))


@pytest.fixture
def builds(monkeypatch) -> list:
    """Every topology load_experiment lays out, as (kind, hosts) (the real layouts, counted)."""
    calls = []
    real = build.layout_of

    def counted(kind, **params):
        calls.append((kind, params.get("hosts")))
        return real(kind, **params)

    monkeypatch.setattr(build, "layout_of", counted)
    return calls


def test_each_distinct_topology_is_built_once_per_load(tmp_path, builds):
    text = ("topology: {kind: star, hosts: 4}\n" + GENERATOR + "repetitions: 2\nsweep:\n  topology.hosts: [4, 6]\n"
            "  seed: [" + ", ".join(str(s) for s in range(50)) + "]\n")
    path = _write(tmp_path, text)
    runs = load_experiment(path).runs()
    assert len(runs) == 2 * 50 * 2
    assert sorted(builds) == [("star", 4), ("star", 6)]
    assert {len(r.topology.hosts) for r in runs} == {4, 6}
    assert runs[0].topology.roles is not runs[2].topology.roles    # each run has its own roles
    load_experiment(path)                                           # a new load builds them again
    assert len(builds) == 4


def test_a_thousand_runs_of_a_thousand_hosts_build_one_topology(tmp_path, builds):
    seeds = ", ".join(str(s) for s in range(1000))
    text = f"topology: {{kind: star, hosts: {topos.MAX_HOSTS}}}\n{GENERATOR}sweep:\n  seed: [{seeds}]\n"
    runs = load_experiment(_write(tmp_path, text)).runs()
    assert len(runs) == 1000 and len(runs[-1].topology.hosts) == topos.MAX_HOSTS
    assert builds == [("star", topos.MAX_HOSTS)]


def test_every_default_is_its_owners():
    """A default restated by hand drifts (burst_bytes was 250,000 in the schema and 1,000,000 in JobSpec):
    the schema, the workloads' specs and configs, the controller's models and the commands that start a
    controller without a file take each from its owner."""
    import argparse
    import inspect
    from dataclasses import fields

    from pcnlab.app.cli import build_parser
    from pcnlab.controller.lead import LeadConfig
    from pcnlab.controller.windows import GUARD_US, SPREAD, PlannerConfig, plan_window
    from pcnlab.experiments.config.runs import ModeConfig
    from pcnlab.experiments.run_controller import start_slice_controller

    def default(cls, name):
        return next(f.default for f in fields(cls) if f.name == name)

    mode, jobs = by_name(SECTIONS["mode"]), by_name(SECTIONS["jobs"])
    assert (mode["K"].default, mode["K_pre"].default) == (modes.K, modes.K_PRE)
    assert (dataplane.PortMode().k, dataplane.PortMode().k_pre) == (modes.K, modes.K_PRE)
    assert default(PlannerConfig, "k_pre") == default(LeadConfig, "k_pre") == modes.K_PRE
    assert (mode["kind"].default, dataplane.PortMode().mode) == (modes.DROPTAIL, modes.DROPTAIL)
    assert (mode["guard_us"].default, mode["announce_hold_us"].default) == (GUARD_US, dataplane.HOLD_US)
    assert (mode["drop_non_ect"].default, mode["count_announcements"].default) == \
        (dataplane.DROP_NON_ECT, dataplane.COUNT_ANNOUNCEMENTS)
    assert default(PlannerConfig, "spread") == inspect.signature(plan_window).parameters["spread"].default == SPREAD
    assert default(specs.JobSpec, "momentum") == default(workload_config.TrainConfig, "momentum") == \
        workload_config.MOMENTUM
    # Every mode key of the file, left out, is what the data plane and the planner do by themselves.
    assert dataplane.PortMode(**ModeConfig().port_mode_kwargs()) == dataplane.PortMode()
    assert PlannerConfig(**ModeConfig().planner_kwargs()) == PlannerConfig()
    assert (PlannerConfig().rtt_us, PlannerConfig().max_lead_share) == (LeadConfig().rtt_us, LeadConfig().max_share)
    # A slice's controller (pcnlab slice, pcnlab controller on a slice): the data plane's K and K_pre.
    slice_params = inspect.signature(start_slice_controller).parameters
    assert (slice_params["k"].default, slice_params["k_pre"].default) == (modes.K, modes.K_PRE)
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = " ".join(commands.choices["controller"].format_help().split())
    assert f"{modes.K} for a slice" in helps and f"{modes.K_PRE} for a slice" in helps
    assert ", ".join(modes.MODES) in helps
    # The jobs: the file's key -> its name in JobSpec and the processes' configs (where they differ).
    owned = {"burst_bytes": workload_config.BURST_BYTES, "ltp_deadline_ms": earlyclose.LTP_DEADLINE_MS,
             "ltp_theta_min": earlyclose.LTP_THETA_MIN, "compression_ratio": compression_methods.DEFAULT_RATIO,
             "error_feedback": compression_methods.DEFAULT_ERROR_FEEDBACK, "iterations": workload_config.ITERATIONS,
             "model": workload_config.MODEL, "scale": workload_config.PROFILE_SCALE, "batch": workload_config.BATCH,
             "lr": workload_config.LR, "eval_every": workload_config.EVAL_EVERY, "bucket_mb": workload_config.BUCKET_MB}
    spec_name = {"scale": "profile_scale"}
    for key, value in owned.items():
        name = spec_name.get(key, key)
        assert jobs[key].default == value == default(specs.JobSpec, name), key
        for cls in (workload_config.BurstConfig, workload_config.TrainConfig):
            if name in {f.name for f in fields(cls)}:
                assert default(cls, name) == value, (cls, key)
    assert workload_config.MODEL in catalog.MODELS
    payload = dataplane.BURST_MIN_PAYLOAD
    assert jobs["burst_min_payload"].default == dataplane.FlowClass(job=1).burst_min_payload == payload
    # G: left out, the data plane reports at the segmenter's REPORT_GAP_US and the gap is learned.
    assert jobs["burst_gap_us"].default is None and dataplane.FlowClass(job=1).burst_gap_us is None


def test_checking_a_file_imports_no_mininet_finsy_or_ledger():
    """Validating a YAML file needs neither the network nor the P4Runtime client nor the run ledger."""
    code = ("import sys; from pcnlab.experiments.config import load_experiment; "
            "runs = load_experiment('experiments/pcn-paper.yaml').runs(); "
            "print(len(runs), *sorted(m for m in sys.modules if m.split('.')[0] in ('mininet', 'finsy') "
            "or m == 'pcnlab.ledger'))")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    count, *loaded = out.stdout.split()
    assert int(count) > 0 and loaded == [], loaded
