"""Shared test helpers: skips that say why, and a run folder with its ledger.

Tests that need root, Mininet, p4c or BMv2 skip with a printed reason where those are absent; they
never replace them with a stand-in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pcnlab.toolchain import thrift_client_available
from pcnlab.workloads.containers import DEFAULT_IMAGE, podman_available
from pcnlab.workloads.images import image_exists
from small_experiment import small_experiment

ROOT = Path(__file__).resolve().parents[1]


def _why_no_root() -> str | None:
    return None if os.geteuid() == 0 else "needs root (Mininet, network namespaces)"


def _why_no_mininet() -> str | None:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "Mininet is not installed (make deps)"
    return _why_no_root()


def _why_no_bmv2() -> str | None:
    if not shutil.which("simple_switch_grpc"):
        return "simple_switch_grpc not found (make deps, or sudo ../shared/p4tools/install on Debian 12)"
    if not thrift_client_available():
        return "BMv2's thrift client (sswitch_runtime) does not import"
    return _why_no_mininet()


def _why_no_p4c() -> str | None:
    return None if shutil.which("p4c") else "p4c not found (make deps, or sudo ../shared/p4tools/install)"


def _skipif(reason: str | None):
    return pytest.mark.skipif(reason is not None, reason=reason or "")


needs_root = _skipif(_why_no_root())
needs_mininet = _skipif(_why_no_mininet())
needs_bmv2 = _skipif(_why_no_bmv2())
needs_p4c = _skipif(_why_no_p4c())
WHY_NO_PODMAN = podman_available()
needs_podman = _skipif(WHY_NO_PODMAN)


@pytest.fixture(scope="session")
def worker_image() -> str:
    """The default image, built through scripts/image.sh if it is missing (it holds no PCN Lab code:
    containers mount the checkout)."""
    if WHY_NO_PODMAN is not None:
        pytest.skip(WHY_NO_PODMAN)
    if image_exists(DEFAULT_IMAGE):
        return DEFAULT_IMAGE
    if os.environ.get("PCNLAB_NO_IMAGE_BUILD") == "1":
        pytest.skip(f"{DEFAULT_IMAGE} is absent and PCNLAB_NO_IMAGE_BUILD=1: make image")
    if shutil.which("debootstrap") is None:
        pytest.skip(f"{DEFAULT_IMAGE} is absent and debootstrap is not installed: make deps")
    start = time.monotonic()
    built = subprocess.run(["bash", str(ROOT / "scripts" / "image.sh")], capture_output=True, text=True,
                           timeout=1800)
    assert built.returncode == 0, f"scripts/image.sh failed:\n{built.stdout[-2000:]}{built.stderr[-2000:]}"
    print(f"\nbuilt {DEFAULT_IMAGE} in {time.monotonic() - start:.0f} s:\n{built.stdout}")
    return DEFAULT_IMAGE


@pytest.fixture
def run_folder(tmp_path, request):
    """A fresh run folder (and ledger) under a temporary results root."""
    from pcnlab.experiments.rundir import RunFolder

    with RunFolder.create(tmp_path / "results", "test", request.node.name[:60]) as run:
        yield run


@pytest.fixture(autouse=True, scope="session")
def session_calibration_file(tmp_path_factory) -> Path:
    """Tests judge fidelity against the machine they run on, measured once per session into a file of the
    session's (PCNLAB_CALIBRATION): the first `pcnlab run` measures it (as on a user's first run), or the
    `machine_calibration` fixture does; never the defaults of another machine, nor whatever `pcnlab
    calibrate` last wrote here."""
    saved = os.environ.get("PCNLAB_CALIBRATION")
    path = tmp_path_factory.mktemp("calibration") / "calibration.json"
    os.environ["PCNLAB_CALIBRATION"] = str(path)
    yield path
    if saved is None:
        os.environ.pop("PCNLAB_CALIBRATION", None)
    else:
        os.environ["PCNLAB_CALIBRATION"] = saved


# The session's first run: a user's first `pcnlab run` on a machine whose calibration file is another
# machine's (here: this one's identity under another host name): it must keep that file, measure this
# machine and judge the run by it (tests/experiments/test_calibrate_bmv2.py reads what it said).
FIRST_RUN = """
name: tiny
topology: {kind: star, hosts: 2, bw: 10, queue: 60}
mode: {kind: ecn, K: 20}
telemetry: 1
background:
  - {src: h2, dst: h1}
duration_s: 4
warmup_s: 0
"""
FOREIGN_HOST = "another-machine"


@dataclass(frozen=True)
class FirstRun:
    """What the session's first `pcnlab run` met, said and left."""

    foreign: dict                           # the other machine's calibration it found
    proc: subprocess.CompletedProcess
    results: Path


@pytest.fixture(scope="session")
def first_run(session_calibration_file, tmp_path_factory) -> FirstRun:
    reason = _why_no_bmv2()
    if reason:
        pytest.skip(reason)
    from pcnlab.calibration import machine_identity

    foreign = {"kind": "quick", "measured": "2026-01-01T00:00:00", "forward_pps": {"off": 1000.0, "every1": 500.0},
               "idle_lag_us": {"p50": 1.0, "p95": 2.0, "n": 1}, "machine": {**machine_identity(), "host": FOREIGN_HOST}}
    session_calibration_file.write_text(json.dumps(foreign))
    folder = tmp_path_factory.mktemp("first-run")
    (folder / "tiny.yaml").write_text(FIRST_RUN)
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "run", str(folder / "tiny.yaml"), "--results",
                           str(folder / "r"), "--no-plots"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    return FirstRun(foreign, proc, folder / "r")


@pytest.fixture(scope="session")
def machine_calibration(first_run, tmp_path_factory) -> dict:
    """This machine's calibration (the session's file, measured by the session's first run; measured
    now if that run could not): what a test that asserts trust, or takes a margin from the machine,
    judges by."""
    from pcnlab.experiments.calibrate import ensure_calibration

    return ensure_calibration(tmp_path_factory.mktemp("calibrate"))


# A switch whose threads waited for a CPU this share of the time (p95) was starved by the machine: the
# negative control (test_fidelity_bmv2's starved switch) must reach it, and a run meant to be light that
# is untrusted and reached it is skipped with its verdict: that machine cannot keep up with even it.
STARVED_WAIT = 0.3


def starved(fidelity: dict) -> str | None:
    """Why a run was untrusted because the machine starved its switches, or None (trusted, or untrusted
    for another reason). Measured either way: their threads waited for a CPU at least STARVED_WAIT of
    the time, or every finding is a switch's lag that the verdict put down to the machine (within its
    limit over the run's moments when the switch waited per wake no longer than at calibration)."""
    if fidelity.get("trusted"):
        return None
    checks = fidelity.get("checks") or {}
    waits = [b["wait"]["p95"] for b in (checks.get("cpu") or {}).get("bmv2", {}).values() if b.get("wait")]
    first = "; ".join(fidelity.get("reasons", [])[:1])
    if waits and max(waits) >= STARVED_WAIT:
        return (f"this machine starved even this light run's switches (threads waiting for a CPU "
                f"{max(waits):.0%} of the time): {first}")
    over = [lag for lag in (checks.get("lag_us") or {}).values() if not lag.get("ok", True)]
    if over and all(lag.get("machine") for lag in over) and len(over) == len(fidelity.get("reasons", [])):
        return f"this machine's CPU contention, not the switches' load, slowed even this light run: {first}"
    return None


def require_trusted(fidelity: dict) -> None:
    """A run meant to be light must be trusted; skipped, with the measured reason, where the machine starved it."""
    why = starved(fidelity)
    if why:
        pytest.skip(why)
    assert fidelity["trusted"] is True, fidelity.get("reasons")


@pytest.fixture(scope="module")
def module_results():
    """A results folder the runs of one test module share, removed after them."""
    folder = Path(tempfile.mkdtemp(prefix="pcnlab-results-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run_experiment(text: str, results: Path, name: str, timeout: float = 300, plots: bool = False) -> Path:
    """`pcnlab run` of the experiment `text` (written to results/<name>.yaml) into results/<name>, from
    the project's folder; asserts it succeeded and returns that results folder. Without plots and views
    unless `plots` (they cost ~5 s a sweep; the tests of plots and views ask for them)."""
    spec = results / f"{name}.yaml"
    spec.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "run", str(spec), "--results", str(results / name),
                           *([] if plots else ["--no-plots"])],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return results / name


VIEWED = small_experiment("viewed", "ecn", 16, 6, "sweep:\n  mode: [ecn, pcn]\n")


@pytest.fixture(scope="session")
def viewed_sweep(tmp_path_factory, machine_calibration) -> Path:
    """One short real BMv2 sweep (ecn, pcn; 6 s each, telemetry on every packet) that the view's tests
    and the example notebook's share, judged against this machine: its results/<experiment> folder."""
    return run_experiment(VIEWED, tmp_path_factory.mktemp("viewed"), "viewed") / "viewed"


def require_trusted_sweep(sweep: Path) -> None:
    """Every run of a sweep (its latest) trusted, or the test skipped where the machine starved one."""
    import json

    for fidelity in sorted(Path(sweep).glob("latest/*/fidelity.json")):
        require_trusted(json.loads(fidelity.read_text()))
