"""versions.json: what produced a run. The project's git commit and whether its tree had changes, every
installed Python package, p4c, BMv2 (and which binary), the kernel, Python and PyTorch."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

from pcnlab.toolchain import bmv2_build, find_program, p4c_version

PROJECT_DIR = Path(__file__).resolve().parent.parent    # the checkout the pcnlab package is installed from


def git_state(folder: Path = PROJECT_DIR) -> dict:
    """{"commit", "dirty", "changed"} of the checkout, or {"commit": None, "note": why not}. Runs under
    sudo in a user's checkout (git's safe.directory) and never writes to it (no optional index locks)."""
    git = find_program("git")
    if git is None:
        return {"commit": None, "note": "git is not installed"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(git), "--no-optional-locks", "-c", f"safe.directory={folder}", "-C",
                               str(folder), *args], capture_output=True, text=True, timeout=30)

    try:
        head = run("rev-parse", "--verify", "HEAD")
        if head.returncode != 0:
            inside = run("rev-parse", "--is-inside-work-tree").stdout.strip() == "true"
            return {"commit": None, "note": "a git checkout without commits" if inside else
                    f"{folder} is not a git checkout"}
        changes = run("status", "--porcelain", "--untracked-files=normal")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"commit": None, "note": f"git failed: {exc}"}
    changed = [line for line in changes.stdout.splitlines() if line.strip()]
    return {"commit": head.stdout.strip(), "dirty": bool(changed), "changed": len(changed)}


def python_packages() -> dict[str, str]:
    """Every installed distribution this Python sees (the venv's and the system's), name -> version."""
    out: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name and name not in out:       # the first on sys.path wins, as for imports
            out[name] = dist.version
    return dict(sorted(out.items(), key=lambda item: item[0].lower()))


def versions() -> dict:
    out = {"python": platform.python_version(), "kernel": platform.release(), "machine": platform.machine(),
           "git": git_state()}
    if find_program("p4c"):
        out["p4c"] = p4c_version()
    if find_program("simple_switch_grpc"):
        build = bmv2_build(False)
        out["bmv2"] = build.version()
        out["bmv2_binary"] = str(build.switch)
    packages = python_packages()
    if "torch" in packages:
        out["torch"] = packages["torch"]
    out["packages"] = packages
    return out
