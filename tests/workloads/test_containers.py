"""A rank in a podman container (workloads/containers.py): the command line this machine needs, a real
container from the default image in a real network namespace, and its removal by the run ledger.

Real podman throughout. The image is built once per session by scripts/image.sh (what `make image`
runs) when it is missing: 100 s from nothing on this machine (2 cores: debootstrap 48 s, the build 48 s),
about 50 s when the base image exists. PCNLAB_NO_IMAGE_BUILD=1 skips those tests instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from pcnlab.errors import UsageError
from pcnlab.workloads.containers import (
    ContainerSpec,
    choose_runtime,
    container_exists,
    remove,
    run_argv,
    runtime_flags,
)

from pcnlab.workloads.images import image_exists

from conftest import ROOT, needs_podman, needs_root


@pytest.fixture
def netns():
    """A network namespace held by a sleeping process, with a veth pair only it has (as a Mininet host)."""
    holder = subprocess.Popen(["unshare", "--net", "sleep", "120"])
    try:
        path = f"/proc/{holder.pid}/ns/net"
        deadline = time.monotonic() + 5
        while os.readlink(path) == os.readlink("/proc/self/ns/net") and time.monotonic() < deadline:
            time.sleep(0.01)  # unshare has not switched yet
        intf = f"pcnt{uuid.uuid4().hex[:6]}"
        for cmd in (["ip", "link", "add", intf, "type", "veth", "peer", "name", f"{intf}p"],
                    ["ip", "link", "set", intf, "up"],
                    ["ip", "addr", "add", "10.77.0.5/24", "dev", intf]):
            subprocess.run(["nsenter", "-t", str(holder.pid), "-n", *cmd], check=True)
        yield holder.pid, intf
    finally:
        holder.kill()
        holder.wait()


def _running(name: str) -> bool:
    """The container runs (not only created: a podman client killed before it started it removes it)."""
    from pcnlab.workloads.containers import podman

    state = subprocess.run([*podman(), "container", "inspect", "--format", "{{.State.Running}}", name],
                           capture_output=True, text=True, timeout=60)
    return state.stdout.strip() == "true"


def _name() -> str:
    return f"pcnlab-test-{uuid.uuid4().hex[:10]}"


# --- (a) the command line on this machine -----------------------------------------------------------

def test_runtime_follows_the_cgroup_mode():
    runtime = choose_runtime()
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    assert runtime.name == ("crun" if v2 else "runc")
    flags = runtime_flags()
    assert flags[:2] == ["--runtime", runtime.name]
    if not Path("/run/systemd/system").is_dir():
        assert "--cgroup-manager" in flags and flags[flags.index("--cgroup-manager") + 1] == "cgroupfs"
    ulimits = [runtime.run_flags[i + 1] for i, f in enumerate(runtime.run_flags) if f == "--ulimit"]
    import resource
    hard_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard_nofile != resource.RLIM_INFINITY:
        assert f"nofile={hard_nofile}:{hard_nofile}" in ulimits


@needs_root   # the netns fixture makes a network namespace
def test_run_argv_shape(netns, tmp_path):
    pid, _ = netns
    spec = ContainerSpec("localhost/some-image:1", cpus=1.5, memory="2G")
    argv = run_argv("pcnlab-r1-job0-r0", spec, pid, ["python3", "train.py", "--steps", "5"],
                    {"RANK": "0", "MASTER_ADDR": "10.0.0.1"}, [tmp_path, tmp_path], tmp_path,
                    cidfile=tmp_path / "cid")
    assert argv[0] == "podman" and argv[1:1 + len(runtime_flags())] == runtime_flags()
    run = argv.index("run")
    assert argv[run:run + 4] == ["run", "--rm", "--name", "pcnlab-r1-job0-r0"]
    pairs = {argv[i]: argv[i + 1] for i in range(run + 1, argv.index("localhost/some-image:1"))
             if argv[i].startswith("--") and argv[i] not in ("--rm", "--ulimit")}
    assert pairs["--network"] == f"ns:/proc/{pid}/ns/net"
    assert pairs["--pull"] == "never"
    assert pairs["--cpus"] == "1.5" and pairs["--memory"] == "2g"
    assert pairs["--cidfile"] == str(tmp_path / "cid")
    assert argv.count("-v") == 1 and argv[argv.index("-v") + 1] == f"{tmp_path}:{tmp_path}"
    assert ["-e", "RANK=0"] == argv[argv.index("-e"):argv.index("-e") + 2]
    assert "MASTER_ADDR=10.0.0.1" in argv
    assert argv[-7:] == ["-w", str(tmp_path), "localhost/some-image:1", "python3", "train.py", "--steps", "5"]
    assert "-d" not in argv and "--detach" not in argv      # attached: the launcher waits for its exit code


def test_run_argv_without_limits_has_none(tmp_path):
    argv = run_argv("c1", ContainerSpec("img"), os.getpid(), ["true"], {}, [], tmp_path)
    assert "--cpus" not in argv and "--memory" not in argv and "-v" not in argv and "-e" not in argv
    # This process's own namespace (a loopback run) is podman's host network: as a path, runc refuses it.
    assert argv[argv.index("--network") + 1] == "host"


def test_a_gone_hosts_namespace_is_one_line(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(UsageError, match=f"no process {gone.pid} to take a network namespace from"):
        run_argv("c1", ContainerSpec("img"), gone.pid, ["true"], {}, [], tmp_path)


# --- (d) bad values, one line each ------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    ({"image": ""}, "image"),
    ({"image": "my image"}, "without spaces"),
    ({"image": "img", "cpus": 0}, "0.01"),
    ({"image": "img", "cpus": -1.0}, "0.01"),
    ({"image": "img", "cpus": 10_000.0}, "this machine has"),
    ({"image": "img", "cpus": "two"}, "number of CPUs"),
    ({"image": "img", "memory": "2 GB"}, "unit b, k, m or g"),
    ({"image": "img", "memory": "lots"}, "e.g. memory: 2g"),
    ({"image": "img", "memory": "1m"}, "at least 6m"),
])
def test_bad_spec_is_one_line(kwargs, words):
    with pytest.raises(UsageError) as err:
        ContainerSpec(**kwargs)
    message = str(err.value)
    assert "\n" not in message and words in message, message


@pytest.mark.parametrize("name, env, argv, words", [
    ("bad name!", {}, ["true"], "container name"),
    ("ok", {"1BAD": "x"}, ["true"], "environment name"),
    ("ok", {}, [], "nothing to run"),
])
def test_bad_run_is_one_line(tmp_path, name, env, argv, words):
    with pytest.raises(UsageError) as err:
        run_argv(name, ContainerSpec("img"), 1, argv, env, [], tmp_path)
    assert "\n" not in str(err.value) and words in str(err.value)


def test_good_values_pass():
    assert ContainerSpec("img", cpus=1, memory="512m").limit_flags() == ["--cpus", "1", "--memory", "512m"]
    assert ContainerSpec("img", memory="1073741824").memory == "1073741824"


# --- podman itself -----------------------------------------------------------------------------------

@needs_podman
def test_missing_image_and_container_are_quiet():
    assert not image_exists("localhost/pcnlab-no-such-image:0")
    name = _name()
    assert not container_exists(name)
    remove(name)  # gone already: no error


# --- (b) a container joins a network namespace -----------------------------------------------------

@needs_podman
def test_container_sees_its_hosts_namespace(worker_image, netns, tmp_path):
    pid, intf = netns
    script = textwrap.dedent("""
        import os, pathlib, sys
        names = sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:])
        v2, v1 = pathlib.Path('/sys/fs/cgroup/memory.max'), pathlib.Path('/sys/fs/cgroup/memory/memory.limit_in_bytes')
        limit = (v2 if v2.exists() else v1).read_text().strip()
        open(os.environ['OUT'], 'w').write(' '.join(names) + '\\n' + limit + '\\n' + os.getcwd())
        print('rank', os.environ['RANK'], 'ok'); print('to stderr', file=sys.stderr); sys.exit(3)
    """)
    out = tmp_path / "seen.txt"
    spec = ContainerSpec(worker_image, cpus=1, memory="256m")
    argv = run_argv(_name(), spec, pid, ["python3", "-c", script], {"RANK": "2", "OUT": str(out)},
                    [tmp_path], tmp_path)
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    assert proc.returncode == 3, proc.stderr                    # the rank's own exit code
    assert proc.stdout == "rank 2 ok\n" and "to stderr" in proc.stderr
    names, limit, cwd = out.read_text().split("\n")
    assert set(names.split()) == {"lo", intf, f"{intf}p"}       # the namespace's interfaces, not ours
    assert int(limit) == 256 * 1024 * 1024
    assert cwd == str(tmp_path)
    print(f"\ncontainer ran a python3 -c in {took:.2f} s (podman run to exit)")


@needs_podman
def test_container_start_overhead(worker_image, netns, tmp_path):
    """How much a container adds to starting a rank: `python3 -c pass` in one vs. bare."""
    pid, _ = netns
    times = []
    for _ in range(3):
        start = time.monotonic()
        subprocess.run(run_argv(_name(), ContainerSpec(worker_image), pid, ["python3", "-c", "pass"], {},
                                [tmp_path], tmp_path), check=True, capture_output=True, timeout=120)
        times.append(time.monotonic() - start)
    start = time.monotonic()
    subprocess.run(["nsenter", "-t", str(pid), "-n", "python3", "-c", "pass"], check=True, timeout=60)
    bare = time.monotonic() - start
    print(f"\ncontainer start: {min(times):.2f} s (best of 3) vs {bare:.2f} s bare")
    assert min(times) < 30


# --- (c) a killed run's container is removed by pcnlab clean -------------------------------------------

OWNER = """
import subprocess, sys, time
from pathlib import Path
from pcnlab.ledger import RunLedger
from pcnlab.workloads.containers import ContainerSpec, run_argv
run_dir, state_dir, name, image, pid = sys.argv[1:6]
ledger = RunLedger("containertest", Path(run_dir), Path(state_dir))
cid = Path(run_dir) / (name + ".cid")
ledger.add_container(name, cid)
argv = run_argv(name, ContainerSpec(image), int(pid), ["sleep", "300"], {}, [Path(run_dir)], Path(run_dir),
                cidfile=cid)
podman = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ledger.add_process(podman.pid, "podman run " + name)
print(podman.pid, flush=True)
time.sleep(600)
"""


@needs_podman
def test_clean_removes_a_dead_runs_container(worker_image, netns, tmp_path):
    from pcnlab.topologies.cleanup import clean_stale

    pid, _ = netns
    name, state = _name(), tmp_path / "state"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "run"), str(state), name, worker_image,
                              str(pid)], stdout=subprocess.PIPE, text=True)
    podman_pid = None
    try:
        podman_pid = int(owner.stdout.readline())
        deadline = time.monotonic() + 60
        while not (_running(name) and (tmp_path / "run" / f"{name}.cid").exists()):
            assert time.monotonic() < deadline, "the container never started"
            time.sleep(0.2)
        owner.send_signal(signal.SIGKILL)                      # the run dies without tearing down
        owner.wait()
        os.kill(podman_pid, signal.SIGKILL)                    # and its podman client with it: the container stays
        time.sleep(0.5)
        assert container_exists(name)
        reports = clean_stale(state)
        assert len(reports) == 1 and reports[0].removed_containers == [name], reports
        assert "1 containers" in reports[0].summary()
        assert not container_exists(name)
        assert clean_stale(state) == []                          # cleaned once, whole
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        remove(name)


@needs_podman
def test_a_podman_run_killed_while_creating_leaves_nothing_after_remove(worker_image, netns, tmp_path):
    """A `podman run` SIGKILLed 0.1 s after it started is at times mid-creation: its conmon and `runc
    init` stay, and podman no longer lists the container (measured: 1 kill in 10). remove() ends them
    too; after it, no process carries the container's name, whichever way each kill fell."""
    from pcnlab.workloads.containers import _leftover_pids

    pid, _ = netns
    left_behind = 0
    for _ in range(10):
        name = _name()
        client = subprocess.Popen(run_argv(name, ContainerSpec(worker_image), pid, ["sleep", "60"], {}, [tmp_path],
                                           tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.1)
        client.kill()
        client.wait()
        time.sleep(0.3)
        left_behind += bool(_leftover_pids(name)) and not container_exists(name)   # podman lost it
        remove(name)
        time.sleep(0.3)
        assert not _leftover_pids(name) and not container_exists(name)
        assert not [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, name)]
    print(f"\n10 podman clients killed at 0.1 s: nothing left after remove() ({left_behind} of "
          f"them had a conmon running while podman listed no container)")


def _cmdline_has(pid: str, name: str) -> bool:
    try:
        return name.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


# --- (e) a torchrun job's ranks in containers (launcher.py), on this machine's loopback ----------------

EXAMPLES = ROOT / "examples"


@needs_podman
def test_the_same_ddp_script_trains_alike_in_containers_and_leaves_none(worker_image, tmp_path):
    from pcnlab.jsonlines import read_json_lines
    from pcnlab.workloads import JobSpec, Workloads

    work = Workloads(tmp_path)
    args = ("--steps", "30", "--compute-ms", "10")
    bare = work.start_job(JobSpec(name="bare", kind="torchrun", workers=("h1", "h2"),
                                  argv=(str(EXAMPLES / "ddp_train.py"), *args))).wait(timeout=180)
    boxed = work.start_job(JobSpec(name="boxed", kind="torchrun", workers=("h1", "h2"),
                                   argv=(str(EXAMPLES / "ddp_train_hooked.py"), *args),
                                   container=ContainerSpec(worker_image, cpus=1, memory="1g"))).wait(timeout=180)
    printed = boxed.procs[0].output.read_text()
    assert printed == bare.procs[0].output.read_text()       # same seeds, same losses, same accuracy
    assert printed.splitlines()[-1].startswith("accuracy ")
    for p in boxed.procs:
        assert p.argv[:2] == ["podman", *runtime_flags()][:2] and worker_image in p.argv
        assert not container_exists(p.container)              # --rm: gone once the rank ended
        its = [r for r in read_json_lines(p.log)[1] if r["type"] == "iteration"]
        assert [r["iter"] for r in its] == list(range(30))    # the image's hook wrote into the mounted run folder


@needs_podman
def test_a_stopped_job_whose_podman_was_killed_leaves_no_container(worker_image, tmp_path):
    from pcnlab.workloads import JobSpec, Workloads

    job = Workloads(tmp_path).start_job(JobSpec(
        name="sleepy", kind="torchrun", workers=("h1", "h2"), container=ContainerSpec(worker_image),
        argv=("python3", "-c", "import time; time.sleep(120)")))
    try:
        deadline = time.monotonic() + 60
        while not all(_running(p.container) for p in job.procs):
            assert time.monotonic() < deadline, "the containers never started"
            time.sleep(0.2)
        for p in job.procs:
            p.signal(signal.SIGKILL)           # the podman clients die; their containers go on
        time.sleep(0.5)
        assert all(container_exists(p.container) for p in job.procs)
    finally:
        job.stop()
    assert not any(container_exists(p.container) for p in job.procs)
