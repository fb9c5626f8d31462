"""The controller's channel to the jobs (`mode.interleave`): a time shift reaches each sending process
of a job as a UDP datagram {"shift_us", "plan", "at_ns", "start_ns"} to its host's own address on the
job's port, where the process's listener (workloads/announce.py) already absorbs PCN-START
announcements. The shift holds
for the communications decided from `at_ns` on (SETTLE_S after the plan, on the monotonic clock every
Mininet host and container of the machine shares; one moment for every job of a plan, whose datagrams
go out together), so all of a job's processes delay the same iteration and the controller knows which;
`start_ns`, on the same clock, is the slot that communication starts no sooner than (the shift is what
the controller foresaw it would take; the process waits only what is left to the slot). The controller runs
outside the hosts, so the socket for each host is made inside the host's network namespace (setns(2) on
a thread of its own, which then ends: the socket stays in that namespace); a container that joined the
host's namespace listens in the same one.

The datagram's socket is connected, so a host where nothing listens answers with ICMP port
unreachable, which the socket reports (ECONNREFUSED) on the next look: that job has no channel (an
unmodified script) and is named. Each job is probed once as its iterations are first told apart at a
port (`probe`), so a plan is made knowing which jobs it cannot move. Python's os module has no setns
before 3.12, hence ctypes; nothing in the field's libraries does this for a socket (pyroute2's netns
moves a process's whole thread set).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import threading
import time
from dataclasses import dataclass

CLONE_NEWNET = 0x40000000
REFUSAL_WAIT_S = 0.05    # loopback's ICMP answer comes at once; this is ample
SETTLE_S = 0.05          # a plan's shifts hold for communications decided from this long after it on


@dataclass(frozen=True)
class Target:
    """One sending process of a job: its host, the pid whose network namespace is the host's, its address
    and the job's port."""

    host: str
    netns_pid: int
    ip: str
    port: int


def socket_in_netns(netns_pid: int, family=socket.AF_INET, kind=socket.SOCK_DGRAM) -> socket.socket:
    """A socket made inside the network namespace of process `netns_pid`."""
    made: dict = {}

    def make():
        try:
            fd = os.open(f"/proc/{netns_pid}/ns/net", os.O_RDONLY)
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into the network namespace of pid {netns_pid}: {os.strerror(err)}")
            finally:
                os.close(fd)
            made["socket"] = socket.socket(family, kind)
        except OSError as exc:
            made["error"] = exc

    thread = threading.Thread(target=make, name=f"netns-{netns_pid}")
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]
    return made["socket"]


class ShiftChannel:
    """The targets of every job that can be sent shifts, and the sending; see the module's note."""

    def __init__(self):
        self._targets: dict[int, tuple[Target, ...]] = {}
        self._sockets: dict[Target, socket.socket] = {}
        self._lock = threading.Lock()      # probes and plans are sent from threads of their own

    def add_job(self, job: int, targets) -> None:
        self._targets[job] = tuple(targets)

    def send(self, job: int, shift_us: float, plan: int, at_ns: int | None = None,
             start_ns: int | None = None) -> dict[str, str]:
        """Send the shift, holding from `at_ns` (None: SETTLE_S from now), with its slot `start_ns` if
        known, to every process of `job`; per host: "sent", "refused" (nothing listens there) or the
        error. Blocks about REFUSAL_WAIT_S (run it off the controller's loop)."""
        at_ns = at_ns if at_ns is not None else time.monotonic_ns() + int(SETTLE_S * 1e9)
        return self.send_plan([(job, shift_us, plan, start_ns)], at_ns)[job]

    def send_plan(self, orders, at_ns: int) -> dict[int, dict[str, str]]:
        """A plan's shifts, each (job, shift_us, plan, start_ns or None), holding from `at_ns`: every
        datagram goes out before one wait for refusals, so the last leaves as soon as the first. Per job,
        per host as `send` says."""
        messages = {}
        for job, shift_us, plan, start_ns in orders:
            fields = {"shift_us": round(shift_us), "plan": plan, "at_ns": at_ns}
            messages[job] = json.dumps(fields if start_ns is None else {**fields, "start_ns": start_ns}).encode()
        return self._send(messages)

    def probe(self, job: int) -> dict[str, str]:
        """Whether `job`'s processes listen, before any plan counts on it: a datagram {"probe": 1} that
        their listeners absorb; per host as `send` says. Blocks about REFUSAL_WAIT_S."""
        return self._send({job: json.dumps({"probe": 1}).encode()})[job]

    def _send(self, messages: dict[int, bytes]) -> dict[int, dict[str, str]]:
        """Each job's message to each of its processes, then one wait for refusals."""
        out: dict[int, dict[str, str]] = {}
        sent = []
        for job, message in messages.items():
            out[job] = {}
            for target in self._targets.get(job, ()):
                try:
                    sock = self._socket(target)
                    sock.send(message)
                    sent.append((job, target, sock))
                    out[job][target.host] = "sent"
                except OSError as exc:
                    out[job][target.host] = "refused" if exc.errno == errno.ECONNREFUSED else str(exc)
        if sent:
            time.sleep(REFUSAL_WAIT_S)
        for job, target, sock in sent:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                out[job][target.host] = "refused" if err == errno.ECONNREFUSED else os.strerror(err)
        return out

    def _socket(self, target: Target) -> socket.socket:
        with self._lock:
            sock = self._sockets.get(target)
            if sock is None:
                sock = socket_in_netns(target.netns_pid)
                sock.connect((target.ip, target.port))
                self._sockets[target] = sock
            return sock

    def close(self) -> None:
        with self._lock:
            for sock in self._sockets.values():
                sock.close()
            self._sockets.clear()
