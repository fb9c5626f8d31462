"""Experiment-file keys of the PyTorch jobs: the digits models, test accuracy's schedule (eval_every),
PCN-START announcements by ps and ring jobs (pcn_start), and the shipped PyTorch experiments sized
for 2 cores. (The malformed corpus holds the one-line errors of their bad values.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from pcnlab.errors import UsageError
from pcnlab.experiments.config import load_experiment
from pcnlab.experiments.config.limits import MAX_LINK_MBPS
from pcnlab.workloads import JobSpec
from pcnlab.workloads.catalog import MODELS

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"

TRAINING = """\
name: t
topology: {{kind: star, hosts: 4}}
mode: {mode}
jobs:
  - kind: {kind}
    {ps}workers: [h2, h3]
    model: {model}
{extra}
sweep:
  mode: [ecn, pcn-host]
"""


def _load(tmp_path, kind="ps", model="digits-mlp", extra="", mode="ecn"):
    path = tmp_path / "t.yaml"
    path.write_text(TRAINING.format(kind=kind, model=model, extra=extra, mode=mode,
                                    ps="ps: h1\n    " if kind == "ps" else ""))
    return load_experiment(path)


@pytest.mark.parametrize("kind", ["ps", "ring"])
def test_torch_jobs_announce_in_pcn_host_runs_only(tmp_path, kind):
    runs = _load(tmp_path, kind).runs()
    assert [(r.mode.kind, r.jobs[0].pcn_start) for r in runs] == [("ecn", False), ("pcn-host", True)]
    spec = JobSpec(**runs[1].jobs[0].job_spec_kwargs(runs[1].seed))
    assert spec.pcn_start is True and spec.pcn_lead_us == 0 and spec.model == "digits-mlp"
    assert spec.eval_every == 10                     # the default schedule of test accuracy
    forced = _load(tmp_path, kind, extra="    pcn_start: true\n    pcn_start_lead_us: 2500\n    eval_every: 0").runs()
    assert [r.jobs[0].pcn_start for r in forced] == [True, True]
    spec = JobSpec(**forced[0].jobs[0].job_spec_kwargs())
    assert (spec.pcn_lead_us, spec.eval_every) == (2500, 0)


def test_every_model_name_reaches_the_workers(tmp_path):
    for model in MODELS:
        job = _load(tmp_path, "ring", model=model).runs()[0].jobs[0]
        spec = JobSpec(**job.job_spec_kwargs())
        assert spec.model == (f"profile:{model}" if model in ("resnet50", "vgg16", "bert-base") else model)


@pytest.mark.parametrize("extra, fragment", [
    ("    eval_every: 2.5", "jobs.0.eval_every: expected a whole number"),
    ("    eval_every: -1", "jobs.0.eval_every: must be at least 0"),
    ("    pcn_start_lead_us: -3", "jobs.0.pcn_start_lead_us: must be at least 0"),
    ("    pcn_start: maybe", "jobs.0.pcn_start: expected auto, true or false"),
])
def test_bad_values_of_the_new_keys_are_one_line_errors(tmp_path, extra, fragment):
    with pytest.raises(UsageError) as err:
        _load(tmp_path, extra=extra)
    message = str(err.value)
    assert "\n" not in message and f"t.yaml:9: {fragment}" in message, message


def test_a_misspelt_model_names_the_digits_models(tmp_path):
    with pytest.raises(UsageError, match=r"unknown model 'digit-cnn' \(did you mean 'digits-cnn'\?\); choose one "
                                         r"of mlp, cnn, digits-mlp, digits-cnn, resnet50"):
        _load(tmp_path, model="digit-cnn")


SIZED = {  # file: (runs, the longest a run may last in s)
    "pcn-training": (6, 70), "ring-vs-ps": (4, 50), "burstiness": (6, 45), "scaling": (4, 50),
    "scaling-unconstrained": (4, 50),
}


@pytest.mark.parametrize("name", sorted(SIZED))
def test_shipped_pytorch_experiments_fit_two_cores(name):
    exp = load_experiment(EXPERIMENTS / f"{name}.yaml")
    runs = exp.runs()
    count, longest = SIZED[name]
    assert len(runs) == count and max(r.duration_s + r.warmup_s for r in runs) <= longest + 3
    for run in runs:
        for job in run.jobs:
            assert job.kind in ("ps", "ring") and len(job.workers) <= 6
            assert job.compute_ms >= 25              # workers sleep through an accelerator's time
        assert len(run.background) <= 2
        if run.switch.kind == "bmv2":
            assert max(run.topology.link_rates_mbps().values()) <= min(20, MAX_LINK_MBPS)
            assert run.topology.kind == "star"       # one BMv2 process
    if name == "burstiness":
        assert {r.telemetry.every for r in runs} == {1}   # 1 ms bins need every packet
        assert {r.jobs[0].model for r in runs} == {"resnet50"}
    if name.startswith("scaling"):
        assert [len(r.jobs[0].workers) for r in runs] == [1, 2, 4, 6]
        assert runs[1].jobs[0].workers == ("h2", "h3")
