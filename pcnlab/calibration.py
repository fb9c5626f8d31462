"""The calibration file: what `pcnlab calibrate` measured this machine sustains (experiments/calibrate.py
measures it; experiments/fit.py estimates from it whether a run will keep up; a run copies it into its folder, and the fidelity check judges the run against that copy).

It is machine-local, not part of the project: /var/lib/pcnlab/calibration.json, or the file named by
the PCNLAB_CALIBRATION environment variable. Its figures, all for one BMv2 switch running p4src/pcn.p4
on the no-logging build with full-size frames (pcnlab.rates.FRAME_BYTES):

    machine          {"host", "cpu_model", "cpus", "boot_id"}: the machine it was measured on; a file
                     whose machine is not this one (another host, CPU model or core count, or measured
                     before the last boot) does not belong here and is measured again
    kind             "quick" (what a run measures on its own when the machine has no calibration: the
                     forwarding rates and the idle lag, in seconds) or "full" (`pcnlab calibrate`)
    forward_pps      {"off": ..., "every1": ...}: the highest packets/s delivered with at most 1 % loss,
                     telemetry off and cloning every packet
    steps            every offered load step: telemetry, offered_pps, received_pps, loss
    idle_lag_us      {"p50", "p95", "n"}: the switch's processing lag (egress - ingress - queueing, for
                     packets that met an empty queue) at a light load, telemetry every packet
    steal            {"since_boot": share of the machine's CPU time taken by its hypervisor since boot}
    workers          (full only) {"rate_mbps", "model", "compute_ms", "fit", "fit_with_idle", "steps"}: how
                     many PyTorch workers (a ps job, mlp) ran beside the switch while it still held rate_mbps
                     on a backlogged port with BMv2 under the fidelity check's CPU limit (fit), and
                     with the machine also at least that check's idle share (fit_with_idle)
    pilots           {shape: {"trusted", "reason", "folder", "time_scale", "measured"}}: the verdicts of
                     runs rehearsed here before their sweeps (experiments/pilot.py), by the run's shape
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from pcnlab.files import write_json

DEFAULT_PATH = Path("/var/lib/pcnlab/calibration.json")
IDENTITY = ("host", "cpu_model", "cpus", "boot_id")    # what makes a calibration this machine's


def calibration_path() -> Path:
    return Path(os.environ.get("PCNLAB_CALIBRATION") or DEFAULT_PATH)


def _first_line(path: str, prefix: str = "") -> str | None:
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip() if prefix else line.strip()
    except OSError:
        pass
    return None


def machine_identity() -> dict:
    """This machine as a calibration names it: host name, CPU model, cores, and this boot."""
    return {"host": platform.node(), "cpu_model": _first_line("/proc/cpuinfo", "model name") or platform.processor(),
            "cpus": os.cpu_count(), "boot_id": _first_line("/proc/sys/kernel/random/boot_id")}


@dataclass(frozen=True)
class CalibrationFile:
    """The calibration file as found: `data` when it belongs to this machine; else `state` says why not
    (absent, damaged, foreign) and `why` says it in words."""

    path: Path
    state: str                  # ok | absent | damaged | foreign
    data: dict | None = None
    why: str = ""

    def line(self) -> str:
        """What it is, in one line (doctor; the note before a run measures the machine again)."""
        if self.state == "ok":
            return describe(self.data)
        if self.state == "absent":
            return f"{self.path}: none yet (the first run measures this machine, about 30 s; pcnlab calibrate measures more)"
        return f"{self.path}: {self.why}"


def _differences(recorded: dict, here: dict) -> list[str]:
    names = {"host": "host", "cpu_model": "CPU model", "cpus": "core count"}
    out = [f"{names[k]} {recorded.get(k)!r}, not {here[k]!r}" for k in names if recorded.get(k) != here[k]]
    if not out and recorded.get("boot_id") != here["boot_id"]:
        out.append("measured before this machine's last boot")
    return out


def read_calibration(path: Path | None = None) -> CalibrationFile:
    """The calibration file and whether it belongs to this machine."""
    path = Path(path) if path else calibration_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return CalibrationFile(path, "absent")
    except OSError as exc:
        return CalibrationFile(path, "damaged", why=f"cannot be read ({exc.strerror or exc})")
    try:
        data = json.loads(text)
    except ValueError as exc:
        return CalibrationFile(path, "damaged", why=f"is not JSON ({exc})")
    if not isinstance(data, dict) or not isinstance(data.get("forward_pps", {}), dict) \
            or not isinstance(data.get("idle_lag_us") or {}, dict):
        return CalibrationFile(path, "damaged", why="is not a calibration (pcnlab calibrate writes one)")
    recorded = data.get("machine")
    if not isinstance(recorded, dict):
        return CalibrationFile(path, "foreign", data, why="names no machine (written before calibrations named "
                                                          "theirs): it may be another machine's")
    differ = _differences(recorded, machine_identity())
    if differ:
        return CalibrationFile(path, "foreign", data, why="is another machine's: " + "; ".join(differ))
    data["path"] = str(path)
    return CalibrationFile(path, "ok", data)


def load_calibration(path: Path | None = None) -> dict | None:
    """This machine's calibration, or None when it has none that belongs to it."""
    found = read_calibration(path)
    return found.data if found.state == "ok" else None


def set_aside(found: CalibrationFile) -> Path:
    """Moves a damaged or foreign calibration file out of the way, beside it, so nothing is lost."""
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S")
    target = found.path.with_name(f"{found.path.stem}.{found.state}-{stamp}{found.path.suffix}")
    found.path.rename(target)
    return target


def save_calibration(data: dict, path: Path | None = None) -> Path:
    path = Path(path) if path else calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    identity = machine_identity()
    body = {"measured": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": identity["host"], "cpus": identity["cpus"],
            "machine": identity, **{k: v for k, v in data.items() if k != "path"}}
    write_json(path, body)
    return path


def record_pilot(calibration: dict, shape: str, verdict: dict) -> None:
    """Keep a pilot's verdict in the calibration (in memory, and in its file when it has one)."""
    calibration.setdefault("pilots", {})[shape] = verdict
    path = calibration.get("path")
    if path:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            return              # gone or damaged since: the next run measures the machine again
        data.setdefault("pilots", {})[shape] = verdict
        write_json(Path(path), data)


def describe(calibration: dict | None) -> str:
    """Which calibration, in one line: where, when, what kind, its idle lag and forwarding rates."""
    if not calibration:
        return "not calibrated: the built-in defaults"
    lag = (calibration.get("idle_lag_us") or {}).get("p95")
    fwd = calibration.get("forward_pps") or {}
    parts = [f"{calibration.get('kind', 'full')} calibration {calibration.get('path', '?')}",
             f"measured {calibration.get('measured', '?')}"]
    if lag is not None:
        parts.append(f"idle lag p95 {lag:.0f} µs")
    if fwd.get("off"):
        parts.append(f"BMv2 {fwd['off']:,.0f} packets/s (telemetry off), {fwd.get('every1') or 0:,.0f} (every packet)")
    steal = (calibration.get("steal") or {}).get("since_boot")
    if steal:
        parts.append(f"CPU steal {steal:.1%} since boot")
    return ", ".join(parts)


def provenance(calibration: dict | None) -> dict:
    """What fidelity.json records of the calibration that judged a run."""
    if not calibration:
        return {"source": "default (not calibrated)"}
    return {"source": calibration.get("path"), "kind": calibration.get("kind", "full"),
            "measured": calibration.get("measured"), "machine": calibration.get("machine"),
            "idle_lag_p95_us": (calibration.get("idle_lag_us") or {}).get("p95"),
            "forward_pps": calibration.get("forward_pps")}


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
