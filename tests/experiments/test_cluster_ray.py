"""Sweeps on a real Ray cluster of two nodes on this machine (ray.cluster_utils.Cluster, each node
advertising `pcnlab: 1`), through `pcnlab run FILE --cluster ADDRESS`: the folders land in the layout of
a local sweep with the same report, a node lost mid-run has its run done again on the other, a node on
other code is refused in one line, Ctrl-C leaves nothing, and bad addresses are one line. The machine
lock serializes the two nodes' networks here, so these tests assert completeness and layout, not trust.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, needs_root

ray = pytest.importorskip("ray", reason="Ray is not installed: make deps installs it")

from pcnlab.ledger import DEFAULT_STATE_DIR, index_entries  # noqa: E402
from pcnlab.status import status_of  # noqa: E402

pytestmark = [needs_root, pytest.mark.slow]

SPEC = """
name: spread
topology: {{kind: star, hosts: 3, bw: 20}}
switch: bridge
jobs:
  - {{name: gen, kind: generator, pattern: ps, ps: h1, workers: [h2], burst_bytes: 20000, period_ms: 100,
     iterations: {iterations}}}
background:
  - {{src: h3, dst: h1}}
duration_s: {duration}
warmup_s: 0.5
sweep:
  jobs.0.period_ms: {periods}
"""


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"pcnlab": 1},
                                                         "include_dashboard": False})
    made.add_node(num_cpus=1, resources={"pcnlab": 1})
    made.wait_for_nodes()
    yield made
    made.shutdown()


def _spec(tmp_path: Path, periods="[100, 150]", iterations=20, duration=4) -> Path:
    spec = tmp_path / "spread.yaml"
    spec.write_text(SPEC.format(periods=periods, iterations=iterations, duration=duration))
    return spec


def _pcnlab(*args, cwd=ROOT, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pcnlab.app.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def test_a_sweep_lands_in_the_local_layout_with_the_same_report(cluster, tmp_path):
    spec = _spec(tmp_path)
    done = _pcnlab("run", str(spec), "--cluster", cluster.address, "--results", str(tmp_path / "far"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count(f" on {platform.node()}") == 2 and done.stdout.count("fidelity:") == 2
    sweep = (tmp_path / "far" / "spread" / "latest").resolve()
    points = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert points == ["period_ms=100", "period_ms=150"]
    for point in points:
        run = sweep / point
        assert json.loads((run / "status.json").read_text())["status"] == "finished"
        assert (run / "metrics.json").exists() and (run / "fidelity.json").exists()
        assert json.loads((run / "versions.json").read_text())["node"]["host"] == platform.node()
        assert json.loads((run / "fidelity.json").read_text())["checks"]["node"] == platform.node()
    record = json.loads((sweep / "cluster.json").read_text())
    assert [r["run"] for r in record["runs"]] == points
    assert all(r["attempts"][-1]["status"] == "finished" for r in record["runs"])
    local = _pcnlab("run", str(spec), "--results", str(tmp_path / "near"))
    assert local.returncode == 0, local.stdout[-3000:]
    near = json.loads(((tmp_path / "near" / "spread" / "latest").resolve() / "summary.json").read_text())
    far = json.loads((sweep / "summary.json").read_text())
    assert _shape(far) == _shape(near)
    assert {p.name for p in sweep.iterdir()} - {"cluster.json"} == \
        {p.name for p in (tmp_path / "near" / "spread" / "latest").resolve().iterdir()}


def _shape(value):
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value[:1]]
    return type(value).__name__


def test_a_node_lost_mid_run_has_its_run_done_again_on_the_other(cluster, tmp_path):
    node = cluster.add_node(num_cpus=1, resources={"pcnlab": 1})
    cluster.wait_for_nodes()
    spec = _spec(tmp_path, periods="[100, 120, 140]", iterations=50, duration=7)
    with _sweep(spec, cluster, tmp_path) as sweep:
        time.sleep(8)                                # three runs submitted: one on each of the three nodes
        cluster.remove_node(node, allow_graceful=False)
        out = _finish(sweep, within_s=180)
    assert sweep.returncode == 0, out[-4000:]
    assert "lost on node" in out and "running it again on another machine" in out
    record = json.loads(((tmp_path / "far" / "spread" / "latest").resolve() / "cluster.json").read_text())
    lost = [r for r in record["runs"] if r["attempts"][0]["status"] == "lost"]
    assert len(lost) == 1 and lost[0]["attempts"][-1]["status"] == "finished"
    assert all(r["attempts"][-1]["status"] == "finished" for r in record["runs"])
    from pcnlab.experiments.cluster import WORK_ROOT

    assert not list(WORK_ROOT.glob("*")), "the lost node's run folder was not removed by the next run"


def test_a_node_on_other_code_is_refused_in_one_line(cluster, tmp_path, monkeypatch):
    """The submitter on another commit (its facts as another checkout's would be): every real node refuses."""
    from pcnlab.experiments import cluster_sweep
    from pcnlab.experiments.cluster import node_facts
    from pcnlab.experiments.config import load_experiment

    spec = _spec(tmp_path)
    monkeypatch.setattr(cluster_sweep, "node_facts", lambda: {**node_facts(), "commit": "0" * 40})
    sweep = cluster_sweep.ClusterSweep(load_experiment(spec), spec, [], cluster.address, tmp_path / "r",
                                       say=lambda line: None)
    with pytest.raises(cluster_sweep.NodeRefused) as refused:
        sweep.run_all()
    message = str(refused.value)
    assert "\n" not in message and "runs other code than this machine: commit 000000000000 here" in message
    assert not list((tmp_path / "r").rglob("status.json"))          # no run began


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_leaves_nothing_on_the_nodes(cluster, tmp_path, stop):
    spec = _spec(tmp_path, periods="[100, 150]", iterations=200, duration=30)
    assert _running_ledgers() == [], "a run of an earlier test is still up"
    with _sweep(spec, cluster, tmp_path) as sweep:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _running_ledgers():
            time.sleep(0.5)
        assert _running_ledgers(), "no run started on the nodes"
        time.sleep(3)
        sweep.send_signal(stop)
        out = _finish(sweep, within_s=180)
    assert sweep.returncode == 130, out[-3000:]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _running_ledgers():
        time.sleep(0.5)
    assert _running_ledgers() == []
    clean = _pcnlab("clean")
    assert "nothing to clean" in clean.stdout, clean.stdout


@contextlib.contextmanager
def _sweep(spec: Path, cluster, tmp_path: Path):
    """`pcnlab run SPEC --cluster` as a process; stopped with Ctrl-C (then killed) if a test leaves it
    running, so that a failing test leaves no run up for the next one."""
    sweep = subprocess.Popen([sys.executable, "-m", "pcnlab.app.cli", "run", str(spec), "--cluster", cluster.address,
                              "--results", str(tmp_path / "far")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, cwd=ROOT)
    try:
        yield sweep
    finally:
        if sweep.poll() is None:
            _stop(sweep, within_s=150)


def _stop(sweep: subprocess.Popen, within_s: float) -> str:
    """Ctrl-C to the sweep, killed if it has not ended `within_s` after; what it printed."""
    sweep.send_signal(signal.SIGINT)
    try:
        return sweep.communicate(timeout=within_s)[0]
    except subprocess.TimeoutExpired:
        sweep.kill()
        return sweep.communicate()[0]


def _finish(sweep: subprocess.Popen, within_s: float) -> str:
    """The sweep's output once it ends; a failure with what it printed so far when it does not end in
    time (below pytest's own timeout, which would lose it)."""
    try:
        return sweep.communicate(timeout=within_s)[0]
    except subprocess.TimeoutExpired:
        up = _runs_up()
        out = _stop(sweep, within_s=60)
        pytest.fail(f"the sweep did not end within {within_s:.0f} s; runs up then: {up}; it printed:\n{out[-4000:]}")


def _runs_up() -> list[str]:
    """Each run with a ledger on this machine: its owner, whether that process lives and where it
    waits in the kernel, and its status (what a hung sweep is waiting for)."""
    found = []
    for entry, data in index_entries(Path(DEFAULT_STATE_DIR)):
        if data is None:
            found.append(f"{entry.name}: unreadable")
            continue
        try:
            wchan = Path(f"/proc/{data.owner_pid}/wchan").read_text() or "running"
        except OSError:
            wchan = "-"
        found.append(f"{data.run_id} pid {data.owner_pid} {'alive' if data.owner_alive() else 'dead'} (wchan {wchan}), "
                     f"status {status_of(data.run_dir)}")
    return found


def _running_ledgers() -> list[str]:
    """This experiment's runs that are up on this machine (any node's): their ledger's index entries,
    which a run removes as it ends, having removed what it started."""
    return sorted(p.name for p in Path(DEFAULT_STATE_DIR).glob("spread-*.json"))


@pytest.mark.parametrize("address, words", [("127.0.0.1:1", "no Ray cluster at 127.0.0.1:1")])
def test_no_cluster_at_the_address_is_one_line(address, words, tmp_path):
    done = _pcnlab("run", str(_spec(tmp_path)), "--cluster", address, timeout=60)
    assert done.returncode == 2 and words in done.stderr and done.stderr.count("\n") == 1


def test_status_lists_each_machine_with_its_commit_and_calibration(cluster):
    import subprocess as sp

    done = _pcnlab("cluster", "status", cluster.address, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    head = sp.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = done.stdout.splitlines()[1:]
    assert len(rows) == len([n for n in cluster.list_all_nodes()]) and all(r.startswith(platform.node()) for r in rows)
    assert all(head[:12] in r and (" no " in r or " yes " in r) for r in rows), done.stdout


def test_a_cluster_without_pcnlab_machines_then_a_node_without_root_refuse_in_one_line(tmp_path):
    """A head that offers no pcnlab: one line. Then a machine whose Ray runs as a user (here: nobody,
    joined to that head) cannot start networks: the sweep stops in one line naming it."""
    import pwd
    import shutil

    from ray.cluster_utils import Cluster

    head = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        done = _pcnlab("run", str(_spec(tmp_path)), "--cluster", head.address, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "has no node offering pcnlab" in done.stderr and done.stderr.count("\n") == 1
        pwd.getpwnam("nobody")
    except KeyError:
        head.shutdown()
        pytest.skip("no user nobody on this machine to run a Ray node as")
    except BaseException:
        head.shutdown()
        raise
    import tempfile

    temp = Path(tempfile.mkdtemp(prefix="pcnlab-ray-nobody-"))      # in /tmp: the user can reach it
    shutil.chown(temp, "nobody")
    ray_cli = str(Path(sys.executable).parent / "ray")
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
    env = {"PATH": os.environ["PATH"], "HOME": str(temp)}
    try:
        joined = subprocess.run([*as_nobody, ray_cli, "start", "--address", head.address, "--num-cpus", "1",
                                 "--resources", '{"pcnlab": 1}', "--temp-dir", str(temp), "--disable-usage-stats"],
                                capture_output=True, text=True, timeout=180, env=env)
        if joined.returncode != 0:
            pytest.skip(f"a Ray node as nobody did not start here: {joined.stderr.strip().splitlines()[-1:]}")
        done = _pcnlab("run", str(_spec(tmp_path)), "--cluster", head.address, "--results", str(tmp_path / "r"),
                       timeout=300)
    finally:
        subprocess.run([*as_nobody, ray_cli, "stop"], capture_output=True, timeout=120, env=env)   # nobody's Ray only
        head.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "runs Ray as a user; runs need root" in done.stderr and done.stderr.count("\n") == 1
