"""Our PyTorch workers in containers (launcher.py `_contain`), on this machine's loopback: the PS and
workers of ps jobs, each rank of a ring, LTP's PS and workers, compressed gradients. The image gives
Python and PyTorch, this checkout (mounted read-only) the code: with the same seeds each trains exactly
as it does bare (the same loss and parameters every iteration), and no container is left."""

from __future__ import annotations

import json

import pytest

from pcnlab.jsonlines import read_json_lines
from pcnlab.workloads import JobSpec, Workloads
from pcnlab.workloads.containers import CHECKOUT, PYTHONPATH_DIR, ContainerSpec, container_exists

from conftest import needs_podman

pytestmark = needs_podman

# The PS on digits-mlp, bare against boxed: tests/experiments/test_training_containers_bmv2.py, through BMv2.
CASES = {
    "ring": dict(kind="ring", workers=("h1", "h2", "h3"), model="mlp"),
    "ltp": dict(kind="ps", servers=("h1",), workers=("h2", "h3"), model="mlp", transport="ltp"),
    "topk": dict(kind="ps", servers=("h1",), workers=("h2",), model="mlp", compression="topk",
                 compression_ratio=0.05),
}


def _iterations(proc) -> list[tuple]:
    return [(r["iter"], r.get("loss"), r.get("params_sha")) for r in read_json_lines(proc.log)[1]
            if r["type"] == "iteration"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_workers_train_alike_in_containers_and_leave_none(case, worker_image, tmp_path):
    work = Workloads(tmp_path)
    kwargs = dict(iterations=6, seed=3, **CASES[case])
    bare = work.start_job(JobSpec(name="bare", **kwargs)).wait(timeout=240)
    boxed = work.start_job(JobSpec(name="boxed", container=ContainerSpec(worker_image, memory="2g"),
                                   **kwargs)).wait(timeout=240)
    for here, there in zip(bare.procs, boxed.procs):
        assert (here.label, here.host) == (there.label, there.host)
        assert there.argv[0] == "podman" and worker_image in there.argv
        argv = " ".join(there.argv)
        assert f"-v {CHECKOUT}:{CHECKOUT}:ro" in argv and f"PYTHONPATH={PYTHONPATH_DIR}" in argv
        assert f"-m pcnlab.workloads.{kwargs['kind']}" in argv
        assert not container_exists(there.container)                  # --rm: gone once it ended
        if here.label.startswith("worker") or kwargs["kind"] == "ring":
            ours, theirs = _iterations(here), _iterations(there)
            assert len(ours) == 6 and ours == theirs                 # the same loss and parameters each iteration
    job = json.loads((boxed.folder / "job.json").read_text())
    assert job["spec"]["container"]["image"] == worker_image
    if kwargs["model"] == "digits-mlp":                                 # the data: the cached copy, mounted
        assert "PCNLAB_DIGITS=" in " ".join(boxed.procs[0].argv)


def test_a_rank_killed_inside_its_container_fails_the_job_in_one_line_and_leaves_none(worker_image, tmp_path):
    import os
    import signal
    import time

    from pcnlab.workloads.containers import container_pid
    from pcnlab.workloads.processes import WorkloadError

    job = Workloads(tmp_path).start_job(JobSpec(name="killed", kind="ps", servers=("h1",), workers=("h2", "h3"),
                                                model="mlp", iterations=400, compute_ms=50,
                                                container=ContainerSpec(worker_image)))
    victim = job.procs[2]
    pid = container_pid(victim.container, lambda: victim.popen.poll() is None, 60)
    assert pid is not None and pid != victim.popen.pid          # the worker itself, not podman's client
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(WorkloadError, match=r"job killed: rank 2 \(worker1 on h3\) was killed by SIGKILL.*stopped the rest"):
        job.wait(timeout=120)
    assert time.monotonic() - started < 30
    assert not any(container_exists(p.container) for p in job.procs)
