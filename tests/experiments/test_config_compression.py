"""Experiment-file keys for gradient compression (`compression`, `compression_ratio` on ps and ring
jobs) and changing conditions (`schedule:`): resolved into what the runner and the launcher take,
written into config.yaml and read back, and every bad setting a one-line error at its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pcnlab.errors import UsageError
from pcnlab.experiments.config import RunConfig, load_experiment
from pcnlab.experiments.config.runs import Change
from pcnlab.workloads import JobSpec

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"

FILE = """\
name: t
topology: {{kind: star, hosts: 5}}
switch: {switch}
jobs:
  - kind: {kind}
    ps: h1
    workers: [h2, h3]
{job}
background:
  - {{name: bulk, src: h4, dst: h1}}
  - {{name: pair, src: [h4, h5], dst: h2}}
schedule:
{schedule}
duration_s: 30
"""
SCHEDULE = """\
  - {at_s: 5, link: s1-h1, bw: 2}
  - {at_s: 15, link: s1-h1, bw: 20}
  - {at_s: 3, start: bulk}
  - {at_s: 20, stop: pair}"""


def load(tmp_path, job="    compression: adaptive", schedule=SCHEDULE, kind="ps", switch="bmv2"):
    path = tmp_path / "t.yaml"
    path.write_text(FILE.format(job=job, schedule=schedule, kind=kind, switch=switch))
    return load_experiment(path)


def test_compression_reaches_the_job_spec_and_round_trips(tmp_path):
    run = load(tmp_path, job="    compression: topk\n    compression_ratio: 0.05").runs()[0]
    job = run.jobs[0]
    assert (job.compression, job.compression_ratio) == ("topk", 0.05)
    spec = JobSpec(**job.job_spec_kwargs())
    assert (spec.compression, spec.compression_ratio) == ("topk", 0.05)
    assert RunConfig.from_dict(run.to_dict()) == run


def test_error_feedback_reaches_the_job_spec_and_round_trips(tmp_path):
    run = load(tmp_path, job="    compression: topk\n    compression_ratio: 0.001\n    error_feedback: false").runs()[0]
    assert run.jobs[0].error_feedback is False
    assert JobSpec(**run.jobs[0].job_spec_kwargs()).error_feedback is False
    assert RunConfig.from_dict(run.to_dict()) == run and run.to_dict()["jobs"][0]["error_feedback"] is False
    assert load(tmp_path, job="    compression: topk").runs()[0].jobs[0].error_feedback is True


def test_defaults_are_no_compression(tmp_path):
    job = load(tmp_path, job="").runs()[0].jobs[0]
    assert job.compression == "none" and JobSpec(**job.job_spec_kwargs()).compression == "none"


def test_schedule_resolves_links_and_flow_names(tmp_path):
    run = load(tmp_path).runs()[0]
    assert run.schedule == (Change(5.0, ("s1", "h1"), 2.0), Change(15.0, ("s1", "h1"), 20.0),
                            Change(3.0, start=("bulk",)), Change(20.0, stop=("pair-1", "pair-2")))
    again = RunConfig.from_dict(run.to_dict())
    assert again.schedule == run.schedule and again == run
    assert run.to_dict()["schedule"][0] == {"at_s": 5.0, "link": "s1-h1", "bw": 2.0}


def test_a_loss_change_round_trips_and_can_be_swept(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(FILE.format(job="", schedule="  - {at_s: 0, link: s1-h1, loss: 0.01}", kind="ps", switch="bmv2")
                    + "sweep:\n  schedule.0.loss: [0, 0.02]\n")
    runs = load_experiment(path).runs()
    assert [r.schedule for r in runs] == [(Change(0.0, ("s1", "h1"), loss=0.0),),
                                          (Change(0.0, ("s1", "h1"), loss=0.02),)]
    assert runs[1].to_dict()["schedule"] == [{"at_s": 0.0, "link": "s1-h1", "loss": 0.02}]
    assert all(RunConfig.from_dict(r.to_dict()) == r for r in runs)


def test_schedule_entries_can_be_swept(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(FILE.format(job="", schedule=SCHEDULE, kind="ps", switch="bmv2")
                    + "sweep:\n  schedule.0.bw: [1, 5]\n")
    runs = load_experiment(path).runs()
    assert [r.schedule[0].bw for r in runs] == [1.0, 5.0] and [r.name for r in runs] == ["bw=1", "bw=5"]


@pytest.mark.parametrize("job, schedule, kind, switch, fragment", [
    ("    compression: zip", SCHEDULE, "ps", "bmv2",
     "t.yaml:8: jobs.0.compression: unknown compression method 'zip'; choose one of none, topk"),
    ("    compression: topk\n    compression_ratio: 0", SCHEDULE, "ps", "bmv2",
     "t.yaml:9: jobs.0.compression_ratio: must be above 0, got 0"),
    ("    compression: topk\n    compression_ratio: 1.5", SCHEDULE, "ps", "bmv2",
     "jobs.0.compression_ratio: must be at most 1, got 1.5"),
    ("    compression: topk\n    error_feedback: maybe", SCHEDULE, "ps", "bmv2",
     "t.yaml:9: jobs.0.error_feedback: expected true or false"),
    ("    error_feedback: false", SCHEDULE, "generator", "bmv2",
     "t.yaml:8: jobs.0.error_feedback: applies to ps and ring jobs, not to a generator job; remove it"),
    ("    error_feedback: false", SCHEDULE, "ps", "bmv2",
     "t.yaml:8: jobs.0.error_feedback: error_feedback false means nothing with compression none"),
    ("    compression: adaptive\n    error_feedback: false", SCHEDULE, "ps", "bmv2",
     "t.yaml:9: jobs.0.error_feedback: error_feedback false does not go with compression adaptive"),
    ("    compression: adaptive", SCHEDULE, "generator", "bmv2",
     "t.yaml:8: jobs.0.compression: applies to ps and ring jobs, not to a generator job; remove it"),
    ("", "  - {at_s: 5, link: s1-h9, bw: 2}", "ps", "bmv2", "t.yaml:13: schedule.0.link: s1 has no link to 'h9'"),
    ("", "  - {at_s: 5, link: s1, bw: 2}", "ps", "bmv2", "schedule.0.link: expected <switch>-<peer>"),
    ("", "  - {at_s: 5, link: s1-h1}", "ps", "bmv2", "schedule.0.bw: a link change needs bw"),
    ("", "  - {at_s: 5, bw: 2}", "ps", "bmv2", "schedule.0.bw: bw needs link"),
    ("", "  - {at_s: 30, link: s1-h1, bw: 2}", "ps", "bmv2", "schedule.0.at_s: 30 s is not before the run ends"),
    ("", "  - {at_s: 5, link: s1-h1, bw: 2000}", "ps", "bmv2", "schedule.0.bw: 2000 Mbit/s is more than"),
    ("", "  - {at_s: 5, link: s1-h1, bw: 2}", "ps", "bridge", "schedule.0.link: changing a link's rate during a run "
                                                           "needs BMv2 switches"),
    ("", "  - {at_s: 5, start: nope}", "ps", "bmv2", "schedule.0.start: no background flow is named 'nope'"),
    ("", "  - {at_s: 5, start: bulk}\n  - {at_s: 6, start: bulk}", "ps", "bmv2",
     "schedule.1.start: flow 'bulk' is started twice"),
    ("", "  - {at_s: 9, start: bulk}\n  - {at_s: 6, stop: bulk}", "ps", "bmv2",
     "flow 'bulk' stops at 6 s, not after it starts at 9 s"),
    ("", "  - {link: s1-h1, bw: 2}", "ps", "bmv2", "schedule.0: missing key 'at_s'"),
    ("", "  - {at_s: 5, rate: 2}", "ps", "bmv2", "schedule.0.rate: unknown key"),
    ("", "  - {at_s: 5, link: s1-h1, loss: 1.5}", "ps", "bmv2", "schedule.0.loss: must be at most 1, got 1.5"),
    ("", "  - {at_s: 5, link: s1-h1, loss: -0.1}", "ps", "bmv2", "schedule.0.loss: must be at least 0"),
    ("", "  - {at_s: 5, loss: 0.01}", "ps", "bmv2", "schedule.0.loss: loss needs link"),
    ("", "  - {at_s: 5, link: s1-h1, loss: 0.01}", "ps", "bridge", "schedule.0.link: changing a link's loss "
                                                                 "during a run needs BMv2 switches"),
    ("", "  - 5", "ps", "bmv2", "schedule.0: expected a mapping"),
])
def test_bad_settings_are_one_line_errors(tmp_path, job, schedule, kind, switch, fragment):
    with pytest.raises(UsageError) as exc:
        load(tmp_path, job=job, schedule=schedule, kind=kind, switch=switch)
    message = str(exc.value)
    assert fragment in message and "\n" not in message, message


@pytest.mark.parametrize("name", ["netsense", "netsense-unconstrained", "compression-scaling"])
def test_shipped_compression_experiments_load(name):
    exp = load_experiment(EXPERIMENTS / f"{name}.yaml")
    methods = {r.jobs[0].compression for r in exp.runs()}
    assert {"none", "int8"} <= methods
    if name == "netsense":
        assert all(r.schedule and r.schedule[0].link == ("s1", "h1") for r in exp.runs())


def test_netsense_competing_sweeps_the_papers_baselines_under_competing_flows():
    runs = load_experiment(EXPERIMENTS / "netsense-competing.yaml").runs()
    assert [(r.jobs[0].compression, r.jobs[0].compression_ratio, r.jobs[0].error_feedback) for r in runs] == [
        ("none", 0.01, True), ("topk", 0.01, False), ("topk", 0.001, False), ("topk", 0.005, True),
        ("adaptive", 0.01, True)]
    run = runs[0]
    assert run.jobs[0].model == "digits-cnn" and 20 <= run.jobs[0].compute_ms <= 50
    starts = [c for c in run.schedule if c.start]
    assert len(starts) >= 2 and all(8 <= len(c.start) <= 16 for c in starts)
    assert {f.cc for f in run.background} == {"cubic"} and {f.dst for f in run.background} == {"h1"}
    drops = [c.bw for c in run.schedule if c.link == ("s1", "h1")]
    fast = run.topology.params["bw"]
    assert sum(10 <= fast / bw <= 25 for bw in drops) >= 2 and drops[-1] == fast
