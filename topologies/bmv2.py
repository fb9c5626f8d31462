"""A Mininet switch that is one BMv2 `simple_switch_grpc` process.

The switch starts without a program (`--no-p4`); the controller pushes the pipeline over P4Runtime.
Its gRPC server listens on 127.0.0.1 only; its log, its console output and (when asked) its pcaps go
to the run's folder. It is stopped by its PID, never by a name pattern.

`realtime` starts it under SCHED_FIFO (`chrt --fifo`; its threads inherit the policy). BMv2 hands each
packet between threads (receive, ingress, egress, transmit) that sleep in between; under the default
policy a thread a packet wakes waits for a CPU like any other, and on 2 cores it waited up to a
scheduler slice (about 1 ms) behind a worker's or the PS's Python, the moment the workers' packets
converge (perf sched: a BMv2 thread 962 µs runnable while a worker's Python ran 742 µs on one
CPU and the runner's Python and BMv2's other threads the other). A real-time thread preempts them at
once.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Collection

from mininet.node import Switch

from pcnlab.errors import PcnLabError, PortInUse, UsageError
from pcnlab.toolchain import Bmv2Build, bmv2_build


class Bmv2StartError(PcnLabError):
    """simple_switch_grpc exited or did not open its ports."""


# SCHED_FIFO priority of a realtime switch (1-99): above every ordinary process, below the kernel's own
# real-time threads (migration, watchdogs at 99).
REALTIME_PRIORITY = 10


def port_is_free(port: int, host: str = "0.0.0.0") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


# Where a switch's own ports are drawn from when none is asked for: below Linux's ephemeral range
# (32768-60999 by default, net.ipv4.ip_local_port_range), from which the kernel gives every outgoing
# connection its source port. A port the kernel chose (bind to 0) is in that range, and an outgoing
# connection could take it between our check and BMv2's bind: BMv2 then runs without listening (the
# likely cause of CI's "did not open its ports in 15 s" of 2026-11-26, whose console was lost with its
# temporary folder). No outgoing connection takes a port below that range, and the workloads' own
# ports start at 20000 (workloads/hosts.py FIRST_PORT).
CONTROL_PORTS = range(10000, 20000)


def free_port(avoid: Collection[int] = ()) -> int:
    """A TCP port in CONTROL_PORTS that nobody has bound now and that is not in `avoid` (ports chosen
    but not bound yet: the same network's other switches). The search starts at a random port, so two
    runs one after the other seldom meet in a port the first has just left."""
    first = random.SystemRandom().randrange(len(CONTROL_PORTS))
    for i in range(len(CONTROL_PORTS)):
        port = CONTROL_PORTS[(first + i) % len(CONTROL_PORTS)]
        if port not in avoid and port_is_free(port):
            return port
    raise PortInUse(f"no free TCP port in {CONTROL_PORTS.start}-{CONTROL_PORTS.stop - 1}; "
                    "set the network's grpc_base_port and thrift_base_port")


def _bind_failure(console: Path, since: int) -> str | None:
    """BMv2's own line, written after byte `since`, saying it could not bind a port (for gRPC it keeps
    running; for thrift it exits), or None."""
    with open(console, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    for line in text.splitlines():
        if "Could not bind" in line or "Address already in use" in line:
            return line.strip()[:200]
    return None


def _last_lines(console: Path, n: int) -> str:
    """The console's last `n` lines, joined by " | " (for a one-line error), or "no output"."""
    return " | ".join(console.read_text(errors="replace").strip().splitlines()[-n:]) or "no output"


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def realtime_prefix(name: str) -> list[str]:
    """What runs a command under SCHED_FIFO at REALTIME_PRIORITY (its threads inherit it)."""
    chrt = shutil.which("chrt")
    if chrt is None:
        raise Bmv2StartError(f"{name}: switch.realtime needs chrt (util-linux), not found; install it or set "
                             "realtime: false")
    return [chrt, "--fifo", str(REALTIME_PRIORITY)]


class Bmv2Switch(Switch):
    """One simple_switch_grpc per Mininet switch.

    Options (keyword arguments, as Mininet passes them):
      device_id     P4Runtime device id (default: the number in the switch's name)
      grpc_port     P4Runtime port on 127.0.0.1 (default: a free one)
      thrift_port   thrift runtime port (default: a free one)
      log_dir       folder for the switch's console output, log and pcaps (default: /tmp)
      packet_log    write BMv2's per-packet log (runs the logging build; slow)
      pcap          write a pcap per port
      cpu_port      P4Runtime packet-in/out port (default: none)
      realtime      run under SCHED_FIFO (see the module's docstring)
      on_process    called with (pid, description) as soon as the process exists (the run's ledger)
    """

    def __init__(self, name: str, device_id: int | None = None, grpc_port: int | None = None,
                 thrift_port: int | None = None, log_dir: str | Path | None = None,
                 packet_log: bool = False, pcap: bool = False, cpu_port: int | None = None,
                 realtime: bool = False,
                 on_process: Callable[[int, str], None] | None = None,
                 build: Bmv2Build | None = None, **params):
        super().__init__(name, **params)
        digits = "".join(ch for ch in name if ch.isdigit())
        self.device_id = device_id if device_id is not None else int(digits or 0)
        self.packet_log = packet_log
        self.build_info = build or bmv2_build(packet_log)
        self.grpc_port = grpc_port or free_port()
        self.thrift_port = thrift_port or free_port(avoid={self.grpc_port})
        self._require_free_ports()  # before Mininet builds links: a taken port fails early
        self.log_dir = Path(log_dir or "/tmp")
        self.pcap = pcap
        self.cpu_port = cpu_port
        self.realtime = realtime
        self.on_process = on_process
        self.process: subprocess.Popen | None = None

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def port_map(self) -> dict[int, str]:
        """Port number -> interface name, as Mininet numbered them."""
        return {port: intf.name for intf, port in self.ports.items() if intf.name != "lo"}

    def command(self) -> list[str]:
        cmd = [str(self.build_info.switch), "--no-p4", "--device-id", str(self.device_id),
               "--thrift-port", str(self.thrift_port)]
        if self.realtime:
            cmd = realtime_prefix(self.name) + cmd
        for port, intf in sorted(self.port_map().items()):
            cmd += ["-i", f"{port}@{intf}"]
        if self.packet_log:
            cmd += ["--log-file", str(self.log_dir / f"{self.name}-packets"), "--log-flush",
                    "--log-level", "info"]
        if self.pcap:
            cmd += [f"--pcap={self.log_dir}"]
        cmd += ["--", "--grpc-server-addr", self.grpc_address]
        if self.cpu_port is not None:
            cmd += ["--cpu-port", str(self.cpu_port)]
        return cmd

    def start(self, controllers) -> None:  # noqa: ARG002  (BMv2 is driven over P4Runtime, not OpenFlow)
        for intf in self.port_map().values():
            # BMv2 reads and writes whole frames; offloads would leave checksums unfinished.
            self.cmd(f"ethtool --offload {intf} rx off tx off sg off >/dev/null 2>&1")
        self._start_process()

    def _require_free_ports(self) -> None:
        for label, port in (("gRPC", self.grpc_port), ("thrift", self.thrift_port)):
            if not 0 < port < 65536:
                raise UsageError(f"{self.name}: {label} port {port} is not a TCP port (1-65535); choose a base "
                                 "port so that base + the number of switches - 1 is at most 65535")
            if not port_is_free(port):
                raise PortInUse(
                    f"{self.name}: {label} port {port} is in use; choose another base port or free it "
                    f"(`ss -ltnp 'sport = :{port}'` shows who holds it)")

    def _start_process(self, timeout: float = 30.0) -> None:
        self._require_free_ports()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        console = self.log_dir / f"{self.name}-console.log"
        with open(console, "ab") as out:
            since = out.tell()
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        if self.on_process:
            self.on_process(self.process.pid, f"simple_switch_grpc {self.name}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Whether it exited, then its output: a switch that could not bind says so and exits, and the
            # exit may come before this loop reads the saying (a full suite's load: thrift, once).
            exited = self.process.poll() is not None
            failure = _bind_failure(console, since)
            if exited and not failure:
                raise Bmv2StartError(f"{self.name}: simple_switch_grpc exited ({_last_lines(console, 1)}); "
                                     f"see {console}")
            if failure:
                self._stop_process()
                raise PortInUse(f"{self.name}: simple_switch_grpc could not bind its gRPC port {self.grpc_port} "
                                f"or thrift port {self.thrift_port}, taken since they were checked free "
                                f"({failure}); start again, or choose other base ports")
            if _listening(self.grpc_port) and _listening(self.thrift_port):
                return
            time.sleep(0.05)
        self._stop_process()
        raise Bmv2StartError(f"{self.name}: simple_switch_grpc did not open its ports {self.grpc_port} and "
                             f"{self.thrift_port} in {timeout:.0f} s (its last output: "
                             f"{_last_lines(console, 3)[:400]}); "
                             f"see {console}")

    def _stop_process(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        """Stop and start the BMv2 process (same ports, no program): the controller must reinstall."""
        self._stop_process()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (port_is_free(self.grpc_port) and port_is_free(self.thrift_port)):
            time.sleep(0.05)
        self._start_process()

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803  (Mininet's name)
        self._stop_process()
        super().stop(deleteIntfs)

    def connected(self) -> bool:
        return self.process is not None and self.process.poll() is None
