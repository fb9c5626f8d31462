"""Starting workloads in their hosts: what the experiment runner calls.

    workloads = Workloads(run_dir, net=net, ledger=ledger)   # one per network: the runner makes one per run
    job = workloads.start_job(JobSpec(name="j1", kind="ps", servers=("h1",), workers=("h2", "h3")))
    result = job.wait(timeout=120)      # WorkloadError (one line, naming the failed rank) on any failure
    flows = workloads.start_flows([FlowSpec("h4", "h1", cc="cubic", ecn=True)])
    ...
    flows.stop(); flows.throughput()

`net` is a running PcnNetwork, or None (the default) for this machine's loopback (tests without root;
every "host" is then 127.0.0.N). A `Workloads` remembers, for as long as it and its network live, what
its jobs and flows set in each host and which ports they were given (hosts.py). Every process is
started in its host with `host.popen`, recorded in the ledger at once, and given its own working
folder; `stop()` ends exactly those processes (SIGTERM, then SIGKILL: processes.py).

Files, under run_dir:
    jobs/<job>/job.json                the spec and every process (label, rank, host, ip, pid, argv)
    jobs/<job>/<label>-<host>.jsonl    its per-iteration log (joblog.py), e.g. worker1-h3.jsonl
    jobs/<job>/<label>-<host>.out      its stdout and stderr (a torchrun rank: stdout; stderr in .err)
    jobs/<job>/<label>-<host>.cid      a rank in a container: its id (podman --cidfile)
    jobs/<job>/<label>-<host>/         its working folder
    flows/<flow>.sender.jsonl, flows/<flow>.receiver.jsonl, flows/<flow>.*.out, flows/flows.json
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from pcnlab.errors import UsageError
from pcnlab.workloads.catalog import DIGITS_MODELS
from pcnlab.workloads.process_config import BurstConfig, FlowConfig, TrainConfig, to_argv
from pcnlab.workloads.containers import checkout_access, container_name, run_argv
from pcnlab.workloads.hosts import TCP_CC, TCP_ECN, Hosts, ecn_value
from pcnlab.workloads.netutil import check_cc
from pcnlab.workloads.processes import FlowsHandle, JobHandle, WorkloadProcess, workload_env
from pcnlab.workloads.specs import FlowSpec, JobSpec, flow_labels
from pcnlab.workloads.torchrun import program_argv, rank_env


def _python_module(module: str) -> list[str]:
    return [sys.executable, "-m", f"pcnlab.workloads.{module}"]


class Workloads:
    """The jobs and background flows of one network (or of loopback), writing under `run_dir`."""

    def __init__(self, run_dir: Path, net=None, ledger=None):
        self.run_dir = Path(run_dir)
        self.ledger = ledger
        self.hosts = Hosts(net)

    def start_job(self, spec: JobSpec) -> JobHandle:
        """Start every process of a job in its host; returns at once (see JobHandle.wait)."""
        hosts = self.hosts
        hosts.check([*spec.servers, *spec.workers])
        owner = f"job {spec.name}"
        wanted: dict[tuple[str, str], str] = {}
        if spec.ecn is not None:
            initiators = spec.workers if spec.kind == "burst" else spec.hosts
            wanted.update({(h, TCP_ECN): ecn_value(spec.ecn) for h in initiators})
        if spec.cc and spec.kind != "burst":
            wanted.update({(h, TCP_CC): spec.cc for h in spec.hosts})
        todo = hosts.plan_settings(owner, wanted)
        if spec.cc:
            check_cc(spec.cc)
        folder = self.run_dir / "jobs" / spec.name
        if folder.exists():
            raise UsageError(f"job {spec.name!r} already ran in {self.run_dir}; give each job of a run its own name")
        folder.mkdir(parents=True)
        hosts.apply_settings(owner, todo)
        data: dict[str, str] = {}
        if spec.kind in ("ps", "ring") and spec.model in DIGITS_MODELS:
            from pcnlab.workloads.datasets import DIGITS_VARIABLE, ensure_digits

            # once here, so the processes read the cached copy instead of importing sklearn (which an image lacks)
            data[DIGITS_VARIABLE] = str(ensure_digits())
        port = hosts.port(spec.port)
        # LTP (workloads/ltp_ps.py): shard s takes gradients on UDP ltp_port + s and the workers its
        # parameters on ltp_port + servers + s (the generator: one port); consecutive, none another job has
        count = 2 * len(spec.servers) if spec.kind == "ps" else 1
        ltp_ports = [hosts.port() for _ in range(count)] if spec.transport == "ltp" else [0]
        placements = spec.placements()
        peers = ",".join(hosts.ip(h) for _, _, h in placements)
        procs = []
        for label, rank, host in placements:
            base = f"{label}-{host}"
            log = folder / f"{base}.jsonl"
            if spec.kind == "torchrun":  # the user's program: torchrun's environment, stderr kept apart
                procs.append(self._rank(spec, label, rank, host, port, log, folder, peers.split(",")))
                continue
            cfg = self._process_config(spec, label, rank, host, port, log, folder, peers, ltp_ports[0])
            proc = WorkloadProcess(label, rank, host, hosts.ip(host), _python_module(spec.kind) + to_argv(cfg),
                                   log, folder / f"{base}.out", env=dict(data))
            if spec.container is not None:
                self._contain(proc, spec, folder, ["python3", "-m", f"pcnlab.workloads.{spec.kind}", *to_argv(cfg)],
                              extra=[Path(v).parent for v in data.values()])
            procs.append(proc)
        handle = JobHandle(spec, folder, procs, port)
        try:
            for p in procs:
                handle.launch(hosts, self.ledger, p, folder / f"{p.label}-{p.host}")
                if spec.kind not in ("burst", "torchrun") and not hosts.loopback:  # no anchor; no switch to starve
                    _wait_until_imported(p, spec.timeout_s)
            for p in procs:
                if p.container is not None:
                    handle.record_container(self.ledger, p, spec.timeout_s)
        except BaseException:
            handle.stop()
            raise
        (folder / "job.json").write_text(json.dumps({
            "spec": asdict(spec), "port": port, "loopback": hosts.loopback,
            **({"ltp_port": ltp_ports[0]} if spec.transport == "ltp" else {}),
            "processes": [{"label": p.label, "rank": p.rank, "host": p.host, "ip": p.ip, "pid": p.pid,
                           "log": p.log.name, "argv": p.argv} for p in procs]}, indent=1))
        return handle

    def _rank(self, spec: JobSpec, label: str, rank: int, host: str, port: int, log: Path, folder: Path,
              ips: list[str]) -> WorkloadProcess:
        """A rank of a torchrun job: the program in its host, or (spec.container) `podman run` of it in
        a container that joins the host's network namespace, with the run folder and the script's folder
        mounted at their own paths and the rank's working folder as its working folder."""
        base = f"{label}-{host}"
        env = rank_env(spec, rank, ips, self.hosts.iface(host), port, log)
        proc = WorkloadProcess(label, rank, host, self.hosts.ip(host), program_argv(spec.argv), log,
                               folder / f"{base}.out", env=env, errors=folder / f"{base}.err")
        if spec.container is not None:
            script = Path(spec.argv[0])
            self._contain(proc, spec, folder, program_argv(spec.argv, python="python3"),
                          extra=[script.parent] if script.suffix == ".py" and script.is_absolute() else [])
        return proc

    def _contain(self, proc: WorkloadProcess, spec: JobSpec, folder: Path, argv: list[str], extra: list[Path]) -> None:
        """Make `proc` run `argv` in a container of spec.container instead (`podman run`, attached),
        joined to its host's network namespace: the run folder mounted writable, this checkout (its
        code, with the image's Python) and the folders of `extra` (a script, the data) read-only, the
        process's working folder as its own, and its variables passed in."""
        run = self.run_dir.resolve()
        name = container_name(f"{run.name}-{hashlib.sha1(str(run).encode()).hexdigest()[:8]}", spec.name, proc.rank)
        base = f"{proc.label}-{proc.host}"
        code, code_env = checkout_access()
        proc.container, proc.cidfile, proc.netns_pid = name, folder / f"{base}.cid", self.hosts.netns_pid(proc.host)
        proc.argv = run_argv(name, spec.container, proc.netns_pid, argv,
                             {**workload_env(self.hosts.iface(proc.host)), **code_env, **proc.env}, [run],
                             folder / base, proc.cidfile, read_only=(*code, *extra))
        proc.env = {}   # the container's variables are in podman's -e flags; podman itself needs none

    def _process_config(self, spec: JobSpec, label: str, rank: int, host: str, port: int, log: Path,
                        folder: Path, peers: str, ltp_port: int = 0):
        ip = self.hosts.ip
        ltp = {"transport": spec.transport, "ltp_port": ltp_port, "ltp_deadline_ms": spec.ltp_deadline_ms,
               "ltp_theta_min": spec.ltp_theta_min}
        if spec.kind == "burst":
            return BurstConfig(
                role="ps" if label == "ps" else "worker", pattern=spec.pattern, rank=max(rank, 0),
                workers=len(spec.workers), ps_addr=ip(spec.servers[0]) if spec.servers else "",
                port=port, peers=",".join(ip(h) for h in spec.workers), burst_bytes=spec.burst_bytes,
                reply_bytes=spec.reply_size, iterations=spec.iterations,
                period_ms=spec.period_ms, jitter_ms=spec.jitter_ms, compute_ms=spec.compute_ms, cc=spec.cc or "",
                pcn_start=spec.pcn_start, pcn_lead_us=spec.pcn_lead_us, seed=spec.seed, timeout_s=spec.timeout_s,
                log=str(log), job=spec.name, host=host, **ltp)
        servers = spec.servers if spec.kind == "ps" else ()
        master = servers[0] if servers else spec.workers[0]
        return TrainConfig(
            kind=spec.kind, rank=rank, world=len(servers) + len(spec.workers), servers=len(servers),
            master_addr=ip(master), master_port=port, iface=self.hosts.iface(host), model=spec.model,
            profile_scale=spec.profile_scale, iterations=spec.iterations, batch=spec.batch, lr=spec.lr,
            momentum=spec.momentum, compute_ms=spec.compute_ms, bucket_mb=spec.bucket_mb, seed=spec.seed,
            timeout_s=spec.timeout_s, log=str(log), dump_dir=str(folder / "tensors") if spec.dump_tensors else "",
            eval_every=spec.eval_every, addr=ip(host), peers=peers, pcn_start=spec.pcn_start,
            pcn_lead_us=spec.pcn_lead_us, compression=spec.compression, compression_ratio=spec.compression_ratio,
            error_feedback=spec.error_feedback, job=spec.name, host=host, **ltp)

    def start_flows(self, flows: Sequence[FlowSpec], name: str = "background") -> FlowsHandle:
        """Start background flows (receivers, then senders); they run for duration_s or until stop()."""
        hosts = self.hosts
        flows = list(flows)
        hosts.check([h for f in flows for h in (f.src, f.dst)])
        for f in flows:
            if f.cc:
                check_cc(f.cc)
        labels = flow_labels(flows)
        wanted: dict[tuple[str, str], str] = {}
        for f in flows:
            if f.ecn is not None:
                key, value = (f.src, TCP_ECN), ecn_value(f.ecn)
                if wanted.get(key, value) != value:
                    raise UsageError(f"flows from {f.src} ask for ECN both on and off; Linux sets ECN per host "
                                     f"(network namespace), so start them from different hosts")
                wanted[key] = value
        todo = hosts.plan_settings(f"background flow{'s' if len(flows) > 1 else ''}", wanted)
        folder = self.run_dir / "flows"
        folder.mkdir(parents=True, exist_ok=True)
        if any((folder / f"{label}.receiver.jsonl").exists() for label in labels):
            raise UsageError(f"a flow named like one of {', '.join(labels)} already ran in {self.run_dir}; "
                             f"name them apart")
        hosts.apply_settings("background flows", todo)
        procs = []
        for f, label in zip(flows, labels):
            port = hosts.port(f.port)
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
                handle.launch(hosts, self.ledger, p, folder / p.label)
        except BaseException:
            handle.stop()
            raise
        index = folder / "flows.json"
        previous = json.loads(index.read_text()) if index.exists() else []
        previous += [{"flow": label, **asdict(f),
                      "processes": {p.label: p.pid for p in procs if p.label.startswith(label + ".")}}
                     for f, label in zip(flows, labels)]
        index.write_text(json.dumps(previous, indent=1))
        return handle


def _wait_until_imported(proc: WorkloadProcess, timeout_s: float) -> None:
    """PyTorch ranks start one at a time: each once the previous one has imported PyTorch (its log's
    anchor line is written after the import). Importing it takes a core for about a second; N ranks
    importing at once would leave a 2-core machine no idle time (and the run untrusted) while the
    switches already carry background traffic. On loopback there is no switch: the ranks start at once
    (the loopback tests of workloads/, 23, took 129 s instead of 182, 2026-11-30). A rank that ends first
    is left to JobHandle.check()."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.popen.poll() is None:
        try:
            if proc.log.stat().st_size > 0:
                return
        except FileNotFoundError:
            pass
        time.sleep(0.05)
