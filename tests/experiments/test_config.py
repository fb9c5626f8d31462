"""Experiment files: the shipped ones load and expand; every default is resolved as documented and the
typed configs carry what the data plane, the controller, the launcher and the topologies take."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import yaml

from config_files import MINIMAL, write_file

from pcnlab.experiments.config import Experiment, RunConfig, load_experiment
from pcnlab.experiments.config.limits import MAX_LINK_MBPS
from pcnlab.experiments.config.schema import TOPOLOGY_PARAMS
from pcnlab.topologies.topos import TOPOLOGIES

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
SHIPPED = ["smoke", "pcn-back-to-back", "ring-vs-ps", "burstiness", "scaling"]


# --- shipped experiments -------------------------------------------------------------------------

@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_experiment_loads_and_expands(name):
    exp = load_experiment(EXPERIMENTS / f"{name}.yaml")
    assert isinstance(exp, Experiment) and exp.name == name
    runs = exp.runs()
    assert runs and len({r.name for r in runs}) == len(runs)
    assert [r.index for r in runs] == list(range(len(runs)))
    for run in runs:
        data = run.to_dict()
        # plain data: YAML and JSON both write it, and it reads back into the same RunConfig
        assert yaml.safe_load(yaml.safe_dump(data)) == data
        json.dumps(data)
        assert RunConfig.from_dict(json.loads(json.dumps(data))) == run
        for mbps in run.topology.link_rates_mbps().values():
            assert 1 <= mbps <= MAX_LINK_MBPS


def test_shipped_run_counts_and_names():
    counts = {name: len(load_experiment(EXPERIMENTS / f"{name}.yaml").runs()) for name in SHIPPED}
    assert counts == {"smoke": 2, "pcn-back-to-back": 12, "ring-vs-ps": 4, "burstiness": 6, "scaling": 4}
    smoke = load_experiment(EXPERIMENTS / "smoke.yaml")
    assert [r.name for r in smoke.runs()] == ["mode=ecn", "mode=pcn"]
    assert smoke.runs()[0].duration_s <= 30 and smoke.runs()[0].switch.kind == "bmv2"
    assert any(j.kind == "generator" for j in smoke.runs()[0].jobs) and len(smoke.runs()[0].background) == 1


def test_pcn_back_to_back_is_the_papers_topology():
    exp = load_experiment(EXPERIMENTS / "pcn-back-to-back.yaml")
    runs = exp.runs()
    assert exp.repetitions == 3
    assert sorted({r.mode.kind for r in runs}) == ["droptail", "ecn", "pcn", "pcn-host"]
    run = runs[0]
    assert run.topology.kind == "tree"
    assert run.topology.queue == 60 and run.mode.K == 40 and run.mode.K_pre == 10
    assert len(run.topology.roles["background"]) == 6          # three per leaf
    assert run.jobs[0].ps == ("h1",) and run.jobs[0].workers == run.topology.roles["workers"]
    assert [f.dst for f in run.background] == ["h1"] * 6
    # names: mode, then repetition; seeds shared by the modes of a repetition
    assert runs[0].name == "mode=droptail,rep=1" and runs[-1].name == "mode=pcn-host,rep=3"
    assert {r.seed for r in runs if r.repetition == 2} == {exp.runs()[0].seed + 1}
    # the generator announces bursts only where the switch listens for them
    assert all(r.jobs[0].pcn_start == (r.mode.kind == "pcn-host") for r in runs)


def test_ltp_incast_paces_its_hosts_and_runs_its_switch_realtime():
    runs = load_experiment(EXPERIMENTS / "ltp-incast.yaml").runs()
    assert len(runs) == 12 and all(r.switch.pace_hosts and r.switch.realtime for r in runs)


def test_burstiness_paper_runs_its_switch_realtime():
    runs = load_experiment(EXPERIMENTS / "burstiness-paper.yaml").runs()
    assert len(runs) == 3 and all(r.switch.realtime and r.switch.kind == "bmv2" for r in runs)
    assert RunConfig.from_dict(json.loads(json.dumps(runs[0].to_dict()))) == runs[0]


def test_scaling_takes_the_first_n_workers():
    runs = load_experiment(EXPERIMENTS / "scaling.yaml").runs()
    assert [len(r.jobs[0].workers) for r in runs] == [1, 2, 4, 6]
    assert runs[1].jobs[0].workers == ("h2", "h3")
    assert [r.name for r in runs] == ["workers=1", "workers=2", "workers=4", "workers=6"]
    assert runs[0].sweep == {"jobs.0.workers": 1}


# --- defaults ------------------------------------------------------------------------------------

def test_every_default_is_resolved(tmp_path):
    run = load_experiment(write_file(tmp_path, MINIMAL)).runs()[0]
    assert run.experiment == "exp" and run.name == "run" and run.seed == 0 and run.repetition == 1
    assert run.topology.params == {"hosts": 3, "bw": 20.0, "queue": 60, "first_bw": 20.0}
    assert run.topology.queue_rates_pps() == {"bw": 1651, "first_bw": 1651}
    assert (run.switch.kind, run.switch.packet_log, run.switch.pcap, run.switch.pace_hosts, run.switch.realtime) == \
        ("bmv2", False, False, False, False)
    assert run.mode.kind == "droptail" and (run.mode.K, run.mode.K_pre) == (40, 10)
    assert run.mode.lead_us == "auto" and run.mode.guard_us == 1000
    assert run.jobs[0].burst_gap_us is None and run.jobs[0].burst_min_payload == 64
    assert run.telemetry.every == 1
    job = run.jobs[0]
    assert (job.id, job.name, job.pattern, job.ps, job.workers) == (1, "job1", "ps", ("h1",), ("h2", "h3"))
    assert job.reply_bytes == job.burst_bytes == 250_000 and job.pcn_start is False
    assert (job.cc, job.ecn) == ("cubic", True)
    assert (run.duration_s, run.warmup_s) == (30.0, 2.0)
    assert run.background == ()

    def no_none_but_rate(value, path=""):
        if isinstance(value, dict):
            for k, v in value.items():
                no_none_but_rate(v, f"{path}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                no_none_but_rate(v, f"{path}.{i}")
        else:
            assert value is not None or path.endswith((".rate", ".every", ".reference", ".burst_gap_us", ".K_behind")), path
    no_none_but_rate(run.to_dict())


def test_derived_defaults(tmp_path):
    text = """\
topology: {kind: dumbbell, left: 2, right: 1, bw: 30}
switch: bridge
jobs:
  - kind: ring
    pool: left
    workers: 2
background:
  - {src: left, dst: right, name: bg}
"""
    run = load_experiment(write_file(tmp_path, text)).runs()[0]
    assert run.topology.params["bottleneck_bw"] == 30.0                  # same as bw
    assert run.telemetry.every is None                                  # bridge: no telemetry
    assert run.jobs[0].workers == ("h1", "h2") and run.jobs[0].ps == ()
    assert [(f.name, f.src, f.dst) for f in run.background] == [("bg-1", "h1", "h3"), ("bg-2", "h2", "h3")]
    assert "ps" not in run.to_dict()["jobs"][0] and "burst_bytes" not in run.to_dict()["jobs"][0]


def test_job_spec_kwargs_match_the_launcher(tmp_path):
    specs = pytest.importorskip("pcnlab.workloads.specs")
    for name in SHIPPED:
        run = load_experiment(EXPERIMENTS / f"{name}.yaml").runs()[-1]
        for job in run.jobs:
            spec = specs.JobSpec(**job.job_spec_kwargs(run.seed))
            assert spec.workers == job.workers
        for flow in run.background:
            specs.FlowSpec(**flow.flow_spec_kwargs(run.duration_s))


def test_port_mode_kwargs_match_the_data_plane():
    dataplane = pytest.importorskip("pcnlab.controller.dataplane")
    for run in load_experiment(EXPERIMENTS / "pcn-back-to-back.yaml").runs():
        dataplane.PortMode(**run.mode.port_mode_kwargs())


def test_planner_kwargs_match_the_controller(tmp_path):
    windows = pytest.importorskip("pcnlab.controller.windows")
    run = load_experiment(EXPERIMENTS / "pcn-back-to-back.yaml", ["mode.lead_us=3000"]).runs()[0]
    assert windows.PlannerConfig(**run.mode.planner_kwargs()).lead_us == 3000
    run = load_experiment(EXPERIMENTS / "pcn-back-to-back.yaml").runs()[0]
    assert windows.PlannerConfig(**run.mode.planner_kwargs()).lead_us is None


def test_topology_parameters_match_the_topologies():
    assert list(TOPOLOGY_PARAMS) == list(TOPOLOGIES)
    for kind, cls in TOPOLOGIES.items():
        signature = [p for p in inspect.signature(cls.build).parameters if p != "self"]
        assert sorted(k.name for k in TOPOLOGY_PARAMS[kind]) == sorted(signature), kind


def test_host_queue_and_first_bw_reach_the_network(tmp_path):
    """switch.host_queue (fifo by default: existing experiments keep their host queues) and the star's
    first_bw (h1's link: a PS that pushes faster than its workers' links take gradients in)."""
    text = MINIMAL.replace("topology: star", "topology: {kind: star, hosts: 3, bw: 25, first_bw: 100}")
    run = load_experiment(write_file(tmp_path, text + "switch: {pace_hosts: true, host_queue: fair}\n")).runs()[0]
    assert run.switch.host_queue == "fair" and run.topology.params["first_bw"] == 100
    topo = run.topology.build(monitors=False)
    assert topo.linkInfo("h1", "s1")["bw"] == 100 and topo.linkInfo("h2", "s1")["bw"] == 25
    assert RunConfig.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    assert load_experiment(write_file(tmp_path, MINIMAL)).runs()[0].switch.host_queue == "fifo"


def test_ltp_synchronised_pushes_from_a_fast_fair_ps_into_a_quarter_burst_queue():
    runs = load_experiment(EXPERIMENTS / "ltp-synchronised.yaml").runs()
    assert [r.name for r in runs[:4]] == ["transport=ltp,rep=1", "transport=tcp-cubic,rep=1",
                                          "transport=tcp-reno,rep=1", "transport=tcp-bbr,rep=1"] and len(runs) == 8
    run = runs[0]
    assert run.switch.pace_hosts and run.switch.host_queue == "fair"
    params = run.topology.params
    assert params["first_bw"] > params["bw"] and params["first_bw"] < len(run.jobs[0].workers) * params["bw"]
    frames = len(run.jobs[0].workers) * 27          # digits-mlp: 27 full frames of gradients per worker
    assert run.jobs[0].model == "digits-mlp" and params["queue"] == frames // 4


def test_ltp_synchronised_generator_has_16_small_flows_into_a_quarter_burst_queue():
    runs = load_experiment(EXPERIMENTS / "ltp-synchronised-generator.yaml").runs()
    assert len(runs) == 8 and {(r.jobs[0].transport, r.jobs[0].cc) for r in runs} == {
        ("ltp", "cubic"), ("tcp", "cubic"), ("tcp", "reno"), ("tcp", "bbr")}
    run = runs[0]
    job, params = run.jobs[0], run.topology.params
    frames = -(-job.burst_bytes // 1448)            # full frames of one worker's burst
    assert len(job.workers) == 16 and frames == 7 and params["queue"] == len(job.workers) * frames // 4
    assert run.switch.host_queue == "fair" and params["first_bw"] >= len(job.workers) * params["bw"] / 2
