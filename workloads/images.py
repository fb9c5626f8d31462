"""What a worker image holds, known before a run's network starts.

A job's processes run the image's python3 with this checkout's code (containers.checkout_access), so an
image serves our PS, ring and LTP workers and a torchrun job's hook when its Python imports them and has
PyTorch. `probe` starts the image once, with the job's own CPU and memory limits and no network, and
imports what the job's processes import: what is missing, an image too old for the code, or a memory
limit PyTorch cannot start in is one line (UsageError) before anything else runs. What it found (the
image's id, its Python and PyTorch) goes into the run's versions.json.

`ensure_default_image` builds the default image on first use (scripts/image.sh, as `make image` does).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from pcnlab.errors import UsageError
from pcnlab.workloads.containers import (
    CHECKOUT,
    DEFAULT_IMAGE,
    ContainerSpec,
    checkout_access,
    choose_runtime,
    mount_flags,
    podman,
    remove,
    run_podman,
)

# What each kind of job's processes import (their modules import the rest, PyTorch among it).
KIND_MODULES = {"ps": ("pcnlab.workloads.ps", "pcnlab.workloads.ltp_ps"),
                "ring": ("pcnlab.workloads.ring",), "torchrun": ("pcnlab.workloads.hook",)}
OOM_KILLED = 137                     # 128 + SIGKILL: the kernel's OOM killer, inside the memory limit
NOT_FOUND = 127                      # podman: the command is not in the image
_PROBE_TIMEOUT_S = 120.0
# Run by the image's python3; prints one JSON line. Hand-written: no library checks an image's imports.
_PROBE = """
import importlib, json, sys
out = {"python": sys.version.split()[0]}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        out.update(missing=exc.name or str(exc), module=name)
        break
    except Exception as exc:
        out.update(error=f"{type(exc).__name__}: {exc}", module=name)
        break
try:
    import torch
    out["torch"] = torch.__version__
except ImportError:
    pass
print(json.dumps(out))
"""


@dataclass(frozen=True)
class ImageFacts:
    """An image as a job's processes found it."""

    image: str
    id: str
    python: str
    torch: str

    def to_dict(self) -> dict:
        return asdict(self)


def image_exists(image: str = DEFAULT_IMAGE) -> bool:
    if shutil.which("podman") is None:
        return False
    return run_podman("image", "exists", image).returncode == 0


def image_id(image: str) -> str | None:
    inspected = run_podman("image", "inspect", "--format", "{{.Id}}", image)
    if inspected.returncode != 0:
        return None
    return inspected.stdout.strip() or None


def probe(spec: ContainerSpec, kinds: tuple[str, ...]) -> ImageFacts:
    """Start `spec.image` once as the processes of `kinds` would (its limits, this checkout mounted) and
    import what they import; its facts, or UsageError naming what is missing."""
    if not image_exists(spec.image):
        hint = "build it with `make image`" if spec.image == DEFAULT_IMAGE else \
            f"build or load it here (podman images lists them; `make image` builds {DEFAULT_IMAGE})"
        raise UsageError(f"image {spec.image} is not on this machine: {hint}")
    modules = [m for kind in kinds for m in KIND_MODULES[kind]]
    read_only, env = checkout_access()
    name = f"pcnlab-probe-{uuid.uuid4().hex[:12]}"
    cmd = [*podman(), "run", "--rm", "--name", name, "--pull", "never", "--network", "none", "--log-driver", "none",
           *choose_runtime().run_flags, *spec.limit_flags(), *mount_flags((), read_only),
           *(f for k, v in env.items() for f in ("-e", f"{k}={v}")), "-w", str(CHECKOUT),
           spec.image, "python3", "-c", _PROBE, *modules]
    try:   # in a folder of its own: conmon leaves a file `oom` in its caller's folder when the limit kills
        with tempfile.TemporaryDirectory(prefix="pcnlab-probe-") as folder:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, cwd=folder)
    except BaseException as exc:      # a timeout, Ctrl-C: the client is gone, its container may not be
        remove(name)
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
        raise UsageError(f"image {spec.image}: importing PyTorch and the workers took over "
                         f"{_PROBE_TIMEOUT_S:.0f} s in it; is the machine overloaded?") from None
    what = f"image {spec.image} ({', '.join(kinds)} jobs)"
    if done.returncode == OOM_KILLED and spec.memory is not None:
        raise UsageError(f"memory {spec.memory} is too small to start PyTorch in {what}: the kernel killed it "
                         "while importing; give more, e.g. memory: 1g")
    if done.returncode == NOT_FOUND or "executable file `python3` not found" in done.stderr:
        raise UsageError(f"{what} has no python3: use an image with Python 3 and PyTorch "
                         f"(`make image` builds {DEFAULT_IMAGE})")
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"{what} could not start python3 (exit {done.returncode}): {last}") from None
    if "missing" in found:
        raise UsageError(f"{what} lacks the Python module {found['missing']!r}, which {found['module']} "
                         f"imports: the workers need Python 3.10+ with PyTorch and numpy (`make image` "
                         f"builds {DEFAULT_IMAGE})")
    if "error" in found:
        raise UsageError(f"{what}: its Python {found['python']} cannot import {found['module']} of this checkout "
                         f"({found['error']}); use Python 3.10+ with PyTorch")
    if "torch" not in found:
        raise UsageError(f"{what} has no PyTorch (import torch failed)")
    return ImageFacts(spec.image, image_id(spec.image) or "unknown", found["python"], found["torch"])


def ensure_default_image(say=print) -> None:
    """Build the default image if this machine has none (scripts/image.sh, what `make image` runs),
    saying so first and relaying its lines; UsageError if the build fails."""
    if image_exists(DEFAULT_IMAGE):
        return
    say(f"building the worker image {DEFAULT_IMAGE} first (once per machine; about 100 s, 1.2 GB; "
        "`make image` does the same)")
    script = Path(CHECKOUT) / "scripts" / "image.sh"
    proc = subprocess.Popen(["bash", str(script)], cwd=CHECKOUT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            if line.startswith("image: "):
                say(f"  {line.rstrip()}")
    except BaseException:        # Ctrl-C, SIGTERM: the build ends with the run (its own trap removes its folder)
        proc.terminate()
        proc.wait(60)
        raise
    if proc.wait() != 0 or not image_exists(DEFAULT_IMAGE):
        raise UsageError(f"building {DEFAULT_IMAGE} failed ({(lines or ['no output'])[-1]}); run `make image` "
                         "to see the whole log, or set containers: null to run the jobs in their hosts")


def prepare(wanted: dict[ContainerSpec, set[str]], say=print) -> dict[str, ImageFacts]:
    """Each container a sweep's jobs ask for (its spec, and the kinds of job that use it), ready before
    any network starts: the default image built if missing, then every one probed. Image -> its facts."""
    if any(spec.image == DEFAULT_IMAGE for spec in wanted):
        ensure_default_image(say)
    facts: dict[str, ImageFacts] = {}
    for spec, kinds in wanted.items():
        facts[spec.image] = probe(spec, tuple(sorted(kinds)))
    for fact in facts.values():
        say(f"containers: {fact.image} ({fact.id[:12]}): Python {fact.python}, PyTorch {fact.torch}")
    return facts
