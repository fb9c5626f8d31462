"""Bad input and missing prerequisites give one line on stderr, no traceback, and a non-zero exit."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, needs_bmv2, needs_root

PCNLAB = [sys.executable, "-m", "pcnlab.app.cli"]


def run_pcnlab(args, env=None, user=None, cwd=None):
    cmd = PCNLAB + args
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def assert_one_line_error(proc, fragment: str, code: int | None = None):
    assert proc.returncode != 0, proc.stdout
    if code is not None:
        assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("pcnlab: ")
    assert fragment in lines[0], lines[0]


@needs_root
def test_not_root_is_one_line(tmp_path):
    os.chmod(tmp_path, 0o777)
    proc = run_pcnlab(["slice", "--topology", "star", "--results", str(tmp_path)], user=65534, cwd=tmp_path)
    assert_one_line_error(proc, "needs root: run this command with sudo", code=1)


def test_unknown_topology_is_one_line(tmp_path):
    proc = run_pcnlab(["slice", "--topology", "stra", "--results", str(tmp_path)])
    assert_one_line_error(proc, "unknown topology 'stra' (did you mean 'star'?)", code=2)
    assert not (tmp_path / "slice").exists()  # nothing was started, no run folder made


def test_unknown_switch_kind_is_one_line(tmp_path):
    proc = run_pcnlab(["slice", "--switch", "ovs", "--results", str(tmp_path)])
    assert_one_line_error(proc, "unknown switch kind 'ovs'", code=2)


def test_missing_p4c_is_one_line(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # a PATH with nothing on it
    proc = run_pcnlab(["p4"], env=env)
    assert_one_line_error(proc, "p4c not found on PATH; install it", code=1)


@needs_root
def test_missing_switch_is_one_line(tmp_path):
    # The per-packet log runs the logging build, found on PATH: here PATH has no BMv2 on it.
    env = dict(os.environ, PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    if shutil.which("simple_switch_grpc", path=env["PATH"]):
        pytest.skip("simple_switch_grpc is installed in a system folder; cannot hide it")
    proc = run_pcnlab(["slice", "--topology", "star", "--packet-log", "--results", str(tmp_path)], env=env)
    assert_one_line_error(proc, "simple_switch_grpc not found on PATH", code=1)


@needs_bmv2
def test_port_in_use_is_one_line(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = run_pcnlab(["slice", "--topology", "star", "--grpc-base-port", str(port),
                           "--results", str(tmp_path)])
    assert_one_line_error(proc, f"gRPC port {port} is in use", code=2)
    # The failed run says why in its folder, and nothing of it is left running.
    status = next(Path(tmp_path).glob("slice/*/*/status.json")).read_text()
    assert '"failed"' in status and "in use" in status


def test_view_of_nothing_is_one_line(tmp_path):
    proc = run_pcnlab(["view", str(tmp_path / "missing")])
    assert_one_line_error(proc, "does not exist; give a results folder", code=2)
    proc = run_pcnlab(["view", str(tmp_path)])
    assert_one_line_error(proc, "no runs under", code=2)
    proc = run_pcnlab(["view", str(tmp_path), "--bins", "3"])
    assert_one_line_error(proc, "--bins 3: give at least 100", code=2)


@needs_root
def test_a_calibration_that_could_not_be_written_is_refused_before_it_measures(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_pcnlab(["calibrate", "--out", str(blocker / "calibration.json"), "--results", str(tmp_path)])
    assert_one_line_error(proc, f"cannot write the calibration to {blocker / 'calibration.json'}", code=2)
    assert not (tmp_path / "calibrate").exists()    # nothing was started


@needs_root
def test_results_that_cannot_be_made_are_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_pcnlab(["run", str(ROOT / "experiments" / "smoke.yaml"), "--results", str(blocker)])
    assert_one_line_error(proc, "cannot make the run folder", code=2)
