"""Experiment files: the shipped ones load and expand; defaults, sweeps and overrides resolve as
documented; every malformed file in malformed/ is one line naming the file, the line and the problem."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pcnlab.errors import UsageError
from pcnlab.experiments.config import Experiment, RunConfig, load_experiment, reference_markdown
from pcnlab.experiments.config.schema import MAX_LINK_MBPS, TOPOLOGY_PARAMS
from pcnlab.topologies.topos import TOPOLOGIES

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
MALFORMED = Path(__file__).resolve().parent / "malformed"
SHIPPED = ["smoke", "pcn-back-to-back", "ring-vs-ps", "burstiness", "scaling"]


def _write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


MINIMAL = """\
topology: star
jobs:
  - kind: generator
    ps: h1
    workers: 2
"""


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


def test_ltp_incast_paces_its_hosts():
    runs = load_experiment(EXPERIMENTS / "ltp-incast.yaml").runs()
    assert len(runs) == 12 and all(r.switch.pace_hosts for r in runs)


def test_scaling_takes_the_first_n_workers():
    runs = load_experiment(EXPERIMENTS / "scaling.yaml").runs()
    assert [len(r.jobs[0].workers) for r in runs] == [1, 2, 4, 6]
    assert runs[1].jobs[0].workers == ("h2", "h3")
    assert [r.name for r in runs] == ["workers=1", "workers=2", "workers=4", "workers=6"]
    assert runs[0].sweep == {"jobs.0.workers": 1}


# --- defaults ------------------------------------------------------------------------------------

def test_every_default_is_resolved(tmp_path):
    run = load_experiment(_write(tmp_path, MINIMAL)).runs()[0]
    assert run.experiment == "exp" and run.name == "run" and run.seed == 0 and run.repetition == 1
    assert run.topology.params == {"hosts": 3, "bw": 20.0, "queue": 60}
    assert run.topology.queue_rates_pps() == {"bw": 1651}
    assert (run.switch.kind, run.switch.packet_log, run.switch.pcap, run.switch.pace_hosts) == \
        ("bmv2", False, False, False)
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
            assert value is not None or path.endswith((".rate", ".every", ".reference", ".burst_gap_us")), path
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
    run = load_experiment(_write(tmp_path, text)).runs()[0]
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


# --- sweeps --------------------------------------------------------------------------------------

def test_sweep_product_names_and_order(tmp_path):
    text = MINIMAL.replace("topology: star", "topology: {kind: star, hosts: 5}") + """\
repetitions: 2
seed: 10
sweep:
  mode: [ecn, pcn]
  jobs.0.workers: [2, 4]
  topology.bw: [10, 12.5]
"""
    runs = load_experiment(_write(tmp_path, text)).runs()
    assert len(runs) == 2 * 2 * 2 * 2
    # Repetitions outermost: every point of repetition 1 (first key slowest), then of repetition 2.
    assert runs[0].name == "mode=ecn,workers=2,bw=10,rep=1"
    assert runs[1].name == "mode=ecn,workers=2,bw=12.5,rep=1"
    assert runs[8].name == "mode=ecn,workers=2,bw=10,rep=2"
    assert runs[-1].name == "mode=pcn,workers=4,bw=12.5,rep=2"
    assert [r.seed for r in runs] == [10] * 8 + [11] * 8 and [r.index for r in runs] == list(range(16))
    assert runs[-1].jobs[0].workers == ("h2", "h3", "h4", "h5") and runs[-1].topology.params["bw"] == 12.5
    assert runs[-1].sweep == {"mode": "pcn", "jobs.0.workers": 4, "topology.bw": 12.5}
    # stable: the same file gives the same names and seeds
    again = load_experiment(tmp_path / "exp.yaml").runs()
    assert [(r.name, r.seed) for r in again] == [(r.name, r.seed) for r in runs]


def test_sweep_keeps_the_modes_other_keys(tmp_path):
    text = MINIMAL + "mode: {kind: ecn, K: 30, K_pre: 5}\nsweep:\n  mode: [ecn, pcn-host]\n"
    runs = load_experiment(_write(tmp_path, text)).runs()
    assert [(r.mode.kind, r.mode.K, r.mode.K_pre) for r in runs] == [("ecn", 30, 5), ("pcn-host", 30, 5)]


def test_sweeping_the_job_kind_keeps_keys_of_the_other_kinds(tmp_path):
    text = MINIMAL.replace("workers: 2", "workers: 2\n    burst_bytes: 5000\n    model: cnn") + \
        "sweep:\n  jobs.0.kind: [generator, ring, ps]\n"
    runs = load_experiment(_write(tmp_path, text)).runs()
    assert [r.name for r in runs] == ["kind=generator", "kind=ring", "kind=ps"]
    gen, ring, ps = (r.jobs[0] for r in runs)
    assert gen.ps == ("h1",) and gen.burst_bytes == 5000
    assert ring.ps == () and ring.workers == ("h2", "h3") and ring.model == "cnn"
    assert ps.ps == ("h1",) and ps.model == "cnn"
    # written in the file, the kind makes other kinds' keys a mistake
    with pytest.raises(UsageError, match=r"exp.yaml:4: jobs.0.ps: applies to ps and generator jobs, not to a ring job"):
        load_experiment(_write(tmp_path, text.replace("kind: generator", "kind: ring").split("sweep:")[0]))


def test_sweep_label_clash_uses_the_full_key(tmp_path):
    text = MINIMAL.replace("topology: star", "topology: {kind: star, hosts: 5}") + """\
  - kind: generator
    ps: h1
    workers: [h4, h5]
sweep:
  jobs.0.iterations: [1, 2]
  jobs.1.iterations: [3]
"""
    names = [r.name for r in load_experiment(_write(tmp_path, text)).runs()]
    assert names == ["jobs.0.iterations=1,jobs.1.iterations=3", "jobs.0.iterations=2,jobs.1.iterations=3"]


def test_sweep_of_host_lists_is_named_by_its_hosts(tmp_path):
    text = MINIMAL.replace("topology: star", "topology: {kind: star, hosts: 4}") + \
        "sweep:\n  jobs.0.workers: [[h2, h3], [h2, h3, h4]]\n"
    assert [r.name for r in load_experiment(_write(tmp_path, text)).runs()] == \
        ["workers=h2+h3", "workers=h2+h3+h4"]


# --- overrides -----------------------------------------------------------------------------------

def test_overrides_set_values_and_fix_swept_keys():
    exp = load_experiment(EXPERIMENTS / "pcn-back-to-back.yaml",
                          ["mode=pcn", "repetitions=1", "mode.K_pre=5", "duration_s=10", "telemetry=off",
                           "jobs.0.workers=[h2, h7]"])
    runs = exp.runs()
    assert [r.name for r in runs] == ["run"] and exp.sweep == {}
    run = runs[0]
    assert (run.mode.kind, run.mode.K_pre, run.duration_s, run.telemetry.every) == ("pcn", 5, 10.0, None)
    assert run.jobs[0].workers == ("h2", "h7")
    assert run.overrides == ("mode=pcn", "repetitions=1", "mode.K_pre=5", "duration_s=10", "telemetry=off",
                             "jobs.0.workers=[h2, h7]")
    assert run.to_dict()["overrides"][0] == "mode=pcn"


def test_overrides_change_the_sweep():
    exp = load_experiment(EXPERIMENTS / "smoke.yaml", ["sweep.mode=[droptail, pcn-host]", "sweep.topology.bw=[10, 20]"])
    assert [r.name for r in exp.runs()] == ["mode=droptail,bw=10", "mode=droptail,bw=20",
                                            "mode=pcn-host,bw=10", "mode=pcn-host,bw=20"]
    assert [r.name for r in load_experiment(EXPERIMENTS / "smoke.yaml", ["sweep="]).runs()] == ["run"]
    assert [r.name for r in load_experiment(EXPERIMENTS / "smoke.yaml", ["sweep.mode="]).runs()] == ["run"]


@pytest.mark.parametrize("item, fragment", [
    ("mode.kpre=3", "--set mode.kpre=3: key 'mode.kpre' does not exist (did you mean 'mode.K_pre'?)"),
    ("mode=fifo", "--set mode=fifo: mode.kind: unknown mode 'fifo'"),
    ("topology.bw=10Mbps", "--set topology.bw=10Mbps: topology.bw: expected a number in Mbit/s"),
    ("topology.bw=400", "--set topology.bw=400: topology.bw: 400 Mbit/s is more than BMv2"),
    ("mode.K_pre=45", "--set mode.K_pre=45: mode.K_pre: 45 is above K (40)"),
    ("jobs.0.workers=[h2, h99]", "'h99' is not a host or role"),
    ("jobs.4.workers=2", "--set jobs.4.workers=2: key 'jobs.4.workers' does not exist: jobs has 1 entry"),
    ("repetitions", "--set repetitions: expected key=value"),
    ("sweep.mode=[]", "--set sweep.mode=[]: sweep.mode: empty list"),
    ("sweep.mode.kpre=[1]", "sweep key 'mode.kpre' does not exist"),
    ("duration_s=[1", "--set duration_s=[1: the value is not valid YAML"),
])
def test_bad_overrides_name_the_set(item, fragment):
    with pytest.raises(UsageError) as err:
        load_experiment(EXPERIMENTS / "smoke.yaml", [item])
    message = str(err.value)
    assert fragment in message and "\n" not in message
    assert message.startswith(f"--set {item}")


def test_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such experiment file"):
        load_experiment(tmp_path / "nope.yaml")


def test_yaml_1_1_spellings_are_read_as_meant(tmp_path):
    text = MINIMAL + "mode: {kind: ecn, K: 4e1}\njobs.0.x: 1\n"
    with pytest.raises(UsageError, match=r"exp.yaml:7: jobs.0.x: unknown key \(dotted keys are for sweep"):
        load_experiment(_write(tmp_path, text))
    text = MINIMAL.replace("workers: 2", "workers: 2\n    burst_bytes: 1e6\n    ecn: off")
    text += "mode: {kind: ecn, K: 4e1}\n"
    run = load_experiment(_write(tmp_path, text)).runs()[0]
    assert run.jobs[0].burst_bytes == 1_000_000 and run.jobs[0].ecn is False and run.mode.K == 40


def test_merge_keys_and_anchors(tmp_path):
    text = """\
topology: {kind: star, hosts: 4}
defaults: &gen
  kind: generator
  ps: h1
"""
    with pytest.raises(UsageError, match="exp.yaml:2: defaults: unknown key"):
        load_experiment(_write(tmp_path, text))
    text = """\
topology: {kind: star, hosts: 4}
jobs:
  - &gen {kind: generator, ps: h1, workers: [h2]}
  - {<<: *gen, name: second, workers: [h3, h4]}
"""
    jobs = load_experiment(_write(tmp_path, text)).runs()[0].jobs
    assert [(j.name, j.ps, j.workers) for j in jobs] == [("job1", ("h1",), ("h2",)), ("second", ("h1",), ("h3", "h4"))]


# --- the malformed corpus ------------------------------------------------------------------------

def _cases():
    out = []
    for path in sorted(MALFORMED.glob("*.yaml")):
        first = path.read_text().split("\n", 1)[0]
        m = re.fullmatch(r"# expect: (\d+): (.+)", first)
        if path.stat().st_size and m is None:
            raise AssertionError(f"{path.name}: first line must be '# expect: LINE: FRAGMENT'")
        out.append((path, int(m.group(1)), m.group(2)) if m else (path, 1, "the file is empty"))
    return out


EMPTY_CASE = MALFORMED / "empty-file.yaml"


def test_the_corpus_is_large_enough():
    assert len(_cases()) >= 20


@pytest.mark.parametrize("path, line, fragment", _cases(), ids=lambda v: v.name if isinstance(v, Path) else "")
def test_malformed_file(path, line, fragment):
    with pytest.raises(UsageError) as err:
        load_experiment(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message, message


ENTRY = """
import json, sys
from pcnlab.errors import PcnLabError
from pcnlab.experiments.config import load_experiment
out = []
for path in sys.argv[1:]:
    try:
        load_experiment(path)
        out.append([path, None, None])
    except PcnLabError as exc:
        out.append([path, exc.exit_code, f"pcnlab: {exc}"])
print(json.dumps(out))
"""


def test_malformed_files_print_one_line_without_traceback():
    """As the CLI does it: catch PcnLabError and print `pcnlab: <msg>`; anything else would crash with a
    traceback and fail this test."""
    paths = [str(p) for p, _, _ in _cases()]
    proc = subprocess.run([sys.executable, "-c", ENTRY, *paths], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    results = json.loads(proc.stdout)
    for path, code, line in results:
        assert code == 2, path
        assert line.count("\n") == 0 and line.startswith(f"pcnlab: {path}:"), line


# --- the reference -------------------------------------------------------------------------------

def test_yaml_reference_is_up_to_date():
    doc = ROOT / "docs" / "yaml-reference.md"
    assert doc.read_text() == reference_markdown() + "\n", \
        "regenerate: .venv/bin/python -c 'from pcnlab.experiments.config import reference_markdown as r; " \
        "open(\"docs/yaml-reference.md\", \"w\").write(r() + \"\\n\")'"


def test_reference_lists_every_key():
    from pcnlab.experiments.config.schema import LIST_SECTIONS, SECTIONS
    text = reference_markdown()
    for section, keys in SECTIONS.items():
        for key in keys:
            prefix = "" if not section else (f"{section}.N." if section in LIST_SECTIONS else f"{section}.")
            assert f"| `{prefix}{key.name}` |" in text, (section, key.name)
    for params in TOPOLOGY_PARAMS.values():
        for key in params:
            assert f"| `topology.{key.name}` |" in text
