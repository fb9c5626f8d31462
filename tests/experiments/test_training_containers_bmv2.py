"""Our PyTorch PS job in containers through a congested BMv2 port, against the same job in its hosts,
in one sweep (`containers: [null, image]`): the same training iteration by iteration, the workers'
announcements reach the switch (pcn-host holds K_pre), versions.json names the image, the sampler
reads the workers inside their containers, and no container is left."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import needs_bmv2, require_trusted_sweep, run_experiment
from pcnlab.jsonlines import read_json_lines
from pcnlab.workloads.containers import container_exists
from pcnlab.workloads.images import image_id

pytestmark = [needs_bmv2, pytest.mark.slow]

ITERATIONS = 20
SPEC = """
name: boxed
topology: {{kind: star, hosts: 5, bw: 20, queue: 60}}
mode: {{kind: pcn-host, K: 40, K_pre: 10}}
telemetry: 1
containers: {image}
jobs:
  - {{name: train, kind: ps, ps: h1, workers: [h2, h3, h4], model: digits-mlp, iterations: {iterations},
     eval_every: 10, compute_ms: 100, cc: cubic, ecn: true}}
background:
  - {{src: h5, dst: h1, cc: cubic, ecn: true}}
duration_s: 25
warmup_s: 2
sweep:
  containers: [null, {image}]
"""


def _iterations(run: Path, base: str) -> list[dict]:
    return [r for r in read_json_lines(run / "jobs" / "train" / f"{base}.jsonl")[1] if r["type"] == "iteration"]


@pytest.fixture(scope="module")
def runs(module_results, worker_image) -> tuple[Path, Path]:
    sweep = run_experiment(SPEC.format(image=worker_image, iterations=ITERATIONS), module_results, "boxed") / "boxed"
    require_trusted_sweep(sweep)
    bare = next(sweep.glob("latest/containers=null"))
    boxed = next(p for p in sweep.glob("latest/containers=*") if p != bare)
    return bare, boxed


def test_the_ps_job_trains_alike_in_containers(runs):
    bare, boxed = runs
    for base in ("worker0-h2", "worker1-h3", "worker2-h4"):
        here, there = _iterations(bare, base), _iterations(boxed, base)
        assert len(there) == ITERATIONS
        assert [(r["loss"], r["params_sha"]) for r in here] == [(r["loss"], r["params_sha"]) for r in there]
    accuracy = [json.loads((run / "metrics.json").read_text())["training"]["accuracy_final"] for run in runs]
    assert accuracy[0] == accuracy[1]


def test_announcements_from_containers_reach_the_switch(runs):
    _, boxed = runs
    assert all(r.get("announce_ns") for base in ("worker0-h2", "worker1-h3", "worker2-h4")
               for r in _iterations(boxed, base))
    assert json.loads((boxed / "metrics.json").read_text())["controller"]["k_pre_held_share"] > 0


def test_versions_name_the_image_and_nothing_is_left(runs, worker_image):
    bare, boxed = runs
    assert "images" not in json.loads((bare / "versions.json").read_text())
    image = json.loads((boxed / "versions.json").read_text())["images"][worker_image]
    assert image["id"] == image_id(worker_image) and image["torch"].startswith("2.")
    job = json.loads((boxed / "jobs" / "train" / "job.json").read_text())
    assert job["spec"]["container"]["image"] == worker_image
    for p in job["processes"]:
        assert p["argv"][0] == "podman" and "ns:/proc/" in " ".join(p["argv"])     # the Mininet host's namespace
        assert not container_exists(p["argv"][p["argv"].index("--name") + 1])


def test_the_sampler_reads_the_workers_inside_their_containers(runs):
    _, boxed = runs
    clients = {p["pid"] for p in json.loads((boxed / "jobs" / "train" / "job.json").read_text())["processes"]}
    cpu = pd.read_csv(boxed / "cpu.csv")
    workers = cpu[cpu["role"].isin(["worker", "ps"])]
    assert set(workers["name"]) == {"train/ps0@h1", "train/worker0@h2", "train/worker1@h3", "train/worker2@h4"}
    assert not set(workers["pid"]) & clients                   # not podman's clients: the processes that train
    assert workers.groupby("name")["cpu"].max().min() > 0
