"""The default image knows which PCN Lab code it holds (scripts/image.sh labels it with
containers.code_digest), so an image older than the checkout is refused before a run and rebuilt by the
tests, not silently run with an old hook (workloads/containers.py)."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from pcnlab.errors import UsageError
from pcnlab.experiments.config import load_experiment
from pcnlab.workloads.containers import (
    CODE_LABEL,
    DEFAULT_IMAGE,
    code_digest,
    image_behind,
    image_code,
    podman,
)

from conftest import needs_podman


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_the_digest_follows_the_code_a_rank_runs_and_nothing_else(tmp_path):
    assert code_digest(tmp_path) is None                       # no git checkout: unknown
    _git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("*.pyc\n")
    for name, text in (("workloads/hook.py", "a = 1\n"), ("pcnlab/cli.py", "b = 1\n"), ("controller/x.py", "c\n")):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    _git(tmp_path, "add", ".")
    first = code_digest(tmp_path)
    (tmp_path / "controller/x.py").write_text("changed\n")       # not in the image's code
    (tmp_path / "workloads/hook.pyc").write_bytes(b"ignored")
    assert code_digest(tmp_path) == first
    (tmp_path / "workloads/hook.py").write_text("a = 2\n")       # uncommitted edits count
    second = code_digest(tmp_path)
    (tmp_path / "pcnlab/new.py").write_text("")                  # and new files
    assert len({first, second, code_digest(tmp_path)}) == 3


OWN = """\
name: own
topology: {{kind: star, hosts: 2, bw: 20}}
switch: bmv2
jobs:
  - {{name: ddp, kind: torchrun, workers: [h1, h2], argv: [examples/ddp_train.py], image: {image}}}
duration_s: 10
"""


@needs_podman
def test_an_image_built_from_other_code_is_refused_in_one_line(worker_image, tmp_path):
    assert image_code(worker_image) == code_digest() and image_behind(worker_image) is None
    stale = "localhost/pcnlab-stale-code-test:latest"
    (tmp_path / "Containerfile").write_text(f"FROM {worker_image}\nLABEL {CODE_LABEL}=0123\n")
    subprocess.run([*podman(), "build", "--quiet", "-t", stale, str(tmp_path)], check=True, capture_output=True)
    try:
        assert image_code(stale) == "0123"
        experiment = tmp_path / "own.yaml"
        experiment.write_text(textwrap.dedent(OWN.format(image=stale)))
        with pytest.raises(UsageError) as caught:
            load_experiment(experiment)
        message = str(caught.value)
        assert "\n" not in message and stale in message and "make image" in message
        experiment.write_text(textwrap.dedent(OWN.format(image=DEFAULT_IMAGE)))
        load_experiment(experiment)                              # the current one passes
    finally:
        subprocess.run([*podman(), "rmi", "--force", stale], capture_output=True)
