"""Each switch's processing lag, judged against the idle lag of its machine's calibration, and whether
the machine, rather than the switch's own packets, made it slow.

The lag of a packet that met an empty queue is its time in the switch outside the queue: egress -
ingress - queueing (µs, the switch's own timestamps). Its p95 over the run must stay within
max_lag_factor x the calibration's idle p95.

A lag over that limit has two causes, and the finding says which one the run measured:
- the switch's own packets: a pipeline thread busy most of the time queues packets behind each other
  inside BMv2 (a single server at utilisation u keeps a packet waiting u / (2 (1 - u)) service times on
  average: half a packet's processing at u = 0.5, four at 0.89);
- the machine: the switch's threads woke for a packet and waited for a CPU that other processes held
  (the run's own or anyone's). cpu.csv's wake_us is their mean wait each time they ran, per 0.5 s interval.
The finding names the machine when both hold. First, the switch's busiest thread ran at most
UNSATURATED of the time (p95 over the intervals), so its own packets cannot have queued it several idle
lags deep. Second, in its worst intervals (p95), its threads waited longer per wake than a whole idle
packet's lag (the calibration's p50), so the machine at least doubled a packet's time there. It happens
on a machine held to a share of its CPU, or with load beside the run. The verdict is untrusted either
way: the run's packets were delayed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pcnlab.analysis.fidelity_limits import FidelityConfig
from pcnlab.analysis.metrics import stats

# Idle processing lag p95 when the machine was never calibrated: about what `pcnlab calibrate` measured
# on the 2-core development machine (88-113 µs at 500 packets/s).
DEFAULT_IDLE_LAG_P95_US = 100.0
# The busiest thread's share of the time below which the switch's own packets queue a packet half a
# packet's processing on average (a single server's u / (2 (1 - u)) at u = 0.5): not several idle lags.
UNSATURATED = 0.5


def processing_lag_us(switch_log: pd.DataFrame) -> np.ndarray:
    """Time each packet that met an empty queue spent in the switch outside the queue (µs)."""
    empty = switch_log[switch_log["enq_qdepth"] == 0]
    return (empty["egress_us"] - empty["ingress_us"] - empty["queue_delay_us"]).to_numpy(dtype=float)


def the_machines_doing(switch_cpu: dict | None, idle_p50_us: float | None) -> str:
    """Why the machine, not the switch's own packets, made a switch slow (its CPU figures: cpu_figures'
    per-switch entry), or "" when the run's measurements do not say so."""
    top = ((switch_cpu or {}).get("top_thread") or {}).get("p95")
    wake = ((switch_cpu or {}).get("wake_us") or {}).get("p95")
    if top is None or wake is None or idle_p50_us is None or top > UNSATURATED or wake <= idle_p50_us:
        return ""
    return (f"; the machine's doing: its busiest thread ran {top * 100:.0f} % of the time (p95), too little to "
            f"queue its own packets, while its threads waited {wake:.0f} µs for a CPU per wake (p95 over "
            f"{switch_cpu['wake_us']['n']} intervals), more than an idle packet's whole lag ({idle_p50_us:.0f} µs)")


def lag_checks(queue: pd.DataFrame, figures: dict | None, limits: FidelityConfig, calibration: dict | None,
               reasons: list[str], note) -> tuple[dict, dict]:
    """Each switch's processing lag against the calibrated idle value; a finding per switch over it,
    naming the machine when the run measured it as the cause (`machine`: true)."""
    idle_lag = (calibration or {}).get("idle_lag_us") or {}
    idle = idle_lag.get("p95") or DEFAULT_IDLE_LAG_P95_US
    source = {"value": idle, "source": (calibration or {}).get("path", "calibration") if idle_lag.get("p95")
              else "default (not calibrated)"}
    lags = {}
    for switch, rows in queue.groupby("switch"):
        lag = stats(processing_lag_us(rows))
        lag["limit_us"] = limits.max_lag_factor * idle
        lag["ok"] = lag["n"] == 0 or lag["p95"] <= lag["limit_us"]
        lags[str(switch)] = lag
        if lag["ok"]:
            continue
        machine = the_machines_doing(((figures or {}).get("bmv2") or {}).get(str(switch)), idle_lag.get("p50"))
        lag["machine"] = bool(machine)
        reasons.append(f"{switch} took {lag['p95']:.0f} µs to process a packet (p95, packets that met an empty "
                       f"queue), {lag['p95'] / idle:.0f} x its idle {idle:.0f} µs (at most "
                       f"{limits.max_lag_factor:g} x){note(str(switch))}{machine}")
    return lags, source
