"""`pcnlab calibrate`: what this machine sustains, measured on one BMv2 switch (the no-logging build,
as runs use) running p4src/pcn.p4 through the controller, written to the calibration file
(pcnlab/calibration.py says where and what it holds).

1. Forwarding: a star of one switch, no queue rate set; UDP full-size frames (1514 bytes on the wire)
   from h1 to h2 offered in steps; packets/s received, telemetry off and cloning every packet.
2. Idle processing lag: the first (light) step with telemetry on; per packet that met an empty queue,
   egress - ingress - queueing time (analysis/fidelity.py's figure).
3. PyTorch workers beside it: h2's port set to a rate (20 Mbit/s by default) and kept backlogged by
   UDP at 1.3 x that rate, while a ps job (mlp) with 0, 1, 2, ... workers runs in the other hosts; the
   rate achieved while backlogged, BMv2's CPU and the machine's idle time for each, as the fidelity
   check measures them.

`one_switch` and `udp_pps` are also what bench/bench_dataplane.py measures with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pcnlab.controller.sessions import ControllerThread, PcnController
from pcnlab.controller.dataplane import DataPlaneConfig, FlowClass, PortMode
from pcnlab.controller.program import P4Program
from pcnlab.controller.endpoints import PortQueue
from pcnlab.errors import PcnLabError, UsageError
from pcnlab.files import writable
from pcnlab.calibration import describe, load_calibration, read_calibration, save_calibration, set_aside
from pcnlab.analysis.fidelity_limits import FidelityConfig
from pcnlab.analysis.fidelity import backlogged_rate, cpu_figures
from pcnlab.analysis.processing_lag import processing_lag_us
from pcnlab.experiments.rundir import RunFolder
from pcnlab.experiments.sampler import CpuSampler, read_machine
from pcnlab.topologies.network import NetworkOptions, PcnNetwork
from pcnlab.rates import FRAME_BYTES, rate_pps
from pcnlab.topologies.topos import make_topology

UDP_PAYLOAD = FRAME_BYTES - 14 - 20 - 8      # a full-size frame: Ethernet, IPv4 and UDP headers around it
STEPS_PPS = (500, 2000, 5000, 8000, 10000, 12000, 15000, 20000, 25000, 30000, 40000)
QUICK_STEP_S = 1.0                           # quick_calibrate: each forwarding step
QUICK_LAG_S = 3.0                            # quick_calibrate: the light step the idle lag is measured on
QUICK_ESTIMATE_S = 30                        # what quick_calibrate takes on a 2-core machine (said before)
MAX_LOSS = 0.01                              # a step is sustained when at most this share was lost
REFINE = 2                                   # steps offered between the last sustained step and the next
IPERF_PORT = 5301


@dataclass
class Rig:
    net: PcnNetwork
    topo: object
    folder: RunFolder
    queue_log: Path | None                  # the collector's CSV (complete once the rig is closed)

    def port_towards(self, host: str) -> int:
        return self.topo.port("s1", host)[0]


@contextlib.contextmanager
def one_switch(results: Path, experiment: str, name: str, hosts: int = 2, program: str = "pcn",
               telemetry: bool = False, queues: dict[str, tuple[int, int]] | None = None,
               cpu: bool = False, telemetry_every: int = 1):
    """A star of one BMv2 switch s1 and `hosts` hosts, configured by the controller: with program pcn,
    every port in ecn mode and one DDL class (the full program's work on every packet), telemetry of
    1 in `telemetry_every` packets to a collector when asked; `queues`: host -> (rate packets/s, depth)
    of the port towards it; `cpu`: sample CPU into the run folder's cpu.csv."""
    topo = make_topology("star", hosts=hosts, monitors=telemetry)
    with RunFolder.create(results, experiment, name) as folder:
        with PcnNetwork(topo, folder.path, folder.ledger, NetworkOptions(switch="bmv2")) as net:
            endpoint = net.endpoints()[0]
            if queues:
                endpoint = dataclasses.replace(endpoint, queues=tuple(
                    PortQueue(topo.port("s1", host)[0], rate, depth) for host, (rate, depth) in queues.items()))
            dataplane = None
            if program == "pcn":
                dataplane = {"s1": DataPlaneConfig(
                    switch_id=1, classes=(FlowClass(job=1, src="10.0.0.98/32", dst="10.0.0.99/32"),),
                    modes={p: PortMode("ecn") for p in endpoint.ports},
                    telemetry_port=topo.monitor_port("s1") if telemetry else None,
                    telemetry_every=telemetry_every)}
            controller = PcnController([endpoint], P4Program.named(program), dataplane=dataplane)
            collector = sampler = None
            queue_log = folder.path / "queue-s1.csv" if telemetry else None
            if telemetry:
                collector = net.host("m1").popen([sys.executable, "-m", "pcnlab.controller.collector",
                                                  "--interface", "m1-eth0", "--switch", "s1",
                                                  "--out", str(queue_log)], text=True)
                folder.ledger.add_process(collector.pid, "collector for s1")
                if "collector ready" not in collector.stdout.readline():
                    raise PcnLabError("the queue log collector did not start")
            if cpu:
                sampler = CpuSampler(folder.ledger, folder.path / "cpu.csv").start()
            try:
                with ControllerThread(controller):
                    yield Rig(net, topo, folder, queue_log)
            finally:
                if sampler is not None:
                    sampler.stop()
                if collector is not None:
                    collector.terminate()
                    collector.wait(10)


def udp_pps(net, seconds: float, size: int = UDP_PAYLOAD, offered_pps: float | None = None,
            src: str = "h1", dst: str = "h2", ledger=None) -> dict:
    """One iperf3 UDP flow of `size`-byte datagrams from src to dst: offered at `offered_pps` (None: as
    fast as iperf3 goes); what was sent and received per second, and the share lost."""
    bits = f"{offered_pps * size * 8:.0f}" if offered_pps else "2G"
    server = net.host(dst).popen(["iperf3", "-s", "-1", "-p", str(IPERF_PORT)])
    if ledger is not None:
        ledger.add_process(server.pid, f"iperf3 server on {dst}")
    try:
        time.sleep(0.3)
        out = net.host(src).cmd(f"iperf3 -c {net.host(dst).IP()} -p {IPERF_PORT} -u -b {bits} -l {size} "
                                f"-t {seconds} -J")
        try:
            summary = json.loads(out[out.index("{"):])["end"]["sum"]
        except (ValueError, KeyError) as exc:
            raise PcnLabError(f"iperf3 from {src} to {dst} gave no result ({exc}): {out.strip()[-200:]}") from None
        sent = summary["packets"]
        return {"offered_pps": offered_pps, "sent_pps": sent / summary["seconds"],
                "received_pps": (sent - summary["lost_packets"]) / summary["seconds"],
                "loss": summary["lost_packets"] / sent if sent else 0.0}
    finally:
        server.terminate()
        server.wait()


def _read_queue_log(path: Path | None) -> pd.DataFrame:
    if path is None or not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(path)


def measure_forwarding(results: Path, telemetry: bool, steps=STEPS_PPS, seconds: float = 3.0, say=print,
                       cpu: bool = True, first_seconds: float | None = None, experiment: str = "calibrate",
                       retry: bool = False):
    """Offered-load steps through one switch: the steps, and (telemetry on) the light step's lag.
    `cpu`: BMv2's CPU and the machine's idle time per step (a second more per step); `first_seconds`:
    the first (light) step's length, where the idle lag is measured; `retry`: a step that lost more
    than MAX_LOSS is offered once more and the better of the two kept."""
    rows, windows = [], []
    label = "every1" if telemetry else "off"
    with one_switch(results, experiment, f"forward-{label}", telemetry=telemetry, cpu=cpu) as rig:
        def step(offered: float, length: float) -> dict:
            start = time.monotonic_ns()
            got = udp_pps(rig.net, length, offered_pps=offered, ledger=rig.folder.ledger)
            if retry and got["loss"] > MAX_LOSS:   # a short step can lose to one hiccup of the machine: once more
                again = udp_pps(rig.net, length, offered_pps=offered, ledger=rig.folder.ledger)
                got = min(got, again, key=lambda step: step["loss"])
            windows.append((start, time.monotonic_ns()))
            got.update(_cpu_during(rig, *windows[-1]) if cpu else {})
            rows.append({"telemetry": label, **got})
            say(f"  telemetry {label:6s}  offered {offered:6.0f}/s  sent {got['sent_pps']:6.0f}/s  "
                f"received {got['received_pps']:6.0f}/s  lost {got['loss']:6.1%}" + (
                    f"  BMv2 {_share(got['bmv2_cpu_p95'])} of a core, busiest thread "
                    f"{_share(got['bmv2_top_thread_p95'])}, machine idle {_share(got['idle_p5'])}" if cpu else ""))
            return got

        for i, offered in enumerate(steps):
            got = step(offered, first_seconds if i == 0 and first_seconds else seconds)
            if got["loss"] > 0.1 or got["sent_pps"] < 0.8 * offered:
                break  # well past what it forwards (or what the sender can offer)
        refine(rows, lambda offered: step(offered, seconds))
    lag = None
    if telemetry:
        log = _read_queue_log(rig.queue_log)
        if not log.empty:
            first = (log["host_ns"] >= windows[0][0]) & (log["host_ns"] <= windows[0][1])
            light = log[first & (log["port"] == rig.port_towards("h2"))]
            lag = processing_lag_us(light)
    return rows, lag


def refine(rows: list[dict], measure, times: int = REFINE) -> None:
    """Halve the gap between the highest step sustained (at most MAX_LOSS lost) and the next one offered,
    `times` times, with `measure(offered)` (a step's row, which it adds to `rows`): the steps are
    2.5 x apart at the light end, where a switch that lost 1.7 % at 5,000 packets/s under CPU steal read
    as 2,000 (a suite's every test that needed more was refused)."""
    held = [r["offered_pps"] for r in rows if r["loss"] <= MAX_LOSS]
    above = [r["offered_pps"] for r in rows if held and r["offered_pps"] > max(held)]
    if not above:
        return
    low, high = max(held), min(above)
    for _ in range(times):
        middle = (low + high) / 2
        low, high = (middle, high) if measure(middle)["loss"] <= MAX_LOSS else (low, middle)


def _cpu_during(rig: Rig, start: int, end: int) -> dict:
    """BMv2's CPU (process, busiest thread: p95) and the machine's idle time (p5) during a step."""
    time.sleep(1.0)  # the sampler's next row covers the end of the step
    figures = cpu_figures(pd.read_csv(rig.folder.path / "cpu.csv"), (start, end))
    bmv2 = figures["bmv2"].get("s1") or {}
    return {"bmv2_cpu_p95": bmv2.get("p95"), "bmv2_top_thread_p95": (bmv2.get("top_thread") or {}).get("p95"),
            "idle_p5": (figures["machine_idle"] or {}).get("p5")}


def measure_workers(results: Path, rate_mbps: float, max_workers: int, seconds: float = 5.0,
                    compute_ms: float = 0.0, say=print) -> list[dict]:
    """0, 1, 2, ... PyTorch workers (a ps job, mlp) beside a port held at `rate_mbps` and kept backlogged;
    stops after the first count at which the switch no longer holds the rate (as received by h2)."""
    from pcnlab.workloads import JobSpec, Workloads

    limits = FidelityConfig()
    rate = rate_pps(rate_mbps)
    rows = []
    # Every port at the rate, as in an experiment: the job's own traffic is held to it by TCP.
    queues = {f"h{i}": (rate, 100) for i in range(1, 4 + max_workers)}
    with one_switch(results, "calibrate", "workers", hosts=3 + max_workers, telemetry=True, queues=queues,
                    cpu=True) as rig:
        workloads = Workloads(rig.folder.path, net=rig.net, ledger=rig.folder.ledger)
        for workers in range(max_workers + 1):
            job = None
            iterations = 0
            if workers:
                job = workloads.start_job(JobSpec(
                    name=f"fit{workers}", kind="ps", servers=("h3",), workers=tuple(f"h{4 + i}" for i in range(workers)),
                    model="mlp", iterations=1_000_000, compute_ms=compute_ms, timeout_s=120))
            try:
                if job is not None:
                    _wait_iterating(job, [f"worker{i}" for i in range(workers)])
                    before = sum(len(job.records(f"worker{i}")) for i in range(workers))
                start = time.monotonic_ns()
                got = udp_pps(rig.net, seconds, offered_pps=1.3 * rate, ledger=rig.folder.ledger)
                end = time.monotonic_ns()
                if job is not None:
                    iterations = sum(len(job.records(f"worker{i}")) for i in range(workers)) - before
            finally:
                if job is not None:
                    job.stop()
            row = {"workers": workers, "start_ns": start, "end_ns": end, "rate_pps": rate,
                   "received_share": got["received_pps"] / rate, **_cpu_during(rig, start, end),
                   "worker_iterations_per_s": iterations / ((end - start) / 1e9)}
            rows.append(row)
            say(f"  {workers} worker(s): h2 received {row['received_share']:.0%} of {rate_mbps:g} Mbit/s, BMv2 "
                f"{_share(row['bmv2_cpu_p95'])} of a core, busiest thread {_share(row['bmv2_top_thread_p95'])} (p95), "
                f"machine idle {_share(row['idle_p5'])} (p5), {row['worker_iterations_per_s']:.1f} worker iterations/s")
            if not _held(row, limits, "received_share"):
                break
    # The collector's CSV is complete now: the rate while backlogged, as the fidelity check takes it.
    log = _read_queue_log(rig.queue_log)
    port = rig.port_towards("h2")
    at = log[log["port"] == port] if not log.empty else log
    for row in rows:
        step = at[(at["host_ns"] >= row["start_ns"]) & (at["host_ns"] <= row["end_ns"])] if not at.empty else at
        got = backlogged_rate(step, 1, log["seq"].to_numpy()) if not step.empty else {"pps": None}
        row["share"] = got["pps"] / rate if got["pps"] else None
    return rows


def _share(value: float | None) -> str:
    return "?" if value is None else f"{value:.0%}"


def _wait_iterating(job, labels: list[str], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.check()
        try:
            if all(job.records(label) for label in labels):
                return
        except OSError:
            pass  # a log not written yet
        time.sleep(0.5)
    raise PcnLabError(f"the PyTorch job {job.name} did not start iterating within {timeout:.0f} s; logs in {job.folder}")


def measure_switch(results: Path, seconds: float, say=print, cpu: bool = True, first_seconds: float | None = None,
                   experiment: str = "calibrate", retry: bool = False) -> dict:
    """What a verdict and the fit estimate need: the packets/s one switch forwards, telemetry off and
    on every packet, and its idle processing lag."""
    steps, forward, lag = [], {}, None
    for telemetry in (False, True):
        rows, light_lag = measure_forwarding(results, telemetry, seconds=seconds, say=say, cpu=cpu,
                                             first_seconds=first_seconds, experiment=experiment, retry=retry)
        steps += rows
        ok = [r["received_pps"] for r in rows if r["loss"] <= MAX_LOSS]
        forward["every1" if telemetry else "off"] = max(ok) if ok else None
        if light_lag is not None and light_lag.size:
            lag = {"p50": float(np.percentile(light_lag, 50)), "p95": float(np.percentile(light_lag, 95)),
                   "n": int(light_lag.size), "at_pps": STEPS_PPS[0]}
    machine = read_machine()         # the machine's CPU time since boot: the share its hypervisor took
    return {"forward_pps": forward, "steps": steps, "idle_lag_us": lag,
            "steal": {"since_boot": machine.steal / (machine.busy + machine.idle)}}


def calibrate(results: Path = Path("results"), rate_mbps: float = 20.0, max_workers: int = 6,
              seconds: float = 3.0, compute_ms: float = 0.0, out: Path | None = None, say=print) -> dict:
    say("forwarding through one BMv2 switch (pcn.p4, no queue rate), UDP of full-size frames h1 -> h2:")
    data = {"kind": "full", **measure_switch(results, seconds, say)}
    say(f"PyTorch workers (ps, mlp, compute {compute_ms:g} ms) beside a port held at {rate_mbps:g} Mbit/s:")
    worker_rows = measure_workers(results, rate_mbps, max_workers, seconds=max(seconds, 5.0),
                                  compute_ms=compute_ms, say=say)
    limits = FidelityConfig()
    held = [r["workers"] for r in worker_rows if _held(r, limits, "share")]
    idle = [r["workers"] for r in worker_rows if r["workers"] in held and (r["idle_p5"] or 0) * 100 >= limits.min_idle_pct]
    data["workers"] = {"rate_mbps": rate_mbps, "model": "mlp", "compute_ms": compute_ms,
                       "fit": _prefix_max(held), "fit_with_idle": _prefix_max(idle), "steps": worker_rows}
    path = save_calibration(data, out)
    say(format_table(data))
    say(f"calibration written to {path}")
    return data


def quick_calibrate(results: Path, out: Path | None = None) -> dict:
    """The part of `pcnlab calibrate` a verdict needs, in seconds: forwarding in short steps (no CPU
    figures) and the idle lag over a light step of QUICK_LAG_S; written to the calibration file."""
    data = {"kind": "quick", **measure_switch(results, QUICK_STEP_S, say=lambda line: None, cpu=False,
                                              first_seconds=QUICK_LAG_S, experiment="calibrate-quick", retry=True)}
    path = save_calibration(data, out)
    return load_calibration(path) or {**data, "path": str(path)}


def ensure_calibration(results: Path, say=print) -> dict:
    """This machine's calibration; measured first (quick_calibrate) when the machine has none that
    belongs to it. A damaged or foreign file is named and set aside beside itself, never lost."""
    found = read_calibration()
    if found.state == "ok":
        return found.data
    unwritable = writable(found.path)
    if unwritable:
        raise UsageError(f"this machine has no calibration of its own and none can be written to {found.path} "
                         f"({unwritable}); set PCNLAB_CALIBRATION to a file you can write")
    if found.state in ("damaged", "foreign"):
        kept = set_aside(found)
        say(f"calibration: {found.path} {found.why}; kept as {kept.name}, measuring this machine again")
    why = "no calibration yet" if found.state == "absent" else "none that is its own"
    say(f"calibrating: this machine has {why}; measuring what its BMv2 sustains first (about "
        f"{QUICK_ESTIMATE_S} s, once per boot; pcnlab calibrate measures more)")
    sys.stdout.flush()
    started = time.monotonic()
    data = quick_calibrate(results, found.path)
    say(f"calibrated in {time.monotonic() - started:.0f} s: {describe(data)}")
    return data


def _held(row: dict, limits: FidelityConfig, share: str) -> bool:
    """The switch held the rate as the fidelity check asks: the share, and BMv2's CPU."""
    return (row[share] or 0) * 100 >= limits.min_rate_pct and (row["bmv2_cpu_p95"] or 0) * 100 <= limits.max_bmv2_cpu_pct


def _prefix_max(counts: list[int]) -> int | None:
    """The largest n such that 0..n all passed."""
    best = None
    for n in range(0, max(counts, default=-1) + 1):
        if n not in counts:
            break
        best = n
    return best


def format_table(data: dict) -> str:
    fwd = data["forward_pps"]
    lines = ["", "what one BMv2 switch sustains here (full-size frames, at most 1 % lost):",
             f"  telemetry off      {fwd.get('off') or 0:8.0f} packets/s  ({(fwd.get('off') or 0) * FRAME_BYTES * 8 / 1e6:.0f} Mbit/s)",
             f"  telemetry every 1  {fwd.get('every1') or 0:8.0f} packets/s  ({(fwd.get('every1') or 0) * FRAME_BYTES * 8 / 1e6:.0f} Mbit/s)"]
    lag = data.get("idle_lag_us")
    if lag:
        lines.append(f"  idle processing lag  p50 {lag['p50']:.0f} µs, p95 {lag['p95']:.0f} µs ({lag['n']} packets)")
    w = data["workers"]
    lines.append(f"  PyTorch workers beside it, port held at {w['rate_mbps']:g} Mbit/s: {w['fit']} "
                 f"(with the machine at least 5 % idle: {w['fit_with_idle']})")
    lines.append("  workers  rate while backlogged  received  BMv2 CPU p95  busiest thread p95  machine idle p5  "
                 "worker iterations/s")
    for r in w["steps"]:
        lines.append(f"  {r['workers']:7d}  {_share(r['share']):>21}  {_share(r['received_share']):>8}  "
                     f"{_share(r['bmv2_cpu_p95']):>12}  {_share(r['bmv2_top_thread_p95']):>18}  "
                     f"{_share(r['idle_p5']):>15}  {r['worker_iterations_per_s']:19.1f}")
    return "\n".join(lines)
