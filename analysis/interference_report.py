"""The report's interference section: each job of a point with several jobs, shared against the same job
alone in the same network (the runs `alone: true` adds, named `<point>,alone=<job>`:
experiments/config/load.py), with the report's 95 % intervals (comparison.cell: Student's t over
repetitions, Welch's for the difference). Per (point, job):

- iteration time shared and alone, and the slowdown: shared over alone (Δ, Δ % and the interval of Δ);
- the same for its communication (the workers' comm_start to comm_end, from their logs), which is where
  a job clocked by a period (a generator with `period_ms`) shows what sharing costs it;
- the share of its communication at the shared port that overlapped another job's, the time the overlap
  added to each iteration (stretch) and the ideal iteration, shared minus stretch (analysis/interference.py).

Times in the experiment file's units (divided by each run's time_scale, as the headline times are).
"""

from __future__ import annotations

import math

from pcnlab.analysis.comparison import Point, cell, dig

ALONE = "alone"                 # the config key (and run-name label) of a run holding one job of its point
ROWS = (  # (key in a row, title, format): what each (point, job) row holds besides its point and job
    ("iteration_ms", "iteration shared (ms)", "{:.1f}"),
    ("alone_iteration_ms", "iteration alone (ms)", "{:.1f}"),
    ("comm_ms", "communication shared (ms)", "{:.1f}"),
    ("alone_comm_ms", "communication alone (ms)", "{:.1f}"),
    ("overlap_fraction", "communication overlapped", "{:.1%}"),
    ("stretch_ms", "stretch per iteration (ms)", "{:.1f}"),
    ("ideal_iteration_ms", "ideal iteration (ms)", "{:.1f}"),
)
TIMES = {"iteration_ms", "comm_ms", "stretch_ms", "ideal_iteration_ms"}


def alone_point(shared: str, job: str) -> str:
    """The point holding `job` alone, as load.py names it."""
    return f"{ALONE}={job}" if shared == "run" else f"{shared},{ALONE}={job}"


def job_value(run, job: str, key: str):
    """A run's figure for one job (metrics.json interference.jobs.<job>.<key>) in the file's units; a run
    alone without that section (older analysis) falls back to its training.iteration_ms.mean."""
    value = dig(run.metrics, f"interference.jobs.{job}.{key}")
    if value is None and key == "iteration_ms" and run.config.get(ALONE) == job:
        value = dig(run.metrics, "training.iteration_ms.mean")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value / run.time_scale if key in TIMES else value


def shared_jobs(point: Point) -> list[str]:
    """The jobs of a point's runs that share a port (interference.jobs of runs that hold several), in order."""
    names: dict[str, None] = {}
    for run in point.runs:
        jobs = dig(run.metrics, "interference.jobs") or {}
        if len(jobs) > 1 and not run.config.get(ALONE):
            names.update(dict.fromkeys(jobs))
    return list(names)


def interference_rows(points: list[Point]) -> list[dict]:
    """One row per (shared point, job): {point, job, alone_point (None when the sweep has none), and per
    ROWS key a cell}; the shared figures' cells carry Δ against alone where there is an alone point."""
    by_name = {p.name: p for p in points}
    rows = []
    for point in points:
        for job in shared_jobs(point):
            alone = by_name.get(alone_point(point.name, job))
            alone_runs = alone.runs if alone else []
            row: dict = {"point": point.name, "job": job, "alone_point": alone.name if alone else None}
            for key in ("iteration_ms", "comm_ms"):
                shared = [job_value(r, job, key) for r in point.runs]
                apart = [job_value(r, job, key) for r in alone_runs]
                row[key] = cell(shared, apart) if alone else cell(shared)
                row[f"alone_{key}"] = cell(apart)
                row[f"{key}_slowdown"] = _ratio(row[key]["mean"], row[f"alone_{key}"]["mean"])
            for key in ("overlap_fraction", "stretch_ms", "ideal_iteration_ms"):
                row[key] = cell([job_value(r, job, key) for r in point.runs])
            rows.append(row)
    return rows


def _ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(a) and math.isfinite(b) else math.nan
