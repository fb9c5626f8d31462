"""One rank in an OCI container (podman) that joins its Mininet host's network namespace.

The launcher builds the command line here and starts it in the rank's host like any other process:
`podman run` stays attached, so the host's popen gets the rank's stdout, stderr and exit code. What
this machine's podman needs (its OCI runtime, its rlimits, its cgroup manager) is decided in one place,
`choose_runtime`. The default worker image is built by `make image` (scripts/image.sh, containers/);
images.py checks what an image holds.

The image gives Python and PyTorch; the project's code is this checkout, mounted read-only at its own
path, with containers/pythonpath (a link to pcnlab/) first on PYTHONPATH (`checkout_access`): a code
change needs no new image, and a user's image with a compatible Python and PyTorch runs our workers.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pcnlab.errors import UsageError

DEFAULT_IMAGE = "localhost/pcnlab-worker:latest"    # built by `make image` (containers/Containerfile)
BASE_IMAGE = "localhost/pcnlab-base:bookworm"       # its base: Debian bookworm by debootstrap, imported
CGROUP_V2_MARKER = Path("/sys/fs/cgroup/cgroup.controllers")  # present only on the unified (v2) hierarchy
# podman 4.3 starts conmon and runc with a hard nproc of 32768 (measured: /proc/<conmon>/limits), so a
# container may ask no more, whatever the launching process has (runc: "error setting rlimit type 6").
PODMAN_NPROC = 32768
MIN_MEMORY_BYTES = 6 * 1024 * 1024                  # podman refuses less
CHECKOUT = Path(__file__).resolve().parents[1]
PYTHONPATH_DIR = CHECKOUT / "containers" / "pythonpath"   # holds only `pcnlab`, a link to the checkout's
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)([bkmg]?)$", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PODMAN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ContainerSpec:
    """What a rank's container is: its image and optional CPU and memory limits (checked as made)."""

    image: str = DEFAULT_IMAGE
    cpus: float | None = None       # CPUs the container may use (podman --cpus), e.g. 1.5
    memory: str | None = None       # its memory limit (podman --memory): a number and b, k, m or g, e.g. "2g"

    def __post_init__(self) -> None:
        if not isinstance(self.image, str) or not self.image.strip() or any(c.isspace() for c in self.image):
            raise UsageError(f"container image {self.image!r}: name an image without spaces, "
                             f"e.g. {DEFAULT_IMAGE} (make image builds it)")
        if self.cpus is not None:
            available = os.cpu_count() or 1
            if isinstance(self.cpus, bool) or not isinstance(self.cpus, (int, float)):
                raise UsageError(f"container cpus {self.cpus!r}: give a number of CPUs, e.g. cpus: 1.5")
            if not 0.01 <= self.cpus <= available:
                raise UsageError(f"container cpus {self.cpus}: this machine has {available} CPUs; "
                                 f"give a number from 0.01 to {available}")
        if self.memory is not None:
            if memory_bytes(self.memory) < MIN_MEMORY_BYTES:
                raise UsageError(f"container memory {self.memory!r}: podman needs at least 6m; "
                                 "give e.g. memory: 2g")

    def limit_flags(self) -> list[str]:
        flags = [] if self.cpus is None else ["--cpus", f"{self.cpus:g}"]
        return flags + ([] if self.memory is None else ["--memory", self.memory.lower()])


def memory_bytes(memory: str) -> int:
    """Bytes in a podman memory size ("2g", "512m", "1073741824"); UsageError if it is not one."""
    match = _MEMORY.match(memory.strip()) if isinstance(memory, str) else None
    if match is None:
        raise UsageError(f"container memory {memory!r}: give a number and a unit b, k, m or g, e.g. memory: 2g")
    return int(float(match.group(1)) * _UNIT[match.group(2).lower()])


@dataclass(frozen=True)
class Runtime:
    """How this machine's podman is run: the global flags before `run`, and why (for `pcnlab doctor`)."""

    name: str                   # the OCI runtime: crun or runc
    why: str
    global_flags: tuple[str, ...]
    run_flags: tuple[str, ...]  # flags of `podman run` itself (rlimits)


def cgroup_v2() -> bool:
    return CGROUP_V2_MARKER.exists()


def choose_runtime() -> Runtime:
    """The one place that decides how podman runs here.

    - cgroup v2 (unified; Ubuntu 24.04): podman's default runtime crun works.
    - cgroup v1 or hybrid (Debian 12 on this machine): crun refuses ("cgroups in hybrid mode not
      supported"); runc works, so `--runtime runc`.
    - Without systemd as PID 1, podman's systemd cgroup manager and journald events cannot work:
      `--cgroup-manager cgroupfs --events-backend file`.
    - rlimits: podman's defaults (nofile 1048576) exceed what this process may grant (runc's
      setrlimit is then denied), so a container gets the launching process's own hard limits (what a
      rank started without a container gets), nproc at most PODMAN_NPROC.
    """
    if cgroup_v2():
        name, why = "crun", "cgroup v2 (unified): podman's default runtime crun"
    else:
        name, why = "runc", "cgroup v1/hybrid: crun refuses it (\"cgroups in hybrid mode not supported\"), runc works"
    flags: list[str] = ["--runtime", name]
    if not Path("/run/systemd/system").is_dir():
        flags += ["--cgroup-manager", "cgroupfs", "--events-backend", "file"]
        why += "; no systemd: cgroupfs and file events"
    run_flags: list[str] = []
    for option, limit, cap in (("nofile", resource.RLIMIT_NOFILE, None),
                               ("nproc", resource.RLIMIT_NPROC, PODMAN_NPROC)):
        bounds = [v for v in (resource.getrlimit(limit)[1], cap) if v not in (None, resource.RLIM_INFINITY)]
        if bounds:
            run_flags += ["--ulimit", f"{option}={min(bounds)}:{min(bounds)}"]
    return Runtime(name, why, tuple(flags), tuple(run_flags))


def runtime_flags() -> list[str]:
    """podman's global flags on this machine (before the subcommand): the runtime and cgroup manager."""
    return list(choose_runtime().global_flags)


def podman() -> list[str]:
    """The podman command with this machine's global flags, for any subcommand."""
    return ["podman", *runtime_flags()]


def container_name(run_id: str, job: str, rank: int) -> str:
    """A name unique to one rank of one run (podman names: letters, digits, _ . -)."""
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", f"pcnlab-{run_id}-{job}-r{rank}")


def run_argv(name: str, spec: ContainerSpec, netns_pid: int, argv: list[str], env: dict[str, str],
             mounts: list[Path], workdir: Path, cidfile: Path | None = None,
             read_only: tuple[Path, ...] = ()) -> list[str]:
    """`podman run` in the foreground: the rank's argv in `spec.image`, in the network namespace of
    process `netns_pid` (the Mininet host's shell), with each of `mounts` (writable) and `read_only` at
    the same path inside (a folder inside another is mounted after it, so the run folder inside a
    read-only checkout stays writable),
    `env` set and `workdir` as its working folder (inside one of `mounts`, or a folder the image has:
    podman fails otherwise). `cidfile`: podman writes the container's id there
    as it creates it (the ledger reads it back). It never pulls: a missing image fails at once."""
    if not _NAME.match(name):
        raise UsageError(f"container name {name!r}: use letters, digits, _ . - (container_name() makes one)")
    if not argv:
        raise UsageError(f"container {name}: nothing to run (empty argv)")
    bad = [k for k in env if not _ENV_KEY.match(k)]
    if bad:
        raise UsageError(f"container {name}: environment name {bad[0]!r} is not a valid variable name")
    runtime = choose_runtime()
    cmd = ["podman", *runtime.global_flags, "run", "--rm", "--name", name, "--pull", "never",
           "--network", _network(netns_pid), "--log-driver", "none",
           *runtime.run_flags, *spec.limit_flags()]
    if cidfile is not None:
        cmd += ["--cidfile", str(cidfile)]
    cmd += mount_flags(mounts, read_only)
    for key, value in env.items():
        cmd += ["-e", f"{key}={value}"]
    return cmd + ["-w", str(Path(workdir).resolve()), spec.image, *argv]


def mount_flags(mounts, read_only=()) -> list[str]:
    """podman's -v flags: each folder at its own path, parents before what they hold (a writable folder
    wins over a read-only one at the same path)."""
    wanted: dict[Path, str] = {Path(m).resolve(): "ro" for m in read_only}
    wanted.update({Path(m).resolve(): "rw" for m in mounts})
    flags = []
    for path in sorted(wanted, key=lambda p: len(p.parts)):
        flags += ["-v", f"{path}:{path}" + (":ro" if wanted[path] == "ro" else "")]
    return flags


def checkout_access() -> tuple[tuple[Path, ...], dict[str, str]]:
    """What a container needs to run this checkout's code with the image's Python: the folders to mount
    read-only (the checkout) and its variables (PYTHONPATH; no .pyc written into the read-only mount)."""
    return (CHECKOUT,), {"PYTHONPATH": str(PYTHONPATH_DIR), "PYTHONDONTWRITEBYTECODE": "1"}


def _network(netns_pid: int) -> str:
    """podman's --network for the namespace of process `netns_pid`: `ns:` its path, or `host` when it is
    the launching process's own (loopback runs): given that namespace as a path, podman applies its default
    sysctls there and runc refuses ("sysctl net.ipv4.ping_group_range not allowed in host network
    namespace")."""
    path = f"/proc/{netns_pid}/ns/net"
    try:
        if os.readlink(path) == os.readlink("/proc/self/ns/net"):
            return "host"
    except OSError:
        raise UsageError(f"no process {netns_pid} to take a network namespace from (is its host still up?)") from None
    return f"ns:{path}"


def podman_available(as_root: bool = True) -> str | None:
    """None when podman can run containers here, or one line saying why not and what fixes it.
    `as_root` False: whether it could once run as root (a file checked at --dry-run, run as you)."""
    if shutil.which("podman") is None:
        return "podman is not installed: `make deps`"
    runtime = choose_runtime()
    if shutil.which(runtime.name) is None:
        return f"{runtime.name} is not installed ({runtime.why}): `make deps`"
    if as_root and os.geteuid() != 0:
        return "containers join Mininet hosts' network namespaces, which needs root: run with sudo"
    return None


def run_podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*podman(), *args], capture_output=True, text=True, timeout=_PODMAN_TIMEOUT_S)


def container_exists(name_or_id: str) -> bool:
    if shutil.which("podman") is None:
        return False
    return run_podman("container", "exists", name_or_id).returncode == 0


def container_pid(name: str, alive, timeout_s: float) -> int | None:
    """The host pid of container `name`'s main process once it runs, while `alive()` (its podman client
    still runs), for at most `timeout_s`; None otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        found = run_podman("container", "inspect", "--format", "{{.State.Pid}}", name)
        pid = found.stdout.strip()
        if found.returncode == 0 and pid.isdigit() and int(pid) > 0:
            return int(pid)
        time.sleep(0.05)
    return None


def container_id(cidfile: Path) -> str | None:
    """The id podman wrote to a --cidfile, or None when it never created the container."""
    try:
        text = Path(cidfile).read_text().strip()
    except OSError:
        return None
    return text if re.fullmatch(r"[0-9a-f]{64}", text) else None


def remove(name: str) -> None:
    """Remove a container (by name or id), killing it first if it runs; quiet if it is gone. What
    podman no longer lists but left running for it is ended too (`_leftover_pids`)."""
    if shutil.which("podman") is None:
        return
    result = run_podman("rm", "--force", "--ignore", "--time", "0", name)
    if result.returncode != 0 and container_exists(name):
        raise RuntimeError(f"podman rm {name} failed: {result.stderr.strip().splitlines()[-1:]}")
    for pid in _leftover_pids(name):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _leftover_pids(name_or_id: str) -> list[int]:
    """The conmon of container `name_or_id` and its children (`runc init`), still running though podman
    no longer lists the container: a `podman run` killed while creating it leaves them (measured: 1 kill
    in 10 at 0.1 s after the start; `podman rm` then finds nothing). Found by the exact argument conmon
    was given (`-n NAME` or `-c ID`), never by a pattern; children first."""
    wanted = name_or_id.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"conmon") and any(flag in (b"-n", b"-c") and value == wanted
                                               for flag, value in zip(argv, argv[1:])):
            pid = int(entry.name)
            try:
                children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
            except OSError:
                children = []
            found += children + [pid]
    return found


def shell_vars() -> str:
    """What scripts/image.sh needs from here, as bash assignments (`eval` them): one source of truth."""
    import shlex

    runtime = choose_runtime()
    arrays = {"PODMAN_GLOBAL": runtime.global_flags, "PODMAN_ULIMITS": runtime.run_flags}
    lines = [f"{k}=({' '.join(shlex.quote(f) for f in v)})" for k, v in arrays.items()]
    scalars = {"PODMAN_RUNTIME": runtime.name, "PODMAN_WHY": runtime.why,
               "DEFAULT_IMAGE": DEFAULT_IMAGE, "BASE_IMAGE": BASE_IMAGE}
    return "\n".join(lines + [f"{k}={shlex.quote(v)}" for k, v in scalars.items()])

