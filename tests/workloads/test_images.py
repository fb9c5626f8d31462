"""What an image holds, known before a run (workloads/images.py): real podman, the default image, its
base (Python without PyTorch), an image without Python, a memory limit PyTorch cannot start in."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from pcnlab.errors import UsageError
from pcnlab.workloads.containers import BASE_IMAGE, ContainerSpec, podman
from pcnlab.workloads.images import image_exists, image_id, prepare, probe

from conftest import needs_podman

pytestmark = needs_podman


def test_the_default_image_serves_every_pytorch_kind_with_this_checkouts_code(worker_image):
    import torch

    facts = probe(ContainerSpec(worker_image), ("ps", "ring", "torchrun"))
    assert facts.image == worker_image and facts.id == image_id(worker_image) and len(facts.id) == 64
    assert facts.python.startswith("3.") and facts.torch.split("+")[0] == torch.__version__.split("+")[0]
    said = []
    assert prepare({ContainerSpec(worker_image): {"ps"}}, said.append) == {worker_image: facts}
    assert said == [f"containers: {worker_image} ({facts.id[:12]}): Python {facts.python}, PyTorch {facts.torch}"]


def test_an_image_without_pytorch_is_named_with_what_it_lacks(worker_image):
    assert image_exists(BASE_IMAGE)      # scripts/image.sh keeps the base it built the worker image on
    with pytest.raises(UsageError, match=r"lacks the Python module '(torch|numpy)', which pcnlab\.workloads\.ring "
                                         r"imports: the workers need Python 3\.10\+ with PyTorch"):
        probe(ContainerSpec(BASE_IMAGE), ("ring",))


def test_an_image_without_python_is_one_line(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "hello").write_text("no python here\n")
    name = f"localhost/pcnlab-test-nopython:{uuid.uuid4().hex[:8]}"
    tar = subprocess.run(["tar", "-C", str(tmp_path / "root"), "-c", "."], capture_output=True, check=True).stdout
    subprocess.run([*podman(), "import", "--quiet", "-", name], input=tar, capture_output=True, check=True, timeout=60)
    try:
        with pytest.raises(UsageError, match=r"has no python3: use an image with Python 3 and PyTorch"):
            probe(ContainerSpec(name), ("ps",))
    finally:
        subprocess.run([*podman(), "rmi", "--force", name], capture_output=True, timeout=60)
    assert not image_exists(name)


def test_a_memory_limit_pytorch_cannot_start_in_is_named(worker_image, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"memory 40m is too small to start PyTorch in image .* the kernel killed it "
                                         r"while importing; give more"):
        probe(ContainerSpec(worker_image, memory="40m"), ("ps",))
    assert list(tmp_path.iterdir()) == []          # conmon's `oom` file went to the probe's own folder


def test_an_image_not_on_this_machine_is_one_line():
    with pytest.raises(UsageError, match=r"image localhost/pcnlab-nope:1 is not on this machine: build or load it"):
        probe(ContainerSpec("localhost/pcnlab-nope:1"), ("ps",))


def test_a_run_whose_image_lacks_pytorch_stops_before_any_network(worker_image, tmp_path):
    import sys

    from conftest import ROOT

    spec = tmp_path / "bad.yaml"
    spec.write_text(f"""
name: bad
topology: {{kind: star, hosts: 3, bw: 20}}
switch: bridge
containers: {BASE_IMAGE}
jobs:
  - {{name: train, kind: ps, ps: h1, workers: [h2, h3], model: mlp, iterations: 5}}
duration_s: 10
""")
    done = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "run", str(spec), "--results", str(tmp_path / "results"), "--no-plots"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"image {BASE_IMAGE} (ps jobs) lacks the Python module" in done.stderr
    assert not list((tmp_path / "results").rglob("started.json"))      # no run began: no network, no ledger
