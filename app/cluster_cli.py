"""`pcnlab cluster start | join | status`: machines as the Ray nodes of a sweep (experiments/cluster.py).

`start` and `join` check what a run on this machine needs (root, the toolchain, a calibration of this
machine, measured now when it has none, the checkout's commit), then run Ray's own `ray start` with the
resource `pcnlab: 1` (a run asks for it: one run per machine at a time), no dashboard, and usage
statistics off. Ray has no authentication: the head binds loopback unless `--address` names another
of this machine's addresses, and then says so. `status` lists the live nodes: their host, commit,
calibration and whether a PCN Lab network runs on them now (a task placed on each node reads it there).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from pcnlab.errors import UsageError
from pcnlab.topologies import control_ports

DEFAULT_PORT = 6379


def add_parser(sub) -> None:
    from pcnlab.cmdline import tcp_port

    p = sub.add_parser("cluster", help="machines as one Ray cluster for sweeps: start, join, stop, status")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = verbs.add_parser("start", help="make this machine the cluster's head (and a machine that runs)")
    v.add_argument("--address", default="127.0.0.1", help="the address of this machine Ray binds (default "
                   "127.0.0.1: only this machine; Ray has no authentication, so name a LAN address only on a "
                   "network you trust)")
    v.add_argument("--port", type=tcp_port, default=DEFAULT_PORT, help=f"the head's port (default {DEFAULT_PORT})")
    v.add_argument("--results", default="results", help="where a first calibration's run folders go")
    v.set_defaults(func=_start)
    v = verbs.add_parser("join", help="add this machine to the cluster at ADDRESS (host:port)")
    v.add_argument("address", help="the head's address, host:port, as pcnlab cluster start printed it")
    v.add_argument("--results", default="results", help="where a first calibration's run folders go")
    v.set_defaults(func=_join)
    v = verbs.add_parser("stop", help="stop Ray on this machine (ray stop) and remove a loopback head's fence")
    v.set_defaults(func=_stop)
    v = verbs.add_parser("status", help="the cluster's machines: commit, calibration, whether a run is on them")
    v.add_argument("address", nargs="?", help="the head's address (default: $RAY_ADDRESS, or this machine's "
                   "running cluster)")
    v.set_defaults(func=_status)


def _ray_cli() -> str:
    from pcnlab.experiments.cluster import RAY_HINT

    found = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if found is None:
        raise UsageError(f"Ray is not installed here: {RAY_HINT}")
    return found


def _ready(results: Path) -> dict:
    """What a machine needs before it may run a sweep's runs; its facts."""
    from pcnlab.calibration import describe
    from pcnlab.experiments.calibrate import ensure_calibration
    from pcnlab.experiments.cluster import node_facts
    from pcnlab.toolchain import require_root

    _ray_cli()
    require_root("a machine of the cluster starts Mininet networks")
    facts = node_facts()
    if not facts["toolchain"]:
        raise UsageError("p4c or BMv2 (simple_switch_grpc) is missing here: `make deps`, then again")
    calibration = ensure_calibration(results)
    facts = node_facts()
    print(f"this machine: {facts['host']}, commit {(facts['commit'] or 'none')[:12]}"
          f"{' (with changes)' if facts['dirty'] else ''}, P4 program {facts['p4']}")
    print(f"calibration: {describe(calibration)}")
    return facts


def _ray_start(args: list[str]) -> None:
    done = subprocess.run([_ray_cli(), "start", *args, "--resources", json.dumps({"pcnlab": 1}),
                           "--include-dashboard", "false", "--disable-usage-stats"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()][-1:] or ["no output"]
        raise UsageError(f"ray start failed: {last[0][:300]}")


WORKER_PORTS = 64         # a loopback head's Ray workers listen on port + 16 ... + 16 + WORKER_PORTS - 1


def ray_ports(port: int) -> dict[str, int]:
    """Every port a head started here listens on, from its base port: Ray 2.60 binds them on every
    address whatever --node-ip-address says (measured with ss), so a loopback head is fenced by them."""
    named = ("node-manager-port", "object-manager-port", "dashboard-agent-grpc-port", "dashboard-agent-listen-port",
             "metrics-export-port", "runtime-env-agent-port", "ray-client-server-port")
    return {"port": port, **{name: port + 1 + i for i, name in enumerate(named)},
            "min-worker-port": port + 16, "max-worker-port": port + 16 + WORKER_PORTS - 1}


def fence_table(port: int) -> str:
    return f"{control_ports.TABLE_PREFIX}ray_{port}"


def _start(args) -> int:
    _ready(Path(args.results))
    address = f"{args.address}:{args.port}"
    ports = ray_ports(args.port)
    if args.port + 16 + WORKER_PORTS > 65535:
        raise UsageError(f"--port {args.port}: a head takes it and the {16 + WORKER_PORTS - 1} ports after it; "
                         "give one below 65455")
    loopback = args.address.startswith("127.")
    if loopback:   # before Ray listens: its ports reachable from this machine's loopback only
        control_ports.guard(fence_table(args.port), [*range(args.port, args.port + 8),
                                                     *range(ports["min-worker-port"], ports["max-worker-port"] + 1)],
                            this_machine=True)
    _ray_start(["--head", "--node-ip-address", args.address,
                *(f for name, value in ports.items() for f in (f"--{name}", str(value)))])
    if loopback:
        print(f"Ray's ports {args.port}-{ports['max-worker-port']} are closed beyond loopback (nftables table "
              f"{fence_table(args.port)}; pcnlab cluster stop removes it)")
    else:
        print(f"note: Ray listens on every address of this machine (Ray 2.60 binds them all) without "
              "authentication: anyone who reaches it can run code here as root; keep it to a network you trust")
    print(f"cluster head at {address}; on each other machine: sudo .venv/bin/pcnlab cluster join {address}")
    print(f"then: pcnlab run FILE --cluster {address}; stop this machine's part with: sudo .venv/bin/pcnlab cluster stop")
    return 0


def _stop(args) -> int:
    """Ray's own `ray stop` (it ends every Ray process of this machine, as it documents), then the
    fences a loopback head put up."""
    from pcnlab.toolchain import require_root

    require_root("removing the nftables fence of a loopback head")
    done = subprocess.run([_ray_cli(), "stop"], capture_output=True, text=True, timeout=300)
    last = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()][-1:] or ["no output"]
    fences = [t for t in _tables() if t.startswith(f"{control_ports.TABLE_PREFIX}ray_")]
    for table in fences:
        control_ports.remove(table)
    print(f"ray stop: {last[0].split(' -- ')[-1][:200]}; removed {len(fences)} fence(s)")
    return 0 if done.returncode == 0 else 1


def _tables() -> list[str]:
    if shutil.which("nft") is None:
        return []
    listed = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, timeout=10)
    return [line.split()[-1] for line in listed.stdout.splitlines() if line.startswith("table inet ")]


def _join(args) -> int:
    _ready(Path(args.results))
    _ray_start(["--address", args.address])
    print(f"joined the cluster at {args.address}; pcnlab cluster status {args.address} lists its machines")
    return 0


def _status(args) -> int:
    import os

    from pcnlab.experiments.cluster import connect, status_rows

    address = args.address or os.environ.get("RAY_ADDRESS") or "auto"
    ray = connect(address)
    try:
        rows = status_rows(ray)
    finally:
        ray.shutdown()
    print(f"{'machine':<20} {'commit':<22} {'run on it':<10} calibration")
    for row in rows:
        print(f"{row['host']:<20} {row['commit']:<22} {row['busy']:<10} {row['calibration']}")
    return 0
