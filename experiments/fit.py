"""The fit, before the run: will each run keep up on this machine? An estimate from the machine's
calibration (pcnlab/calibration.py) and the runs' configurations, made before anything starts.

The busiest switch's packets/s (experiments/traffic.py: every flow as heavy as it can be at once, a
job's at most what it sends per iteration over its shortest iteration, max-min fair over the routes, with
the ACKs) against what one BMv2 switch forwards here with the run's telemetry setting
(`capacity_pps`) is the packet fit. The processes that want a CPU (switches, collectors, job processes,
background senders and receivers) are counted against the cores; the calibration's `workers` figure
(how many PyTorch workers ran beside one switch at a rate while it held it) is the only measure they are
judged by, and only where a run is at least as heavy as what was measured not to hold: no threshold is
invented. A run that does not fit gets the option that would make it: `time_scale` first (it keeps the
regime's proportions), else lower topology rates, each checked by estimating the run with it.

Hand-written: no library estimates a BMv2 testbed's load from its configuration.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

from pcnlab.calibration import capacity_pps
from pcnlab.errors import UsageError
from pcnlab.experiments.config.limits import MIN_LINK_MBPS
from pcnlab.experiments.config.schema import section_keys
from pcnlab.experiments.config.timescale import rescaled
from pcnlab.experiments.traffic import switch_pps
from pcnlab.rates import rate_pps
from pcnlab.workloads.specs import TORCH_KINDS, JobSpec


@dataclass(frozen=True)
class Fit:
    """One run's estimate on this machine. `keeps_up` None: not calibrated, or no BMv2 switch to judge."""

    run: str
    switch: str | None = None                       # the busiest BMv2 switch
    pps: float | None = None                        # its packets/s
    switches: tuple[tuple[str, float], ...] = ()    # every switch's packets/s
    capacity: float | None = None                   # what one BMv2 switch forwards here, this telemetry
    telemetry: int | None = None
    processes: int = 0                              # that want a CPU
    torch_processes: int = 0
    cores: int = 1
    keeps_up: bool | None = None
    reason: str = ""                                # why it will not keep up
    time_scale: int | None = None                   # suggested: the smallest that fits
    rates: tuple[tuple[str, float], ...] = ()       # suggested: topology rate key -> Mbit/s that fits
    measured: str | None = None                     # the calibration's date (None: not calibrated)

    @property
    def share(self) -> float | None:
        return self.pps / self.capacity if self.pps is not None and self.capacity else None

    def pps_of(self, switch: str) -> float:
        return dict(self.switches)[switch]

    @property
    def rate_overrides(self) -> tuple[str, ...]:
        return tuple(f"topology.{key}={mbps:g}" for key, mbps in self.rates)

    @property
    def suggestion(self) -> str | None:
        """The option that would make the run fit, as `--set`s: time_scale first (it keeps the regime)."""
        rates = " ".join(f"--set {item}" for item in self.rate_overrides)
        if self.time_scale and rates:
            return f"--set time_scale={self.time_scale} (or {rates})"
        if self.time_scale:
            return f"--set time_scale={self.time_scale}"
        return rates or None


def estimate(runs, calibration: dict | None, cores: int | None = None) -> list[Fit]:
    """A Fit per run, in order (a Linux-bridge run's has no switch and `keeps_up` None)."""
    cores = cores or os.cpu_count() or 1
    topologies: dict = {}
    return [_fit(run, calibration, cores, topologies) for run in runs]


def _fit(run, calibration: dict | None, cores: int, topologies: dict) -> Fit:
    if run.switch.kind != "bmv2":
        return Fit(run.name, cores=cores)
    loads = switch_pps(run, topologies)
    switch = max(loads, key=lambda s: (loads[s], -int(s[1:])))
    torch = sum(len(_placements(job)) for job in run.jobs if job.kind in TORCH_KINDS)
    fit = Fit(run.name, switch, loads[switch], tuple(sorted(loads.items(), key=lambda kv: int(kv[0][1:]))),
              telemetry=run.telemetry.every, processes=_processes(run, len(loads)), torch_processes=torch,
              cores=cores, measured=_measured(calibration))
    capacity = capacity_pps(calibration, run.telemetry.every) if calibration else None
    if not capacity:
        return fit
    fit = replace(fit, capacity=capacity)
    held = _held(calibration)
    if _ok(fit.share, torch, held):
        return replace(fit, keeps_up=True)
    return replace(fit, keeps_up=False, reason=_reason(fit, held), time_scale=_time_scale(run, fit, held, topologies),
                   rates=_rates(run, fit, held, topologies))


@dataclass(frozen=True)
class _Held:
    """The calibration's measure of PyTorch processes beside a switch: with `failed` of them (a PS and
    its workers), a switch at `mbps` (`load` of what it forwards with telemetry every packet) did not
    hold its rate."""

    failed: int
    mbps: float
    load: float


def _held(calibration: dict) -> _Held | None:
    workers = calibration.get("workers") or {}
    fit, mbps, steps = workers.get("fit"), workers.get("rate_mbps"), workers.get("steps") or []
    every1 = capacity_pps(calibration, 1)
    tried = max((s.get("workers") or 0 for s in steps if isinstance(s, dict)), default=0)
    if not isinstance(fit, int) or not mbps or not every1 or tried <= fit:
        return None                             # no count was measured not to hold
    return _Held(fit + 2, mbps, rate_pps(mbps) / every1)   # the calibration's ps job: a PS, fit + 1 workers


def _ok(share: float, torch: int, held: _Held | None) -> bool:
    """The busiest switch within what one switch forwards, and not at least as loaded as the calibration's
    switch was beside at least as many PyTorch processes as it did not hold its rate beside."""
    return share <= 1 and not (held and torch >= held.failed and share >= held.load)


def _target(fit: Fit, held: _Held | None) -> float:
    """The share of capacity the busiest switch must stay within (below, for the PyTorch processes')."""
    return held.load if held and fit.torch_processes >= held.failed else 1.0


def _reason(fit: Fit, held: _Held | None) -> str:
    if fit.share > 1:
        out = (f"{fit.switch} needs about {_about(fit.pps)} packets/s, {fit.share:.1f} x the "
               f"{_about(fit.capacity)} one BMv2 switch forwards here with {_telemetry(fit.telemetry)}")
    else:
        out = f"{fit.switch} at about {_about(fit.pps)} packets/s ({_pct(fit.share)} of what it forwards here)"
    if held and fit.torch_processes >= held.failed:
        out += (f", beside {fit.torch_processes} PyTorch processes, where a switch at {held.mbps:g} Mbit/s "
                f"({_pct(held.load)}) did not hold its rate beside {held.failed} (a PS and {held.failed - 1} "
                f"worker{'s' if held.failed > 2 else ''})")
    return out


def _time_scale(run, fit: Fit, held: _Held | None, topologies: dict) -> int | None:
    """The smallest whole time_scale (counting the run's own) at which the run fits: each tried on the run
    as that time_scale makes it (experiments/config/timescale.py: rates divided, the jobs' times
    multiplied); none when the factor passes a key's bounds first."""
    key = section_keys("").get("time_scale")
    if key is None or not _rate_params(run):
        return None
    now = float(getattr(run, "time_scale", 1) or 1)
    scale = max(math.ceil(fit.share * now / _target(fit, held)), math.floor(now) + 1)
    while scale <= (key.max or math.inf):
        try:
            slower = rescaled(run, scale / now)
        except UsageError:
            return None
        if _fits(slower, fit, held, topologies):
            return scale
        scale += 1
    return None


def _rates(run, fit: Fit, held: _Held | None, topologies: dict) -> tuple[tuple[str, float], ...]:
    """The topology's rate keys, all lowered by one factor (rounded down) so that the run fits; none
    when the schedule sets link rates of its own (the topology's keys do not govern those)."""
    if any(change.bw is not None for change in run.schedule):
        return ()
    now = _rate_params(run)
    factor = fit.share / _target(fit, held)
    for _ in range(200):
        rates = {k: _round_down(v / factor) for k, v in now.items()}
        if min(rates.values(), default=0) < MIN_LINK_MBPS:
            return ()
        if _fits(_with_rates(run, rates), fit, held, topologies):
            return tuple(rates.items())
        factor *= 1.02
    return ()


def _fits(run, fit: Fit, held: _Held | None, topologies: dict) -> bool:
    return _ok(max(switch_pps(run, topologies).values()) / fit.capacity, fit.torch_processes, held)


def _rate_params(run) -> dict[str, float]:
    return {k: v for k, v in run.topology.link_rates_mbps().items() if v is not None}


def _with_rates(run, rates: dict[str, float]):
    """The run with these topology rates."""
    return replace(run, topology=replace(run.topology, params={**run.topology.params, **rates}))


def _round_down(mbps: float) -> float:
    digits = 0 if mbps >= 10 else 1 if mbps >= 1 else 2
    return math.floor(mbps * 10 ** digits) / 10 ** digits


# --- processes --------------------------------------------------------------------------------------

def _placements(job) -> list:
    return JobSpec(**job.job_spec_kwargs()).placements()


def _processes(run, switches: int) -> int:
    """Processes that want a CPU: BMv2 switches, their collectors (telemetry on), every job process
    (PyTorch ranks and PS shards, the generator's), and a sender and a receiver per background flow."""
    collectors = switches if run.telemetry.every else 0
    return switches + collectors + sum(len(_placements(job)) for job in run.jobs) + 2 * len(run.background)


# --- the lines --------------------------------------------------------------------------------------

def fit_lines(fits: list[Fit]) -> list[str]:
    """What --dry-run and a run's start say: a line per distinct run shape, and one verdict line when
    something will not keep up here (naming the option that would make it fit)."""
    fits = [f for f in fits if f.switch is not None]
    if not fits:
        return []                               # Linux bridges only: nothing to estimate
    if fits[0].measured is None:
        return ["fit: this machine is not calibrated yet (pcnlab calibrate), so no estimate of whether the "
                "runs keep up here"]
    if any(f.capacity is None for f in fits):
        return ["fit: this machine's calibration has no forwarding figure for the runs' telemetry setting "
                "(pcnlab calibrate), so no estimate of whether they keep up here"]
    shapes: dict[Fit, list[str]] = {}
    for fit in fits:
        shapes.setdefault(replace(fit, run=""), []).append(fit.run)
    lines = []
    for shape, names in shapes.items():
        label = "" if len(shapes) == 1 else f", {names[0]}" + (f" and {len(names) - 1} more" if len(names) > 1 else "")
        torch = f" ({shape.torch_processes} PyTorch)" if shape.torch_processes else ""
        lines.append(f"fit{label}: {shape.switch} busiest, about {_about(shape.pps)} packets/s of the "
                     f"{_about(shape.capacity)} one BMv2 switch forwards here with {_telemetry(shape.telemetry)} "
                     f"({_pct(shape.share)}); {shape.processes} processes{torch} on {shape.cores} "
                     f"core{'s' if shape.cores != 1 else ''}")
    failing = [f for f in fits if f.keeps_up is False]
    if failing:
        worst = max(failing, key=lambda f: (f.time_scale or math.inf, f.share))
        scales = [f.time_scale for f in failing]
        scale = max(scales) if all(scales) else None
        some = "" if len(failing) == len(fits) else f" ({len(failing)} of {len(fits)} runs)"
        advice = replace(worst, time_scale=scale).suggestion
        lines.append(f"will not keep up here{some}: {worst.reason} (calibrated {worst.measured}): "
                     + (f"add {advice}" if advice else "use fewer processes or lower the link rates"))
    return lines


def _measured(calibration: dict | None) -> str | None:
    if not calibration:
        return None
    return str(calibration.get("measured") or "date unknown")[:10]


def _telemetry(every: int | None) -> str:
    if not every:
        return "telemetry off"
    return "telemetry every packet" if every == 1 else f"telemetry 1 in {every} packets"


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def _about(value: float) -> str:
    """Two significant figures, with thousands separators: 3,100."""
    if value <= 0:
        return "0"
    return f"{round(value, 1 - int(math.floor(math.log10(value)))):,.0f}"
