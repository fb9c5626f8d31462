"""The pilot: the sweep's heaviest run, rehearsed on this machine for a short while before the sweep and
judged as every run is (analysis/fidelity.py). The fit (fit.py) estimates packets/s against the
calibration; what no estimate sees is whether this machine gives the run's own mix of processes (PyTorch
ranks, their containers, collectors, background senders) a CPU in time. Measured on a machine held to
60 % with a hog: the fit passed pcn-training at 58 % of what a switch forwards, and its runs came out
untrusted, BMv2's threads waiting for a CPU 43 % of the time; a full calibration's workers, flat out on
one switch, still held the rate there. The run itself is the measure that cannot miss its own mix.

A pilot runs when the sweep takes at least WORTH pilots' time (or when asked, `--pilot`), for at most
PILOT_S times the run's time_scale, its folder kept under results/<experiment>-pilot/. An untrusted
pilot is tried once more at the next whole time_scale; the sweep is then refused in one line naming
that option when it was trusted, or saying it was not. Each verdict is kept in the calibration file
under `pilots` (the run's shape: its configuration without its name, seed and length), so a shape is
piloted once per calibration, that is once per machine and boot.

Hand-written: no library rehearses a testbed's run.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, replace

from pcnlab.calibration import record_pilot
from pcnlab.errors import PcnLabError, UsageError

PILOT_S = 20.0        # a pilot's length at time_scale 1: a verdict needs a backlogged second and idle packets
WORTH = 10            # a sweep is piloted when it is at least this many pilots long


@dataclass(frozen=True)
class PilotVerdict:
    """One pilot's answer: trusted or not, the first reason, its folder, when it ran."""

    trusted: bool
    reason: str
    folder: str
    time_scale: float
    measured: str

    def to_dict(self) -> dict:
        return {"trusted": self.trusted, "reason": self.reason, "folder": self.folder,
                "time_scale": self.time_scale, "measured": self.measured}


def shape(run) -> str:
    """What a pilot's verdict is about: the run's configuration without its name, seed and length."""
    data = run.to_dict()
    for key in ("run", "index", "repetition", "seed", "sweep", "source", "overrides", "description",
                "duration_s", "schedule"):
        data.pop(key, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def heaviest(runs, fits):
    """The run to rehearse: most PyTorch processes, then the busiest switch; None without a BMv2 run."""
    judged = [(run, fit) for run, fit in zip(runs, fits) if fit.switch is not None]
    if not judged:
        return None
    return max(judged, key=lambda pair: (pair[1].torch_processes, pair[1].share or 0, pair[1].processes))[0]


def worth(runs) -> bool:
    """A sweep long enough that a pilot costs at most 1/WORTH of it."""
    return sum(run.duration_s for run in runs) >= WORTH * PILOT_S


def known(calibration: dict | None, run) -> PilotVerdict | None:
    """This calibration's verdict on the run's shape, if it has one."""
    found = ((calibration or {}).get("pilots") or {}).get(shape(run))
    return PilotVerdict(**found) if isinstance(found, dict) else None


def rehearsal(run):
    """The run, short: PILOT_S (times its time_scale) at most, the schedule's changes inside it."""
    length = min(run.duration_s, run.warmup_s + PILOT_S * run.time_scale)
    return replace(run, name=f"pilot-{run.name}", duration_s=length,
                   schedule=tuple(c for c in run.schedule if c.at_s < length))


def fly(run, rehearse, calibration: dict, say=print) -> PilotVerdict:
    """Rehearse `run` (`rehearse(short run)`: experiments/runner.py runs it in results/<experiment>-pilot/
    and gives its RunOutcome) and keep its verdict."""
    cached = known(calibration, run)
    if cached is not None:
        return cached
    short = rehearsal(run)
    scaled = f" at time_scale {run.time_scale:g}" if run.time_scale != 1 else ""
    say(f"pilot: {run.name}{scaled} for {short.duration_s:g} s, judged as a run is, before the sweep "
        f"(once per calibration; --no-pilot skips it)")
    outcome = rehearse(short)
    if outcome.status == "aborted":
        raise KeyboardInterrupt
    if outcome.status != "finished":
        raise PcnLabError(f"the pilot of {run.name} failed ({outcome.error}); its files are in {outcome.path}")
    reasons = outcome.fidelity.get("reasons") or []
    verdict = PilotVerdict(bool(outcome.fidelity.get("trusted")), reasons[0] if reasons else "",
                           str(outcome.path), float(run.time_scale), time.strftime("%Y-%m-%dT%H:%M:%S"))
    record_pilot(calibration, shape(run), verdict.to_dict())
    say(f"pilot: {'trusted' if verdict.trusted else 'untrusted'}"
        + (f" ({verdict.reason})" if verdict.reason else "") + f"; {verdict.folder}")
    return verdict


def chosen(runs, calibration: dict | None, asked: bool):
    """The run a pilot rehearses before this sweep, or None (no BMv2 run, not calibrated, not worth it)."""
    from pcnlab.experiments.fit import estimate

    run = heaviest(runs, estimate(runs, calibration)) if calibration else None
    return run if run is not None and (asked or worth(runs) or known(calibration, run)) else None


def plan_line(runs, calibration: dict | None, asked: bool) -> str | None:
    """What --dry-run says of the pilot."""
    run = chosen(runs, calibration, asked)
    if run is None:
        return None
    found = known(calibration, run)
    if found is not None:
        return (f"pilot: {run.name}'s shape was rehearsed here {found.measured[:16]}: "
                + ("trusted" if found.trusted else f"untrusted ({found.reason})"))
    return f"pilot: {run.name} would be rehearsed for {rehearsal(run).duration_s:g} s before the sweep"


def check(runs, rehearse, calibration: dict | None, asked: bool, say=print) -> None:
    """Pilot the sweep when it is worth it (or `asked`); UsageError, naming the option that makes it
    fit, when its pilot was untrusted. `rehearse`: as fly() takes it."""
    run = chosen(runs, calibration, asked)
    if run is None:
        return
    from pcnlab.experiments.config.timescale import rescaled

    verdict = fly(run, rehearse, calibration, say)
    if verdict.trusted:
        return
    scale = math.floor(run.time_scale) + 1
    try:
        slower = rescaled(run, scale / run.time_scale)
    except UsageError:
        slower = None
    again = fly(slower, rehearse, calibration, say) if slower is not None else None
    where = f"its pilot was untrusted ({verdict.reason}; {verdict.folder})"
    if again is not None and again.trusted:
        raise UsageError(f"will not keep up here: {where}; at time_scale {scale} it was trusted: add "
                         f"--set time_scale={scale}; or --force to run it anyway")
    tried = f"; at time_scale {scale} too ({again.reason})" if again is not None else ""
    raise UsageError(f"will not keep up here: {where}{tried}: use fewer processes or lower the link rates, "
                     "or --force to run it anyway (expect runs marked untrusted)")
