"""CPU use through a run: a thread in the runner that every 0.5 s reads the machine's idle share and
the CPU time of every process the run's ledger recorded, and writes `cpu.csv` in the run folder.

    sampler = CpuSampler(ledger, run_dir / "cpu.csv").start()
    ...
    cost = sampler.stop()          # the sampler's own CPU time, and how many samples it took

cpu.csv, one row per process per interval and one `machine` row per interval:

    host_ns   end of the interval (time.monotonic_ns(): the clock of the queue log and the workers' logs)
    pid       the process (empty for the machine and the sampler)
    role      bmv2 | worker | ps | background | collector | runner | sampler | shell | other | machine
    name      s1 (a switch, collector or shell), gen/worker0@h1 (a job's process), h3-h4.sender@h3 (a
              background flow's), runner, machine
    label     what the ledger calls the process
    cpu       its CPU time over the interval / the interval: 1.0 is one core (machine: cores busy)
    top_thread  BMv2 rows: the share of the interval its busiest thread ran (1.0: a whole core; a BMv2
              pipeline stage is one thread, so this is what saturates first)
    wait      BMv2 rows: the largest share of the interval any of its threads waited, runnable, for a
              CPU (the kernel's run_delay): how starved the switch was
    wake_us   BMv2 rows: its threads' mean wait for a CPU each time one was made to run, in µs (their
              run_delay over the times they ran, schedstat's third field): the delay the machine adds
              to each packet that wakes one, whatever the switch's own load
    idle      machine rows: the share of all cores' time idle (idle + iowait) over the interval
    load1     machine rows: the one-minute load average
    steal     machine rows: the share of all cores' time the hypervisor ran something else over the
              interval (/proc/stat's steal: a VM's CPU taken by its host; 0 on bare metal)
    runnable  machine rows: threads runnable at the sample (/proc/stat's procs_running, this sampler
              included): above the core count, threads were waiting for a CPU

A process is only counted while its PID has the start time the ledger recorded: a recycled PID is
another process and is never attributed to the run. /proc/<pid>/stat counts every thread of the
process. CPU times come in clock ticks (usually 10 ms), so one interval's share is within
1 tick / 0.5 s (2 % of a core); percentiles over a run are finer.
"""

from __future__ import annotations

import csv
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pcnlab.ledger import RunLedger

SAMPLE_PERIOD_S = 0.5
COLUMNS = ("host_ns", "pid", "role", "name", "label", "cpu", "top_thread", "wait", "wake_us", "idle", "load1", "steal", "runnable")
TICKS_PER_S = os.sysconf("SC_CLK_TCK")

# The ledger's labels, as topologies/bmv2.py, the runner and workloads/processes.py write them.
_LABELS = (
    ("bmv2", re.compile(r"simple_switch_grpc (?P<name>\S+)$")),
    ("collector", re.compile(r"collector (?:for|on) (?P<name>\S+)$")),
    ("shell", re.compile(r"shell of (?P<name>\S+)$")),
    ("job", re.compile(r"job (?P<job>\S+): (?:rank -?\d+ \()?(?P<proc>\S+) on (?P<host>[^\s)]+)\)?$")),
    ("background", re.compile(r"background flows \S+: (?P<proc>\S+) on (?P<host>\S+)$")),
)


def classify(label: str) -> tuple[str, str]:
    """(role, short name) of a ledger label."""
    for role, pattern in _LABELS:
        match = pattern.match(label)
        if match is None:
            continue
        parts = match.groupdict()
        if role == "job":
            return ("ps" if parts["proc"].startswith("ps") else "worker",
                    f"{parts['job']}/{parts['proc']}@{parts['host']}")
        if role == "background":
            return role, f"{parts['proc']}@{parts['host']}"
        return role, parts["name"]
    return "other", label


def read_ticks(pid: int) -> tuple[int, int] | None:
    """(start time, utime + stime) of a process in clock ticks, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; the fields after its last ')' are fixed.
    fields = text[text.rindex(b")") + 2:].split()
    return int(fields[19]), int(fields[11]) + int(fields[12])


def read_threads(pid: int) -> dict[int, tuple[int, int, int]]:
    """Per thread of a process: (ns it ran, ns it waited runnable for a CPU, times it was run), from
    /proc/<pid>/task/<tid>/schedstat."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as handle:
                ran, waited, runs = handle.read().split()
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
        out[int(tid)] = (int(ran), int(waited), int(runs))
    return out


def _thread_shares(threads: dict, earlier: dict, seconds: float) -> tuple[float, float, float | str]:
    """Over an interval: the busiest thread's share of it, the most-delayed thread's share of it spent
    waiting for a CPU, and the mean wait of all threads each time one was made to run (µs; empty if none
    ran). A thread not seen before started during the interval: all its time is in it."""
    deltas = [[now - before for now, before in zip(t, earlier.get(tid, (0, 0, 0)))] for tid, t in threads.items()]
    if not deltas:
        return 0.0, 0.0, ""
    top, wait = max(d[0] for d in deltas), max(d[1] for d in deltas)
    waited, runs = sum(d[1] for d in deltas), sum(d[2] for d in deltas)
    return round(top / 1e9 / seconds, 4), round(wait / 1e9 / seconds, 4), round(waited / runs / 1e3, 1) if runs > 0 else ""


@dataclass(frozen=True)
class MachineTicks:
    busy: int             # clock ticks of all cores not idle (steal included)
    idle: int             # idle + iowait
    steal: int            # taken by the hypervisor
    load1: float          # the one-minute load average
    runnable: int         # threads runnable now (procs_running)


def read_machine() -> MachineTicks:
    """The whole machine's CPU time so far, and what is runnable now."""
    with open("/proc/stat", "rb") as handle:
        lines = handle.read().split(b"\n")
    # user nice system idle iowait irq softirq steal (guest time is already inside user and nice)
    values = [int(v) for v in lines[0].split()[1:9]]
    idle = values[3] + values[4]
    running = next((int(line.split()[1]) for line in lines if line.startswith(b"procs_running ")), 0)
    with open("/proc/loadavg", "rb") as handle:
        load1 = float(handle.read().split()[0])
    return MachineTicks(sum(values) - idle, idle, values[7], load1, running)


@dataclass(frozen=True)
class _Process:
    pid: int
    start_time: int
    role: str
    name: str
    label: str


@dataclass(frozen=True)
class SamplerCost:
    cpu_s: float          # the sampling thread's own CPU time
    wall_s: float         # how long it ran
    samples: int

    @property
    def share(self) -> float:
        """Its own CPU use as a share of one core."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


class CpuSampler:
    """Samples the processes of `ledger` (read afresh every period: processes started later are
    picked up) and the runner itself into `out`."""

    def __init__(self, ledger: RunLedger, out: Path, period_s: float = SAMPLE_PERIOD_S):
        self.ledger = ledger
        self.out = Path(out)
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[tuple[int, int], int] = {}   # (pid, start time) -> ticks at the last sample
        self._last_threads: dict[tuple[int, int], dict[int, tuple[int, int]]] = {}
        self._last_machine: MachineTicks | None = None
        self._last_ns = 0
        self._own_cpu_s = 0.0
        self._started_wall = 0.0
        self.samples = 0
        self.cost: SamplerCost | None = None

    def _processes(self) -> list[_Process]:
        data = self.ledger.data
        out = [_Process(data.owner_pid, data.owner_start_time, "runner", "runner", "runner (controller, sampler)")]
        for entry in list(data.processes):
            role, name = classify(entry.what)
            out.append(_Process(entry.pid, entry.start_time, role, name, entry.what))
        return out

    def sample(self) -> list[tuple]:
        """One sample: the rows for the interval since the previous one (none the first time)."""
        now = time.monotonic_ns()
        rows = []
        seconds = (now - self._last_ns) / 1e9 if self._last_ns else 0.0
        seen: dict[tuple[int, int], int] = {}
        threads_seen: dict[tuple[int, int], dict[int, tuple[int, int, int]]] = {}
        for proc in self._processes():
            ticks = read_ticks(proc.pid)
            if ticks is None or ticks[0] != proc.start_time:
                continue  # gone, or its PID now belongs to another process
            key = (proc.pid, proc.start_time)
            seen[key] = ticks[1]
            top = wait = wake = ""
            if proc.role == "bmv2":
                threads = threads_seen[key] = read_threads(proc.pid)
                earlier = self._last_threads.get(key)
                if earlier is not None and seconds > 0:
                    top, wait, wake = _thread_shares(threads, earlier, seconds)
            before = self._last.get(key)
            if before is not None and seconds > 0:
                share = (ticks[1] - before) / TICKS_PER_S / seconds
                rows.append((now, proc.pid, proc.role, proc.name, proc.label, round(share, 4), top, wait, wake, "", "",
                             "", ""))
        machine = read_machine()
        if self._last_machine is not None and seconds > 0:
            before = self._last_machine
            d_busy, d_idle = machine.busy - before.busy, machine.idle - before.idle
            total = d_busy + d_idle
            if total > 0:
                rows.append((now, "", "machine", "machine", "all cores", round(d_busy / TICKS_PER_S / seconds, 4),
                             "", "", "", round(d_idle / total, 4), machine.load1,
                             round((machine.steal - before.steal) / total, 4), machine.runnable))
        self._last, self._last_machine, self._last_ns = seen, machine, now
        self._last_threads = threads_seen
        return rows

    def _loop(self) -> None:
        with open(self.out, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMNS)
            own_before = time.thread_time()
            own_ns = time.monotonic_ns()
            while True:
                rows = self.sample()
                own = time.thread_time()
                if rows:
                    seconds = (self._last_ns - own_ns) / 1e9
                    rows.append((self._last_ns, "", "sampler", "sampler", "this sampler (a thread of the runner)",
                                 round((own - own_before) / seconds, 4) if seconds > 0 else 0.0, "", "", "", "", "",
                                 "", ""))
                    writer.writerows(rows)
                    handle.flush()
                    self.samples += 1
                self._own_cpu_s += own - own_before
                own_before, own_ns = own, self._last_ns
                if self._stop.wait(self.period_s):
                    break
            self._own_cpu_s += time.thread_time() - own_before

    def start(self) -> "CpuSampler":
        self._started_wall = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> SamplerCost:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(10)
            self._thread = None
            self.cost = SamplerCost(self._own_cpu_s, time.monotonic() - self._started_wall, self.samples)
        return self.cost or SamplerCost(0.0, 0.0, 0)
