"""Experiment files: sweeps expand in order with their names, and --set overrides set values, fix swept
keys or change the sweep; a bad override names the item."""

from __future__ import annotations

from pathlib import Path

import pytest

from config_files import MINIMAL, write_file

from pcnlab.errors import UsageError
from pcnlab.experiments.config import load_experiment

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"


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
    runs = load_experiment(write_file(tmp_path, text)).runs()
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
    runs = load_experiment(write_file(tmp_path, text)).runs()
    assert [(r.mode.kind, r.mode.K, r.mode.K_pre) for r in runs] == [("ecn", 30, 5), ("pcn-host", 30, 5)]


def test_sweeping_the_job_kind_keeps_keys_of_the_other_kinds(tmp_path):
    text = MINIMAL.replace("workers: 2", "workers: 2\n    burst_bytes: 5000\n    model: cnn") + \
        "sweep:\n  jobs.0.kind: [generator, ring, ps]\n"
    runs = load_experiment(write_file(tmp_path, text)).runs()
    assert [r.name for r in runs] == ["kind=generator", "kind=ring", "kind=ps"]
    gen, ring, ps = (r.jobs[0] for r in runs)
    assert gen.ps == ("h1",) and gen.burst_bytes == 5000
    assert ring.ps == () and ring.workers == ("h2", "h3") and ring.model == "cnn"
    assert ps.ps == ("h1",) and ps.model == "cnn"
    # written in the file, the kind makes other kinds' keys a mistake
    with pytest.raises(UsageError, match=r"exp.yaml:4: jobs.0.ps: applies to ps and generator jobs, not to a ring job"):
        load_experiment(write_file(tmp_path, text.replace("kind: generator", "kind: ring").split("sweep:")[0]))


def test_sweep_label_clash_uses_the_full_key(tmp_path):
    text = MINIMAL.replace("topology: star", "topology: {kind: star, hosts: 5}") + """\
  - kind: generator
    ps: h1
    workers: [h4, h5]
sweep:
  jobs.0.iterations: [1, 2]
  jobs.1.iterations: [3]
"""
    names = [r.name for r in load_experiment(write_file(tmp_path, text)).runs()]
    assert names == ["jobs.0.iterations=1,jobs.1.iterations=3", "jobs.0.iterations=2,jobs.1.iterations=3"]


def test_sweep_of_host_lists_is_named_by_its_hosts(tmp_path):
    text = MINIMAL.replace("topology: star", "topology: {kind: star, hosts: 4}") + \
        "sweep:\n  jobs.0.workers: [[h2, h3], [h2, h3, h4]]\n"
    assert [r.name for r in load_experiment(write_file(tmp_path, text)).runs()] == \
        ["workers=h2+h3", "workers=h2+h3+h4"]


# --- overrides -----------------------------------------------------------------------------------

ZIPPED = MINIMAL.replace("kind: generator", "kind: ps\n    model: digits-cnn") + """\
sweep:
  jobs.0.compression+jobs.0.compression_ratio+jobs.0.error_feedback:
    - [none, 0.01, true]
    - [topk, 0.001, false]
    - [topk, 0.005, true]
"""


def test_a_zipped_sweep_sets_its_keys_together(tmp_path):
    """Keys joined by + take one value each from every point: combinations, not their product."""
    runs = load_experiment(write_file(tmp_path, ZIPPED + "  topology.bw: [10, 20]\n")).runs()
    assert [r.name for r in runs[:4]] == [
        "compression+compression_ratio+error_feedback=none+0.01+on,bw=10",
        "compression+compression_ratio+error_feedback=none+0.01+on,bw=20",
        "compression+compression_ratio+error_feedback=topk+0.001+off,bw=10",
        "compression+compression_ratio+error_feedback=topk+0.001+off,bw=20"]
    assert len(runs) == 6
    jobs = [r.jobs[0] for r in runs[::2]]
    assert [(j.compression, j.compression_ratio, j.error_feedback) for j in jobs] == [
        ("none", 0.01, True), ("topk", 0.001, False), ("topk", 0.005, True)]
    assert runs[2].sweep["jobs.0.compression+jobs.0.compression_ratio+jobs.0.error_feedback"] == ["topk", 0.001, False]
    # --set sweep.<the zipped key>=[...] replaces it, its keys in any order; --set sweep.<the zipped key>= ends it
    two = load_experiment(tmp_path / "exp.yaml", [
        "sweep.jobs.0.compression+jobs.0.compression_ratio+jobs.0.error_feedback=[[adaptive, 0.01, true]]"]).runs()
    assert [r.jobs[0].compression for r in two] == ["adaptive", "adaptive"]
    turned = load_experiment(tmp_path / "exp.yaml", [
        "sweep.jobs.0.error_feedback+jobs.0.compression+jobs.0.compression_ratio=[[false, int8, 0.01]]"]).runs()
    assert [(r.jobs[0].compression, r.jobs[0].error_feedback) for r in turned] == [("int8", False)] * 2
    fixed = load_experiment(tmp_path / "exp.yaml", [
        "sweep.jobs.0.compression_ratio+jobs.0.error_feedback+jobs.0.compression=", "jobs.0.compression=int8"]).runs()
    assert {r.jobs[0].compression for r in fixed} == {"int8"} and len(fixed) == 2


def test_set_of_one_key_of_a_zipped_sweep_is_refused(tmp_path):
    """Fixing one key of a zip would silently drop its other keys' points: say how to replace or end it."""
    write_file(tmp_path, ZIPPED)
    zipped = "jobs.0.compression+jobs.0.compression_ratio+jobs.0.error_feedback"
    with pytest.raises(UsageError) as err:
        load_experiment(tmp_path / "exp.yaml", ["jobs.0.compression=int8"])
    message = str(err.value)
    assert message.startswith("--set jobs.0.compression=int8: ") and "\n" not in message
    assert f"the zipped sweep {zipped!r}" in message
    assert f"--set 'sweep.{zipped}=[[...], [...]]'" in message and message.endswith(f"--set sweep.{zipped}=")


@pytest.mark.parametrize("sweep, fragment", [
    ("  jobs.0.compression+jobs.0.compression_ratio: [[topk, 0.01], topk]",
     "sweep.jobs.0.compression+jobs.0.compression_ratio: each value of a sweep of 2 keys is a list of 2 values"),
    ("  jobs.0.compression+jobs.0.compression_ratio: [[topk]]", "is a list of 2 values, one per key, got 1"),
    ("  jobs.0.compression+jobs.0.ratio: [[topk, 0.01]]", "sweep key 'jobs.0.ratio' does not exist"),
    ("  jobs.0.compression+jobs.0.compression_ratio: [[topk, 2]]", "jobs.0.compression_ratio (sweep value): must be at most 1"),
    ("  jobs.0.compression+: [[topk, 1]]", "one of them is empty"),
    ("  jobs.0.compression+jobs.0.compression_ratio: [[topk, 0.01]]\n  jobs.0.compression: [int8]",
     "overlaps"),
    ("  jobs.0.compression+jobs.0.compression: [[topk, int8]]",
     "'jobs.0.compression' appears twice in the zipped key"),
    ("  jobs.0.compression+jobs.0.compression_ratio: [[topk, 0.01], [topk, 0.01]]",
     "sweep.jobs.0.compression+jobs.0.compression_ratio: value [topk, 0.01] is listed twice"),
])
def test_bad_zipped_sweeps_are_one_line_errors(tmp_path, sweep, fragment):
    text = MINIMAL.replace("kind: generator", "kind: ps") + "sweep:\n" + sweep + "\n"
    with pytest.raises(UsageError) as err:
        load_experiment(write_file(tmp_path, text))
    assert fragment in str(err.value) and "\n" not in str(err.value), str(err.value)


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
