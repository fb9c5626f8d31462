"""This machine made slower on purpose: a command (the test suite, a run) held to a share of the
machine's CPU by a cgroup's CPU quota, with CPU hogs beside it, as on a shared server or a VM that
loses CPU to its neighbours. What passes here passes on a slower machine than this one.

    sudo .venv/bin/python bench/slow_machine.py --cpu-pct 60 --hogs 1 -- .venv/bin/python -m pytest
    sudo .venv/bin/python bench/slow_machine.py --cpu-pct 60 --hogs 1 -- .venv/bin/pcnlab run experiments/smoke.yaml

The quota: cgroup v1's cpu.cfs_quota_us over cpu.cfs_period_us (Debian 12's hybrid mode), or v2's
cpu.max (Ubuntu 24.04), on a cgroup of its own that the command (and everything it starts) runs in.
The hogs: busy Python loops outside that cgroup, each wanting a whole core. Both are removed when the
command ends, is interrupted or fails: the hogs ended, the cgroup removed once empty. Prints one line
of what was done and how the command ended; exits with the command's status.

Hand-written: the few writes to /sys/fs/cgroup that this needs are simpler than a dependency
(systemd-run --scope would do it where systemd runs, which it does not in containers and CI here).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pcnlab.cmdline import OneLineParser, natural
from pcnlab.errors import UsageError

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
HOG = "while True: pass"


@dataclass(frozen=True)
class CpuQuota:
    """A cgroup holding its processes to `cores` cores' worth of CPU time."""

    path: Path
    version: int
    cores: float
    note: str = ""              # what it could not set (v1's realtime budget, when others hold it)

    @classmethod
    def create(cls, cores: float, name: str) -> "CpuQuota":
        quota = int(cores * PERIOD_US)
        if (ROOT / "cgroup.controllers").exists():          # v2: cpu.max, with the cpu controller enabled
            if "cpu" not in (ROOT / "cgroup.controllers").read_text().split():
                raise UsageError("cgroup v2 without the cpu controller: no CPU quota can be set here")
            control = ROOT / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu")
            path = ROOT / name
            path.mkdir()
            try:
                (path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            except OSError:
                path.rmdir()
                raise
            return cls(path, 2, cores)
        base = next((ROOT / d for d in ("cpu", "cpu,cpuacct") if (ROOT / d / "cpu.cfs_quota_us").exists()), None)
        if base is None:
            raise UsageError("no cgroup CPU controller under /sys/fs/cgroup (cpu.max or cpu.cfs_quota_us)")
        path = base / name
        path.mkdir()
        try:
            (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError:
            path.rmdir()                 # nothing left behind when the quota cannot be set
            raise
        # v1 gives a new group no realtime budget: a realtime switch (switch.realtime) could not start in it.
        # Its share of the parent's budget, as for the rest of its CPU.
        parent = int((base / "cpu.rt_runtime_us").read_text())
        realtime = ""
        if parent > 0:
            share = int(parent * min(1.0, cores / (os.cpu_count() or 1)))
            try:
                (path / "cpu.rt_runtime_us").write_text(str(share))
            except OSError as exc:     # the parent's budget already given to other groups (EINVAL)
                realtime = f"no realtime budget for it ({exc.strerror}: other groups hold the parent's)"
        return cls(path, 1, cores, realtime)

    def join(self) -> None:
        """Moves the calling process into the cgroup (its children follow)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def describe(self) -> str:
        if self.version == 2:
            return f"cgroup v2 {self.path}/cpu.max {(self.path / 'cpu.max').read_text().strip()}"
        return (f"cgroup v1 {self.path}/cpu.cfs_quota_us {(self.path / 'cpu.cfs_quota_us').read_text().strip()} "
                f"per {PERIOD_US} µs" + (f"; {self.note}" if self.note else ""))

    def used_s(self) -> float | None:
        """CPU time its processes used so far (s)."""
        try:
            if self.version == 2:
                stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
                return int(stat["usage_usec"]) / 1e6
            acct = self.path.parent.parent / "cpuacct" / self.path.name / "cpuacct.usage"
            return int(acct.read_text()) / 1e9 if acct.exists() else None
        except (OSError, KeyError, ValueError):
            return None

    def remove(self, wait_s: float = 10.0) -> str | None:
        """Removes the cgroup once its processes have ended; why not, when some remain."""
        deadline = time.monotonic() + wait_s
        while True:
            left = (self.path / "cgroup.procs").read_text().split()
            if not left:
                self.path.rmdir()
                return None
            if time.monotonic() > deadline:
                return f"{self.path} kept: processes {' '.join(left)} still in it"
            time.sleep(0.2)


def cpuacct_group(name: str) -> Path | None:
    """cgroup v1: a cpuacct group of the same name, to count what the held command used."""
    base = ROOT / "cpuacct"
    if not (base / "cpuacct.usage").exists() or base.resolve() == (ROOT / "cpu").resolve():
        return None
    path = base / name
    path.mkdir()
    return path


def run_held(command: list[str], cpu_pct: float, hogs: int, say=print) -> int:
    if os.geteuid() != 0:
        raise UsageError("setting a CPU quota needs root: run with sudo")
    cores = os.cpu_count() or 1
    name = f"pcnlab-slow-{os.getpid()}"
    quota = CpuQuota.create(cpu_pct / 100 * cores, name)
    try:
        acct = cpuacct_group(name) if quota.version == 1 else None
    except OSError:
        quota.remove()
        raise
    started: list[subprocess.Popen] = []
    child = None
    status = 1
    began = time.monotonic()

    def join() -> None:
        quota.join()
        if acct is not None:
            (acct / "cgroup.procs").write_text(str(os.getpid()))

    try:
        for _ in range(hogs):
            started.append(subprocess.Popen([sys.executable, "-c", HOG]))
        pids = f" (pids {' '.join(str(h.pid) for h in started)})" if started else ""
        say(f"slow machine: the command held to {cpu_pct:g} % of {cores} cores ({quota.describe()}), "
            f"{hogs} CPU hog(s) beside it{pids}", flush=True)
        child = subprocess.Popen(command, preexec_fn=join)
        status = child.wait()
    except KeyboardInterrupt:
        if child is not None:
            child.send_signal(signal.SIGINT)
            status = child.wait()
    finally:
        for hog in started:
            hog.kill()
            hog.wait()
        used = quota.used_s() if quota.version == 2 else (
            int((acct / "cpuacct.usage").read_text()) / 1e9 if acct is not None else None)
        kept = quota.remove()
        if acct is not None and kept is None:
            acct.rmdir()
        wall = time.monotonic() - began
        cpu = f", {used:.0f} s of CPU ({used / wall / cores:.0%} of the machine)" if used and wall else ""
        shown = shlex.join(command).replace("\n", " ")[:160]
        say(f"slow machine: {shown} exited {status} after {wall:.0f} s{cpu}" + (f"; {kept}" if kept else ""))
    return status


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="slow_machine.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-pct", type=float, default=60.0, help="share of the machine's CPU the command may "
                        "use, %% (default 60)")
    parser.add_argument("--hogs", type=natural, default=1, help="busy loops beside it, each wanting a core (default 1)")
    parser.add_argument("command", nargs="+", help="the command, after --")
    args = parser.parse_args(argv)
    if not 1 <= args.cpu_pct <= 100:
        parser.error(f"--cpu-pct {args.cpu_pct:g} is not a share from 1 to 100 %")
    try:
        return run_held(args.command, args.cpu_pct, args.hogs)
    except UsageError as exc:
        print(f"slow_machine.py: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:      # a cgroup file the kernel refused (a read-only /sys/fs/cgroup, a container)
        print(f"slow_machine.py: cannot set a CPU quota here: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
