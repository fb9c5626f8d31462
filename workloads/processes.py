"""The processes of a workload, and the groups that live and die together: a job's ranks (JobHandle),
a set of background flows (FlowsHandle).

A group starts each process in its host, records it in the run's ledger at once, and ends exactly
those processes (SIGTERM, then SIGKILL after a grace period). The first process to fail stops the rest
and becomes one WorkloadError line: which rank, how it ended, its own last error, where the logs are.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Sequence

from pcnlab.errors import PcnLabError
from pcnlab.jsonlines import read_json_lines
from pcnlab.workloads.containers import container_pid
from pcnlab.workloads.containers import remove as remove_container
from pcnlab.workloads.hosts import Hosts
from pcnlab.workloads.specs import FlowSpec, JobSpec

STOP_GRACE_S = 2.0
# A rank that fails with an error may be the echo of a peer's death seen later: a container's `podman
# run` exits 140-175 ms after its process is SIGKILLed, its peers' 20-90 ms after that (measured), and
# a busy machine can swap them. How long a failure waits for the rest to end before naming its cause.
ECHO_S = 2.0


class WorkloadError(PcnLabError):
    """A job or flow failed or timed out; the message names the process, and where its logs are."""


def workload_env(iface: str) -> dict[str, str]:
    """What every workload process is given beside its own variables (a container: only these)."""
    return {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": iface,
            # c10d warns that hosts have no DNS name; they need none
            "TORCH_CPP_LOG_LEVEL": os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR")}


def process_env(iface: str) -> dict[str, str]:
    return {**os.environ, **workload_env(iface)}


def _as_bare(proc: "WorkloadProcess", rc: int) -> int:
    """A process's exit as bare: `podman run` exits 128 + N when its container's process was killed by
    signal N (measured: 137 for SIGKILL), where a bare process's Popen says -N."""
    if proc.container is not None and 128 < rc < 128 + 65:
        return -(rc - 128)
    return rc


@dataclass
class WorkloadProcess:
    label: str          # ps0, worker2, sender, receiver
    rank: int           # the torch rank; the generator's worker index (-1 for its PS)
    host: str
    ip: str
    argv: list[str]
    log: Path
    output: Path
    env: dict[str, str] = field(default_factory=dict)   # added to process_env's
    errors: Path | None = None   # stderr apart from stdout (a user's program: its last lines are the error)
    container: str | None = None   # `podman run --name` of a rank in a container (argv runs podman)
    cidfile: Path | None = None    # where podman writes that container's id (the ledger reads it back)
    netns_pid: int | None = None   # a container: a process in its host's namespace (podman runs outside it)
    popen: subprocess.Popen | None = field(default=None, repr=False)
    returncode: int | None = None
    ended_ns: int | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def describe(self) -> str:
        return f"{self.label} on {self.host}" if self.rank < 0 else f"rank {self.rank} ({self.label} on {self.host})"

    def how_it_ended(self) -> str:
        rc = self.returncode
        if rc is not None and rc < 0:
            try:
                return f"was killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"was killed by signal {-rc}"
        return f"exited with status {rc}"

    def last_error(self) -> str:
        """The process's own one-line error: from its log, else (a failed exit) its output's last line.
        A process ended by a signal said nothing; what it printed before is not why it ended."""
        try:
            for rec in reversed(read_json_lines(self.log)[1]):
                if rec.get("type") == "error":
                    return rec["message"]
        except (OSError, PcnLabError):  # no log yet, or not one of ours: the output may say more
            pass
        if self.returncode is None or self.returncode <= 0:
            return ""
        try:
            lines = [ln.strip() for ln in (self.errors or self.output).read_text(errors="replace").splitlines()
                     if ln.strip() and not ln.startswith(("[W", "Warning", "warnings.warn"))]
        except OSError:
            return ""
        if self.errors is not None:  # a program of the user's: its traceback's last lines, quoted
            lines = [ln for ln in lines if not ln.startswith("Traceback (most recent call last)")]
            return " | ".join(ln[:200] for ln in lines[-3:])
        return lines[-1][:300] if lines else ""

    def signal(self, sig: int) -> None:
        try:
            self.popen.send_signal(sig)
        except ProcessLookupError:
            pass


class ProcessGroup:
    """Processes that live and die together; the base of JobHandle and FlowsHandle."""

    what = "workload"

    def __init__(self, name: str, folder: Path, procs: list[WorkloadProcess]):
        self.name = name
        self.folder = folder
        self.procs = procs
        self._outputs: list = []
        self.failure: str | None = None
        self.started = time.monotonic()

    def launch(self, hosts: Hosts, ledger, proc: WorkloadProcess, cwd: Path) -> None:
        """Start one of the group's processes in its host, in its own working folder `cwd`."""
        cwd.mkdir(parents=True, exist_ok=True)
        out = open(proc.output, "wb")
        self._outputs.append(out)
        err = subprocess.STDOUT
        if proc.errors is not None:
            err = open(proc.errors, "wb")
            self._outputs.append(err)
        if ledger is not None and proc.container is not None:   # before podman creates it
            ledger.add_container(proc.container, proc.cidfile)
        # podman itself runs in this machine's namespace and puts the container into the host's: run in
        # the host's, runc takes that for its own and refuses podman's network sysctls there.
        popen = subprocess.Popen if proc.container is not None else partial(hosts.popen, proc.host)
        proc.popen = popen(proc.argv, cwd=str(cwd), env={**process_env(hosts.iface(proc.host)), **proc.env},
                           stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        if ledger is not None:   # a container's podman client is not the process that works: record_container
            client = "podman client of " if proc.container is not None else ""
            ledger.add_process(proc.popen.pid, f"{client}{self.what} {self.name}: {proc.describe()}")

    def record_container(self, ledger, proc: WorkloadProcess, timeout_s: float) -> None:
        """The process inside `proc`'s container (its main one), once it runs, recorded in the ledger
        under the label a process in its host has: what the CPU sampler and fidelity read is the worker
        itself, not podman's client. Nothing when it ended first or never ran within `timeout_s`."""
        pid = container_pid(proc.container, lambda: proc.popen.poll() is None, timeout_s)
        if ledger is not None and pid is not None:
            ledger.add_process(pid, f"{self.what} {self.name}: {proc.describe()}")

    def _poll(self) -> list[WorkloadProcess]:
        newly = []
        for p in self.procs:
            if p.returncode is None and p.popen is not None:
                rc = p.popen.poll()
                if rc is not None:
                    p.returncode, p.ended_ns = _as_bare(p, rc), time.monotonic_ns()
                    newly.append(p)
        return newly

    def _echoes(self) -> list[WorkloadProcess]:
        """The processes that failed within ECHO_S of a failure, waiting no longer than until all ended."""
        deadline, seen = time.monotonic() + ECHO_S, []
        while time.monotonic() < deadline and any(p.returncode is None for p in self.procs if p.popen):
            seen += [p for p in self._poll() if p.returncode != 0]
            if any(p.returncode < 0 for p in seen):
                break
            time.sleep(0.01)
        return seen

    def check(self) -> bool:
        """True once every process has ended well; WorkloadError (after stopping the rest) on a failure."""
        if self.failure:
            raise WorkloadError(self.failure)
        failed = [p for p in self._poll() if p.returncode != 0]
        if failed and all(p.returncode > 0 for p in failed):
            failed += self._echoes()
        if failed:
            # Of those seen failing together, a killed process is the cause, the rest its echo.
            first = sorted(failed, key=lambda p: (p.returncode >= 0, p.rank))[0]
            self.stop()
            error = first.last_error()
            self.failure = (f"{self.what} {self.name}: {first.describe()} {first.how_it_ended()}"
                            + (f" ({error})" if error else "")
                            + f"; stopped the rest; logs in {self.folder}")
            raise WorkloadError(self.failure)
        return all(p.returncode == 0 for p in self.procs)

    def wait(self, timeout: float):
        deadline = time.monotonic() + timeout
        while not self.check():
            if time.monotonic() > deadline:
                self.stop()
                self.failure = (f"{self.what} {self.name} did not finish within {timeout:g} s; stopped it; "
                                f"logs in {self.folder}")
                raise WorkloadError(self.failure)
            time.sleep(0.05)
        self._close_outputs()
        return self

    def alive(self) -> list[WorkloadProcess]:
        return [p for p in self.procs if p.popen is not None and p.popen.poll() is None]

    def stop(self, order: Sequence[Sequence[WorkloadProcess]] | None = None) -> None:
        """End exactly this group's processes: SIGTERM, then SIGKILL after a grace period; reap them."""
        for batch in order or [self.procs]:
            victims = [p for p in batch if p.popen is not None and p.popen.poll() is None]
            for p in victims:
                p.signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline and any(p.popen.poll() is None for p in victims):
                time.sleep(0.02)
            for p in victims:
                if p.popen.poll() is None:
                    p.signal(signal.SIGKILL)
            for p in victims:
                p.popen.wait()
        for p in self.procs:
            if p.popen is not None and p.returncode is None:
                p.returncode, p.ended_ns = _as_bare(p, p.popen.wait()), time.monotonic_ns()
        for p in self.procs:  # a `podman run` ended by a signal may leave its container running
            if p.container is not None and p.popen is not None:
                remove_container(p.container)
        self._close_outputs()

    def _close_outputs(self) -> None:
        for f in self._outputs:
            f.close()

    @property
    def logs(self) -> dict[str, Path]:
        return {p.label: p.log for p in self.procs}

    def records(self, label: str) -> list[dict]:
        """The iteration (or interval) records of one process's log."""
        kinds = {"iteration", "interval"}
        return [r for r in read_json_lines(self.logs[label])[1] if r.get("type") in kinds]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class JobHandle(ProcessGroup):
    what = "job"

    def __init__(self, spec: JobSpec, folder: Path, procs: list[WorkloadProcess], port: int = 0):
        super().__init__(spec.name, folder, procs)
        self.spec = spec
        self.port = port
        self._rendezvous = spec.kind != "torchrun"   # a user's program: not until its store is seen

    def check(self) -> bool:
        done = super().check()
        if not self._rendezvous and not done:
            first = self.procs[0]
            if first.popen is not None and rendezvous_open(first.netns_pid or first.pid, self.port):
                self._rendezvous = True
            elif time.monotonic() - self.started > self.spec.timeout_s:
                self.stop()
                self.failure = (f"job {self.name}: {first.describe()} opened no rendezvous on port {self.port} "
                                f"(MASTER_PORT) within {self.spec.timeout_s:g} s: does the program call "
                                f"torch.distributed.init_process_group (env://)? stopped it; logs in {self.folder}")
                raise WorkloadError(self.failure)
        return done


def rendezvous_open(pid: int, port: int) -> bool:
    """A TCP socket on `port` in the network namespace of process `pid` (rank 0's torch.distributed
    store listens on MASTER_PORT once init_process_group has begun)."""
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        if any(int(line.split()[1].rsplit(":", 1)[1], 16) == port for line in lines if line.strip()):
            return True
    return False


class FlowsHandle(ProcessGroup):
    what = "background flows"

    def __init__(self, name: str, folder: Path, procs: list[WorkloadProcess], specs: list[FlowSpec]):
        super().__init__(name, folder, procs)
        self.specs = specs

    def stop(self, order=None) -> None:
        # Senders first, so each receiver sees the end of its stream and logs its last interval.
        senders = [p for p in self.procs if p.label.endswith(".sender")]
        receivers = [p for p in self.procs if p.label.endswith(".receiver")]
        super().stop(order or [senders, receivers])

    def throughput(self) -> dict[str, list[dict]]:
        """Per flow: the receiver's intervals (start_ns, end_ns, bytes, mbps)."""
        return {p.label[: -len(".receiver")]: self.records(p.label)
                for p in self.procs if p.label.endswith(".receiver")}
