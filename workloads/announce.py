"""PCN-START announcements (the PCN paper's, for the data plane's `pcn-host` mode), shared by the burst
generator and the PyTorch workers: one small UDP datagram with DSCP PCN_START_DSCP to the burst's
destination (the PS, or the ring successor) on the job's port number, about two smoothed RTTs before
the burst (`default_lead_us`); and, on the receiving side, a listener that absorbs (and logs) them, so they cost the
receiver no ICMP port-unreachable. The datagram's payload is JSON: {"job", "rank", "iter", "bytes",
"lead_us"}. See netutil.PCN_START_DSCP.

The same listener takes the other direction's messages: a time shift from the controller
(controller/turns.py, `mode.interleave`), a datagram {"shift_us", "plan", "at_ns", "start_ns"} that the
controller sends to the host's own address from inside its network namespace; `Shifts` holds it until
the process's loop delays the first communication it decides from `at_ns` on, once: until `start_ns`
(its slot), or by `shift_us`. A datagram {"probe": 1} (the controller asking whether the job listens,
before its first plan) is absorbed.

PyTorch's gloo owns its sockets, so a worker finds the smoothed RTT to its destination in its own
process: the TCP sockets among its file descriptors connected to that address (`peer_srtt_us`).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from pcnlab.workloads.joblog import JsonLog
from pcnlab.workloads.netutil import PCN_START_TOS, tcp_info

LATER_ROUND = 0.75   # a slot more than this share of the process's own period past its shift is a round later

DEFAULT_LEAD_US = 1000.0   # when no connection to the destination tells its RTT yet
LEAD_RTTS = 2              # the default lead, in smoothed RTTs of the connection to the destination


def default_lead_us(srtt_us: float | None) -> float:
    """How far ahead to announce when the job does not say: two smoothed RTTs. The marks K_pre sets at
    the announcement reach the background's senders and their slower sending reaches the switch about
    one RTT later; the standing queue then drains to K_pre. In the paper's regime (pcn-host-lead.yaml,
    docs/results.md) one RTT (about 25 ms) left the bursts a start queue of 19 packets, 50 ms
    (two) 10.5, 100 ms no less (10.4) but K_pre held twice as long."""
    return LEAD_RTTS * srtt_us if srtt_us else DEFAULT_LEAD_US


def announce_socket() -> socket.socket:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, PCN_START_TOS)
    return udp


def send_announcement(udp: socket.socket, log: JsonLog, dst: str, port: int, *, job: str, rank: int, it: int,
                      nbytes: int, lead_us: float) -> int:
    """Send one PCN-START to (dst, port) and log it; returns the monotonic time it was sent (ns)."""
    msg = json.dumps({"job": job, "rank": rank, "iter": it, "bytes": nbytes, "lead_us": round(lead_us)}).encode()
    sent = time.monotonic_ns()
    udp.sendto(msg, (dst, port))
    log.write("announce", host_ns=sent, direction="sent", iter=it, lead_us=round(lead_us), dst=dst)
    return sent


class Shifts:
    """The delays the controller asked of this process and it has not taken yet: filled by the listener's
    thread, taken by the process's loop before a communication. Each shift holds from a moment on
    (`at_ns`, the host's monotonic clock, which every Mininet host and container shares): it delays the
    first communication decided at or after it (when the process chooses that communication's start: as
    the last one ends, or its compute begins), so every process of a job delays the same iteration (the
    two workers of a PS, handed the shift between their answers, once delayed different iterations, and
    the job moved twice the shift), and the controller knows which one (the starts decided before the
    moment are played out: controller/fluid.py). A shift may name its slot (`start_ns`): that communication
    then starts no sooner than it, however late or early the one before it ended (the controller foresees
    a collided round's end only roughly), and the delay is what is left to wait. A slot that leaves more
    than LATER_ROUND of the process's own period (its last decision to this one) to wait beyond the shift
    is for the next round, and waits for the next decision: the controller takes a communication as
    decided when its last packet has crossed the port, a process when it decides, and a PS worker decides
    once its answer is back (for 204 KB at 20 Mbit/s, 85 ms later). Taken in the round before, two
    PyTorch PS jobs waited a whole period more at 22 of 25 slots (542-699 ms; 7-8 % slower than without
    interleaving; docs/results.md)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending: list[tuple[int, float, int | None]] = []      # (at_ns, shift_us, start_ns)
        self._decided: int | None = None                             # the last decision's moment

    def add(self, shift_us: float, at_ns: int = 0, start_ns: int | None = None) -> None:
        """A shift holding from `at_ns`; one that names a slot replaces a slot not yet taken (a later plan's
        slot is where the controller wants the job now)."""
        with self._lock:
            if start_ns is not None:
                self._pending = [s for s in self._pending if s[2] is None]
            self._pending.append((at_ns, shift_us, start_ns))

    def take(self, log: JsonLog | None = None, it: int | None = None, decided_ns: int | None = None,
             planned_ns: int | None = None) -> float:
        """The delay (µs) the shifts that hold for a communication decided at `decided_ns` (None: all) and
        planned to start at `planned_ns` ask of it: a shift that names a slot, what is left to wait for
        it (when the planned start is known), else the shift; those are taken, once. Logged as applied
        before iteration `it` when one is taken."""
        with self._lock:
            period = decided_ns - self._decided if decided_ns is not None and self._decided is not None else 0
            self._decided = decided_ns if decided_ns is not None else self._decided
            due = [s for s in self._pending if (decided_ns is None or s[0] <= decided_ns)
                   and not (period > 0 and s[2] is not None and planned_ns is not None
                            and s[2] - planned_ns - s[1] * 1e3 > LATER_ROUND * period)]
            self._pending = [s for s in self._pending if s not in due]
        shift_us = 0.0
        for _, us, start_ns in due:
            if start_ns is not None and planned_ns is not None:
                us = max(0.0, (start_ns - planned_ns) / 1e3 - shift_us)
            shift_us += us
        if due and log is not None:          # a slot already past is taken too, with no wait
            log.write("shift", direction="applied", iter=it, shift_us=round(shift_us))
        return shift_us


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def start_listener(log: JsonLog, bind_addr: str, port: int, shifts: Shifts | None = None) -> bool:
    """Absorb and log PCN-START datagrams on (bind_addr, port) in a daemon thread, hand the controller's
    shifts to `shifts`, and absorb its probes unlogged. False when another process of the same host
    already listens there (it absorbs them for both; the shifts sent there reach that one)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((bind_addr, port))
    except OSError:
        s.close()
        return False

    def loop():
        while True:
            data, peer = s.recvfrom(2048)
            try:
                info = json.loads(data)
            except ValueError:
                info = {}
            if not isinstance(info, dict):
                info = {}
            if info.get("probe") == 1:           # the controller asking whether anyone listens: absorbed
                continue
            shift, at_ns, start_ns = info.get("shift_us"), info.get("at_ns", 0), info.get("start_ns")
            slot_ok = start_ns is None or (_number(start_ns) and _number(at_ns) and 0 <= start_ns - at_ns < 1e12)
            if _number(shift) and 0 <= shift < 1e9 and _number(at_ns) and slot_ok:      # a slot within 1,000 s
                log.write("shift", direction="received", shift_us=round(shift), plan=info.get("plan"), at_ns=at_ns,
                          start_ns=start_ns)
                if shifts is not None:
                    shifts.add(float(shift), int(at_ns), None if start_ns is None else int(start_ns))
                continue
            log.write("announce", direction="received",
                      src=peer[0], **{k: info.get(k) for k in ("rank", "iter", "bytes", "lead_us")})

    threading.Thread(target=loop, daemon=True, name="pcn-start-listener").start()
    return True


def peer_srtt_us(addr: str) -> float | None:
    """The largest smoothed RTT (µs) of this process's TCP connections to `addr` (None: no such one)."""
    best = None
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in fds:
        fd = int(name)
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if s.family == socket.AF_INET and s.type == socket.SOCK_STREAM and s.getpeername()[0] == addr:
                srtt = tcp_info(s).get("srtt_us")
                if srtt:
                    best = max(best or 0, srtt)
        except OSError:
            pass  # not connected
        finally:
            s.close()
    return best


class Announcer:
    """A PyTorch worker's announcements: before each iteration's communication phase, one PCN-START to
    each destination, one lead ahead (`lead_us`, or 0: `default_lead_us` of gloo's connection there)."""

    def __init__(self, log: JsonLog, destinations: list[str], port: int, job: str, rank: int, nbytes: int,
                 lead_us: float = 0.0):
        self.log = log
        self.destinations = list(dict.fromkeys(destinations))
        self.port = port
        self.job, self.rank, self.nbytes = job, rank, nbytes
        self.fixed_lead_us = lead_us
        self.udp = announce_socket()
        self.last_ns: int | None = None   # when the latest announcement was sent

    def lead_us(self) -> float:
        if self.fixed_lead_us:
            return self.fixed_lead_us
        rtts = [r for r in (peer_srtt_us(d) for d in self.destinations) if r]
        return float(default_lead_us(max(rtts) if rtts else None))

    def before(self, comm_start_ns: int, it: int) -> int:
        """Sleep until one lead before `comm_start_ns` (not at all when that is past), then announce
        iteration `it` to every destination; returns when the first one was sent (ns)."""
        lead = self.lead_us()
        delay = (comm_start_ns - int(lead * 1e3) - time.monotonic_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
        sent = [send_announcement(self.udp, self.log, d, self.port, job=self.job, rank=self.rank, it=it,
                                  nbytes=self.nbytes, lead_us=lead) for d in self.destinations]
        self.last_ns = sent[0]
        return sent[0]
