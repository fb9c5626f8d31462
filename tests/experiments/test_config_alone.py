"""`alone: true`: each sweep point gets, in each repetition, a run per job holding only that job, in the
same network, named `<point>,alone=<job>` and run right after the point; its config says which job."""

from __future__ import annotations

from pathlib import Path

import pytest

from config_files import write_file

from pcnlab.errors import UsageError
from pcnlab.experiments.config import load_experiment
from pcnlab.experiments.config.runs import RunConfig

ROOT = Path(__file__).resolve().parents[2]
TWO_JOBS = ROOT / "experiments" / "pcn-two-jobs.yaml"


def test_each_job_alone_after_its_point_in_every_repetition():
    runs = load_experiment(TWO_JOBS, ["alone=true"]).runs()
    assert [r.name for r in runs] == [
        "mode=pcn,rep=1", "mode=pcn,alone=a,rep=1", "mode=pcn,alone=b,rep=1",
        "mode=pcn-host,rep=1", "mode=pcn-host,alone=a,rep=1", "mode=pcn-host,alone=b,rep=1",
        "mode=pcn,rep=2", "mode=pcn,alone=a,rep=2", "mode=pcn,alone=b,rep=2",
        "mode=pcn-host,rep=2", "mode=pcn-host,alone=a,rep=2", "mode=pcn-host,alone=b,rep=2"]
    shared, a, b = runs[3:6]
    assert [j.name for j in shared.jobs] == ["a", "b"] and shared.alone is None
    assert (a.alone, [j.name for j in a.jobs], a.jobs[0].id) == ("a", ["a"], 1)
    assert (b.alone, [j.name for j in b.jobs], b.jobs[0].id) == ("b", ["b"], 1)   # the only job: data-plane id 1
    assert b.jobs[0].workers == shared.jobs[1].workers and b.jobs[0].period_ms == shared.jobs[1].period_ms
    # the same network, mode and seed as the point
    for alone in (a, b):
        assert (alone.topology, alone.background, alone.mode, alone.seed, alone.sweep) == \
            (shared.topology, shared.background, shared.mode, shared.seed, shared.sweep)
    assert [r.index for r in runs] == list(range(12))
    # written to the run folder and read back
    assert b.to_dict()["alone"] == "b" and "alone" not in shared.to_dict()
    assert RunConfig.from_dict(b.to_dict()) == b and RunConfig.from_dict(shared.to_dict()) == shared


def test_alone_without_a_sweep_keeps_the_files_baseline_out_of_the_way():
    exp = load_experiment(TWO_JOBS, ["alone=true", "mode=ecn", "repetitions=1"])
    assert [r.name for r in exp.runs()] == ["run", "alone=a", "alone=b"] and exp.baseline is None
    assert all(r.mode.kind == "ecn" for r in exp.runs())


def test_off_by_default_and_nothing_to_add_for_one_job(tmp_path):
    assert len(load_experiment(TWO_JOBS).runs()) == 4
    one = write_file(tmp_path, "topology: star\nalone: true\njobs:\n  - {kind: generator, ps: h1, workers: 2}\n")
    assert [r.name for r in load_experiment(one).runs()] == ["run"]


def test_alone_is_not_swept_and_is_a_boolean(tmp_path):
    with pytest.raises(UsageError, match="'alone' cannot be swept"):
        load_experiment(TWO_JOBS, ["sweep.alone=[false, true]"])
    bad = write_file(tmp_path, TWO_JOBS.read_text() + "alone: yes please\n")
    with pytest.raises(UsageError, match=r"exp.yaml:\d+: alone"):
        load_experiment(bad)
