"""The pilot: a sweep's heaviest run goes first and is judged as every run is (analysis/fidelity.py)
before the rest; when it is untrusted the sweep stops there, the run is rehearsed once at the next whole
time_scale, and the sweep is refused in one line naming that option when its rehearsal was trusted.

Why a whole run. The fit (fit.py) estimates packets/s against the calibration; what no estimate sees is
whether this machine gives the run's own mix of processes (PyTorch ranks, their containers, collectors,
background senders) a CPU in time. A 23 s rehearsal of pcn-training on a machine held to 60 % with a hog
was trusted while its three 70 s runs were not (2026-11-29): the port they failed on, a worker's, is
backlogged only by the PS's replies, about 0.3 s in 23 s, too little to judge (min_backlog_s), and its
rate while backlogged swung from 78 % to 98 % between 23 s stretches of one run. A run is judged over
its whole length, so the pilot is the whole run; going first, a trusted pilot costs nothing.

When: sweeps of at least WORTH runs (a refused pilot costs at most one run and its rehearsal), or any
with `--pilot`. Each verdict is kept in the calibration file under `pilots` by the run's shape (its
configuration without its name and seed), so a shape is judged once per calibration, that is once per
machine and boot: a shape already refused is refused before anything starts.

Hand-written: no library gates a testbed's sweep on its own first run.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass

from pcnlab.calibration import record_pilot
from pcnlab.errors import PcnLabError, UsageError

WORTH = 3             # a sweep of at least this many runs is piloted


@dataclass(frozen=True)
class PilotVerdict:
    """One pilot's answer: trusted or not, the first reason, its folder, when it ran."""

    trusted: bool
    reason: str
    folder: str
    time_scale: float
    measured: str

    def to_dict(self) -> dict:
        return asdict(self)


def shape(run) -> str:
    """What a pilot's verdict is about: the run's configuration without its name and seed."""
    data = run.to_dict()
    for key in ("run", "index", "repetition", "seed", "sweep", "source", "overrides", "description"):
        data.pop(key, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def heaviest(runs, fits):
    """The run to judge first: most PyTorch processes, then the busiest switch (the earliest of equals);
    None without a BMv2 run."""
    judged = [(run, fit) for run, fit in zip(runs, fits) if fit.switch is not None]
    if not judged:
        return None
    return max(judged, key=lambda pair: (pair[1].torch_processes, pair[1].share or 0, pair[1].processes))[0]


def known(calibration: dict | None, run) -> PilotVerdict | None:
    """This calibration's verdict on the run's shape, if it has one."""
    found = ((calibration or {}).get("pilots") or {}).get(shape(run))
    return PilotVerdict(**found) if isinstance(found, dict) else None


def chosen(runs, calibration: dict | None, asked: bool):
    """The sweep's pilot, or None (no BMv2 run, not calibrated, too short a sweep, judged trusted here)."""
    from pcnlab.experiments.fit import estimate

    run = heaviest(runs, estimate(runs, calibration)) if calibration else None
    if run is None or not (asked or len(runs) >= WORTH):
        return None
    found = known(calibration, run)
    return None if found is not None and found.trusted else run


def plan_line(runs, calibration: dict | None, asked: bool) -> str | None:
    """What --dry-run says of the pilot."""
    run = chosen(runs, calibration, asked)
    if run is None:
        return None
    found = known(calibration, run)
    if found is not None:
        return f"pilot: {run.name}'s shape was judged here {found.measured[:16]}: untrusted ({found.reason})"
    return f"pilot: {run.name} runs first; if it is untrusted the sweep stops there"


def order(runs, pilot) -> list:
    """The sweep's runs with its pilot first."""
    return runs if pilot is None else [pilot, *(run for run in runs if run is not pilot)]


def verdict_of(outcome, run) -> PilotVerdict:
    if outcome.status == "aborted":
        raise KeyboardInterrupt
    if outcome.status != "finished":
        raise PcnLabError(f"the pilot {run.name} failed ({outcome.error}); its files are in {outcome.path}")
    reasons = outcome.fidelity.get("reasons") or []
    return PilotVerdict(bool(outcome.fidelity.get("trusted")), reasons[0] if reasons else "", str(outcome.path),
                        float(run.time_scale), time.strftime("%Y-%m-%dT%H:%M:%S"))


def _slower(run):
    """The next whole time_scale and the run at it (None where that passes a key's bounds)."""
    from pcnlab.experiments.config.timescale import rescaled

    scale = math.floor(run.time_scale) + 1
    try:
        return scale, rescaled(run, scale / run.time_scale)
    except UsageError:
        return scale, None


def judge(run, outcome, calibration: dict, rehearse, say=print) -> None:
    """After the pilot `run` ran (`outcome`): its verdict kept; when untrusted, the run rehearsed at the next
    whole time_scale (`rehearse(run)` runs it apart from the sweep and gives its RunOutcome, unless this
    calibration judged that shape already) and a UsageError naming what to change."""
    first = verdict_of(outcome, run)
    record_pilot(calibration, shape(run), first.to_dict())
    if first.trusted:
        return
    scale, slower = _slower(run)
    again = known(calibration, slower) if slower is not None else None
    if slower is not None and again is None:
        say(f"pilot: {run.name} was untrusted; the sweep stops here; rehearsing it at time_scale {scale} "
            f"({slower.duration_s:g} s)")
        again = verdict_of(rehearse(slower), slower)
        record_pilot(calibration, shape(slower), again.to_dict())
    raise UsageError(refusal(first, again, scale))


def refused(run, calibration: dict | None) -> str | None:
    """The refusal of a sweep whose pilot `run` (chosen()) has a shape this calibration judged untrusted."""
    first = known(calibration, run) if run is not None else None
    if first is None:
        return None
    scale, slower = _slower(run)
    return refusal(first, known(calibration, slower) if slower is not None else None, scale)


def refusal(first: PilotVerdict, again: PilotVerdict | None, scale: int) -> str:
    where = f"its first run was untrusted here ({first.reason}; {first.folder})"
    if again is not None and again.trusted:
        return (f"will not keep up here: {where}; at time_scale {scale} it was trusted ({again.folder}): add "
                f"--set time_scale={scale}; or --force to run it anyway")
    tried = f"; at time_scale {scale} too ({again.reason})" if again is not None else ""
    return (f"will not keep up here: {where}{tried}: use fewer processes or lower the link rates, or --force "
            "to run it anyway (expect runs marked untrusted)")
