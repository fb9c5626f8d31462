"""Does BMv2 hold a port to its rate across its priority queues? Two UDP senders (h2, h3) into h1 through one
simple_switch, each faster than the port; with two queues per port, h2's packets in priority queue 0 and h3's in queue 1 (bench/prio.p4).
With one queue per port the two share the port's rate; a strict-priority port at the same rate would give h3
all of it and h2 what is left. Prints what h1 received from each, in packets/s, for 1 and 2 queues per port.

    sudo .venv/bin/python bench/priority_queues.py [--rate 1000] [--send 1500] [--seconds 6]

Measures the limit behind issue 47's in-network alternative (docs/results.md, "Jobs that take turns"): BMv2's
QueueingLogicPriRL gives each priority queue its own rate limiter and none for the port (behavioral-model
include/bm/bm_sim/queueing.h; behavioral-model#1067 asks for a port rate).
Hand-written: a bare Mininet with one simple_switch (the JSON given on its command line), not the testbed's
P4Runtime switch, so that the program under test is only the three lines that pick a queue.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mininet.net import Mininet
from mininet.node import Switch

from pcnlab.cmdline import OneLineParser, count, positive

HERE = Path(__file__).resolve().parent
SWITCH = Path("/usr/local/opt/bmv2-nolog/bin/simple_switch")
SKIP_S = 1.0        # the receiver leaves out each measurement's first and last second
SEND = """
import socket, sys, time
dst, pps, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); data = bytes(1400); t0 = time.monotonic(); n = 0
while time.monotonic() - t0 < secs:
    s.sendto(data, (dst, 9000)); n += 1
    wait = t0 + n / pps - time.monotonic()
    if wait > 0: time.sleep(wait)
"""
RECEIVE = """
import collections, json, socket, sys, time
secs, skip = float(sys.argv[1]), float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9000)); s.settimeout(0.2)
print("ready", flush=True); first = None; start = time.monotonic() + 5; counts = collections.Counter()
while True:
    try: _, (src, _) = s.recvfrom(2048)
    except socket.timeout:
        if time.monotonic() - (first or start) > secs: break
        continue
    now = time.monotonic(); first = first or now
    if skip <= now - first <= secs - skip: counts[src] += 1
print(json.dumps({k: v / (secs - 2 * skip) for k, v in counts.items()}))
"""


class PlainBmv2(Switch):
    """simple_switch with a JSON program, `queues` priority queues per port and a thrift port."""

    def __init__(self, name, json_path="", queues=1, thrift_port=9190, **params):
        super().__init__(name, **params)
        self.json_path, self.queues, self.thrift_port, self.proc = json_path, queues, thrift_port, None

    def start(self, controllers):  # noqa: ARG002
        cmd = [str(SWITCH), "--thrift-port", str(self.thrift_port)]
        for intf, port in self.ports.items():
            if intf.name != "lo":
                self.cmd(f"ethtool --offload {intf.name} rx off tx off sg off >/dev/null 2>&1")
                cmd += ["-i", f"{port}@{intf.name}"]
        cmd += [self.json_path, "--", "--priority-queues", str(self.queues)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self, deleteIntfs=True):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        super().stop(deleteIntfs)


def cli(thrift_port: int, line: str) -> None:
    for _ in range(50):
        done = subprocess.run(["simple_switch_CLI", "--thrift-port", str(thrift_port)], input=line + "\n",
                              capture_output=True, text=True)
        if done.returncode == 0 and "Could not connect" not in done.stdout + done.stderr:
            return
        time.sleep(0.2)
    raise SystemExit(f"priority_queues: simple_switch_CLI '{line}' failed: {done.stdout}{done.stderr}".strip())


def measure(json_path: Path, queues: int, rate: int, send: int, seconds: float) -> dict:
    net = Mininet(topo=None, controller=None, build=False, autoSetMacs=True)
    started: list[subprocess.Popen] = []
    s1 = net.addSwitch("s1", cls=PlainBmv2, json_path=str(json_path), queues=queues)
    hosts = [net.addHost(f"h{i}", ip=f"10.0.0.{i}/24") for i in (1, 2, 3)]
    for h in hosts:                                  # h1 on port 1, h2 on 2, h3 on 3
        net.addLink(h, s1)
    try:
        net.build()
        net.start()
        net.staticArp()
        for h in hosts:                              # BMv2 forwards frames whole: checksums finished by the host
            h.cmd(f"ethtool --offload {h.defaultIntf().name} rx off tx off sg off >/dev/null 2>&1")
        cli(s1.thrift_port, f"set_queue_rate {rate} 1")
        if queues > 1:
            cli(s1.thrift_port, "table_add queue_of queue 10.0.0.3 => 1")
        rx = hosts[0].popen([sys.executable, "-c", RECEIVE, str(seconds), str(SKIP_S)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
        started.append(rx)
        rx.stdout.readline()
        tx = [h.popen([sys.executable, "-c", SEND, "10.0.0.1", str(send), str(seconds)], stdout=subprocess.DEVNULL,
                      stderr=subprocess.PIPE, text=True) for h in hosts[1:]]
        started.extend(tx)
        for h, p in zip(hosts[1:], tx):
            _, err = p.communicate(timeout=seconds + 30)
            if p.returncode != 0:
                raise SystemExit(f"priority_queues: the sender on {h.name} failed: {err.strip().splitlines()[-1:]}")
        out, err = rx.communicate(timeout=30)
        if rx.returncode != 0 or not out.strip():
            raise SystemExit(f"priority_queues: the receiver on h1 failed: {err.strip().splitlines()[-1:]}")
        got = json.loads(out.strip().splitlines()[-1])
        return {"h2 (queue 0)": round(got.get("10.0.0.2", 0)), "h3 (queue 1)": round(got.get("10.0.0.3", 0))}
    finally:
        for proc in started:         # Mininet's popen detaches them (mnexec -d): net.stop would not end them
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        net.stop()


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="priority_queues.py", description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=count, default=1000, help="port 1's queue rate, packets/s")
    p.add_argument("--send", type=count, default=1500, help="each sender's rate, packets/s")
    p.add_argument("--seconds", type=positive, default=6.0, help="each measurement's length (over 2: its first and "
                   "last second are not counted)")
    p.add_argument("--repeat", type=count, default=2, help="measurements of each queue count, interleaved")
    args = p.parse_args(argv)
    if args.seconds <= 2 * SKIP_S:
        p.error(f"--seconds {args.seconds:g} leaves nothing to count: give more than {2 * SKIP_S:g}")
    if os.geteuid() != 0:
        p.error("needs root (Mininet hosts and a switch): run it with sudo")
    if not SWITCH.exists() or shutil.which("p4c") is None:
        p.error(f"needs p4c and the no-logging BMv2 at {SWITCH}: ../shared/p4tools/install")
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(["p4c", "--target", "bmv2", "--arch", "v1model", "-o", out, str(HERE / "prio.p4")], check=True)
        json_path = Path(out) / "prio.json"
        for r in range(args.repeat):
            for queues in (1, 2):                     # interleaved, repeated: the machine is noisy
                got = measure(json_path, queues, args.rate, args.send, args.seconds)
                print(f"repeat {r + 1}, {queues} queue(s) per port, port rate {args.rate} pkt/s, two senders at "
                      f"{args.send}: h1 received {got} = {sum(got.values())} pkt/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
