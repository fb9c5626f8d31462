"""The sweep report: `pcnlab report DIR [--baseline POINT]`, and the report.md, summary.json and plots
of a sweep folder. Reads run folders only (through pcnlab.analysis.results); never re-runs anything.

Runs are grouped by sweep point (the run's name without `,rep=N`). Each headline metric (a key of the
runs' metrics.json) gets, per point, the mean over the point's repetitions, the half-width of its 95 %
interval (Student's t, n - 1 degrees of freedom) and n, the runs that have the metric. With a baseline
point: the difference of means (Δ), Δ in % of the baseline's mean, and the 95 % interval of the
difference (Welch's t). Runs whose fidelity check failed (fidelity.json: trusted false) are left out
unless asked for, and counted; so are runs that did not finish.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from pcnlab.errors import UsageError
from pcnlab.analysis import traffic_stats as m
from pcnlab.analysis import reference as references
from pcnlab.analysis.comparison import HEADLINE, ITERATION_KEY, SCALING, Point, Report, cell, dig
from pcnlab.analysis.interference_report import interference_rows
from pcnlab.files import give_back, write_json
from pcnlab.analysis.results import RunData, run_folders
from pcnlab.status import is_run_folder, status_of


def _analysed(path: Path) -> RunData:
    """The run, analysed first when a finished run has no metrics.json yet."""
    if is_run_folder(path) and not (path / "metrics.json").exists():
        if status_of(path) == "finished":
            from pcnlab.analysis.metrics import analyse_run

            analyse_run(path, plots=False)
    return RunData(path)


def collect_points(paths: list[Path], include_untrusted: bool = False) -> list[Point]:
    """The runs grouped by sweep point, in the experiment's order."""
    points: dict[str, Point] = {}
    for path in paths:
        run = _analysed(path)
        point = points.setdefault(run.point, Point(run.point))
        index = run.config.get("index")
        point.order = min(point.order, index if isinstance(index, (int, float)) else math.inf)
        status = run.status.get("status")
        if status != "finished":
            error = run.status.get("error")
            point.left_out.append((run.name, f"{status}" + (f": {error}" if error else "")))
        elif run.fidelity and run.fidelity.get("trusted") is False and not include_untrusted:
            reasons = run.fidelity.get("reasons") or ["no reason given"]
            node = (run.fidelity.get("checks") or {}).get("node")
            point.left_out.append((run.name, f"untrusted{f' on {node}' if node else ''}: {reasons[0]}"))
        else:
            point.runs.append(run)
    ordered = sorted(points.values(), key=lambda p: p.order)  # stable: folder order where no index
    _add_scaling(ordered)
    return ordered


def _add_scaling(points: list[Point]) -> None:
    """Each run's T_1 / T_N, where the sweep has a point of 1 worker (T_1 its mean iteration time)."""
    single = [p for p in points if p.workers == 1 and m.finite(p.values(ITERATION_KEY)).size]
    if not single:
        return
    t1 = float(m.finite(single[0].values(ITERATION_KEY)).mean())
    for point in points:
        point.scaling = [t1 / tn if tn else None for tn in point.values(ITERATION_KEY)]


def build_report(paths: list[Path], baseline: str | None = None, include_untrusted: bool = False,
                 required: bool = True) -> Report:
    """The report of these runs, against `baseline` (a point's name). Not `required` (the experiment's own,
    after its sweep): a baseline without a run counted (the sweep stopped before it, the machine starved
    it) leaves the report without one (its `baseline` None), each point on its own."""
    points = collect_points(paths, include_untrusted)
    names = [p.name for p in points]
    if baseline is not None and not required and not any(p.runs for p in points if p.name == baseline):
        baseline = None
    if baseline is not None and baseline not in names:
        raise UsageError(f"--baseline {baseline} names no sweep point; the points are: {', '.join(names)} "
                         f"(e.g. --baseline {names[0]})")
    base = next((p for p in points if p.name == baseline), None)
    rows = [h for h in (*HEADLINE, SCALING) if any(m.finite(p.values(h[0])).size for p in points)]
    cells = {}
    for point in points:
        cells[point.name] = {}
        for key, _, _ in rows:
            if base is None:
                cells[point.name][key] = cell(point.values(key))
            elif point is base:
                cells[point.name][key] = {**cell(point.values(key)), "delta": None, "delta_pct": None,
                                          "delta_ci95": None}
            else:
                cells[point.name][key] = cell(point.values(key), base.values(key))
    runs = [r for p in points for r in p.runs]
    declared = {r.config.get("reference") for r in runs if r.config.get("reference")}
    notes = [f"{r.name}: {dig(r.metrics, 'iterations.note') or 'iteration count differs from the workers'}"
             for r in runs if dig(r.metrics, "iterations.consistent") is False]
    return Report(points, rows, cells, baseline, references.get(sorted(declared)[0]) if declared else None,
                  include_untrusted, notes, sorted({r.time_scale for r in runs}), interference_rows(points))


# --- text ---------------------------------------------------------------------------------------------

def _fmt(value, fmt: str, sign: bool = False) -> str:
    """`value` in the metric's format; a signed difference of a share reads in percentage points."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if sign and fmt.endswith("%}"):
        digits = re.search(r"[.](\d+)", fmt).group(1)
        return f"{value * 100:+.{digits}f} pp"
    text = fmt.format(value)
    if sign and value > 0:
        text = "+" + text
    return text


def _mean_text(c: dict, fmt: str) -> str:
    text = _fmt(c["mean"], fmt)
    if text != "-" and c["ci95"] is not None and math.isfinite(c["ci95"]):
        text += " ± " + _fmt(c["ci95"], fmt).rstrip("%")
    return text


def _pct_text(pct) -> str:
    if pct is None or not math.isfinite(pct):
        return "-"
    return f"{pct:+.0f} %" if abs(pct) >= 10 else f"{pct:+.1f} %"


def _interval_text(c: dict, fmt: str) -> str:
    low, high = c.get("delta_ci95") or (None, None)
    if low is None or not (math.isfinite(low) and math.isfinite(high)):
        return "-"
    return f"[{_fmt(low, fmt, True)}, {_fmt(high, fmt, True)}]"


def table_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """The report as a table: one row per (metric, point)."""
    titles = ["metric", "point", "n", "mean ± 95 %"]
    if report.baseline:
        titles += ["Δ", "Δ %", "Δ 95 % interval"]
    if report.reference:
        titles.append(report.reference.title)
    lines = []
    for key, title, fmt in report.metrics:
        for i, point in enumerate(report.points):
            c = report.cells[point.name][key]
            line = [title if i == 0 else "", point.name, str(c["n"]), _mean_text(c, fmt)]
            if report.baseline:
                if point.name == report.baseline:
                    line += ["baseline", "", ""]
                else:
                    pct = c["delta_pct"]
                    line += [_fmt(c["delta"], fmt, True), _pct_text(pct), _interval_text(c, fmt)]
            if report.reference:
                figure = report.reference.figures.get(key)
                line.append(figure.text() if figure and i == 0 else "")
            lines.append(line)
    return titles, lines


def time_scale_note(scales: list[float]) -> str | None:
    """The report's one line on time_scale, when a run had one (comparison.TIME_SCALE_POWER)."""
    if all(s == 1 for s in scales):
        return None
    factor = f"time_scale {scales[0]:g}" if len(scales) == 1 else \
        f"each run's time_scale ({', '.join(f'{s:g}' for s in scales)})"
    return (f"times divided and rates multiplied by {factor}: in the experiment's own units (metrics.json holds "
            "what was measured; packets unchanged)")


def footnotes(report: Report) -> list[str]:
    out = [note] if (note := time_scale_note(report.time_scales)) else []
    for point in report.points:
        if point.left_out:
            total = len(point.runs) + len(point.left_out)
            why = "; ".join(f"{run}: {reason}" for run, reason in point.left_out)
            out.append(f"{point.name}: {len(point.left_out)} of {total} runs left out ({why})")
    if report.include_untrusted:
        out.append("untrusted runs are included (--include-untrusted)")
    out += [f"iterations: {note}" for note in report.notes]
    if report.reference:
        out.append(f"{report.reference.title}: {report.reference.source}; {report.reference.baseline} → "
                   f"{report.reference.mechanism}")
    return out


def interference_table(report: Report) -> tuple[list[str], list[list[str]]]:
    """The interference section as a table: one row per (shared point, job); a slowdown is shared over
    alone, with the 95 % interval of the difference shared - alone (Welch)."""
    titles = ["job", "point", "iteration shared", "alone", "slowdown", "Δ 95 % interval", "communication shared",
              "alone", "slowdown", "Δ 95 % interval", "overlapped", "stretch (ms)", "ideal iteration"]
    lines = []
    for row in report.interference:
        line = [row["job"], row["point"]]
        for key in ("iteration_ms", "comm_ms"):
            shared, alone = row[key], row[f"alone_{key}"]
            ratio = row[f"{key}_slowdown"]
            line += [_mean_text(shared, "{:.1f}"), _mean_text(alone, "{:.1f}"),
                     f"{ratio:.3f}" if math.isfinite(ratio) else "-", _interval_text(shared, "{:.1f}")]
        line += [_mean_text(row["overlap_fraction"], "{:.1%}"), _mean_text(row["stretch_ms"], "{:.1f}"),
                 _mean_text(row["ideal_iteration_ms"], "{:.1f}")]
        lines.append(line)
    return titles, lines


def _table_text(titles: list[str], lines: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        return ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)] + \
            ["| " + " | ".join(line) + " |" for line in lines]
    widths = [max(len(t), *(len(line[i]) for line in lines)) if lines else len(t) for i, t in enumerate(titles)]
    return ["  ".join(t.ljust(w) for t, w in zip(titles, widths)).rstrip()] + \
        ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]


INTERFERENCE_HEAD = ("Interference at the shared port: each job shared against the same job alone (times in ms; "
                     "slowdown: shared / alone; ideal: shared minus what overlap added to its communication; "
                     "-: no run alone, or no iteration free of overlap)")


def format_report(report: Report, markdown: bool = False) -> str:
    titles, lines = table_rows(report)
    head = ("95 % intervals over repetitions (Student's t)"
            + (f"; Δ against {report.baseline}, its interval by Welch's t" if report.baseline else ""))
    notes = footnotes(report)
    out = [head] + ([""] if markdown else []) + _table_text(titles, lines, markdown)
    if report.interference:
        out += ["", INTERFERENCE_HEAD] + ([""] if markdown else []) + \
            _table_text(*interference_table(report), markdown)
    if markdown:
        return "\n".join(out + ([""] + [f"- {n}" for n in notes] if notes else []))
    return "\n".join(out + notes)


# --- summary.json -------------------------------------------------------------------------------------

def summary(report: Report) -> dict:
    """summary.json: stable machine keys (metric keys as in metrics.json); strict JSON once json_safe."""
    ref = report.reference
    return m.json_safe({
        "baseline": report.baseline,
        "include_untrusted": report.include_untrusted,
        "reference": ({"name": ref.name, "source": ref.source, "baseline": ref.baseline, "mechanism": ref.mechanism}
                      if ref else None),
        "metrics": {key: {"title": title, **({"reference": ref.figures[key].as_dict()}
                                             if ref and key in ref.figures else {})}
                    for key, title, _ in report.metrics},
        "points": {p.name: {"runs": len(p.runs), "run_names": [r.name for r in p.runs],
                            "left_out": [{"run": run, "reason": why} for run, why in p.left_out],
                            "metrics": report.cells[p.name]}
                   for p in report.points},
        "notes": report.notes,
        "time_scales": report.time_scales,
        "interference": report.interference,
    })


def write_report(folder: Path, report: Report) -> list[Path]:
    folder = Path(folder)
    (folder / "report.md").write_text(format_report(report, markdown=True) + "\n")
    write_json(folder / "summary.json", summary(report), allow_nan=False)
    return [folder / "report.md", folder / "summary.json"]


def sweep_folder(path: Path, paths: list[Path]) -> Path | None:
    """Where a report of `path` is written: the folder holding its runs, unless `path` is one run."""
    if is_run_folder(path):
        return None
    parents = {p.parent for p in paths}
    return parents.pop() if len(parents) == 1 else None


def run_report(path: Path, baseline: str | None = None, include_untrusted: bool = False, markdown: bool = False,
               plots: bool = True, say=print, required: bool = True) -> Report:
    """`pcnlab report`: print the table; for a sweep, write report.md, summary.json and the sweep plots.
    Without a baseline, the one the sweep's summary.json names (the experiment file's `baseline:`)."""
    paths = run_folders(path)
    folder = sweep_folder(path, paths)
    if baseline is None and folder is not None and (folder / "summary.json").exists():
        try:
            baseline = json.loads((folder / "summary.json").read_text()).get("baseline")
        except ValueError:
            baseline = None
    report = build_report(paths, baseline, include_untrusted, required)
    if baseline is not None and report.baseline is None:
        say(f"report: the baseline {baseline} has no trusted run in this sweep: each point stands on its own")
    say(format_report(report, markdown=markdown))
    if folder is None:
        return report
    written = write_report(folder, report)
    if plots:
        from pcnlab.analysis.view import run_views, view_links

        views = run_views(paths, say=say)
        if views:
            with open(folder / "report.md", "a") as md:
                md.write(view_links(folder, views))
            written += views
        try:
            from pcnlab.analysis.plots import plot_sweep

            written += plot_sweep(folder, report)
        except Exception as exc:  # noqa: BLE001 -- a plot that fails must not hide the table
            say(f"(sweep plots skipped: {type(exc).__name__}: {exc})")
    give_back(*written)
    say(f"written: {', '.join(str(p.relative_to(folder)) for p in written)} in {folder}")
    return report


def summarise_sweep(sweep_dir: Path, say=print, baseline: str | None = None, plots: bool = True) -> Report:
    """After `pcnlab run`: the report of the sweep just run, and where everything is. The experiment's
    baseline where it has a trusted run; where it has none (the sweep stopped before it, or the machine
    starved it), each point on its own, said in one line."""
    report = run_report(Path(sweep_dir), baseline, plots=plots, say=say, required=False)
    if plots:
        say(f"results: {sweep_dir} (report.md, summary.json, plots; each run's folder has metrics.json and its "
            "queue plot)")
    else:
        say(f"results: {sweep_dir} (report.md, summary.json; each run's folder has metrics.json; no plots: "
            f"pcnlab report {sweep_dir} draws the sweep's plots and each run's view)")
    return report

