"""The Makefile as the README uses it: `make` lists every target; `make doctor` and `make clean` never
install anything, and without a .venv say so in one line naming the fix."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), *args], capture_output=True,
                          text=True, timeout=60)


def test_make_alone_lists_every_target_with_one_line():
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    out = make()
    assert out.returncode == 0, out.stderr
    listed = {line.split()[1]: line for line in out.stdout.splitlines() if line.strip().startswith("make ")}
    assert set(listed) == set(phony)
    assert all(len(line.split(None, 2)) == 3 for line in listed.values())     # each with its description


@pytest.mark.parametrize("target", ["doctor", "clean"])
def test_doctor_and_clean_install_nothing(target, tmp_path):
    plan = make("-n", target)
    assert plan.returncode == 0 and "deps.sh" not in plan.stdout and "pip" not in plan.stdout, plan.stdout
    missing = make(target, f"VENV={tmp_path / 'no-venv'}")
    assert missing.returncode != 0 and missing.stdout == ""
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and "is missing" in lines[0] and "run `make deps` first" in lines[0], missing.stderr
    assert not (tmp_path / "no-venv").exists()
