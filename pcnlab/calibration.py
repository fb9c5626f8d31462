"""The calibration file: what `pcnlab calibrate` measured this machine sustains (experiments/calibrate.py
measures it; the fidelity check and `pcnlab run`'s rate warning read it).

It is machine-local, not part of the project: /var/lib/pcnlab/calibration.json, or the file named by
the PCNLAB_CALIBRATION environment variable. Its figures, all for one BMv2 switch running p4src/pcn.p4
on the no-logging build with full-size frames (pcnlab.rates.FRAME_BYTES):

    forward_pps      {"off": ..., "every1": ...}: the highest packets/s delivered with at most 1 % loss,
                     telemetry off and cloning every packet
    steps            every offered load step: telemetry, offered_pps, received_pps, loss
    idle_lag_us      {"p50", "p95", "n"}: the switch's processing lag (egress - ingress - queueing, for
                     packets that met an empty queue) at a light load, telemetry every packet
    workers          {"rate_mbps", "model", "compute_ms", "fit", "fit_with_idle", "steps"}: how many
                     PyTorch workers (a ps job, mlp) ran beside the switch while it still held rate_mbps
                     on a backlogged port with BMv2 under the fidelity check's CPU limit (fit), and
                     with the machine also at least that check's idle share (fit_with_idle)
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from pcnlab.files import write_json
from pcnlab.rates import rate_pps

DEFAULT_PATH = Path("/var/lib/pcnlab/calibration.json")


def calibration_path() -> Path:
    return Path(os.environ.get("PCNLAB_CALIBRATION") or DEFAULT_PATH)


def load_calibration(path: Path | None = None) -> dict | None:
    """The calibration of this machine, or None when it was never calibrated (or the file is unreadable)."""
    path = Path(path) if path else calibration_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data["path"] = str(path)
    return data


def save_calibration(data: dict, path: Path | None = None) -> Path:
    path = Path(path) if path else calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"measured": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "cpus": os.cpu_count(),
            **{k: v for k, v in data.items() if k != "path"}}
    write_json(path, body)
    return path


def capacity_pps(calibration: dict, telemetry_every: int | None) -> float | None:
    """Packets/s one switch forwards here with telemetry 1 in N: each packet costs the no-telemetry
    time plus 1/N of a clone's extra time (interpolated between the two measured figures)."""
    figures = calibration.get("forward_pps") or {}
    off, on = figures.get("off"), figures.get("every1")
    if not telemetry_every:
        return off
    if not off or not on:
        return on if telemetry_every == 1 else off
    per_packet = 1 / off + (1 / on - 1 / off) / telemetry_every
    return 1 / per_packet


def rate_warning(runs, calibration: dict | None) -> str | None:
    """One line when a run's configured link rate needs more packets/s than calibration measured
    (None when every rate fits, or when the machine was never calibrated)."""
    if not calibration:
        return None
    worst = None
    for run in runs:
        if run.switch.kind != "bmv2":
            continue
        capacity = capacity_pps(calibration, run.telemetry.every)
        if not capacity:
            continue
        for key, mbps in run.topology.link_rates_mbps().items():
            need = rate_pps(mbps)
            if need > capacity and (worst is None or need / capacity > worst[0]):
                worst = (need / capacity, key, mbps, need, capacity, run.telemetry.every)
    if worst is None:
        return None
    _, key, mbps, need, capacity, every = worst
    telemetry = f"telemetry every {every}" if every else "telemetry off"
    return (f"warning: topology.{key} {mbps:g} Mbit/s needs {need} packets/s, more than the {capacity:.0f} one "
            f"BMv2 switch forwarded on this machine with {telemetry} (pcnlab calibrate, {calibration.get('measured', '?')}); "
            f"expect runs marked untrusted, or lower the rate")
