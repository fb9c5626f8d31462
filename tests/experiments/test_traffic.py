"""experiments/traffic.py's flows of a job, by hand: what each kind of job sends per iteration over its
shortest iteration (the fit's estimate of each switch's packets: tests/experiments/test_fit.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcnlab.experiments.config import load_experiment
from pcnlab.experiments.traffic import SEGMENT_BYTES, Flow, job_flows, model_parameters, switch_pps
from pcnlab.rates import rate_pps
from pcnlab.workloads.specs import JobSpec

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def runs_of(name: str, overrides=()):
    return load_experiment(EXPERIMENTS / f"{name}.yaml", list(overrides)).runs()


JOB_FILE = """\
name: flows
topology: {{kind: star, hosts: 5}}
switch: bmv2
jobs:
  - name: j
{job}
"""


def job_spec(tmp_path, job: str, overrides=()) -> JobSpec:
    """The JobSpec of the one job of a small experiment file (its first run), as the runner makes it."""
    path = tmp_path / "flows.yaml"
    path.write_text(JOB_FILE.format(job=job))
    return JobSpec(**load_experiment(path, overrides).runs()[0].jobs[0].job_spec_kwargs())


def test_a_full_segment_is_1448_bytes():
    assert SEGMENT_BYTES == 1514 - 14 - 20 - 32 == 1448


def test_a_generator_with_a_period_is_capped_by_its_period(tmp_path):
    # Each worker sends 144,800 bytes (100 segments) and gets 14,480 back (10 segments) every 500 ms;
    # compute_ms 100 is shorter than the period, so the period is its shortest iteration: 100 / 0.5 s =
    # 200 packets/s up, 10 / 0.5 s = 20 down, per worker.
    spec = job_spec(tmp_path, "    kind: generator\n    ps: h1\n    workers: [h2, h3]\n    burst_bytes: 144800\n"
                              "    reply_bytes: 14480\n    period_ms: 500\n    compute_ms: 100")
    assert job_flows(spec) == [Flow("h2", "h1", pytest.approx(200.0)), Flow("h1", "h2", pytest.approx(20.0)),
                               Flow("h3", "h1", pytest.approx(200.0)), Flow("h1", "h3", pytest.approx(20.0))]
    # reply_bytes null: the PS answers burst_bytes, 200 packets/s back too.
    spec = job_spec(tmp_path, "    kind: generator\n    ps: h1\n    workers: [h2]\n    burst_bytes: 144800\n"
                              "    period_ms: 500")
    assert job_flows(spec) == [Flow("h2", "h1", pytest.approx(200.0)), Flow("h1", "h2", pytest.approx(200.0))]
    # The config resolves the null itself; a JobSpec made directly keeps reply_bytes None, the same answer.
    direct = JobSpec(name="g", kind="burst", workers=("h2",), servers=("h1",), burst_bytes=144800, period_ms=500)
    assert direct.reply_bytes is None
    assert job_flows(direct) == [Flow("h2", "h1", pytest.approx(200.0)), Flow("h1", "h2", pytest.approx(200.0))]
    # reply_bytes 0: nothing comes back (a cap of 0 packets/s, not None: not backlogged).
    assert job_flows(JobSpec(name="g", kind="burst", workers=("h2",), servers=("h1",), burst_bytes=144800,
                             reply_bytes=0, period_ms=500)) == [Flow("h2", "h1", pytest.approx(200.0)), Flow("h1", "h2", 0.0)]
    # smoke's: 50,000 bytes every 500 ms, 69.06 packets/s each way.
    assert [f.cap_pps for f in job_flows(JobSpec(**runs_of("smoke")[0].jobs[0].job_spec_kwargs()))] \
        == [pytest.approx(50_000 / 1448 / 0.5)] * 4


def test_a_generator_without_a_period_is_capped_by_its_compute_and_uncapped_without_either(tmp_path):
    # period_ms 0: back to back after compute_ms 250, so no iteration is shorter than 250 ms:
    # 144,800 bytes = 100 segments per 0.25 s = 400 packets/s each way (reply_bytes null).
    job = "    kind: generator\n    ps: h1\n    workers: [h2, h3]\n    burst_bytes: 144800\n    compute_ms: 250"
    spec = job_spec(tmp_path, job)
    assert spec.period_ms == 0
    assert [(f.src, f.dst, f.cap_pps) for f in job_flows(spec)] == [
        ("h2", "h1", pytest.approx(400.0)), ("h1", "h2", pytest.approx(400.0)),
        ("h3", "h1", pytest.approx(400.0)), ("h1", "h3", pytest.approx(400.0))]
    # A generator ring: each rank to the next, capped the same way (burst_bytes per compute_ms).
    ring = job_spec(tmp_path, "    kind: generator\n    pattern: ring\n    workers: [h2, h3, h4]\n"
                              "    burst_bytes: 144800\n    compute_ms: 250")
    assert [(f.src, f.dst) for f in job_flows(ring)] == [("h2", "h3"), ("h3", "h4"), ("h4", "h2")]
    assert all(f.cap_pps is not None for f in job_flows(ring))
    # Neither a period nor a compute time: nothing bounds an iteration, the flows are backlogged.
    spec = job_spec(tmp_path, job, ["jobs.0.compute_ms=0"])
    assert (spec.period_ms, spec.compute_ms) == (0, 0)
    assert job_flows(spec) == [Flow("h2", "h1"), Flow("h1", "h2"), Flow("h3", "h1"), Flow("h1", "h3")]
    assert all(f.cap_pps is None for f in job_flows(spec))


def test_a_ps_job_is_capped_by_its_models_bytes_over_compute(tmp_path):
    # digits-mlp, as the workers build it: 64 x 128 + 128 + 128 x 10 + 10 = 9,610 parameters, 38,440 bytes
    # of float32 gradients up and of parameters down per worker per iteration. compute_ms 200 (the case
    # that was estimated backlogged at 17,000 packets/s on a 100 Mbit/s port): 38,440 / 1448 / 0.2 s =
    # 132.7 packets/s each way.
    assert 64 * 128 + 128 + 128 * 10 + 10 == 9_610 == model_parameters("digits-mlp", 0.01)
    job = "    kind: ps\n    ps: h1\n    workers: [h2, h3, h4]\n    model: digits-mlp\n    compute_ms: 200"
    spec = job_spec(tmp_path, job)
    cap = 38_440 / 1448 / 0.2
    assert cap == pytest.approx(132.73, abs=0.01)
    assert job_flows(spec) == [flow for w in ("h2", "h3", "h4")
                               for flow in (Flow(w, "h1", pytest.approx(cap)), Flow("h1", w, pytest.approx(cap)))]
    # On a 100 Mbit/s star (8256 packets/s a port) the PS's port carries 3 x 132.7 + 3 x 132.7 / 2 = 597:
    # no link is full, and s1 carries 6 x 1.5 x 132.7 = 1195 packets/s. Backlogged (compute_ms 0: the same
    # six flows, no cap) the PS's port fills, 3t + 3t/2 = 8256, and s1 carries 6 x 1.5 x 8256 / 4.5 = 16,512.
    path = tmp_path / "flows.yaml"
    path.write_text(JOB_FILE.format(job=job).replace("hosts: 5}", "hosts: 5, bw: 100}"))
    assert switch_pps(load_experiment(path).runs()[0]) == {"s1": pytest.approx(6 * 1.5 * cap)}
    assert [f.cap_pps for f in job_flows(job_spec(tmp_path, job, ["jobs.0.compute_ms=0"]))] == [None] * 6
    path.write_text(JOB_FILE.format(job=job).replace("hosts: 5}", "hosts: 5, bw: 100}"))
    assert switch_pps(load_experiment(path, ["jobs.0.compute_ms=0"]).runs()[0]) \
        == {"s1": pytest.approx(6 * 1.5 * rate_pps(100) / 4.5)}
    assert 6 * 1.5 * rate_pps(100) / 4.5 == 16_512


def test_a_ring_rank_sends_2_n_minus_1_over_n_of_the_model(tmp_path):
    # A ring all-reduce of digits-mlp's 38,440 bytes over 4 ranks: each rank sends 2 (4 - 1) / 4 = 1.5
    # of it per iteration, 57,660 bytes; per compute_ms 100: 57,660 / 1448 / 0.1 s = 398.2 packets/s.
    spec = job_spec(tmp_path, "    kind: ring\n    workers: [h1, h2, h3, h4]\n    model: digits-mlp\n"
                              "    compute_ms: 100")
    cap = 4 * 9_610 * 2 * (4 - 1) / 4 / 1448 / 0.1
    assert cap == pytest.approx(398.20, abs=0.01)
    assert job_flows(spec) == [Flow("h1", "h2", pytest.approx(cap)), Flow("h2", "h3", pytest.approx(cap)),
                               Flow("h3", "h4", pytest.approx(cap)), Flow("h4", "h1", pytest.approx(cap))]
    # Two ranks: 2 (2 - 1) / 2 = 1, the whole model each way, 38,440 / 1448 / 0.1 s = 265.5.
    two = job_spec(tmp_path, "    kind: ring\n    workers: [h1, h2]\n    model: digits-mlp\n    compute_ms: 100")
    assert job_flows(two) == [Flow("h1", "h2", pytest.approx(38_440 / 1448 / 0.1)),
                              Flow("h2", "h1", pytest.approx(38_440 / 1448 / 0.1))]


def test_a_torchrun_job_is_backlogged():
    # The user's program: what it sends per iteration is not known, so rank to next rank, uncapped, even
    # with a compute_ms.
    spec = JobSpec(name="mine", kind="torchrun", workers=("h1", "h2", "h3"), argv=("train.py",), compute_ms=100)
    assert job_flows(spec) == [Flow("h1", "h2"), Flow("h2", "h3"), Flow("h3", "h1")]
    assert all(f.cap_pps is None for f in job_flows(spec))


def test_a_generator_ring_sends_2_n_minus_1_over_n_of_its_burst(tmp_path):
    # workloads/burst.py's ring: 2 (n - 1) chunks of burst_bytes / n per iteration. Three ranks, 434,400
    # bytes every 100 ms: 4/3 x 434,400 = 579,200 bytes = 400 segments per 0.1 s = 4,000 packets/s.
    spec = job_spec(tmp_path, "    kind: generator\n    pattern: ring\n    workers: [h1, h2, h3]\n"
                              "    burst_bytes: 434400\n    period_ms: 100")
    assert [f.cap_pps for f in job_flows(spec)] == [pytest.approx(4000.0)] * 3


def test_each_shard_of_a_ps_is_capped_at_the_whole_model(tmp_path):
    # Shards are whole tensors, largest first (workloads/ps.py): digits-mlp's two shards hold 8,192 and
    # 1,418 parameters, so an even split (19,220 bytes each) would undercount the heavy one. Each is
    # capped at the whole model: 38,440 bytes per 0.1 s = 265.5 packets/s, the upper bound.
    spec = job_spec(tmp_path, "    kind: ps\n    ps: [h1, h4]\n    workers: [h2, h3]\n    model: digits-mlp\n"
                              "    compute_ms: 100")
    assert len(job_flows(spec)) == 8
    assert [f.cap_pps for f in job_flows(spec)] == [pytest.approx(4 * 9_610 / 1448 / 0.1)] * 8


def test_a_models_parameters_are_counted_once_per_version_of_its_code_then_read_without_pytorch(tmp_path,
                                                                                              monkeypatch):
    monkeypatch.setenv("PCNLAB_CACHE", str(tmp_path))
    count = model_parameters.__wrapped__                  # past the process's own memo
    assert count("digits-mlp", 0.01) == 9610              # built once ...
    cached, = tmp_path.glob("parameters-*.json")
    assert json.loads(cached.read_text()) == {"digits-mlp@0.01": 9610}
    read = ("import sys; from pcnlab.experiments.traffic import model_parameters; "
            "print(model_parameters('digits-mlp', 0.01), 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PCNLAB_CACHE": str(tmp_path)})
    assert done.returncode == 0 and done.stdout.split() == ["9610", "False"], done.stderr[-2000:]  # ... then read
    cached.write_text("{not json")                        # a cut cache is counted again, and mended
    assert count("digits-mlp", 0.01) == 9610 and json.loads(cached.read_text()) == {"digits-mlp@0.01": 9610}
    cached.write_text(json.dumps({"digits-mlp@0.01": 1}))  # what the cache holds is what is read ...
    assert count("digits-mlp", 0.01) == 1
    cached.unlink()                                       # ... and only the cache of this code: another's is not
    (tmp_path / "parameters-0000000000000000.json").write_text(json.dumps({"digits-mlp@0.01": 1}))
    assert count("digits-mlp", 0.01) == 9610
