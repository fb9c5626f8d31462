"""What the burst generator's TCP pattern (burst.py) and its LTP transport (ltp_burst.py) share: the
messages (a 16-byte header of iteration and payload length before each payload; the worker's rank as
its hello), the start handshake between a PS and its workers, the pacing of each burst with its
PCN-START announcement one lead ahead, the PS's answers, and the iteration records of a PS and a worker."""

from __future__ import annotations

import random
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor

from pcnlab.jsonlines import Iteration
from pcnlab.workloads.announce import Shifts, announce_socket, default_lead_us, send_announcement, start_listener
from pcnlab.workloads.joblog import JsonLog
from pcnlab.workloads.netutil import connect_retry, listen, recv_exact, set_cc, tcp_info
from pcnlab.workloads.process_config import BurstConfig

HEADER = struct.Struct("!QQ")  # iteration, payload bytes
HELLO = struct.Struct("!Q")    # the worker's rank, once per connection


class Payload:
    def __init__(self, size: int):
        self.buf = memoryview(bytearray(max(size, 1)))
        self._out = memoryview(bytearray(HEADER.size + max(size, 1)))

    def send(self, sock: socket.socket, it: int, size: int) -> None:
        """Header and payload in one write: a burst's first segment is a full one, never a lone header
        (which the switch would not count as the burst's start: it looks like a control message).
        One thread at a time per object: pack_into zeroes the header before writing it, so another
        thread's sendall of the same buffer could put a header of zeros on the wire."""
        if HEADER.size + size > len(self._out):
            self._out = memoryview(bytearray(HEADER.size + size))
        HEADER.pack_into(self._out, 0, it, size)
        sock.sendall(self._out[:HEADER.size + size])

    def receive(self, sock: socket.socket, expect_it: int) -> tuple[int, int]:
        """(first byte's time, payload size)."""
        head = bytearray(HEADER.size)
        first = recv_exact(sock, memoryview(head))
        it, size = HEADER.unpack(head)
        if it != expect_it:
            raise ConnectionError(f"expected iteration {expect_it}, got {it}")
        if size > len(self.buf):
            self.buf = memoryview(bytearray(size))
        recv_exact(sock, self.buf[:size])
        return first, size


def announce_listener(cfg: BurstConfig, log: JsonLog, bind_addr: str, shifts: Shifts | None = None) -> None:
    """Absorb (and log) PCN-START datagrams, so they cost the host no ICMP port-unreachable; the
    controller's time shifts sent there go to `shifts`."""
    start_listener(log, bind_addr, cfg.port, shifts)


def worker_shifts(cfg: BurstConfig, log: JsonLog, own_addr: str) -> Shifts:
    """A worker's channel from the controller: a listener on its own address and the job's port."""
    shifts = Shifts()
    announce_listener(cfg, log, own_addr, shifts)
    return shifts


class Pacer:
    """When each burst starts: period, compute gap and jitter; announcements one lead ahead. A shift
    from the controller (`shifts`) delays the next start once (to its slot), and with a period the clock
    moves by that wait, so every later one."""

    def __init__(self, cfg: BurstConfig, shifts: Shifts | None = None, log: JsonLog | None = None):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed * 7919 + cfg.rank)
        self.t0 = time.monotonic_ns()
        self.shifts, self.log = shifts, log

    def next_start(self, it: int, answered_ns: int) -> int:
        cfg = self.cfg
        planned = answered_ns + int(cfg.compute_ms * 1e6)
        if cfg.period_ms > 0:
            planned = max(planned, self.t0 + int(it * cfg.period_ms * 1e6))
        shift_ns = int(self.shifts.take(self.log, it, answered_ns, planned) * 1e3) if self.shifts is not None else 0
        self.t0 += shift_ns    # the period's clock: this start and every later one
        target = planned + shift_ns
        if cfg.jitter_ms > 0:
            target += int(self.rng.uniform(-cfg.jitter_ms, cfg.jitter_ms) * 1e6)
        return max(target, answered_ns)


def sleep_until(t_ns: int) -> None:
    delay = (t_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


def announce(cfg: BurstConfig, log: JsonLog, udp: socket.socket, dst: str, it: int, lead_us: float) -> int:
    return send_announcement(udp, log, dst, cfg.port, job=cfg.job, rank=cfg.rank, it=it, nbytes=cfg.burst_bytes,
                             lead_us=lead_us)


def wait_and_announce(cfg, log, pacer, udp, data_sock, dst, it, answered_ns) -> tuple[int, int | None]:
    """Sleep through the compute gap, announcing one lead before the burst. (gap start, announce time)."""
    start = pacer.next_start(it, answered_ns)
    announced = None
    if udp is not None:
        lead_us = cfg.pcn_lead_us or default_lead_us(tcp_info(data_sock).get("srtt_us"))
        sleep_until(start - int(lead_us * 1e3))
        announced = announce(cfg, log, udp, dst, it, lead_us)
    sleep_until(start)
    return start, announced


def announce_udp(cfg: BurstConfig) -> socket.socket | None:
    return announce_socket() if cfg.pcn_start else None


def accept_workers(cfg: BurstConfig, log: JsonLog, before_go=None) -> dict[int, socket.socket]:
    """The PS's side of the start: every worker connects and says its rank; then (after `before_go(conns)`,
    if given) all are told to go."""
    server = listen(cfg.ps_addr, cfg.port)
    announce_listener(cfg, log, cfg.ps_addr)
    server.settimeout(cfg.timeout_s)
    conns: dict[int, socket.socket] = {}
    while len(conns) < cfg.workers:
        try:
            sock, _ = server.accept()
        except TimeoutError:
            raise ConnectionError(f"only {len(conns)} of {cfg.workers} workers connected within "
                                  f"{cfg.timeout_s:.0f} s") from None
        sock.settimeout(None)
        set_cc(sock, cfg.cc)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = bytearray(HELLO.size)
        recv_exact(sock, memoryview(head))
        conns[HELLO.unpack(head)[0]] = sock
    server.close()
    if before_go is not None:
        before_go(conns)
    for sock in conns.values():  # everyone is here: iteration 0 starts together, like a real job
        sock.sendall(HELLO.pack(len(conns)))
    return conns


def join_ps(cfg: BurstConfig) -> socket.socket:
    """A worker's side of the start: connect, say its rank, wait for the PS's go."""
    sock = connect_retry(cfg.ps_addr, cfg.port, cfg.timeout_s, cfg.cc)
    sock.sendall(HELLO.pack(cfg.rank))
    recv_exact(sock, memoryview(bytearray(HELLO.size)))  # the PS's go, once every worker is connected
    return sock


def answer_all(pool: ThreadPoolExecutor, conns: dict[int, socket.socket], replies: dict[int, Payload], it: int,
               reply_bytes: int) -> tuple[int, int]:
    """The PS answers every worker at once (one buffer each): (when the answers started, when TCP had them all)."""
    send_start = time.monotonic_ns()
    list(pool.map(lambda r: replies[r].send(conns[r], it, reply_bytes), sorted(conns)))
    return send_start, time.monotonic_ns()


def ps_iteration(it: int, comm_start_ns: int, recv_end_ns: int, answered: tuple[int, int], bytes_sent: int,
                 bytes_recv: int, compute_start_ns: int | None = None, **extra) -> Iteration:
    """A PS's iteration: its communication from the first byte of any burst (`comm_start_ns`) until the
    answers were handed to TCP, its compute from the last burst's end (or `compute_start_ns`) until the
    answers started (`answered`: answer_all's pair); `extra` after recv_end_ns and send_start_ns."""
    send_start, send_end = answered
    return Iteration(
        iter=it, compute_start_ns=recv_end_ns if compute_start_ns is None else compute_start_ns,
        compute_end_ns=send_start, comm_start_ns=comm_start_ns, comm_end_ns=send_end, bytes_sent=bytes_sent,
        bytes_recv=bytes_recv, extra=dict(recv_end_ns=recv_end_ns, send_start_ns=send_start, **extra))


def worker_iteration(it: int, gap_start_ns: int, comm_start_ns: int, answered_ns: int, bytes_sent: int,
                     bytes_recv: int, **extra) -> Iteration:
    """A worker's iteration: its compute gap from the last answer until its burst's first send, its
    communication from there until its answer's (a ring: its last step's) last byte."""
    return Iteration(iter=it, compute_start_ns=gap_start_ns, compute_end_ns=comm_start_ns, comm_start_ns=comm_start_ns,
                     comm_end_ns=answered_ns, bytes_sent=bytes_sent, bytes_recv=bytes_recv, extra=extra)

