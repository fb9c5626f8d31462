"""The interleaving core (controller/interleave.py) on what a run with several jobs measured at its shared
port: the shifts it would choose and the overlap it predicts, beside the overlap the run measured.

    .venv/bin/python bench/interleave_measured.py results/<experiment>/<sweep>/<run> [--quantum-ms 1]

From the run's metrics.json `interference.jobs` (analysis/interference.py): each job's period at the port
(median start to start), its communication when nothing overlapped it (`plan_comm_ms`) and its last start
there (switch clock), the JobPhase the predictor would give. Printed per job: the measured overlap
fraction, the one the core predicts for the phases as measured (no shifts), the shift chosen and the
overlap predicted with it; and the unified circle it planned on. Shifts are not delivered to any job.
"""

from __future__ import annotations

from pathlib import Path

from pcnlab.analysis.results import load_run
from pcnlab.cmdline import OneLineParser, positive
from pcnlab.controller.interleave import JobPhase, plan
from pcnlab.errors import UsageError


def measured_phases(metrics: dict) -> tuple[list[JobPhase], dict]:
    """The jobs' JobPhases from metrics.json, and each job's measured overlap fraction."""
    jobs = (metrics.get("interference") or {}).get("jobs") or {}
    phases, measured = [], {}
    for name, f in jobs.items():
        if None in (f.get("period_ms"), f.get("plan_comm_ms"), f.get("last_start_us")):
            continue
        phases.append(JobPhase(name, f["period_ms"] * 1000, f["plan_comm_ms"] * 1000, f["last_start_us"]))
        measured[name] = f.get("overlap_fraction")
    return phases, measured


def main() -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder whose run held several jobs")
    parser.add_argument("--quantum-ms", type=positive, default=1.0, help="periods rounded to this first (ms)")
    args = parser.parse_args()
    try:
        run = load_run(args.run)
        metrics = run.metrics
    except UsageError as e:
        parser.error(str(e))
    phases, measured = measured_phases(metrics)
    if len(phases) < 2:
        parser.error(f"{args.run}: metrics.json has no interference figures for two jobs or more "
                     "(a run of several jobs, analysed: `pcnlab report --recompute`)")
    chosen = plan(phases, quantum_us=args.quantum_ms * 1000)
    c = chosen.circle
    print(f"{run.name}: unified circle {c.length_us / 1000:.0f} ms (quantum {c.quantum_us / 1000:g} ms; "
          f"periods " + ", ".join(f"{p / 1000:.0f}" for p in c.periods_us) + " ms"
          + ("" if c.exact else "; rounded by " + ", ".join(f"{e / 1000:+.1f}" for e in c.period_error_us) + " ms")
          + ")")
    print(f"{'job':8} {'period ms':>9} {'comm ms':>8} {'measured':>9} {'predicted':>9} {'shift ms':>9} {'planned':>8}")
    for p in phases:
        print(f"{str(p.job):8} {p.period_us / 1000:9.1f} {p.comm_us / 1000:8.1f} {measured[p.job]:9.1%} "
              f"{chosen.before_fraction[p.job]:9.1%} {chosen.shifts_us[p.job] / 1000:9.1f} "
              f"{chosen.overlap_fraction[p.job]:8.1%}")
    print(f"clearance after the shifts: {chosen.clearance_us / 1000:.1f} ms")


if __name__ == "__main__":
    main()
