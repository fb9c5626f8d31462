"""The `pcnlab` command. Errors a user can fix print as one line, without a traceback."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pcnlab.errors import PcnLabError


def _cmd_doctor(args) -> int:
    from pcnlab.doctor import doctor

    return doctor()


def _cmd_clean(args) -> int:
    from pcnlab.ledger import DEFAULT_STATE_DIR, clean_stale
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
    from pcnlab.p4src import BUILD_DIR, P4SRC_DIR, PROGRAMS
    from pcnlab.toolchain import compile_p4, p4c_version

    version = p4c_version()
    for main in PROGRAMS:
        json_path, p4info = compile_p4(P4SRC_DIR, main, BUILD_DIR)
        print(f"compiled {P4SRC_DIR / main} with {version} -> {json_path.name}, {p4info.name}")
    return 0


def _cmd_slice(args) -> int:
    from pcnlab.experiments.slice import run_slice
    from pcnlab.topologies.network import NetworkOptions

    options = NetworkOptions(switch=args.switch, packet_log=args.packet_log, pcap=args.pcap,
                             grpc_base_port=args.grpc_base_port, thrift_base_port=args.thrift_base_port)
    result = run_slice(args.topology, options, Path(args.results))
    return 0 if result.received == result.sent else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pcnlab", description="PCN Lab: P4/Mininet testbed for DDL traffic")
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
    p.add_argument("--grpc-base-port", type=int, help="s<N> serves P4Runtime on this port + N - 1")
    p.add_argument("--thrift-base-port", type=int, help="s<N> serves thrift on this port + N - 1")
    p.add_argument("--results", default="results", help="results folder (default: results)")
    p.set_defaults(func=_cmd_slice)
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


if __name__ == "__main__":
    sys.exit(main())
