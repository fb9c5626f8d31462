"""Did the machine keep up? A run's fidelity check, from its folder's files alone (cpu.csv, the queue
logs and their summaries, events.jsonl, endpoints.json, config.yaml), written to fidelity.json:

    {"trusted": false,
     "reasons": ["s1 port 4 achieved 71 % of its 20 Mbit/s while backlogged: BMv2 s1 at 98 % of a core", ...],
     "checks": {"thresholds": {...}, "cpu": {...}, "ports": [...], "lag_us": {...}, "telemetry": {...},
                "controller": {...}, "unmeasured": [...]}}

What is checked (thresholds: the run's `fidelity:` settings, experiments/config/schema.py):
- CPU (cpu.csv, experiments/sampler.py), over the queue log's span (with the machine's CPU steal and
  runnable threads, recorded, and steal named in a finding it took part in): each BMv2 process's share of one
  core (p95 at most max_bmv2_cpu_pct: `pcnlab calibrate` finds one switch starts losing packets as
  its process nears a whole core, while no single thread of it does), its busiest thread's, and how
  long its threads waited for a CPU (the most-delayed thread's share of the time: a starved switch,
  reported with the rate and lag findings); each worker's and PS's share (reported only); the
  machine's idle share (p5 at least min_idle_pct, and its mean; by default a busy machine is only a
  warning: what says whether the emulation kept up is the switches' achieved rates and lag).
- Every port with a configured rate whose queue was non-empty at least min_backlog_s: the rate it
  achieved while backlogged (at least min_rate_pct of the configured one). A telemetry record whose
  packet left `deq_qdepth` >= N packets behind it (N: telemetry every N) starts an interval in which
  the port sent exactly the next N packets back to back, so the rate while backlogged is N x those
  intervals / their total length. Intervals across a lost record of the switch are left out.
- Each switch's processing lag: egress_us - ingress_us - queue_delay_us of packets that met an empty
  queue (enq_qdepth 0), p95 at most max_lag_factor x the idle value of the calibration file
  (analysis/processing_lag.py, which also says when the machine's CPU contention caused it).
- Telemetry records lost per switch (the summary's sequence gaps that never arrived late), at most
  max_telemetry_loss_pct.
- pcn runs: the controller's lag, from a burst report to the window write it caused (the `arm` event
  with the report's switch, port, job and decision time), p95 at most max_controller_lag_ms; and the
  writes' own latency (write_ms).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from pcnlab.analysis.metrics import stats
from pcnlab.calibration import load_calibration, provenance
from pcnlab.analysis.fidelity_limits import FidelityConfig, thresholds
from pcnlab.analysis.traffic_stats import json_safe
from pcnlab.files import write_json
from pcnlab.jsonlines import read_json_lines
from pcnlab.analysis.processing_lag import lag_checks
from pcnlab.analysis.results import RunData, on_port, rate_timeline
from pcnlab.rates import rate_mbps

IDLE_WARNING = 0.05   # a machine idle less than this (p5) gets a warning in fidelity.json
BACKLOG_DEPTH = 2     # a packet that met at least this many queued ahead of it was paced by the port


def _pct(share: float | None) -> str:
    return "?" if share is None else f"{share * 100:.0f} %"


# --- the figures, each from plain tables ------------------------------------------------------------

def backlogged_rate(port_log: pd.DataFrame, every: int = 1, switch_seqs: np.ndarray | None = None) -> dict:
    """Departures of one port while its queue set the pace: {"pps", "seconds", "intervals"}.

    An interval from one record's departure to the next counts when the port, not the arrivals, decided
    it: the first packet left at least `every` packets behind it (the next ones were all queued) and the
    next record's packet met at least BACKLOG_DEPTH packets when it arrived. BMv2 fixes each packet's
    departure time when it is queued (its predecessor's plus 1 / rate, or now if that has passed), so a
    packet that arrives at a near-empty queue after its slot starts a new schedule even though the
    previous packet, its egress thread a little late, is still in the queue: such a queue of one is not
    the port falling short of its rate, and counting it did (40 Mbit/s uplinks carrying bursts showed
    85 % with single-packet queues and 100 % at the standing queue of the bottleneck).

    `port_log`: that port's telemetry records (egress_us, deq_qdepth, enq_qdepth, seq); `switch_seqs`:
    every sequence number the switch's log holds, to leave out intervals across a lost record."""
    rows = port_log.sort_values("egress_us", kind="stable")
    egress = rows["egress_us"].to_numpy(dtype=np.int64)
    left = rows["deq_qdepth"].to_numpy(dtype=np.int64)
    met = rows["enq_qdepth"].to_numpy(dtype=np.int64) if "enq_qdepth" in rows else left + 1
    if len(rows) < 2:
        return {"pps": None, "seconds": 0.0, "intervals": 0}
    gaps = np.diff(egress)
    busy = (left[:-1] >= every) & (met[1:] >= BACKLOG_DEPTH) & (gaps >= 0)
    if switch_seqs is not None and "seq" in rows:
        seq = rows["seq"].to_numpy(dtype=np.int64)
        known = np.sort(np.asarray(switch_seqs, dtype=np.int64))
        between = np.searchsorted(known, seq[1:], "left") - np.searchsorted(known, seq[:-1], "right")
        busy &= (seq[1:] > seq[:-1]) & (between == seq[1:] - seq[:-1] - 1)
    seconds = float(gaps[busy].sum()) / 1e6
    intervals = int(busy.sum())
    return {"pps": intervals * every / seconds if seconds > 0 else None, "seconds": seconds, "intervals": intervals}


def telemetry_loss(summary: dict) -> dict:
    """Records never received (the collector's summary: a record that arrived late is not lost)."""
    lost, received = int(summary.get("lost", 0)), int(summary.get("records", 0))
    total = received + lost
    return {"records": received, "lost": lost, "share": lost / total if total else 0.0}


def switch_outages(events: pd.DataFrame) -> list[dict]:
    """Each time a switch's P4Runtime session went down during the run (`switch_down`): when (s after
    the log's anchor), until its next `switch_ready` (ms; None: never), and the BMv2 exit status when
    the runner started a dead one again (`switch_restarted`)."""
    if events.empty or "type" not in events or not (events["type"] == "switch_down").any():
        return []
    t0 = float(events["host_ns"].min())
    out = []
    for _, down in events[events["type"] == "switch_down"].iterrows():
        mine = events[(events.get("switch") == down["switch"]) & (events["host_ns"] >= down["host_ns"])]
        ready = mine[mine["type"] == "switch_ready"]["host_ns"]
        near = events[(events["type"] == "switch_restarted") & (events.get("switch") == down["switch"])
                      & ((events["host_ns"] - down["host_ns"]).abs() < 5e9)]
        out.append({"switch": down["switch"], "at_s": (float(down["host_ns"]) - t0) / 1e9,
                    "down_ms": (float(ready.min()) - float(down["host_ns"])) / 1e6 if not ready.empty else None,
                    "status": int(near["status"].iloc[0]) if not near.empty else None})
    return out


def _lost_parts(events: pd.DataFrame) -> list[str]:
    """What ended in the middle of the run besides a switch (experiments/watch.py), one reason each."""
    if events.empty or "type" not in events:
        return []
    t0, out = float(events["host_ns"].min()), []
    for _, e in events[events["type"].isin(["switch_backup", "collector_ended", "flow_ended"])].iterrows():
        at = f"{(float(e['host_ns']) - t0) / 1e9:.1f} s into the run"
        if e["type"] == "switch_backup":
            out.append(f"another P4Runtime client became primary on switch {e['switch']} {at}: the controller's "
                       f"writes were refused while it was")
        elif e["type"] == "collector_ended":
            out.append(f"the queue-log collector of {e['switch']} ended {at} (status {int(e['status'])}): its "
                       f"queue log stops there")
        else:
            out.append(f"background flow {e['flow']} ended {at} (status {int(e['status'])})")
    return out


def controller_lag(events: pd.DataFrame) -> dict:
    """From each burst report to the window write it caused (ms), and the writes' latency (ms)."""
    empty = {"lag_ms": stats([]), "write_ms": stats([])}
    if events.empty or "type" not in events:
        return empty
    arms = events[events["type"] == "arm"]
    reports = events[events["type"] == "report"]
    if arms.empty or reports.empty or "decided_us" not in arms:
        return {**empty, "write_ms": stats(arms.get("write_ms", []))}
    key = ["switch", "port", "job"]
    left = reports[key + ["t_us", "host_ns"]].rename(columns={"t_us": "decided_us", "host_ns": "report_ns"})
    right = arms[key + ["decided_us", "host_ns"]]
    joined = right.merge(left, on=key + ["decided_us"], how="inner")
    lag = (joined["host_ns"] - joined["report_ns"]) / 1e6
    return {"lag_ms": stats(lag[lag >= 0]), "write_ms": stats(arms["write_ms"])}


def cpu_figures(cpu: pd.DataFrame, span_ns: tuple[float, float] | None = None) -> dict:
    """Per BMv2 process and per worker/PS: share of one core (p50, p95, max); the machine's idle share
    (p5, mean) and load average, over the samples whose interval lies inside `span_ns`."""
    if span_ns is not None:
        cpu = cpu[(cpu["host_ns"] >= span_ns[0]) & (cpu["host_ns"] <= span_ns[1])]

    def shares(values) -> dict:
        arr = np.asarray(values, dtype=float)
        return {"p50": float(np.percentile(arr, 50)), "p95": float(np.percentile(arr, 95)),
                "max": float(arr.max()), "n": int(arr.size)}

    out: dict = {"samples": 0, "bmv2": {}, "workers": {}, "machine_idle": None, "load1": None}
    machine = cpu[cpu["role"] == "machine"]
    out["samples"] = int(len(machine))
    for role, target in (("bmv2", "bmv2"), ("worker", "workers"), ("ps", "workers")):
        for name, rows in cpu[cpu["role"] == role].groupby("name"):
            out[target][str(name)] = shares(rows["cpu"])
    for name, rows in cpu[cpu["role"] == "bmv2"].groupby("name"):
        for column in ("top_thread", "wait", "wake_us"):
            values = rows[column].dropna() if column in rows else ()
            out["bmv2"][str(name)][column] = shares(values) if len(values) else None
    if not machine.empty:
        idle = machine["idle"].astype(float)
        out["machine_idle"] = {"p5": float(np.percentile(idle, 5)), "mean": float(idle.mean()), "n": int(idle.size)}
        out["load1"] = {"mean": float(machine["load1"].mean()), "max": float(machine["load1"].max())}
        out["machine_busy_cores"] = {"mean": float(machine["cpu"].mean()), "max": float(machine["cpu"].max())}
        for column in ("steal", "runnable"):     # contention from outside the run (cpu.csv since steal was sampled)
            values = machine[column].dropna().astype(float) if column in machine else ()
            out[column] = shares(values) if len(values) else None
    sampler = cpu[cpu["role"] == "sampler"]
    if not sampler.empty:
        out["sampler_cpu_mean"] = float(sampler["cpu"].mean())
    return out


# --- the verdict ---------------------------------------------------------------------------------------

def check_run(run_dir: Path, calibration: dict | None = None, write: bool = True) -> dict:
    """The fidelity verdict of a finished run folder; written to fidelity.json unless write=False.
    `calibration`: the calibration data (default: the one the run recorded, calibration.json; for a run
    from before runs recorded it, this machine's file, if any)."""
    run = RunData(Path(run_dir))
    limits = thresholds(run.config)
    if calibration is None:
        calibration = run.calibration or load_calibration()
    queue = run.queue
    checks: dict = {"thresholds": asdict(limits), "telemetry_every": run.telemetry_every, "unmeasured": [],
                    "calibration": provenance(calibration)}
    if run.node:
        checks["node"] = run.node         # a sweep on a cluster: the machine that ran and judged it
    unmeasured = checks["unmeasured"]

    cpu_path = run.path / "cpu.csv"
    cpu = pd.read_csv(cpu_path) if cpu_path.exists() and cpu_path.stat().st_size else pd.DataFrame()
    figures = None
    if not cpu.empty:
        span = (float(queue["host_ns"].min()), float(queue["host_ns"].max())) if not queue.empty else None
        figures = cpu_figures(cpu, span)
        if figures["samples"] == 0:
            figures = cpu_figures(cpu)      # a run too short for a sample inside the queue log's span
    else:
        unmeasured.append("CPU: no samples (cpu.csv missing or empty)")
    checks["cpu"] = figures
    note = _cpu_note(figures)

    reasons: list[str] = []         # the switches' own findings first, then the machine's
    if queue.empty:
        unmeasured.append("rates and lag: no queue log (telemetry off)")
    else:
        checks["ports"] = _port_checks(run, queue, limits, reasons, note)
        if not any(p["bottleneck"] for p in checks["ports"]):
            unmeasured.append(f"rate: no port was backlogged for {limits.min_backlog_s:g} s")
        checks["lag_us"], checks["idle_lag_p95_us"] = lag_checks(queue, figures, limits, calibration, reasons, note)
    warnings: list[str] = []
    if figures is not None:
        reasons += _cpu_reasons(figures, limits)
        idle = figures["machine_idle"]
        if idle is not None and idle["p5"] < IDLE_WARNING and idle["p5"] * 100 >= limits.min_idle_pct:
            warnings.append(f"the machine was {_pct(idle['p5'])} idle at its busiest (p5), load average up to "
                            f"{figures['load1']['max']:.1f}")
    checks["telemetry"] = _telemetry_checks(run.path, limits, reasons)
    checks["ecn"] = _ecn_checks(run, reasons)
    checks["controller"] = control = controller_lag(run.events)
    lag_ms = control["lag_ms"]
    control["ok"] = lag_ms["n"] == 0 or lag_ms["p95"] <= limits.max_controller_lag_ms
    if lag_ms["n"] == 0:
        unmeasured.append("controller lag: no window was written (only pcn runs write them)")
    elif not control["ok"]:
        reasons.append(f"the controller took {lag_ms['p95']:.0f} ms from a burst report to its window write (p95; "
                       f"at most {limits.max_controller_lag_ms:g} ms); the writes alone "
                       f"{control['write_ms']['p95']:.1f} ms")

    checks["outages"] = outages = switch_outages(run.events)
    for o in outages:
        back = f"configured again after {o['down_ms']:.0f} ms" if o["down_ms"] is not None else "never back"
        restarted = f"; BMv2 ended with status {o['status']} and was started again" if o["status"] is not None else ""
        reasons.append(f"switch {o['switch']} was down {o['at_s']:.1f} s into the run ({back}{restarted})")
    reasons += _lost_parts(run.events)

    out = json_safe({"trusted": not reasons, "reasons": reasons, "warnings": warnings, "checks": checks})
    if write:
        write_json(run.path / "fidelity.json", out, allow_nan=False)
    return out


def _cpu_note(figures: dict | None):
    """What the CPU figures say about a switch, to append to a finding about it."""
    def note(switch: str) -> str:
        if figures is None or switch not in figures["bmv2"]:
            return ""
        share = figures["bmv2"][switch]
        text = f": BMv2 {switch} at {_pct(share['p95'])} of a core"
        if share.get("wait"):
            text += f", its threads waiting for a CPU up to {_pct(share['wait']['p95'])} of the time"
        if figures["machine_idle"] is not None:
            text += f", machine {_pct(figures['machine_idle']['p5'])} idle (p5)"
        return text + _contention(figures)
    return note


def _contention(figures: dict) -> str:
    """Steal, when it took part: the machine's CPU that its hypervisor gave to something else."""
    steal = figures.get("steal")
    if steal and round(steal["p95"] * 100) >= 1:          # as it prints: "up to 0 %" says nothing
        return f", CPU steal up to {_pct(steal['p95'])} of the machine (p95: its hypervisor ran something else)"
    return ""


def _cpu_reasons(figures: dict, limits: FidelityConfig) -> list[str]:
    out = []
    for name, share in figures["bmv2"].items():
        if share["p95"] * 100 > limits.max_bmv2_cpu_pct:
            out.append(f"BMv2 {name} used {_pct(share['p95'])} of a core (p95; at most {limits.max_bmv2_cpu_pct:g} %): "
                       "near what one switch forwards here")
    idle = figures["machine_idle"]
    if idle is not None and idle["p5"] * 100 < limits.min_idle_pct:
        out.append(f"the machine was {_pct(idle['p5'])} idle at its busiest (p5; at least {limits.min_idle_pct:g} %), "
                   f"load average up to {figures['load1']['max']:.1f}: every core was busy{_contention(figures)}")
    return out


def _port_checks(run: RunData, queue: pd.DataFrame, limits: FidelityConfig, reasons: list[str], note) -> list[dict]:
    """Every port with a configured rate: the rate it achieved while backlogged. A port whose rate the
    run's schedule changed is judged per step against the rate in force when its packets were queued
    (BMv2 fixes a packet's departure when it is queued)."""
    ports = []
    for (switch, port), steps in sorted(rate_timeline(run.events, run.port_rates).items()):
        at = queue[on_port(queue, switch, port)]
        seqs = queue.loc[queue["switch"] == switch, "seq"].to_numpy()
        for i, (since_ns, rate) in enumerate(steps):
            until_ns = steps[i + 1][0] if i + 1 < len(steps) else None
            rows = at
            if since_ns is not None:
                rows = rows[rows["ingress_ns"] >= since_ns]
            if until_ns is not None:
                rows = rows[rows["ingress_ns"] < until_ns]
            if rate is None:
                continue
            got = backlogged_rate(rows, run.telemetry_every, seqs)
            share = got["pps"] / rate if got["pps"] else None
            bottleneck = got["seconds"] >= limits.min_backlog_s and share is not None
            ok = not bottleneck or share * 100 >= limits.min_rate_pct
            step = {"since_ns": since_ns} if len(steps) > 1 else {}
            ports.append({"switch": switch, "port": port, "rate_pps": rate, "rate_mbps": rate_mbps(rate), **step,
                          "backlogged_s": got["seconds"], "achieved_pps": got["pps"], "share": share,
                          "bottleneck": bottleneck, "ok": ok})
            if not ok:
                when = " (a scheduled rate)" if since_ns is not None else ""
                reasons.append(f"{switch} port {port} achieved {_pct(share)} of its {rate_mbps(rate):.3g} Mbit/s{when} "
                               f"while backlogged ({got['pps']:.0f} of {rate} packets/s over {got['seconds']:.1f} s)"
                               f"{note(switch)}")
    return ports


def _telemetry_checks(path: Path, limits: FidelityConfig, reasons: list[str]) -> dict:
    out = {}
    for summary_path in sorted(path.glob("queue-s*.summary.json")):
        summary = json.loads(summary_path.read_text())
        loss = telemetry_loss(summary)
        loss["ok"] = loss["share"] * 100 <= limits.max_telemetry_loss_pct
        switch = summary.get("switch", summary_path.name.split(".")[0].removeprefix("queue-"))
        out[switch] = loss
        if not loss["ok"]:
            reasons.append(f"{switch} lost {_pct(loss['share'])} of its telemetry records ({loss['lost']} of "
                           f"{loss['records'] + loss['lost']}; at most {limits.max_telemetry_loss_pct:g} %): the "
                           "collector fell behind")
    return out


def _ecn_checks(run: RunData, reasons: list[str]) -> dict:
    """Background flows configured with ECN whose connection went without it (the sender's `connected`
    record): such a flow is non-ECT, no mode marks it, and the queue it keeps is not the experiment's."""
    wanted = {f["name"] for f in run.config.get("background") or [] if f.get("ecn")}
    without = []
    for log in sorted(run.path.glob("flows/*.sender.jsonl")):
        flow = log.name[: -len(".sender.jsonl")]
        connected = next((r for r in read_json_lines(log)[1] if r.get("type") == "connected"), None)
        if flow in wanted and connected is not None and connected.get("ecn") is False:
            without.append(flow)
    if without:
        reasons.append(f"background flow{'s' if len(without) > 1 else ''} {', '.join(without)} asked for ECN "
                       "but connected without it: non-ECT traffic no mode marks")
    return {"asked": sorted(wanted), "without": without}


def verdict_line(fidelity: dict, most: int = 2) -> str:
    """One line for the terminal: trusted, or untrusted with its first reasons (all are in fidelity.json)."""
    if fidelity.get("trusted"):
        bottlenecks = [p for p in fidelity["checks"].get("ports", []) if p["bottleneck"]]
        detail = ", ".join(f"{p['switch']} port {p['port']} at {_pct(p['share'])} of its rate" for p in bottlenecks)
        return "trusted" + (f" ({detail})" if detail else "")
    reasons = fidelity["reasons"]
    more = f" (and {len(reasons) - most} more in fidelity.json)" if len(reasons) > most else ""
    return "UNTRUSTED: " + "; ".join(reasons[:most]) + more
