"""Starting workloads in their hosts: what the experiment runner calls.

    job = start_job(net, ledger, JobSpec(name="j1", kind="ps", servers=("h1",), workers=("h2", "h3")), run_dir)
    result = job.wait(timeout=120)      # WorkloadError (one line, naming the failed rank) on any failure
    flows = start_flows(net, ledger, [FlowSpec("h4", "h1", cc="cubic", ecn=True)], run_dir)
    ...
    flows.stop(); flows.throughput()

`net` is a running PcnNetwork, or None for this machine's loopback (tests without root; every "host"
is then 127.0.0.N). Every process is started in its host with `host.popen`, recorded in the ledger at
once, and given its own working folder; `stop()` ends exactly those processes (SIGTERM, then SIGKILL).

Files, under run_dir:
    jobs/<job>/job.json                the spec and every process (label, rank, host, ip, pid, argv)
    jobs/<job>/<label>-<host>.jsonl    its per-iteration log (joblog.py), e.g. worker1-h3.jsonl
    jobs/<job>/<label>-<host>.out      its stdout and stderr
    jobs/<job>/<label>-<host>/         its working folder
    flows/<flow>.sender.jsonl, flows/<flow>.receiver.jsonl, flows/<flow>.*.out, flows/flows.json
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from pcnlab.errors import PcnLabError, UsageError
from pcnlab.workloads.config import BURST_PATTERNS, BurstConfig, FlowConfig, TrainConfig, to_argv
from pcnlab.workloads.joblog import read_log
from pcnlab.workloads.catalog import DIGITS_MODELS, check_model
from pcnlab.workloads.netutil import check_cc

JOB_KINDS = ("ps", "ring", "burst")
STOP_GRACE_S = 2.0


class WorkloadError(PcnLabError):
    """A job or flow failed or timed out; the message names the process, and where its logs are."""


# --- what to run --------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobSpec:
    """One DDL job: PyTorch parameter server ("ps"), PyTorch ring all-reduce ("ring") or the burst
    generator ("burst", with pattern "ps" or "ring"). Hosts are topology names (h1, ...)."""

    name: str
    kind: str
    workers: tuple[str, ...]
    servers: tuple[str, ...] = ()    # ps: one host per PS shard; burst/ps: exactly one; ring: none
    iterations: int = 10
    compute_ms: float = 0.0
    # PyTorch jobs
    model: str = "mlp"               # catalog.PROCESS_MODELS: mlp | cnn | digits-mlp | digits-cnn | profile:<name>
    profile_scale: float = 0.01
    batch: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    bucket_mb: float = 25.0
    eval_every: int = 10             # real models: test accuracy every this many iterations and at the end
    dump_tensors: bool = False       # write every iteration's tensors to jobs/<job>/tensors (small models)
    # the burst generator
    pattern: str = "ps"
    burst_bytes: int = 1_000_000
    reply_bytes: int | None = None   # None: burst_bytes
    period_ms: float = 0.0
    jitter_ms: float = 0.0
    pcn_start: bool = False          # every job kind: announce each burst (PCN-START) one lead ahead
    pcn_lead_us: float = 0.0         # 0: one smoothed RTT
    # transport
    cc: str | None = None            # burst: per socket; torch jobs: the hosts' default (sysctl)
    ecn: bool | None = None          # per host (network namespace); None: leave the host as it is
    port: int = 0                    # 0: chosen by the launcher
    seed: int = 0
    timeout_s: float = 120.0         # the processes' own rendezvous / connect timeout

    def __post_init__(self):
        object.__setattr__(self, "workers", tuple(self.workers))
        object.__setattr__(self, "servers", tuple(self.servers))
        if self.kind not in JOB_KINDS:
            raise UsageError(f"job {self.name!r}: unknown kind {self.kind!r}; choose one of {', '.join(JOB_KINDS)}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise UsageError(f"job name {self.name!r}: use letters, digits, '.', '_' and '-' only")
        if not self.workers:
            raise UsageError(f"job {self.name!r}: needs at least one worker host")
        if self.iterations < 1:
            raise UsageError(f"job {self.name!r}: iterations must be at least 1")
        if self.kind == "burst" and self.pattern not in BURST_PATTERNS:
            raise UsageError(f"job {self.name!r}: unknown pattern {self.pattern!r}; choose one of "
                             f"{', '.join(BURST_PATTERNS)}")
        if self.comm_pattern == "ps" and (not self.servers or (self.kind == "burst" and len(self.servers) != 1)):
            want = "exactly one PS host" if self.kind == "burst" else "at least one PS host (servers)"
            raise UsageError(f"job {self.name!r}: a parameter-server job needs {want}")
        if self.comm_pattern == "ring":
            if self.servers:
                raise UsageError(f"job {self.name!r}: a ring job has no servers; list every host as a worker")
            if len(self.workers) < 2:
                raise UsageError(f"job {self.name!r}: a ring needs at least two workers")
        if self.kind == "burst" and self.pattern == "ring" and len(set(self.workers)) != len(self.workers):
            raise UsageError(f"job {self.name!r}: a generator ring needs distinct worker hosts")
        if self.kind != "burst":
            check_model(self.model, self.profile_scale)
        if self.eval_every < 0:
            raise UsageError(f"job {self.name!r}: eval_every must be 0 (only at the end) or more")

    @property
    def comm_pattern(self) -> str:
        return self.pattern if self.kind == "burst" else self.kind


@dataclass(frozen=True)
class FlowSpec:
    """A long-lived background TCP flow from src to dst."""

    src: str
    dst: str
    cc: str | None = None            # cubic, reno, bbr, dctcp (where the kernel has it)
    ecn: bool | None = None          # set on the sender's host (ECN is per network namespace)
    duration_s: float = 0.0          # 0: until stop()
    interval_ms: float = 100.0
    port: int = 0
    name: str = ""                   # default: <src>-<dst>[-n]


# --- where to run -------------------------------------------------------------------------------

class _Hosts:
    """Processes and addresses in Mininet hosts, or on this machine's loopback when net is None."""

    def __init__(self, net):
        self.net = net

    @property
    def loopback(self) -> bool:
        return self.net is None

    def check(self, names) -> None:
        if self.net is None:
            return
        known = set(self.net.net.nameToNode)
        for name in names:
            if name not in known or name not in {h.name for h in self.net.net.hosts}:
                raise UsageError(f"unknown host {name!r}; this network's hosts are "
                                 f"{', '.join(h.name for h in self.net.net.hosts)}")

    def ip(self, name: str) -> str:
        if self.net is None:
            m = re.fullmatch(r"h(\d+)", name)
            n = int(m.group(1)) if m else (sum(name.encode()) % 250)
            return f"127.0.{n // 250}.{n % 250 + 1}"
        return self.net.host(name).IP()

    def iface(self, name: str) -> str:
        return "lo" if self.net is None else self.net.host(name).defaultIntf().name

    def popen(self, name: str, argv: list[str], **kwargs) -> subprocess.Popen:
        if self.net is None:
            return subprocess.Popen(argv, **kwargs)
        return self.net.host(name).popen(argv, **kwargs)

    def sysctl(self, name: str, key: str, value: str) -> None:
        host = self.net.host(name)
        if key == "net.ipv4.tcp_congestion_control":
            _allow_congestion_control(value)
        host.cmd(f"sysctl -qw {key}={value}")
        got = host.cmd(f"cat /proc/sys/{key.replace('.', '/')}").strip()
        if got != value:
            raise PcnLabError(f"could not set {key}={value} in host {name} (it reads {got!r})")


ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


def _allow_congestion_control(cc: str) -> None:
    """A network namespace other than the first may only default to an *allowed* congestion control
    (the kernel says EPERM otherwise, even to root); the allowed list is machine-wide, so add it there."""
    try:
        allowed = ALLOWED_CC.read_text().split()
        if cc not in allowed:
            ALLOWED_CC.write_text(" ".join(allowed + [cc]))
    except OSError:
        pass  # not root, or no such file: the check after the sysctl says what went wrong


class _NetState:
    """What the launcher set per host of one network, and the ports it handed out."""

    def __init__(self):
        self.settings: dict[tuple[str, str], tuple[str, str]] = {}  # (host, key) -> (value, owner)
        self.next_port = 20000


_STATE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LOOPBACK_STATE = _NetState()


def _state(net) -> _NetState:
    if net is None:
        return _LOOPBACK_STATE
    return _STATE.setdefault(net, _NetState())


def _ports(hosts: _Hosts, state: _NetState, wanted: int, count: int) -> list[int]:
    if wanted:
        return [wanted + i for i in range(count)]
    if hosts.loopback:  # ports the kernel says are free now
        socks = [socket.socket() for _ in range(count)]
        try:
            for s in socks:
                s.bind(("127.0.0.1", 0))
            return [s.getsockname()[1] for s in socks]
        finally:
            for s in socks:
                s.close()
    first = state.next_port
    state.next_port += count
    return list(range(first, first + count))


def _plan_host_settings(hosts: _Hosts, state: _NetState, owner: str,
                        wanted: dict[tuple[str, str], str]) -> list[tuple[str, str, str]]:
    """Check per-host settings against what earlier jobs and flows set; return the ones to apply."""
    todo = []
    for (host, key), value in wanted.items():
        if hosts.loopback:
            what = "ECN" if key.endswith("tcp_ecn") else "a PyTorch job's congestion control"
            raise UsageError(f"{owner}: {what} is set per host network namespace; on loopback that would "
                             f"change this machine, so run it in a Mininet network (or leave it unset)")
        previous = state.settings.get((host, key))
        if previous is not None and previous[0] != value:
            raise UsageError(f"{owner}: host {host} already has {key}={previous[0]} for {previous[1]}; "
                             f"Linux sets it per host (network namespace), so put these on different hosts")
        todo.append((host, key, value))
    return todo


def _apply_host_settings(hosts: _Hosts, state: _NetState, owner: str, todo) -> None:
    for host, key, value in todo:
        hosts.sysctl(host, key, value)
        state.settings.setdefault((host, key), (value, owner))


def _ecn_value(on: bool) -> str:
    # 1: request ECN on outgoing connections (and accept it); 2 (the kernel default): only accept it.
    return "1" if on else "2"


def _env(iface: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", GLOO_SOCKET_IFNAME=iface)
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10d warns that hosts have no DNS name; they need none
    return env


# --- the processes ------------------------------------------------------------------------------

@dataclass
class WorkloadProcess:
    label: str          # ps0, worker2, sender, receiver
    rank: int           # the torch rank; the generator's worker index (-1 for its PS)
    host: str
    ip: str
    argv: list[str]
    log: Path
    output: Path
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
            for rec in reversed(read_log(self.log)[1]):
                if rec.get("type") == "error":
                    return rec["message"]
        except OSError:
            pass
        if self.returncode is None or self.returncode <= 0:
            return ""
        try:
            lines = [ln.strip() for ln in self.output.read_text(errors="replace").splitlines()
                     if ln.strip() and not ln.startswith(("[W", "Warning", "warnings.warn"))]
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""


class _Group:
    """Processes that live and die together; the base of JobHandle and FlowsHandle."""

    what = "workload"

    def __init__(self, name: str, folder: Path, procs: list[WorkloadProcess]):
        self.name = name
        self.folder = folder
        self.procs = procs
        self._outputs: list = []
        self.failure: str | None = None
        self.started = time.monotonic()

    def _start(self, hosts: _Hosts, ledger, proc: WorkloadProcess, cwd: Path, iface: str) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        out = open(proc.output, "wb")
        self._outputs.append(out)
        proc.popen = hosts.popen(proc.host, proc.argv, cwd=str(cwd), env=_env(iface), stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT)
        if ledger is not None:
            ledger.add_process(proc.popen.pid, f"{self.what} {self.name}: {proc.describe()}")

    def _poll(self) -> list[WorkloadProcess]:
        newly = []
        for p in self.procs:
            if p.returncode is None and p.popen is not None:
                rc = p.popen.poll()
                if rc is not None:
                    p.returncode, p.ended_ns = rc, time.monotonic_ns()
                    newly.append(p)
        return newly

    def check(self) -> bool:
        """True once every process has ended well; WorkloadError (after stopping the rest) on a failure."""
        if self.failure:
            raise WorkloadError(self.failure)
        failed = [p for p in self._poll() if p.returncode != 0]
        if failed:
            # Of those seen failing in the same look, a killed process is the cause, the rest its echo.
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
                _signal(p, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline and any(p.popen.poll() is None for p in victims):
                time.sleep(0.02)
            for p in victims:
                if p.popen.poll() is None:
                    _signal(p, signal.SIGKILL)
            for p in victims:
                p.popen.wait()
        for p in self.procs:
            if p.popen is not None and p.returncode is None:
                p.returncode, p.ended_ns = p.popen.wait(), time.monotonic_ns()
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
        return [r for r in read_log(self.logs[label])[1] if r.get("type") in kinds]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal(p: WorkloadProcess, sig: int) -> None:
    try:
        p.popen.send_signal(sig)
    except ProcessLookupError:
        pass


class JobHandle(_Group):
    what = "job"

    def __init__(self, spec: JobSpec, folder: Path, procs: list[WorkloadProcess]):
        super().__init__(spec.name, folder, procs)
        self.spec = spec


class FlowsHandle(_Group):
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


# --- starting -----------------------------------------------------------------------------------

def _python_module(module: str) -> list[str]:
    return [sys.executable, "-m", f"pcnlab.workloads.{module}"]


def start_job(net, ledger, spec: JobSpec, run_dir: Path) -> JobHandle:
    """Start every process of a job in its host; returns at once (see JobHandle.wait)."""
    hosts = _Hosts(net)
    hosts.check([*spec.servers, *spec.workers])
    state = _state(net)
    owner = f"job {spec.name}"
    job_hosts = sorted({*spec.servers, *spec.workers})
    wanted: dict[tuple[str, str], str] = {}
    if spec.ecn is not None:
        initiators = spec.workers if spec.kind == "burst" else job_hosts
        wanted.update({(h, "net.ipv4.tcp_ecn"): _ecn_value(spec.ecn) for h in initiators})
    if spec.cc and spec.kind != "burst":
        wanted.update({(h, "net.ipv4.tcp_congestion_control"): spec.cc for h in job_hosts})
    todo = _plan_host_settings(hosts, state, owner, wanted)
    if spec.cc:
        check_cc(spec.cc)
    folder = Path(run_dir) / "jobs" / spec.name
    if folder.exists():
        raise UsageError(f"job {spec.name!r} already ran in {run_dir}; give each job of a run its own name")
    folder.mkdir(parents=True)
    _apply_host_settings(hosts, state, owner, todo)
    if spec.kind != "burst" and spec.model in DIGITS_MODELS:
        from pcnlab.workloads.datasets import ensure_digits

        ensure_digits()  # once here, so the processes read the cached copy instead of importing sklearn
    port = _ports(hosts, state, spec.port, 1)[0]
    placements = _placements(spec)
    procs = []
    for label, rank, host in placements:
        base = f"{label}-{host}"
        cfg = _process_config(spec, hosts, label, rank, host, port, folder / f"{base}.jsonl", folder,
                              ",".join(hosts.ip(h) for _, _, h in placements))
        module = "burst" if spec.kind == "burst" else spec.kind
        procs.append(WorkloadProcess(label, rank, host, hosts.ip(host), _python_module(module) + to_argv(cfg),
                                     folder / f"{base}.jsonl", folder / f"{base}.out"))
    handle = JobHandle(spec, folder, procs)
    try:
        for p in procs:
            handle._start(hosts, ledger, p, folder / f"{p.label}-{p.host}", hosts.iface(p.host))
            if spec.kind != "burst":
                _wait_until_imported(p, spec.timeout_s)
    except BaseException:
        handle.stop()
        raise
    (folder / "job.json").write_text(json.dumps({
        "spec": asdict(spec), "port": port, "loopback": hosts.loopback,
        "processes": [{"label": p.label, "rank": p.rank, "host": p.host, "ip": p.ip, "pid": p.pid,
                       "log": p.log.name, "argv": p.argv} for p in procs]}, indent=1))
    return handle


def _wait_until_imported(proc: WorkloadProcess, timeout_s: float) -> None:
    """PyTorch ranks start one at a time: each once the previous one has imported PyTorch (its log's
    anchor line is written after the import). Importing it takes a core for about a second; N ranks
    importing at once would leave a 2-core machine no idle time (and the run untrusted) while the
    switches already carry background traffic. A rank that ends first is left to JobHandle.check()."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.popen.poll() is None:
        try:
            if proc.log.stat().st_size > 0:
                return
        except FileNotFoundError:
            pass
        time.sleep(0.05)


def _placements(spec: JobSpec) -> list[tuple[str, int, str]]:
    """(label, rank, host) per process: torch ranks are PS shards first, then workers."""
    if spec.kind == "burst":
        out = [(f"worker{i}", i, h) for i, h in enumerate(spec.workers)]
        return ([("ps", -1, spec.servers[0])] + out) if spec.pattern == "ps" else out
    servers = spec.servers if spec.kind == "ps" else ()
    return ([(f"ps{i}", i, h) for i, h in enumerate(servers)]
            + [(f"worker{i}", len(servers) + i, h) for i, h in enumerate(spec.workers)])


def _process_config(spec: JobSpec, hosts: _Hosts, label: str, rank: int, host: str, port: int,
                    log: Path, folder: Path, peers: str = ""):
    if spec.kind == "burst":
        return BurstConfig(
            role="ps" if label == "ps" else "worker", pattern=spec.pattern, rank=max(rank, 0),
            workers=len(spec.workers), ps_addr=hosts.ip(spec.servers[0]) if spec.servers else "",
            port=port, peers=",".join(hosts.ip(h) for h in spec.workers), burst_bytes=spec.burst_bytes,
            reply_bytes=-1 if spec.reply_bytes is None else spec.reply_bytes, iterations=spec.iterations,
            period_ms=spec.period_ms, jitter_ms=spec.jitter_ms, compute_ms=spec.compute_ms, cc=spec.cc or "",
            pcn_start=spec.pcn_start, pcn_lead_us=spec.pcn_lead_us, seed=spec.seed, timeout_s=spec.timeout_s,
            log=str(log), job=spec.name, host=host)
    servers = spec.servers if spec.kind == "ps" else ()
    master = servers[0] if servers else spec.workers[0]
    return TrainConfig(
        kind=spec.kind, rank=rank, world=len(servers) + len(spec.workers), servers=len(servers),
        master_addr=hosts.ip(master), master_port=port, iface=hosts.iface(host), model=spec.model,
        profile_scale=spec.profile_scale, iterations=spec.iterations, batch=spec.batch, lr=spec.lr,
        momentum=spec.momentum, compute_ms=spec.compute_ms, bucket_mb=spec.bucket_mb, seed=spec.seed,
        timeout_s=spec.timeout_s, log=str(log), dump_dir=str(folder / "tensors") if spec.dump_tensors else "",
        eval_every=spec.eval_every, addr=hosts.ip(host), peers=peers, pcn_start=spec.pcn_start,
        pcn_lead_us=spec.pcn_lead_us, job=spec.name, host=host)


def start_flows(net, ledger, flows: Sequence[FlowSpec], run_dir: Path, name: str = "background") -> FlowsHandle:
    """Start background flows (receivers, then senders); they run for duration_s or until stop()."""
    hosts = _Hosts(net)
    flows = list(flows)
    hosts.check([h for f in flows for h in (f.src, f.dst)])
    state = _state(net)
    for f in flows:
        if f.cc:
            check_cc(f.cc)
    labels = _flow_labels(flows)
    wanted: dict[tuple[str, str], str] = {}
    for f, label in zip(flows, labels):
        if f.ecn is not None:
            key, value = (f.src, "net.ipv4.tcp_ecn"), _ecn_value(f.ecn)
            if wanted.get(key, value) != value:
                raise UsageError(f"flows from {f.src} ask for ECN both on and off; Linux sets ECN per host "
                                 f"(network namespace), so start them from different hosts")
            wanted[key] = value
    todo = _plan_host_settings(hosts, state, f"background flow{'s' if len(flows) > 1 else ''}", wanted)
    folder = Path(run_dir) / "flows"
    folder.mkdir(parents=True, exist_ok=True)
    if any((folder / f"{label}.receiver.jsonl").exists() for label in labels):
        raise UsageError(f"a flow named like one of {', '.join(labels)} already ran in {run_dir}; name them apart")
    _apply_host_settings(hosts, state, "background flows", todo)
    procs = []
    for f, label in zip(flows, labels):
        port = _ports(hosts, state, f.port, 1)[0]
        for role, host in (("receiver", f.dst), ("sender", f.src)):
            cfg = FlowConfig(role=role, addr=hosts.ip(f.dst), port=port, cc=f.cc or "", duration_s=f.duration_s,
                             interval_ms=f.interval_ms, log=str(folder / f"{label}.{role}.jsonl"), flow=label,
                             host=host)
            procs.append(WorkloadProcess(f"{label}.{role}", -1, host, hosts.ip(host),
                                         _python_module("flows") + to_argv(cfg), Path(cfg.log),
                                         folder / f"{label}.{role}.out"))
    handle = FlowsHandle(name, folder, procs, flows)
    try:
        for p in procs:  # receivers come first in each pair; senders retry until they listen
            handle._start(hosts, ledger, p, folder / p.label, hosts.iface(p.host))
    except BaseException:
        handle.stop()
        raise
    index = folder / "flows.json"
    previous = json.loads(index.read_text()) if index.exists() else []
    previous += [{"flow": label, **asdict(f), "processes": {p.label: p.pid for p in procs if p.label.startswith(label + ".")}}
                 for f, label in zip(flows, labels)]
    index.write_text(json.dumps(previous, indent=1))
    return handle


def _flow_labels(flows: Sequence[FlowSpec]) -> list[str]:
    labels, seen = [], {}
    for f in flows:
        base = f.name or f"{f.src}-{f.dst}"
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", base):
            raise UsageError(f"flow name {base!r}: use letters, digits, '.', '_' and '-' only")
        seen[base] = seen.get(base, 0) + 1
        labels.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    if len(set(labels)) != len(labels):
        raise UsageError("two flows have the same name; name them apart")
    return labels
