"""The `pcnlab` command. Errors a user can fix print as one line, without a traceback."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from pcnlab.cmdline import OneLineParser, count, natural, non_negative, positive, tcp_port
from pcnlab.app.cluster_cli import add_parser as add_cluster_parser
from pcnlab.app.standalone_controller import SLICE_MODE
from pcnlab.controller.modes import K, K_PRE, MODES
from pcnlab.errors import PcnLabError, UsageError


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _stop_on_sigterm() -> None:
    """SIGTERM (`kill`, a timeout, or a job run in the background, where Ctrl-C's SIGINT is ignored)
    stops a command that starts a network the way Ctrl-C does: what it started removed, results kept."""
    signal.signal(signal.SIGTERM, _interrupt)


def _cmd_doctor(args) -> int:
    from pcnlab.app.doctor import doctor

    return doctor()


def _cmd_clean(args) -> int:
    from pcnlab.ledger import DEFAULT_STATE_DIR
    from pcnlab.topologies.cleanup import clean_stale
    from pcnlab.toolchain import require_root

    require_root("cleaning up network namespaces and interfaces")
    reports = clean_stale(Path(args.state_dir) if args.state_dir else DEFAULT_STATE_DIR)
    for report in reports:
        print(report.summary())
        for item in report.killed + report.removed_interfaces:
            print(f"  {item}")
    if not reports:
        print("nothing to clean: no dead run left anything behind")
    return 0


def _cmd_p4(args) -> int:
    from pcnlab.p4src import BUILD_DIR, MAIN_SOURCE, P4SRC_DIR, PROGRAMS, facts, wireshark
    from pcnlab.toolchain import compile_p4, p4c_version

    version = p4c_version()
    for main in PROGRAMS:
        json_path, p4info = compile_p4(P4SRC_DIR, main, BUILD_DIR)
        print(f"compiled {P4SRC_DIR / main} with {version} -> {json_path.name}, {p4info.name}")
        if main == MAIN_SOURCE:
            data = facts.extract(P4SRC_DIR, json_path)
            written = facts.write(data, BUILD_DIR / facts.FACTS_FILE)
            wireshark.DISSECTOR.write_text(wireshark.dissector(facts.parse(data)))
            print(f"generated {written.name} and {wireshark.DISSECTOR.relative_to(P4SRC_DIR.parent)} from it")
    return 0


def _cmd_slice(args) -> int:
    from pcnlab.experiments.pingall import run_slice
    from pcnlab.topologies.network import NetworkOptions

    options = NetworkOptions(switch=args.switch, packet_log=args.packet_log, pcap=args.pcap,
                             grpc_base_port=args.grpc_base_port, thrift_base_port=args.thrift_base_port)
    if not args.cli:  # Mininet's CLI takes a KeyboardInterrupt as "interrupt the command", not "stop"
        _stop_on_sigterm()
    result = run_slice(args.topology, options, Path(args.results), cli=args.cli)
    return 0 if result.received == result.sent else 1


def _cmd_controller(args) -> int:
    from pcnlab.app.standalone_controller import run_standalone

    run_standalone(Path(args.topology), args.mode, args.k, args.k_pre, Path(args.events) if args.events else None)
    return 0


def _fit(runs, calibration: dict | None, refuse: bool) -> None:
    """The fit, before the run (experiments/fit.py): printed; a run that will not keep up here refused
    in one line naming the option that makes it fit, unless `refuse` is off (--force, --dry-run)."""
    from pcnlab.experiments.fit import estimate, fit_lines

    fits = estimate(runs, calibration)
    lines = fit_lines(fits)
    verdict = [line for line in lines if line.startswith("will not keep up")]
    for line in lines:
        if not (refuse and line in verdict):
            print(line)
    if refuse and verdict:
        raise UsageError(f"{verdict[0]}; or --force to run it anyway (expect runs marked untrusted)")


def _pilot_mode(args) -> str:
    """experiments/pilot.py: never with --force or --no-pilot, always with --pilot, else when worth it."""
    return "never" if args.force or args.no_pilot else "always" if args.pilot else "auto"


def _boxed(run) -> str:
    """Which of a run's jobs run in containers, and in which images."""
    images: dict[str, list[str]] = {}
    for job in run.jobs:
        if job.image is not None:
            images.setdefault(job.image, []).append(job.name)
    return "".join(f"; {', '.join(names)} in containers of {image}" for image, names in images.items())


def _cmd_run(args) -> int:
    from pcnlab.calibration import read_calibration
    from pcnlab.experiments.config import load_experiment

    experiment = load_experiment(args.file, args.overrides)
    runs = experiment.runs()
    bmv2 = any(run.switch.kind == "bmv2" for run in runs)
    if args.dry_run:
        found = read_calibration()
        if bmv2:
            print(f"calibration: {found.line()}")
        _fit(runs, found.data, refuse=False)
        if bmv2 and _pilot_mode(args) != "never":
            from pcnlab.experiments.pilot import plan_line

            line = plan_line(runs, found.data, asked=args.pilot)
            if line:
                print(line)
        print(f"{experiment.name}: {len(runs)} run(s), valid")
        for run in runs:
            print(f"  {run.name}: {run.topology.kind}, {run.switch.kind}, mode {run.mode.kind}, "
                  f"{len(run.jobs)} job(s), {len(run.background)} background flow(s), {run.duration_s:g} s"
                  + (f" (time_scale {run.time_scale:g})" if run.time_scale != 1 else "") + _boxed(run))
        return 0
    if args.cluster is not None:
        return _run_on_cluster(args, experiment)
    from pcnlab.experiments.calibrate import ensure_calibration
    from pcnlab.experiments.runner import ExperimentRunner
    from pcnlab.toolchain import require_root

    require_root()
    _stop_on_sigterm()  # the run marked aborted, earlier runs intact
    # A verdict is measured against this machine: the first run on it measures it first.
    calibration = ensure_calibration(Path(args.results)) if bmv2 else None
    _fit(runs, calibration, refuse=not args.force)
    outcomes = ExperimentRunner(experiment, Path(args.results), calibration=calibration,
                                pilot=_pilot_mode(args), plots=not args.no_plots).run_all()
    failed = [o for o in outcomes if o.status != "finished"]
    return 130 if any(o.status == "aborted" for o in outcomes) else (1 if failed else 0)


def _run_on_cluster(args, experiment) -> int:
    """The sweep's runs on a Ray cluster's machines, each judged by its own machine (experiments/cluster.py)."""
    import os

    from pcnlab.experiments.cluster_sweep import ClusterSweep

    address = args.cluster or os.environ.get("RAY_ADDRESS", "")
    if not address:
        raise UsageError("--cluster needs the head's address (host:port, as pcnlab cluster start printed it), "
                         "or RAY_ADDRESS set")
    _stop_on_sigterm()
    outcomes = ClusterSweep(experiment, Path(args.file), args.overrides, address, Path(args.results)).run_all()
    failed = [o for o in outcomes if o.status != "finished"]
    return 130 if any(o.status == "aborted" for o in outcomes) else (1 if failed else 0)


def _cmd_calibrate(args) -> int:
    from pcnlab.calibration import calibration_path
    from pcnlab.experiments.calibrate import calibrate
    from pcnlab.files import writable
    from pcnlab.toolchain import require_root

    require_root()
    out = Path(args.out) if args.out else calibration_path()
    why = writable(out)
    if why:
        raise UsageError(f"cannot write the calibration to {out} ({why}); give --out a file you can write")
    _stop_on_sigterm()
    calibrate(Path(args.results), rate_mbps=args.rate, max_workers=args.max_workers, seconds=args.seconds,
              compute_ms=args.compute_ms, out=out)
    return 0


def _cmd_report(args) -> int:
    from pcnlab.analysis.report import run_report

    if args.recompute:
        from pcnlab.analysis.metrics import analyse_run
        from pcnlab.analysis.fidelity import check_run
        from pcnlab.status import write_status
        from pcnlab.analysis.results import load_run, run_folders

        for folder in run_folders(Path(args.dir)):
            status = load_run(folder).status
            retry = status.get("status") == "failed" and status.get("analysis_failed")
            if status.get("status") == "finished" or retry:
                print(f"recomputing {folder.name}", flush=True)
                analyse_run(folder)
                check_run(folder)
                if retry:  # the run had completed; only reading it had failed
                    write_status(folder, "finished", {"metrics": "metrics.json", "analysis_failed": False, "error": None})
    run_report(Path(args.dir), baseline=args.baseline, include_untrusted=args.include_untrusted,
               markdown=args.markdown)
    return 0


def _cmd_export(args) -> int:
    from pcnlab.analysis.export import export_parquet

    export_parquet(Path(args.dir), Path(args.parquet))
    return 0


def _cmd_queues(args) -> int:
    from pcnlab.analysis.queues import show_queues

    show_queues(Path(args.dir), args.switch, args.port, args.around_iteration, args.margin_ms, args.rows)
    return 0


def _cmd_view(args) -> int:
    if args.bins < 100:
        raise UsageError(f"--bins {args.bins}: give at least 100 (time bins over the run; default 4000)")
    from pcnlab.analysis.results import run_folders

    run_folders(Path(args.dir))         # a wrong folder is one line before Bokeh and the plots are loaded
    from pcnlab.analysis.view import write_view
    from pcnlab.analysis.view_data import Decimation

    write_view(Path(args.dir), args.out, Decimation(bins=args.bins))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="pcnlab", description="PCN Lab: P4/Mininet testbed for DDL traffic")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the controller does")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("doctor", help="check what this machine has and what is missing")
    p.set_defaults(func=_cmd_doctor)

    p = sub.add_parser("clean", help="remove what dead runs left behind (exactly that)")
    p.add_argument("--state-dir", help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_clean)

    p = sub.add_parser("p4", help="compile p4src/ into p4src/build (BMv2 JSON + P4Info)")
    p.set_defaults(func=_cmd_p4)

    p = sub.add_parser("slice", help="start a topology, push the pipeline and routes, ping all pairs")
    p.add_argument("--topology", default="tree", help="star, dumbbell, tree, leaf-spine (default: tree)")
    p.add_argument("--switch", default="bmv2", help="bmv2 or bridge (default: bmv2)")
    p.add_argument("--packet-log", action="store_true", help="write BMv2's per-packet log (slow)")
    p.add_argument("--pcap", action="store_true", help="write a pcap per switch port")
    p.add_argument("--grpc-base-port", type=tcp_port, help="s<N> serves P4Runtime on this port + N - 1")
    p.add_argument("--thrift-base-port", type=tcp_port, help="s<N> serves thrift on this port + N - 1")
    p.add_argument("--results", default="results", help="results folder (default: results)")
    p.add_argument("--cli", action="store_true", help="then open Mininet's CLI (exit it to stop)")
    p.set_defaults(func=_cmd_slice)

    p = sub.add_parser("run", help="run an experiment file (every run of its sweep)")
    p.add_argument("file", help="an experiment YAML file, e.g. experiments/smoke.yaml")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                   help="override a key (dotted), e.g. --set mode=pcn --set duration_s=10")
    p.add_argument("--dry-run", action="store_true", help="validate and list the runs, with the fit estimate; "
                   "start nothing")
    p.add_argument("--force", action="store_true", help="run even when the fit estimate says the runs will not "
                   "keep up on this machine")
    from pcnlab.experiments.pilot import WORTH

    pilot = p.add_mutually_exclusive_group()
    pilot.add_argument("--pilot", action="store_true", help="run the heaviest run first and stop the sweep if it "
                       f"is untrusted here, naming the time_scale that is not (by default: sweeps of {WORTH} runs or "
                       "more, once per calibration)")
    pilot.add_argument("--no-pilot", action="store_true", help="the runs in their order, none judged first")
    p.add_argument("--no-plots", action="store_true", help="the tables only, no plots or views (faster on a "
                   "slow machine; pcnlab report draws them later)")
    p.add_argument("--results", default="results", help="results folder (default: results)")
    p.add_argument("--cluster", nargs="?", const="", metavar="ADDRESS", help="run the sweep on the Ray cluster at "
                   "ADDRESS (host:port; alone: $RAY_ADDRESS), one run per machine at a time; the folders come "
                   "home under --results (pcnlab cluster start/join make the machines)")
    p.set_defaults(func=_cmd_run)

    add_cluster_parser(sub)

    p = sub.add_parser("calibrate", help="measure what this machine sustains: packets/s through one BMv2 "
                       "switch, its idle lag, PyTorch workers beside it (a few minutes)")
    p.add_argument("--rate", type=positive, default=20.0, help="the port rate the workers step checks, Mbit/s "
                   "(default: 20)")
    p.add_argument("--max-workers", type=natural, default=6, help="most PyTorch workers to try (default: 6)")
    p.add_argument("--compute-ms", type=non_negative, default=0.0, help="the workers' compute_ms (default: 0, as "
                   "fast as they go)")
    p.add_argument("--seconds", type=positive, default=3.0, help="length of each load step (default: 3)")
    p.add_argument("--out", help="calibration file (default: $PCNLAB_CALIBRATION or /var/lib/pcnlab/calibration.json)")
    p.add_argument("--results", default="results", help="where the steps' run folders go (default: results)")
    p.set_defaults(func=_cmd_calibrate)

    p = sub.add_parser("report", help="compare the runs of a finished experiment (never re-runs)")
    p.add_argument("dir", help="results/<experiment>[/<timestamp>|/latest] or a run folder")
    p.add_argument("--baseline", metavar="POINT", help="a sweep point as in run names, e.g. mode=droptail: "
                   "every point's difference to it (Δ, Δ %%, 95 %% interval by Welch's t)")
    p.add_argument("--include-untrusted", action="store_true", help="count runs whose fidelity check failed "
                   "(fidelity.json: trusted false); by default they are left out and counted")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--recompute", action="store_true", help="first compute every finished run's metrics, "
                   "plots and fidelity verdict again from its files (after an update of the analysis), and "
                   "those of runs that completed but whose analysis failed")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("export", help="a run's or an experiment's tables (pcnlab.analysis.results) as Parquet files")
    p.add_argument("dir", help="results/<experiment>[/<timestamp>|/latest] or a run folder")
    p.add_argument("--parquet", required=True, metavar="OUT", help="folder to write queue, iterations, events, "
                   "flows, iteration_table and metrics .parquet into (a `run` column tells the runs apart)")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("queues", help="a run's switch queue log, zoomed on an iteration")
    p.add_argument("dir", help="a run folder")
    p.add_argument("--switch", help="switch (default: the bottleneck's)")
    p.add_argument("--port", type=natural, help="port (default: where DDL queued most)")
    p.add_argument("--around-iteration", type=natural, help="print and plot the records around DDL iteration N")
    p.add_argument("--margin-ms", type=non_negative, default=20.0, help="how much before and after the burst (ms)")
    p.add_argument("--rows", type=count, default=60, help="rows to print at most")
    p.set_defaults(func=_cmd_queues)

    p = sub.add_parser("view", help="one self-contained HTML file to look at a run (or a sweep's runs side by "
                       "side): queues, marks, windows, iterations, background throughput")
    p.add_argument("dir", help="a run folder, or results/<experiment>[/<timestamp>|/latest] for its sweep")
    p.add_argument("--out", help="the HTML file to write (default: view.html in the run's or sweep's folder)")
    p.add_argument("--bins", type=int, default=4000, help="time bins over the run whose queue extremes are drawn "
                   "away from iteration starts and windows (default 4000)")
    p.set_defaults(func=_cmd_view)

    p = sub.add_parser("controller", help="run the controller alone against running switches")
    p.add_argument("--topology", required=True, help="the folder of a running network: a run in progress "
                   "(its config.yaml gives classes, burst detection, telemetry) or a slice (its endpoints.json)")
    p.add_argument("--mode", help=f"{', '.join(MODES)} (default: the run's; {SLICE_MODE} for a slice)")
    p.add_argument("--k", type=natural, help=f"ECN threshold K, packets (default: the run's; {K} for a slice)")
    p.add_argument("--k-pre", type=natural, help=f"PCN threshold K_pre, packets (default: the run's; {K_PRE} for a "
                   "slice)")
    p.add_argument("--events", help="event log path (default: in the run folder)")
    p.set_defaults(func=_cmd_controller)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not args.verbose:
        # finsy and Mininet log a lot at INFO; keep the terminal for our own progress lines.
        logging.getLogger("finsy").setLevel(logging.CRITICAL)
    try:
        return args.func(args)
    except PcnLabError as exc:
        print(f"pcnlab: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("pcnlab: interrupted; what this run started was removed", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. piped into head
        return 0


if __name__ == "__main__":
    sys.exit(main())
