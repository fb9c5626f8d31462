"""`pcnlab doctor`: one line per requirement, exit 0 when everything needed is there."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from conftest import needs_root

LINE = re.compile(r"^(OK|MISSING|NOTE)\s+[\w ./-]+: .+$")


def doctor(*, user=None, env=None):
    cmd = [sys.executable, "-m", "pcnlab.app.cli", "doctor"]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def as_is():
    """One `pcnlab doctor` of this machine as it is, which the tests reading its lines share (it probes for
    real: several seconds)."""
    return doctor()


def test_every_line_is_a_verdict(as_is):
    proc = as_is
    lines = proc.stdout.strip().splitlines()
    checks, verdict = lines[:-1], lines[-1]
    assert len(checks) >= 10
    for line in checks:
        assert LINE.match(line), line
    names = {line.split(":")[0].split(None, 1)[1] for line in checks}
    for required in ("root", "mininet", "p4c", "simple_switch_grpc", "simple_switch_CLI",
                     "BMv2 thrift client", "python packages", "kernel qdiscs", "TCP congestion control",
                     "ECN sysctl", "ports"):
        assert required in names
    missing = [ln for ln in checks if ln.startswith("MISSING")]
    assert (proc.returncode == 0) == (not missing)
    assert verdict == ("everything needed is there" if not missing else
                       "something needed is missing: see the lines above")


def test_tools_report_versions_and_the_kernel(as_is):
    out = as_is.stdout
    if shutil.which("p4c"):
        assert re.search(r"^OK\s+p4c: p4c \d+\.\d+", out, re.M)
    if shutil.which("simple_switch_grpc"):
        assert re.search(r"^OK\s+simple_switch_grpc: \d+\.\d+\.\d+", out, re.M)
    available = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    cc_line = next(ln for ln in out.splitlines() if "TCP congestion control" in ln)
    for cc in available:
        assert cc in cc_line
    if "dctcp" not in available:
        assert "dctcp absent" in cc_line


@needs_root
def test_qdiscs_are_probed_for_real(as_is):
    line = next(ln for ln in as_is.stdout.splitlines() if "kernel qdiscs" in ln)
    # htb is what the bridge variant shapes with; every Mininet kernel has it.
    assert "have htb" in line


@needs_root
def test_not_root_fails_on_the_root_line():
    proc = doctor(user=65534)
    assert proc.returncode == 1
    assert re.search(r"^MISSING\s+root: .*sudo", proc.stdout, re.M)
