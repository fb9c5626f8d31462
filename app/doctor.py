"""`pcnlab doctor`: one line per requirement, OK or what is missing and the command that fixes it."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pcnlab.errors import UsageError
from pcnlab.toolchain import INSTALL_HINT, NOLOG_BIN, find_program, thrift_client_available, tool_output_line

# Each qdisc with the least arguments `tc` accepts for it.
QDISCS = {"htb": "", "tbf": "rate 1mbit burst 32kbit latency 400ms", "pfifo": "", "netem": "",
          "red": "limit 400000 min 30000 max 90000 avpkt 1000 burst 55 bandwidth 10mbit",
          "fq_codel": "", "prio": "", "fq": "", "sfq": ""}
PYTHON_PACKAGES = ("finsy", "grpc", "scapy", "yaml", "pandas", "matplotlib", "scipy", "sklearn", "pyarrow", "torch")
DEFAULT_PORTS = {"P4Runtime (BMv2's default)": 9559, "thrift (BMv2's default)": 9090}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True

    def line(self) -> str:
        status = "OK" if self.ok else ("MISSING" if self.required else "NOTE")
        return f"{status:8s}{self.name}: {self.detail}"


def check_root() -> Check:
    root = os.geteuid() == 0
    return Check("root", root, "running as root" if root else "Mininet and BMv2 need root: run with sudo")


def check_mininet() -> Check:
    try:
        mininet = importlib.import_module("mininet.net")
    except ImportError:
        return Check("mininet", False, "Python module not found: `make deps` (Debian/Ubuntu package mininet)")
    if not shutil.which("mnexec"):
        return Check("mininet", False, "mnexec not on PATH: `make deps` (package mininet)")
    version = getattr(importlib.import_module("mininet.net"), "VERSION", "?")
    return Check("mininet", True, f"{version} ({Path(mininet.__file__).parent})")


def check_program(name: str, version_cmd: list[str] | None = None, last: bool = False) -> Check:
    path = find_program(name)
    if path is None:
        return Check(name, False, f"not found; {INSTALL_HINT}")
    if version_cmd == []:  # no version flag: the path is all there is to say
        return Check(name, True, str(path))
    return Check(name, True, f"{tool_output_line(version_cmd or [str(path), '--version'], last)} ({path})")


def check_nolog_build() -> Check:
    fast = NOLOG_BIN / "simple_switch_grpc"
    if os.access(fast, os.X_OK):
        return Check("BMv2 no-logging build", True, f"{tool_output_line([str(fast), '--version'])} ({fast}): used for runs",
                     required=False)
    return Check("BMv2 no-logging build", False,
                 "absent: runs use the logging build (about half the packet rate)", required=False)


def check_thrift_client() -> Check:
    if thrift_client_available():
        return Check("BMv2 thrift client", True, "sswitch_runtime and thrift import")
    return Check("BMv2 thrift client", False,
                 f"sswitch_runtime/thrift do not import (queue rates need them); {INSTALL_HINT}")


def check_python_packages() -> Check:
    missing = []
    for name in PYTHON_PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        return Check("python packages", False, f"missing {', '.join(missing)}: run `make deps`")
    return Check("python packages", True, ", ".join(PYTHON_PACKAGES))


def check_qdiscs() -> Check:
    """Which qdiscs the kernel has, tried on a veth pair in a throwaway network namespace."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return Check("kernel qdiscs", False, "not checked (needs root and unshare)", required=False)
    script = "ip link add pcnd0 type veth peer name pcnd1 && " + " ; ".join(
        f"tc qdisc add dev pcnd0 root {q} {a} >/dev/null 2>&1 && echo {q} && tc qdisc del dev pcnd0 root"
        for q, a in QDISCS.items())
    out = subprocess.run(["unshare", "--net", "sh", "-c", script], capture_output=True, text=True, timeout=30)
    have = set(out.stdout.split())
    absent = [q for q in QDISCS if q not in have]
    detail = f"have {', '.join(q for q in QDISCS if q in have) or 'none'}"
    if absent:
        detail += f"; absent {', '.join(absent)} (PCN Lab shapes with BMv2's queues and htb/tbf only)"
    return Check("kernel qdiscs", "htb" in have, detail, required=False)


def check_congestion_controls() -> Check:
    path = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    have = path.read_text().split() if path.exists() else []
    detail = f"have {', '.join(have) or 'none'}"
    if "dctcp" not in have:
        detail += "; dctcp absent (flows asking for it will fail with a clear error; try `modprobe tcp_dctcp`)"
    return Check("TCP congestion control", "cubic" in have or "reno" in have, detail, required=False)


def check_ecn() -> Check:
    path = Path("/proc/sys/net/ipv4/tcp_ecn")
    value = path.read_text().strip() if path.exists() else "?"
    meaning = {"0": "off", "1": "on (requested and accepted)", "2": "accepted when asked (kernel default)"}
    return Check("ECN sysctl", True, f"net.ipv4.tcp_ecn={value}: {meaning.get(value, '?')}; "
                 "flows set ECN per host namespace", required=False)


def check_ports() -> Check:
    from pcnlab.topologies.bmv2 import port_is_free

    busy = [f"{label} {port}" for label, port in DEFAULT_PORTS.items() if not port_is_free(port)]
    if busy:
        return Check("ports", False, f"in use: {', '.join(busy)}; runs pick free ports unless told a base port",
                     required=False)
    return Check("ports", True, "9559 and 9090 free; runs pick free ports unless told a base port", required=False)


def check_podman() -> Check:
    """PyTorch jobs with an image (the `containers` section, a job's `image:`) run in podman containers:
    podman, its runtime here, the default image and what it holds."""
    from pcnlab.workloads.containers import DEFAULT_IMAGE, ContainerSpec, choose_runtime, podman_available
    from pcnlab.workloads.images import image_exists, probe

    why_not = podman_available()
    if why_not is not None:
        return Check("podman", False, f"{why_not} (only jobs in containers need it)", required=False)
    runtime = choose_runtime()
    version = tool_output_line(["podman", "--version"])
    if not image_exists(DEFAULT_IMAGE):
        return Check("podman", False, f"{version}; runtime {runtime.name} ({runtime.why}); default image "
                                      f"{DEFAULT_IMAGE} absent: `make image` (a run builds it first otherwise)",
                     required=False)
    try:
        facts = probe(ContainerSpec(DEFAULT_IMAGE), ("ps", "ring", "torchrun"))
    except UsageError as exc:
        return Check("podman", False, f"{version}; runtime {runtime.name}; {exc}", required=False)
    return Check("podman", True, f"{version}; runtime {runtime.name} ({runtime.why}); default image {DEFAULT_IMAGE}: "
                                 f"Python {facts.python}, PyTorch {facts.torch}", required=False)


def check_calibration() -> Check:
    """The calibration runs are judged by: this machine's, or what the first run will do about it."""
    from pcnlab.calibration import read_calibration

    found = read_calibration()
    if found.state == "ok":
        return Check("calibration", True, found.line(), required=False)
    todo = "the next run measures it first (about 30 s); `pcnlab calibrate` measures more"
    if found.state == "absent":
        return Check("calibration", False, f"{found.path}: none yet; {todo}", required=False)
    return Check("calibration", False, f"{found.line()}; {todo} and keeps this file beside it", required=False)


def run_checks() -> list[Check]:
    return [
        check_root(),
        check_mininet(),
        check_program("p4c", last=True),
        check_program("simple_switch_grpc"),
        check_nolog_build(),
        check_program("simple_switch_CLI", version_cmd=[]),
        check_thrift_client(),
        check_python_packages(),
        check_qdiscs(),
        check_congestion_controls(),
        check_ecn(),
        check_ports(),
        check_podman(),
        check_calibration(),
    ]


def doctor() -> int:
    checks = run_checks()
    for check in checks:
        print(check.line())
    ok = all(c.ok for c in checks if c.required)
    print("everything needed is there" if ok else "something needed is missing: see the lines above")
    return 0 if ok else 1
