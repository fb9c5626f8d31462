"""The most a policy choosing among fixed codecs could gain in a regime, from measurements only:

    python -m pcnlab.analysis.compression_ceiling results/netsense-competing/<stamp> [MORE ...]
        --bench bench/results/compression_efficiency-digits-cnn.json [MORE ...] [--target 0.95]
        [--include-untrusted]

The runs (fixed codecs, and adaptive if you like, in one regime: the same YAML and schedule) give each
codec's worker iterations per second in each phase of the schedule; the bench
(bench/bench_compression_efficiency.py, no network, the same model) gives each codec's learning per
iteration, eff = iterations(none) / iterations(codec) to the target, each bench file against its own
none (a codec that some seed of a file never brought to the target is left out of that file's figures,
which flatters it where another file has it). A codec that runs s(p) iterations a second in phase p
makes eff x s(p) iterations' worth of none's progress a second there; it reaches the target when the sum
over time equals none's iterations to it.

For every codec with runs this prints its measured time to the target (mean over its runs) beside the
time this model predicts for it: the check of the model. Then the ceiling: a policy that in every phase
uses the codec with the most progress per second, knowing each phase's speeds in advance and switching
for free. No policy that chooses among these codecs can beat it by more than the model's error, so its
factor over the best fixed policy bounds what adaptive compression can gain in this regime.

Written as ceiling.md, ceiling.json and ceiling.png (each codec's predicted progress against time, the
ceiling's, the target and the measured times) into the first sweep folder. Hand-written (a piecewise-constant
integral over the schedule's phases; no library models training progress per codec).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pcnlab.errors import UsageError
from pcnlab.analysis.compression_plots import plot_ceiling
from pcnlab.analysis.compression_report import figures
from pcnlab.analysis.traffic_stats import json_safe
from pcnlab.analysis.results import run_folders
from pcnlab.cmdline import OneLineParser, fraction


@dataclass(frozen=True)
class Phase:
    name: str            # as compression_report labels it: `40 Mbit/s + 8 flows @5s`
    from_s: float        # mean over the runs, seconds since the job started


def iterations_to(bench: dict, target: float) -> dict[str, float]:
    """One bench file's mean iterations to `target` per codec; a codec some seed never brought there is
    left out, none must be there."""
    if target not in [float(t) for t in bench.get("targets", [])]:
        raise UsageError(f"a bench file has no target {target:g} (it has {bench.get('targets')}): "
                         f"run bench/bench_compression_efficiency.py with --targets {target:g}")
    per: dict[str, list[int | None]] = {}
    for row in bench["rows"]:
        per.setdefault(row["codec"], []).append(row.get(f"{target:g}"))
    if "none" not in per:
        raise UsageError("a bench file has no rows of none: run bench/bench_compression_efficiency.py, "
                         "whose every run includes none")
    reached = {c: float(np.mean(v)) for c, v in per.items() if v and None not in v}
    if "none" not in reached:
        raise UsageError(f"a bench file's none never reached {target:g}: no codec can be compared there")
    return reached


def efficiencies(benches: list[dict], target: float) -> dict[str, float]:
    """Learning per iteration against none at `target`, per codec (bench names), the mean over bench
    files; a codec some seed of a file never brought to the target is left out of that file's figures."""
    found: dict[str, list[float]] = {}
    for reached in (iterations_to(bench, target) for bench in benches):
        for codec, iterations in reached.items():
            found.setdefault(codec, []).append(reached["none"] / iterations)
    return {codec: float(np.mean(v)) for codec, v in found.items()}


def phase_speeds(rows: list[dict]) -> tuple[list[Phase], dict[str, dict[str, float]]]:
    """The schedule's phases in time, and per codec its mean iterations per second in each."""
    starts: dict[str, list[float]] = {}
    speeds: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        for p in row.get("phases", []):
            starts.setdefault(p["phase"], []).append(p.get("from_s", 0.0))
            if p.get("iterations_per_s") is not None and p.get("seconds", 0) > 0:
                speeds.setdefault(row["codec"], {}).setdefault(p["phase"], []).append(p["iterations_per_s"])
    phases = sorted((Phase(name, float(np.mean(t))) for name, t in starts.items()), key=lambda p: p.from_s)
    return phases, {c: {p: float(np.mean(v)) for p, v in per.items()} for c, per in speeds.items()}


def time_to(rates: list[tuple[float, float]], needed: float, until: float = float("inf")) -> float | None:
    """When the integral of a piecewise-constant rate, (from_s, rate) in time order, the last held on
    until `until`, first reaches `needed`; None if it does not by then."""
    done = 0.0
    for i, (start, rate) in enumerate(rates):
        end = rates[i + 1][0] if i + 1 < len(rates) else until
        if rate > 0 and done + rate * (end - start) >= needed:
            return start + (needed - done) / rate
        done += rate * (end - start) if end != float("inf") else 0.0
    return None


def progress_rates(phases: list[Phase], speeds: dict[str, float], eff: float) -> list[float | None]:
    """A codec's progress per second (iterations' worth of none) in each phase; None where its runs did
    not reach."""
    return [eff * speeds[p.name] if p.name in speeds else None for p in phases]


def reach(phases: list[Phase], rates: list[float | None], needed: float) -> float | None:
    """When progress at `rates` (per phase, from the first; a list shorter than `phases` ends where it
    ends) reaches `needed`; None if not before the first phase without a rate (nothing is held on past its
    start)."""
    known = next((i for i, r in enumerate(rates) if r is None), len(rates))
    until = phases[known].from_s if known < len(phases) else float("inf")
    return time_to([(p.from_s, r) for p, r in zip(phases[:known], rates[:known])], needed, until)


def predict(phases: list[Phase], speeds: dict[str, float], eff: float, needed: float) -> float | None:
    """A fixed codec's predicted time to the target; None if it is not reached before the first phase
    its runs did not reach."""
    return reach(phases, progress_rates(phases, speeds, eff), needed)


def ceiling(phases: list[Phase], speeds: dict[str, dict[str, float]], eff: dict[str, float],
            needed: float) -> tuple[float | None, list[tuple[str, str, float]]]:
    """The best choice per phase, (phase, codec, progress per second), up to the first phase no codec with
    a bench figure has runs through, and its time to the target (None if not reached before that phase)."""
    rates = {c: progress_rates(phases, s, eff[c]) for c, s in speeds.items() if c in eff}
    best = []
    for i, p in enumerate(phases):
        options = [(r[i], c) for c, r in rates.items() if r[i] is not None]
        if not options:
            break
        rate, codec = max(options)
        best.append((p.name, codec, rate))
    return reach(phases, [rate for _, _, rate in best], needed), best


def table(rows: list[dict], benches: list[dict], target: float) -> dict:
    eff = efficiencies(benches, target)
    needed = float(np.mean([iterations_to(b, target)["none"] for b in benches]))
    phases, speeds = phase_speeds(rows)
    codecs = []
    for codec in dict.fromkeys(r["codec"] for r in rows):
        mine = [r for r in rows if r["codec"] == codec]
        times = [r["time_to_target_s"] for r in mine if r.get("time_to_target_s") is not None]
        rates = progress_rates(phases, speeds.get(codec, {}), eff[codec]) if codec in eff else None
        codecs.append({"codec": codec, "runs": len(mine), "reached": len(times),
                       "measured_s": float(np.mean(times)) if times else None,
                       "efficiency": eff.get(codec),
                       "predicted_s": reach(phases, rates, needed) if rates is not None else None,
                       "progress_per_s": rates if rates is not None else [None] * len(phases)})
    best_time, best = ceiling(phases, speeds, eff, needed)
    fixed = [c for c in codecs if c["predicted_s"] is not None]
    best_fixed = min(fixed, key=lambda c: c["predicted_s"]) if fixed else None
    return {"target": target, "none_iterations": needed, "phases": [p.__dict__ for p in phases],
            "codecs": codecs, "ceiling_s": best_time,
            "ceiling_phases": [{"phase": p, "codec": c, "progress_per_s": r} for p, c, r in best],
            "best_fixed": best_fixed and best_fixed["codec"],
            "factor": best_fixed["predicted_s"] / best_time if best_fixed and best_time else None}


def markdown(t: dict) -> str:
    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)
    lines = [f"to {t['target']:.0%} (none needs {t['none_iterations']:.0f} iterations without a network)", "",
             "| codec | runs (reached) | learning per iteration | measured (s) | predicted (s) |",
             "|---|---|---|---|---|"]
    lines += [f"| {c['codec']} | {c['runs']} ({c['reached']}) | {f(c['efficiency'], '{:.2f}')} | "
              f"{f(c['measured_s'])} | {f(c['predicted_s'])} |" for c in t["codecs"]]
    lines += ["", "| phase | from (s) | the ceiling's codec | none's iterations per second |", "|---|---|---|---|"]
    lines += [f"| {p['phase']} | {q['from_s']:.1f} | {p['codec']} | {p['progress_per_s']:.1f} |"
              for p, q in zip(t["ceiling_phases"], t["phases"])]
    lines += ["", f"ceiling: {f(t['ceiling_s'])} s to {t['target']:.0%}; the best fixed codec by the model, "
              f"{t['best_fixed']}, {f(t['factor'], '{:.2f}')} x the ceiling's time"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = OneLineParser(prog="python -m pcnlab.analysis.compression_ceiling",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, nargs="+", help="sweep folders of one regime (their runs are pooled)")
    parser.add_argument("--bench", type=Path, nargs="+", required=True,
                        help="bench/bench_compression_efficiency.py's JSON files for the runs' model")
    parser.add_argument("--target", type=fraction, default=0.95)
    parser.add_argument("--include-untrusted", action="store_true")
    args = parser.parse_args(argv)
    try:
        benches = []
        for path in args.bench:
            try:
                bench = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise UsageError(f"cannot read the bench file {path}: {exc}") from None
            if not (isinstance(bench, dict) and isinstance(bench.get("rows"), list)
                    and all(isinstance(r, dict) and "codec" in r for r in bench["rows"])):
                raise UsageError(f"{path} is not a JSON file of bench/bench_compression_efficiency.py "
                                 "(a dict with rows of codec, seed and the iteration each target was reached)")
            benches.append(bench)
        rows = figures(args.path, args.target, args.include_untrusted)
        if not rows:
            raise UsageError(f"no finished{'' if args.include_untrusted else ', trusted'} runs under "
                             f"{', '.join(map(str, args.path))}")
        models = {b.get("model") for b in benches} | {r.get("model") for r in rows}
        if len(models - {None}) > 1:
            raise UsageError(f"the runs and bench files are of different models ({', '.join(sorted(models - {None}))})")
        result = table(rows, benches, args.target)
    except UsageError as exc:
        print(f"compression_ceiling: {exc}", file=sys.stderr)
        return exc.exit_code
    folder = run_folders(args.path[0])[0].parent
    text = markdown(result)
    (folder / "ceiling.md").write_text(text + "\n")
    (folder / "ceiling.json").write_text(json.dumps(json_safe(result), indent=1))
    plot_ceiling(result, folder / "ceiling.png")
    print(text)
    print(f"written to {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
